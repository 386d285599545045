/*
 * stats.c - per-launch statistics: pipe busy time, bytes per path, FLOPs, the msprof-style
 * pipe ratios and the one-word bottleneck.
 *
 * Ratios are msprof's: busy time of a pipe summed over the cores of a kind that ran the
 * kernel, divided by kernel time x those cores. The bottleneck is
 *   launch_bound   when launch overhead is at least half the kernel time;
 *   <pipe>_bound   when the busiest pipe ratio is at least 0.5 (cube_bound for the cube,
 *                  vec_bound, mte1/mte2/mte3/fixpipe/scalar_bound);
 *   core_underuse  otherwise, when fewer than 3/4 of the cores of the kernel's kind ran;
 *   latency_bound  otherwise: no unit is busy: dependencies and latencies dominate.
 * When the memory system sets the time instead (the analytic fidelity's HBM / L2 roofline floor),
 * core__result_memory_bound names the busiest GM pipe (mte2_bound for reads, mte3_bound or
 * fixpipe_bound for writes), as the event fidelity's GM pipes, stretched by the shared bandwidth,
 * name such a kernel.
 */
#include <string.h>

#include "common/err.h"
#include "cores/exec_int.h"
#include "memory/dma.h"

static const char *op_name(const struct core__run *r, const struct core_instr *in)
{
  switch (in->op) {
  case CORE_OP_COPY: {
    enum arch_path p;
    if (mem_path_of(r->chip, in->u.copy.src.space, in->u.copy.dst.space, &p)) return arch_path_name(p);
    return "copy";
  }
  case CORE_OP_MMAD: return "mmad";
  case CORE_OP_VEC: return core_vec_op_name((enum core_vec_op)in->u.vec.op);
  case CORE_OP_SCALAR: return "scalar";
  default: return "sync";
  }
}

void core__account(struct core__run *r, struct core__core *c, int pipe,
                   const struct core_instr *in, double start, double end)
{
  struct core_result *res = &r->res;
  bool vec_side = pipe == CORE_PIPE_V || pipe == CORE_PIPE_MTE3 || c->kind == CORE_KIND_AIV;
  struct core_pipe_stats *ps = vec_side && c->kind != CORE_KIND_AIC ? &res->aiv[pipe] : &res->aic[pipe];
  if (c->kind == CORE_KIND_COUPLED) ps = (pipe == CORE_PIPE_V || pipe == CORE_PIPE_MTE3) ? &res->aiv[pipe] : &res->aic[pipe];
  ps->busy_s += end - start;
  ps->instructions++;
  res->instructions++;
  switch (in->op) {
  case CORE_OP_COPY: {
    enum arch_path p;
    bool gm = in->u.copy.src.space == MEM_GM || in->u.copy.dst.space == MEM_GM;
    if (mem_path_of(r->chip, in->u.copy.src.space, in->u.copy.dst.space, &p))
      res->path_bytes[p] += gm ? core__gm_bytes(r->chip, in) : core__copy_bytes(in);
    if (gm) ps->gm_busy_s += end - start;
    break;
  }
  case CORE_OP_MMAD: {
    uint64_t macs = (uint64_t)in->u.mmad.m * in->u.mmad.k * in->u.mmad.n;
    res->cube_macs += macs;
    res->flops += 2.0 * (double)macs;
    break;
  }
  case CORE_OP_VEC: res->flops += core__vec_flops(&in->u.vec); break;
  default: break;
  }
  if (r->trace) npu_trace_add(r->trace, c->id, pipe, op_name(r, in), start - r->t0, end - start);
  if (r->observe) core__observe(r, c, pipe, in, start, end, 0);
}

void core__observe(struct core__run *r, const struct core__core *c, int pipe, const struct core_instr *in,
                   double start, double end, uint64_t flow)
{
  struct core_obs_instr e = {.core = c->id, .unit = c->unit, .pipe = pipe, .in = in,
                             .start_s = start - r->t0, .end_s = end - r->t0, .body_t0_s = r->t0, .flow = flow};
  if (in->op == CORE_OP_COPY) {
    bool gm = in->u.copy.src.space == MEM_GM || in->u.copy.dst.space == MEM_GM;
    e.bytes = gm ? core__gm_bytes(r->chip, in) : core__copy_bytes(in);
  }
  r->observe->instr(r->observe->ctx, &e);
}

static double ratio(double busy, double t, int cores)
{
  return t > 0 && cores > 0 ? busy / (t * cores) : 0;
}

