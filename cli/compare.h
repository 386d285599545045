/*
 * compare.h - the parts of `npusim compare` that read measured profiles (compare_ops.c).
 */
#ifndef NPUSIM_CLI_COMPARE_H
#define NPUSIM_CLI_COMPARE_H

#include <stdbool.h>

#include "common/diag.h"
#include "common/strutil.h"

/*
 * A comparison's tally of B against A row by row (a collective's sizes, a profile's operators):
 * the rows on both sides, the mean and largest |B / A - 1|, and the rows further than tol
 * percent (tol < 0: no tolerance), the first six named for the failure's message.
 */
struct cli_tally {
  double tol;
  int matched, beyond;
  double sum, sum_abs, worst;
  double worst_at;        /* the caller's key of the largest (a size) */
  struct npu_buf bad;
};
/* Add a row: label, A's and B's figure in unit; A <= 0 counts only as beyond when B > 0. Whether
 * the row is beyond the tolerance. */
bool cli_tally_add(struct cli_tally *t, const char *label, double key, double a, double b, const char *unit);
/* 0, or NPU_EINTERNAL with "N <what|many> beyond T%: ..." in diag; releases the tally. */
int cli_tally_finish(struct cli_tally *t, const char *what, const char *many, struct npu_diag *diag);

/* The npusim operator a CANN operator type (msprof's "OP Type") is costed as, or NULL. */
const char *cli_cann_op(const char *type);

/* Whether path is msprof's op_statistic CSV (a header with "OP Type" and "Total Time(us)"). */
bool cli_is_op_statistic(const char *path);

/*
 * measured (op_statistic over `steps` steps) against simulated (npusim's operators.csv, or the
 * -o directory holding it), stage `stage`: per npusim operator the calls and time per step of
 * each, B / A; with tol >= 0 an operator further than tol percent fails (NPU_EINTERNAL).
 */
int cli_compare_op_statistic(const char *measured, const char *simulated, int steps, int stage, double tol,
                             struct npu_buf *out, struct npu_diag *diag);

/* The category npusim costs a Kineto event as (cat "kernel": by its name; gpu_memcpy and
 * gpu_memset: "memcpy"), or NULL for host events. */
const char *cli_kernel_category(const char *cat, const char *name);

/*
 * measured (a PyTorch profiler trace over `steps` steps) against simulated (operators.csv or its
 * directory), stage `stage`: GPU kernel time per step by category beside npusim's; tol as above.
 */
int cli_compare_kineto(const char *measured, const char *simulated, int steps, int stage, double tol,
                       struct npu_buf *out, struct npu_diag *diag);

#endif
