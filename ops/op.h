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
#define OP_MAX_TENSORS 72 /* a fused communication operator's tensors on each of a server's devices */

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
struct op_call; /* a typed call of an operator (below) */

/* What a backward call computes: the gradient of the forward's inputs, or of its weights
 * (a training step runs the two at different times: input gradients first, weights later). */
enum op_grad {
  OP_GRAD_INPUT,  /* gradient of the activations (dX; the data-gradient GEMM) */
  OP_GRAD_WEIGHT, /* gradient of the weights (dW) */
};

/* How an operator's backward is costed. */
enum op_bwd_kind {
  OP_BWD_NONE,   /* not on the gradient path (an optimizer step, a cast): no backward calls */
  OP_BWD_KERNEL, /* a real backward: the operator's own backward pass, or named kernels that are it */
  OP_BWD_PROXY,  /* a declared proxy: forward kernels of about the same traffic, for the reason given */
};

#define OP_MAX_BWD_CALLS 2

struct op_bwd {
  enum op_bwd_kind kind;
  const char *rule;     /* what the backward calls are, one line ("the same call with pass=bwd") */
  const char *reason;   /* OP_BWD_PROXY: why the proxy stands for the real backward; else NULL */
  /* Build the backward calls of forward call fwd into out[] (at most OP_MAX_BWD_CALLS), each with
   * its gradient kind in grad[]; returns how many (0 when kind is OP_BWD_NONE: build is NULL). */
  int (*build)(const struct op_call *fwd, struct op_call *out, enum op_grad *grad);
};

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
  struct op_bwd bwd;            /* how a training step costs this operator's backward */
  /* Optional: the tiling search, as CANN's tiling functions or a catlass tuner choose between
   * tilings. Write up to max argument sets into out (a with tiling parameters set; the first is
   * a itself, the operator's default tiling) and return how many; 0 or 1 when a's tiling is
   * fixed (the caller gave one). op_run costs every candidate at analytic fidelity and runs the
   * fastest (a later one only when faster by more than 0.1%); a candidate whose plan fails (a
   * tiling the chip's buffers cannot hold) is not a choice. chip is the chip it runs on (its
   * core count sizes candidates that balance blocks over the cores). */
  int (*variants)(const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip, struct op_args *out,
                  int max);
  /* Optional: the devices one execution runs on (a fused communication operator, MC2, runs on
   * every rank of its group at once: its kernels are launched with core_launch_opts.ranks, its
   * tensors placed with op_tensor_place, on a server of op_run_opts.node). NULL: one device. */
  int (*ranks)(const void *plan);
  /* Optional, with ranks: the analytic fidelity of such an operator, a closed form of its pipeline
   * on the server `node` (full mesh), from its parts' analytic times on one device and the links'
   * rate: fills *out as a launch's result (time, launch, counts, cores, ratios, bottleneck).
   * NULL: event fidelity only. */
  int (*closed_form)(const void *plan, const struct arch_chip *chip, const struct arch_node *node,
                     struct core_result *out, struct npu_diag *diag);
};

#define OP_MAX_VARIANTS 10 /* candidates of one tiling search */

/* The operator registry: the built-in operators, then those loaded from kernel plugins
 * (ops/plugin.h). op_builtins lists the built-in ones alone: what must not depend on which
 * plugins a process loaded before (the keys a scenario accepts) reads that. */
const struct op_desc *op_find(const char *name);
const struct op_desc *const *op_all(size_t *n);
const struct op_desc *const *op_builtins(size_t *n);
/* The registered operator name closest to an unknown name (for "did you mean"), or NULL. */
const char *op_suggest(const char *name);

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

/* ------------------------------------------------------------------ typed calls */

/*
 * A typed call: an operator of the registry and its arguments, checked as the call is built
 * rather than parsed from text when it runs. Usage:
 *
 *   struct op_call c;
 *   op_call_init(&c, "gemm");             // unknown operator: an error, located here
 *   op_call_dim(&c, "m", 4096);           // unknown name, wrong type, bad value: an error
 *   op_call_dtype(&c, "dtype", NPU_DT_BF16);
 *   op_call_bool(&c, "trans_b", true);
 *   if (op_call_check(&c, diag)) ...      // the first error, or a required parameter not set
 *
 * Parameters not set keep their defaults from the operator's table. The first error sticks
 * (later setters do nothing) and names the file and line of op_call_init. The call's label,
 * "gemm m=4096 n=... k=... dtype=bf16 trans_b=true", lists the parameters set explicitly in
 * the table's order: the text used in reports and traces; the cost cache keys on all of the
 * arguments (op_args_format).
 */
struct op_call {
  const struct op_desc *desc;   /* the operator; NULL when the name was not found */
  const char *name;             /* the operator's name as asked for (not copied: a literal) */
  struct op_args args;          /* defaults, then the values set */
  uint32_t given;               /* bit i: parameter i set explicitly (shown in the label) */
  const char *file;             /* where the call was started (op_call_init), for diagnostics */
  int line;
  int err;                      /* 0, or the first error (NPU_EINVAL) */
  char key[48];                 /* with err: "gemm.m", or "gemm" */
  char msg[208];                /* with err: what is wrong */
};

