/*
 * opstats.h - a per-operator statistics table of one replay rank's training step, as msprof's
 * op_statistic and PyTorch's key_averages print them: for each operator the calls the rank's
 * step makes, their total, mean, shortest and longest time, and the share of the step.
 *
 * Read from the step program (the slots and steps the rank runs: each segment's kernels and
 * TP/CP collectives, the routed experts' passes, the optimizer), with each call at its costed
 * time alone on the chip or its links: what the operator costs, not when the replay's clock
 * ran it (overlap, waits and interference are the breakdown's). EP all-to-alls, pipeline
 * transfers and data-parallel collectives are simulated on the cluster and have no costed time
 * per call; the breakdown and the communication line report them.
 */
#ifndef NPUSIM_WORKLOADS_OPSTATS_H
#define NPUSIM_WORKLOADS_OPSTATS_H

#include "common/strutil.h"
#include "workloads/job.h"

struct wl_program;
struct wl_result;

struct wl_op_stat {
  char op[40];       /* operator name (gemm, flash_attention, ...); TP/CP collectives as
                        "tp allgather"; the routed experts' grouped passes as "moe_experts" */
  int cat;           /* enum wl_cat it counts in */
  long calls;        /* per step on the rank */
  double total_s, min_s, max_s;
};

/* The statistics of replay rank `rank` (stage x E + EP index) of program p, heaviest first
 * (ties by name); *out is allocated (free it). Returns the number of operators. */
int wl_op_stats(const struct wl_program *p, int rank, struct wl_op_stat **out);

/* The statistics of the result's slowest replay rank (as wl_op_stats); their count. */
int wl_op_stats_slowest(const struct wl_result *r, struct wl_op_stat **out);

/* The table of the result's slowest replay rank: as text (the top `top` operators; 0: all),
 * and as CSV (a header and a row per operator: op, category, calls, total_s, mean_s, min_s,
 * max_s, share of the step). */
void wl_op_stats_text(const struct wl_result *r, int top, struct npu_buf *out);
void wl_op_stats_csv(const struct wl_result *r, struct npu_buf *out);
/* ... and as a JSON array of objects (op, category, calls, total_s, mean_s, min_s, max_s,
 * step_share), written into j where a value is expected. */
struct npu_json;
void wl_op_stats_json(const struct wl_result *r, struct npu_json *j);

#endif
