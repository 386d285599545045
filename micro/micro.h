/*
 * micro.h - micro-benchmark scenarios: one operator kernel on the chip, or one collective on
 * the cluster, described in a scenario file instead of on the command line.
 *
 * A kernel scenario is a system (chip, node, cluster sections or a preset) plus a `kernel`
 * section: the operator, its arguments (a string of "name=value" in kernel.args and/or one key
 * per parameter, kernel.m, kernel.dtype, ...: the keys are generated from the operator
 * registry, ops/op.h), the fidelity and the seed. It runs exactly what `npusim kernel OP --NAME
 * VALUE ...` runs, and its report is the same text and JSON (mc_kernel_text / mc_kernel_json
 * are what `npusim kernel` prints).
 *
 * A collective scenario is a system plus a `collective` section: the operation, the size S
 * (nccl-tests convention, interconnect/coll.h), the communicator (the first N ranks, a list, or
 * every device), the algorithm and the fidelity. It runs what `npusim collective` runs for one
 * size, and reports the same text and JSON.
 *
 * Errors are located: file:line of the key that is wrong (an operator argument given in
 * kernel.args is reported at kernel.args, naming the argument).
 */
#ifndef NPUSIM_MICRO_MICRO_H
#define NPUSIM_MICRO_MICRO_H

#include <stdbool.h>
#include <stdint.h>

#include "arch/arch.h"
#include "common/cfg.h"
#include "common/diag.h"
#include "common/strutil.h"
#include "interconnect/coll.h"
#include "ops/op.h"
#include "ops/parity.h"

/*
 * Register the kernel section (with the kernel.<param> keys) or the collective section with
 * cfg, for a loader shared by several kinds of scenario (detection, `npusim keys`). The
 * returned object holds their values: destroy it after cfg.
 */
struct mc_tables *mc_kernel_tables_register(struct npu_cfg *cfg);
struct mc_tables *mc_coll_tables_register(struct npu_cfg *cfg);
void mc_tables_destroy(struct mc_tables *t);

/* ------------------------------------------------------------------ kernel */

/* The fixed keys of the kernel section. */
struct mc_kernel_spec {
  char op[48];            /* operator name (npusim kernel list) */
  char args[1024];        /* "name=value ..." operator arguments */
  int fidelity;           /* enum core_fidelity */
  int seed;               /* input generator seed, >= 1 */
  bool functional;        /* also compute real data and check it */
  char load[512];         /* kernel plugin to load first ("" none) */
};

struct mc_kparams;        /* the kernel.<param> keys, generated from the operator registry */

struct mc_kernel_job {
  char path[512];               /* scenario file as given (or the display name) */
  struct npu_cfg *cfg;          /* owned */
  struct arch_system sys;
  struct mc_kernel_spec spec;
  struct mc_kparams *kp;        /* owned */
  const struct op_desc *op;     /* after load */
  struct op_args args;          /* after load: defaults, kernel.args, then kernel.<param> keys */
  char args_text[1024];         /* canonical arguments (op_args_format) */
  uint8_t arg_src[OP_MAX_PARAMS]; /* where each argument came from, to locate messages (kernel.c) */
  const struct npu_progress *progress; /* event fidelity: told of the blocks issued (may be NULL) */
};

/*
 * Register the system, the kernel section and the kernel.<param> keys with a new loader
 * (job->cfg); nothing loaded. For probes and `npusim keys`.
 */
void mc_kernel_init(struct mc_kernel_job *job, const char *path);

/*
 * Finish a loaded job: required keys, the system's checks, the operator and its arguments,
 * and the operator's plan on the chip (so a shape the chip refuses is a located error before
 * anything runs). 0 or NPU_ECONFIG with diag naming file:line and the key.
 */
int mc_kernel_finish(struct mc_kernel_job *job, struct npu_diag *diag);

/* mc_kernel_init, load the file, apply the overrides, mc_kernel_finish. */
int mc_kernel_load(struct mc_kernel_job *job, const char *path, const char *const *sets, int nsets,
                   struct npu_diag *diag);
void mc_kernel_release(struct mc_kernel_job *job);

/*
 * The value of a kernel.<param> key as the operator will see it (its default when not set),
 * for sweep expressions. 0, or NPU_EINVAL with diag when key is not a numeric parameter of
 * the job's operator. After mc_kernel_finish.
 */
int mc_kernel_param_value(const struct mc_kernel_job *job, const char *key, double *out, struct npu_diag *diag);

/*
 * Run the kernel (event fidelity starts the process's engine); trace (event fidelity only) gets
 * one event per instruction, or NULL. 0 or an npu_err with diag; a failed functional check is
 * NPU_EINTERNAL with diag naming kernel.functional (res filled).
 */
int mc_kernel_run(struct mc_kernel_job *job, struct npu_trace *trace, struct op_result *res, struct npu_diag *diag);

/*
 * Reports of `npusim kernel` and of kernel scenarios (the same functions). args is the
 * canonical argument text, fidelity "event" or "analytic".
 */
void mc_kernel_text(const struct op_desc *d, const char *args, const struct arch_system *sys, const char *fidelity,
                    const struct op_result *r, struct npu_buf *out);
void mc_kernel_json(const struct op_desc *d, const char *args, const struct arch_system *sys, const char *fidelity,
                    uint64_t seed, const struct op_result *r, struct npu_buf *out);

/* The kernel's page (`npusim run --html` of a kernel scenario, report/html.h): the facts of the
 * text report, the pipes' busy share as bars, each launch of a multi-kernel operator in a table,
 * and the text report. path names the scenario. */
