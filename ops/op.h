/*
 * op.h - operators: real kernels written once as tile programs for the chip model.
 *
 * An operator has named parameters (its dimensions, dtypes, options), a plan function that
 * checks them against the chip and chooses the tiling, a setup function that registers its GM
 * tensors (with seeded random inputs in functional mode) and the kernels it launches, a
 * double-precision host reference, and its model FLOPs. Running an operator runs its kernels in
 * order on the chip model, at either fidelity; in functional mode the outputs are compared with
 * the reference. The tile program is the only source of the operator's time: there is no
 * separate timing formula.
 */
#ifndef NPUSIM_OPS_OP_H
#define NPUSIM_OPS_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"
#include "common/diag.h"
#include "common/dtype.h"
#include "common/trace.h"
#include "cores/kernel.h"
#include "memory/gm.h"

#define OP_MAX_PARAMS 24
#define OP_MAX_KERNELS 8
#define OP_MAX_TENSORS 24

enum op_ptype {
  OP_P_DIM,    /* a dimension or count, >= 1 (0 allowed when the parameter says so) */
  OP_P_INT,    /* any integer >= 0 */
  OP_P_DTYPE,  /* a dtype name */
  OP_P_BOOL,   /* true / false (a bare --flag on the command line) */
  OP_P_CHOICE, /* one of choices */
  OP_P_REAL,   /* a number */
};

struct op_param {
  const char *name;             /* option name: "m" for --m */
  enum op_ptype type;
  const char *def;              /* default as text; NULL: required */
  const char *desc;
  const char *const *choices;   /* OP_P_CHOICE: NULL-terminated */
};

/* Parsed arguments, by parameter index. */
struct op_args {
  uint64_t u[OP_MAX_PARAMS];    /* DIM, INT, BOOL, DTYPE (enum npu_dtype), CHOICE (index) */
  double r[OP_MAX_PARAMS];      /* REAL */
};

struct op_exec; /* one execution: GM, tensors, kernels */

struct op_desc {
  const char *name;
  const char *summary;
  const struct op_param *params;
  int nparams;
  size_t plan_size;             /* bytes of the operator's plan struct */
  /* Check arguments against the chip, choose the tiling. 0, or NPU_EINVAL /
   * NPU_EUNSUPPORTED / NPU_ENOFIT with diag naming the parameter. */
  int (*plan)(void *plan, const struct op_desc *d, const struct op_args *a,
              const struct arch_chip *chip, struct npu_diag *diag);
  /* Register tensors (op_tensor) and kernels (op_kernel) on x. */
  void (*setup)(void *plan, struct op_exec *x);
  /* Model FLOPs of one execution (0 for data movement). */
  double (*flops)(const void *plan);
  /* Functional check: compare outputs with the host reference; fill *max_err (relative to the
   * tolerance: <= 1 passes) and a one-line summary. */
  bool (*check)(void *plan, struct op_exec *x, double *max_err, char *summary, size_t n);
  /* Optional: release what the plan allocated. */
  void (*release)(void *plan);
};

/* The operator registry. */
const struct op_desc *op_find(const char *name);
const struct op_desc *const *op_all(size_t *n);

/* Parameter lookup by name (-1 if none); typed access to parsed arguments by name. */
int op_param_index(const struct op_desc *d, const char *name);
uint64_t op_u(const struct op_desc *d, const struct op_args *a, const char *name);
double op_r(const struct op_desc *d, const struct op_args *a, const char *name);
enum npu_dtype op_dtype(const struct op_desc *d, const struct op_args *a, const char *name);

/* Fill a with defaults, then apply "name=value" strings; diag names the option on error. */
int op_args_parse(const struct op_desc *d, struct op_args *a, const char *const *kv, int n,
                  struct npu_diag *diag);
/* Canonical "m=8192 n=8192 ..." text of the arguments (for cache keys and reports). */
void op_args_format(const struct op_desc *d, const struct op_args *a, char *buf, size_t n);

/* ------------------------------------------------------------------ execution */

struct op_tensor {
  const char *name;
  enum npu_dtype dtype;
  uint64_t count;               /* elements */
  uint64_t addr;                /* device address */
  void *host;                   /* functional storage (NULL in timing-only mode) */
};

enum op_init { OP_INIT_ZERO, OP_INIT_UNIFORM, OP_INIT_POSITIVE, OP_INIT_NONE };

/* Register a GM tensor of count elements; in functional mode it gets host storage, filled per
 * init from the execution's seeded generator (uniform in [-1, 1), or (0, 1) for POSITIVE). */
struct op_tensor *op_tensor(struct op_exec *x, const char *name, enum npu_dtype dtype,
                            uint64_t count, enum op_init init);
/* Register raw bytes (index lists, scales, tiling data); host data copied when functional. */
struct op_tensor *op_tensor_bytes(struct op_exec *x, const char *name, uint64_t bytes,
                                  const void *data);
/* Append a kernel to launch (copied; its ctx must outlive the execution). */
void op_kernel(struct op_exec *x, const struct core_kernel *k);
bool op_functional(const struct op_exec *x);
const struct arch_chip *op_chip(const struct op_exec *x);
/* The execution's seeded generator: uniform in [0, 1). */
double op_rand(struct op_exec *x);

/* ------------------------------------------------------------------ running */

struct op_result {
  struct core_result total;     /* summed over kernels; ratios time-weighted */
  struct core_result kernel[OP_MAX_KERNELS];
  int nkernels;
  double flops;                 /* model FLOPs */
  double achieved_flops_per_s;
  double gm_bytes_per_s;        /* GM read + write bytes over time */
  bool checked, passed;         /* functional check done / passed */
  double max_err;               /* worst error relative to tolerance */
  char check_summary[256];
};

struct op_run_opts {
  enum core_fidelity fidelity;
  bool functional;
  uint64_t seed;                /* input generator seed */
  struct npu_trace *trace;      /* event fidelity: instruction timeline */
};

/*
 * Plan, set up and run operator d with arguments a on chip. Event fidelity starts the
 * process's engine (once per process). Returns 0 (a functional mismatch is reported in
 * res->passed, not as an error), or a negative npu_err with diag filled.
 */
int op_run(const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
           const struct op_run_opts *opts, struct op_result *res, struct npu_diag *diag);

/* Find a tensor registered by setup, by name (NULL if none). */
struct op_tensor *op_find_tensor(struct op_exec *x, const char *name);

/* Compare got with ref (n values): worst |got - ref| / (atol + rtol |ref|). */
double op_compare(const double *got, const double *ref, size_t n, double atol, double rtol);
/* Decode n elements of a tensor's host data to doubles (caller frees). */
double *op_decode(const struct op_tensor *t);

#endif