void core__result_finish(struct core_result *res, const struct arch_chip *chip,
                         enum core_mode mode, double body_s)
{
  bool split = chip->org == ARCH_ORG_SPLIT;
  if (res->ranks < 1) res->ranks = 1;
  res->aic_total = chip->aic_count * res->ranks;
  res->aiv_total = (split ? chip->aiv_count : chip->aic_count) * res->ranks;
  res->launch_s = chip->launch_overhead_s;
  res->time_s = body_s + res->launch_s;
  double t = res->time_s;
  res->aic_mac_ratio = ratio(res->aic[CORE_PIPE_M].busy_s, t, res->aic_used);
  res->aic_mte1_ratio = ratio(res->aic[CORE_PIPE_MTE1].busy_s, t, res->aic_used);
  res->aic_mte2_ratio = ratio(res->aic[CORE_PIPE_MTE2].busy_s, t, res->aic_used);
  res->aic_fixpipe_ratio = ratio(res->aic[CORE_PIPE_FIX].busy_s, t, res->aic_used);
  res->aic_scalar_ratio = ratio(res->aic[CORE_PIPE_S].busy_s, t, res->aic_used);
  res->aiv_vec_ratio = ratio(res->aiv[CORE_PIPE_V].busy_s, t, res->aiv_used);
  res->aiv_mte2_ratio = ratio(res->aiv[CORE_PIPE_MTE2].busy_s, t, res->aiv_used);
  res->aiv_mte3_ratio = ratio(res->aiv[CORE_PIPE_MTE3].busy_s, t, res->aiv_used);
  res->aiv_scalar_ratio = ratio(res->aiv[CORE_PIPE_S].busy_s, t, res->aiv_used);
  res->hbm_bw_bytes_per_s = t > 0 ? (double)res->hbm_bytes / t : 0;
  res->l2_bw_bytes_per_s = t > 0 ? (double)(res->gm_read_bytes + res->gm_write_bytes) / t : 0;

  struct { double v; const char *name; } cand[] = {
      {res->aic_mac_ratio, "cube_bound"},       {res->aiv_vec_ratio, "vec_bound"},
      {res->aic_mte2_ratio, "mte2_bound"},      {res->aiv_mte2_ratio, "mte2_bound"},
      {res->aic_mte1_ratio, "mte1_bound"},      {res->aiv_mte3_ratio, "mte3_bound"},
      {res->aic_fixpipe_ratio, "fixpipe_bound"}, {res->aic_scalar_ratio, "scalar_bound"},
      {res->aiv_scalar_ratio, "scalar_bound"},
  };
  double best = 0;
  const char *name = "latency_bound";
  for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
    if (cand[i].v > best) {
      best = cand[i].v;
      name = cand[i].name;
    }
  int used = mode == CORE_MODE_VECTOR ? res->aiv_used : res->aic_used;
  int total = mode == CORE_MODE_VECTOR ? res->aiv_total : res->aic_total;
  if (res->launch_s >= 0.5 * t)
    res->bottleneck = "launch_bound";
  else if (best >= 0.5)
    res->bottleneck = name;
  else if (4 * used < 3 * total)
    res->bottleneck = "core_underuse";
  else
    res->bottleneck = "latency_bound";
}

void core__result_memory_bound(struct core_result *res)
{
  if (!strcmp(res->bottleneck, "launch_bound")) return;
  struct { double v; const char *name; } gm[] = {
      {res->aic_mte2_ratio, "mte2_bound"}, {res->aiv_mte2_ratio, "mte2_bound"},
      {res->aiv_mte3_ratio, "mte3_bound"}, {res->aic_fixpipe_ratio, "fixpipe_bound"},
  };
  double best = -1;
  for (size_t i = 0; i < sizeof gm / sizeof gm[0]; i++)
    if (gm[i].v > best) {
      best = gm[i].v;
      res->bottleneck = gm[i].name;
    }
}

void core__finish_result(struct core__run *r)
{
  struct core_result *res = &r->res;
  res->aic_used = res->aiv_used = 0;
  for (int i = 0; i < r->ncores; i++) {
    const struct core__core *c = &r->cores[i];
    if (!c->used) continue;
    if (c->kind != CORE_KIND_AIV) res->aic_used++;
    if (c->kind != CORE_KIND_AIC) res->aiv_used++;
  }
  res->ranks = r->ranks;
  core__result_finish(res, r->chip, r->k->mode, r->end - r->t0);
}
