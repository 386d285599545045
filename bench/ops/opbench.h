/* opbench.h - what the operator benchmarks share: a preset loaded, an operator run and timed. */
#ifndef NPUSIM_BENCH_OPS_OPBENCH_H
#define NPUSIM_BENCH_OPS_OPBENCH_H

#include <stdio.h>

#include "bench/benchutil.h"
#include "common/cfg.h"
#include "ops/op.h"

/* Load preset (a chip or a system) into *sys; 0, or 1 with the message on stderr. */
static inline int opbench_load(struct arch_system *sys, const char *preset)
{
  struct npu_cfg *cfg = npu_cfg_create();
  arch_register(cfg, sys);
  struct npu_diag d;
  int rc = npu_cfg_load_spec(cfg, preset, &d);
  if (!rc) rc = arch_finish(cfg, sys, &d);
  if (rc) npu_diag_print(stderr, &d);
  npu_cfg_destroy(cfg);
  return rc;
}

/* Run op with "name=value" arguments kv (n of them) and options o on sys's chip; *wall its wall
 * time. 0, or non-zero with the message on stderr. */
static inline int opbench_run(const struct arch_system *sys, const char *op, const char *const *kv, int n,
                              const struct op_run_opts *o, struct op_result *res, double *wall)
{
  const struct op_desc *d = op_find(op);
  struct op_args a;
  struct npu_diag diag;
  if (op_args_parse(d, &a, kv, n, &diag)) {
    npu_diag_print(stderr, &diag);
    return 1;
  }
  double t0 = bench_now();
  int rc = op_run(d, &a, &sys->chip, o, res, &diag);
  *wall = bench_now() - t0;
  if (rc) npu_diag_print(stderr, &diag);
  return rc;
}

#endif