/* Start a call of operator `name` (a string that outlives the call) with every default set. */
#define op_call_init(c, name) op_call_init_at((c), (name), __FILE__, __LINE__)
/* op_call_init with an explicit source location (file outlives the call). */
void op_call_init_at(struct op_call *c, const char *name, const char *file, int line);
/* Set a dimension (OP_P_DIM, >= 1) or count (OP_P_INT, >= 0) parameter. */
void op_call_dim(struct op_call *c, const char *param, int64_t v);
/* Set a dtype parameter. */
void op_call_dtype(struct op_call *c, const char *param, enum npu_dtype t);
/* Set a boolean parameter. */
void op_call_bool(struct op_call *c, const char *param, bool v);
/* Set a choice parameter to one of its choices, by name. */
void op_call_choice(struct op_call *c, const char *param, const char *choice);
/* Set a real-valued parameter (finite). */
void op_call_real(struct op_call *c, const char *param, double v);
/* Set each parameter given in src that dst's operator has under the same name and type. */
void op_call_copy_given(struct op_call *dst, const struct op_call *src);
/* Whether the call is complete and has no error. */
bool op_call_ok(const struct op_call *c);
/* 0, or NPU_EINVAL with diag (file:line of op_call_init, key "op.param") naming the first error
 * or a required parameter left unset. */
int op_call_check(const struct op_call *c, struct npu_diag *diag);
/* A parameter's value (DIM, INT, BOOL, DTYPE, CHOICE index); aborts on a name the operator lacks. */
uint64_t op_call_u(const struct op_call *c, const char *param);
/* Whether two calls are the same operator with the same arguments given. */
bool op_call_equal(const struct op_call *a, const struct op_call *b);
/* The given arguments as canonical text, "m=4096 n=1024 ... trans_b=true" (table order). */
void op_call_args_text(const struct op_call *c, char *buf, size_t n);
/* The label: the operator's name, a space, op_call_args_text. */
void op_call_label(const struct op_call *c, char *buf, size_t n);
/* The backward calls of forward call fwd, per its operator's bwd rule (see struct op_bwd): fills
 * out[] and grad[] (room for OP_MAX_BWD_CALLS) and returns how many. An invalid fwd gives one
 * copy of itself, so that its error is reported where the backward is checked. */
int op_call_backward(const struct op_call *fwd, struct op_call *out, enum op_grad *grad);
/* The name of a backward kind: "none", "kernel" or "proxy". */
const char *op_bwd_kind_name(enum op_bwd_kind k);

/* ------------------------------------------------------------------ execution */

struct op_tensor {
  const char *name;
  enum npu_dtype dtype;
  uint64_t count;               /* elements */
  uint64_t addr;                /* device address */
  void *host;                   /* functional storage (NULL in timing-only mode) */
  bool scratch;                 /* a workspace (OP_INIT_SCRATCH), not a result: parity and --dump leave it out */
};

/* OP_INIT_SCRATCH: zeroed like OP_INIT_ZERO, and marked as a workspace the kernels use between
 * them (split-K partial sums, histograms), whose contents are no result of the operator. */
enum op_init { OP_INIT_ZERO, OP_INIT_UNIFORM, OP_INIT_POSITIVE, OP_INIT_NONE, OP_INIT_SCRATCH };

/* Register a GM tensor of count elements; in functional mode it gets host storage, filled per
 * init from the execution's seeded generator (uniform in [-1, 1), or (0, 1) for POSITIVE). */
struct op_tensor *op_tensor(struct op_exec *x, const char *name, enum npu_dtype dtype,
                            uint64_t count, enum op_init init);
/* Register raw bytes (index lists, scales, tiling data); host data copied when functional. */
struct op_tensor *op_tensor_bytes(struct op_exec *x, const char *name, uint64_t bytes,
                                  const void *data);
/* Place tensor t in the memory of device `device` (0 unless placed; see op_desc.ranks). */
void op_tensor_place(struct op_exec *x, const struct op_tensor *t, int device);
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
  int searched;                 /* tilings the search costed (op_desc.variants; 0: none searched) */
  struct op_args args;          /* the arguments that ran: the search's choice, else the caller's */
  char chosen[160];             /* what the search changed, "tile_m=128 tile_n=144" ("": the default) */
};

/* Every tensor of a functional run, as set up and as the kernels left it (op_run_opts.capture). */
struct op_captured {
  const char *name;             /* as the operator registered it */
  bool scratch;                 /* a workspace (struct op_tensor) */
  enum npu_dtype dtype;
  uint64_t count;               /* elements; fmt_bytes(dtype, count) bytes each copy */
  void *before, *after;         /* host data before the kernels ran and after (NULL when the run failed) */
};

struct op_capture {
  struct op_captured t[OP_MAX_TENSORS];
  int n;
};

void op_capture_release(struct op_capture *c);

struct op_run_opts {
  enum core_fidelity fidelity;
  bool functional;
  uint64_t seed;                /* input generator seed: a tensor's values are a stream of (seed, its name) */
  struct npu_trace *trace;      /* event fidelity: instruction timeline */
  const struct core_observer *observe; /* event fidelity: told of every instruction */
  const struct npu_progress *progress; /* event fidelity: told of the blocks issued */
  struct op_capture *capture;   /* functional: filled with every tensor's data (release it) */
  const struct arch_node *node; /* the server an operator over several devices runs on (op_desc.ranks);
                                   NULL: none given */
};

/* The parameters whose values differ between a and b, "name=value name=value" (empty if none):
 * what a tiling search changed. */
void op_args_diff(const struct op_desc *d, const struct op_args *a, const struct op_args *b, char *buf, size_t n);

/*
 * Plan, set up and run operator d with arguments a on chip. An operator with a tiling search
 * (op_desc.variants) runs the candidate that is fastest at analytic fidelity (res->args). Event
 * fidelity starts the process's engine (once per process). Returns 0 (a functional mismatch is reported in
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