void mc_kernel_html(const char *path, const struct op_desc *d, const char *args, const struct arch_system *sys,
                    const char *fidelity, const struct op_result *r, struct npu_buf *out);

/* The report of `npusim kernel OP --parity` (ops/parity.h): text, one line per case; JSON. */
void mc_parity_text(const struct op_desc *d, const struct op_parity *p, const struct arch_system *sys, uint64_t seed,
                    struct npu_buf *o);
void mc_parity_json(const struct op_desc *d, const struct op_parity *p, const struct arch_system *sys, uint64_t seed,
                    struct npu_buf *o);

/* What a kernel scenario's columns read: the job and its result (both borrowed). */
struct mc_kernel_report {
  const struct mc_kernel_job *job;
  const struct op_result *res;
};
struct rpt_column;
/* The columns of a kernel scenario's summary.csv (report/columns.h), from a struct
 * mc_kernel_report; static. */
const struct rpt_column *mc_kernel_columns(void);

/* summary.csv of a kernel scenario: the header line, and one row (each ends in a newline). */
void mc_kernel_csv_header(struct npu_buf *out);
void mc_kernel_csv_row(const struct mc_kernel_job *job, const struct op_result *r, struct npu_buf *out);

/* ------------------------------------------------------------------ collective */

/* The collective section. */
struct mc_coll_spec {
  int op;                 /* enum ic_op */
  uint64_t bytes;         /* S per rank, nccl-tests convention */
  int ranks;              /* the communicator is ranks 0..ranks-1; 0: every device */
  char comm[256];         /* or this list of ranks ("0,8,16,24", "0-3,8-11"); "" none */
  char algorithm[64];     /* a name ic_coll_parse_algo reads ("auto", "hierarchical(mesh+nhr)", ...) */
  int fidelity;           /* 0 auto (step up to MC_STEP_MAX_RANKS ranks, bulk above), 1 step, 2 bulk */
  int root;               /* broadcast / reduce: position of the root in the communicator */
  uint64_t buffer;        /* communicator buffer, bytes (larger payloads loop) */
};

#define MC_STEP_MAX_RANKS 512 /* fidelity "auto" is step up to this many ranks (npusim collective) */

struct mc_coll_job {
  char path[512];
  struct npu_cfg *cfg;    /* owned */
  struct arch_system sys;
  struct mc_coll_spec spec;
  int nranks;             /* after load: ranks of the platform (the communicator's highest + 1) */
};

/* Register the system and the collective section with a new loader; nothing loaded. */
void mc_coll_init(struct mc_coll_job *job, const char *path);
/* Required keys, the system's checks, the communicator against the system. 0 or NPU_ECONFIG. */
int mc_coll_finish(struct mc_coll_job *job, struct npu_diag *diag);
int mc_coll_load(struct mc_coll_job *job, const char *path, const char *const *sets, int nsets,
                 struct npu_diag *diag);
void mc_coll_release(struct mc_coll_job *job);

/* The result of a collective scenario, for the reports. */
struct mc_coll_result {
  enum ic_op op;
  enum ic_fidelity fidelity;
  int ranks;              /* communicator size */
  int servers;            /* servers the communicator spans */
  double bytes;
  double time_s;
  char algorithm[64];
  int loops;
  int64_t flows;
  int root;               /* broadcast / reduce: the root's position in the communicator */
};

/* Build the platform, run the collective (starts the process's engine). 0 or an npu_err. */
int mc_coll_run(struct mc_coll_job *job, struct mc_coll_result *res, struct npu_diag *diag);

/*
 * The CLI's uneven AllToAllV pattern for S bytes on p ranks: rank i sends 2 S/p x (1 + (i + j)
 * mod p) / (p + 1) to rank j. Caller frees.
 */
double *mc_alltoallv_matrix(int p, double bytes);

/*
 * Reports of `npusim collective` and of collective scenarios (the same functions): n results
 * of one operation on one communicator (a size sweep when n > 1). arch is the system's label:
 * the --arch value, or for a scenario the system's name (cluster, else node, else chip name).
 */
void mc_coll_text(const char *arch, const struct mc_coll_result *r, int n, const char *dtype, struct npu_buf *out);
/* The element types of the table's count column, as nccl-tests names them (-d): bytes of one
 * element of `name`, 0 if unknown; and the names. dtype NULL in mc_coll_text: float. */
int mc_coll_dtype_bytes(const char *name);
const char *const *mc_coll_dtype_names(int *n);
void mc_coll_json(const char *arch, const struct mc_coll_result *r, int n, struct npu_buf *out);
/* The collective's page (`npusim run --html` of a collective scenario): facts, the bandwidths
 * against what a device's links carry (mark_bytes_per_s, labelled mark; 0: no mark), the
 * nccl-tests table. path names the scenario. */
void mc_coll_html(const char *path, const char *arch, const struct mc_coll_result *r, double mark_bytes_per_s,
                  const char *mark, struct npu_buf *out);

/* The system's name: cluster.name, else node.name, else chip.name. Lives as long as sys. */
const char *mc_system_name(const struct arch_system *sys);

/* What a collective scenario's columns read: the job and its result (both borrowed). */
struct mc_coll_report {
  const struct mc_coll_job *job;
  const struct mc_coll_result *res;
};
/* The columns of a collective scenario's summary.csv, from a struct mc_coll_report; static. */
const struct rpt_column *mc_coll_columns(void);

/* summary.csv of a collective scenario: the header line, and one row (each ends in a newline). */
void mc_coll_csv_header(struct npu_buf *out);
void mc_coll_csv_row(const struct mc_coll_job *job, const struct mc_coll_result *r, struct npu_buf *out);

#endif
