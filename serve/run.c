/*
 * run.c - one serving run: the engine's costs, its collectives probed, the requests through the
 * replicas, then the request-level figures vLLM's benchmark_serving reports (TTFT, TPOT, ITL,
 * E2E, throughput, goodput) and where the engines' time went.
 *
 * Definitions (as benchmark_serving computes them): TTFT from arrival to the first token; TPOT
 * of a request (finish - first token) / (output - 1), requests of one output token excluded;
 * ITL every gap between two tokens of a request; duration from the first arrival to the last
 * token; percentiles interpolated linearly between order statistics (numpy's default); ITL's
 * from a histogram of 1000 bins per decade (0.23% wide).
 */
#include "serve/serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/derived.h"
#include "common/err.h"
#include "ops/cost_cache.h"
#include "serve/infer.h"

static double step_fn(const void *ctx, const struct sv_step *s, double parts[SV_PART_COUNT])
{
  return sv_step_s(ctx, s, parts);
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Mean, linear-interpolated percentiles and max of v[0..n) (sorted in place). */
static void latency(double *v, int n, struct sv_latency *l)
{
  memset(l, 0, sizeof *l);
  l->n = n;
  if (n <= 0) return;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  double sum = 0;
  for (int i = 0; i < n; i++) sum += v[i];
  l->mean = sum / n;
  double *q[] = {&l->p50, &l->p90, &l->p99};
  const double at[] = {0.50, 0.90, 0.99};
  for (int k = 0; k < 3; k++) {
    double pos = at[k] * (n - 1);
    int i = (int)floor(pos);
    double f = pos - i;
    *q[k] = i + 1 < n ? v[i] + f * (v[i + 1] - v[i]) : v[i];
  }
  l->max = v[n - 1];
}

/* The sentence naming where the time went: the kind of step and the part that dominate, and
 * what held the requests back (a full KV cache, idle engines). */
static void bottleneck(const struct sv_job *job, struct sv_result *r)
{
  static const char *const kinds[] = {"prefill", "decode", "mixed prefill+decode"};
  double busy = r->kind_s[0] + r->kind_s[1] + r->kind_s[2];
  int k = 0;
  for (int i = 1; i < 3; i++) k = r->kind_s[i] > r->kind_s[k] ? i : k;
  int p = 0;
  for (int i = 1; i < SV_PART_COUNT; i++) p = r->kind_parts_s[k][i] > r->kind_parts_s[k][p] ? i : p;
  size_t n = (size_t)snprintf(r->bottleneck, sizeof r->bottleneck, "%s steps %.0f%% of engine time, %s %.0f%% of "
                              "them", kinds[k], busy > 0 ? 100 * r->kind_s[k] / busy : 0, sv_part_name(p),
                              r->kind_s[k] > 0 ? 100 * r->kind_parts_s[k][p] / r->kind_s[k] : 0);
  if (n >= sizeof r->bottleneck) return;
  if (r->preemptions)
    snprintf(r->bottleneck + n, sizeof r->bottleneck - n, "; KV cache full: %ld preemptions, %.0f tokens recomputed",
             r->preemptions, r->recomputed_tokens);
  else if (r->busy < 0.5)
    snprintf(r->bottleneck + n, sizeof r->bottleneck - n, "; engines busy %.0f%% of the time: arrivals are the limit",
             100 * r->busy);
  else if (r->mean_batch >= 0.95 * job->spec.max_num_seqs)
    snprintf(r->bottleneck + n, sizeof r->bottleneck - n, "; batches at serve.max_num_seqs (%d)",
             job->spec.max_num_seqs);
}

/* Requests as slices on lanes per replica (a lane holds requests that do not overlap), engine steps on track 0. */
static void add_trace(const struct sv_job *job, const struct sv_req_out *out, const struct sv_engine_stats *st,
                      struct npu_trace *t)
{
  static const char *const step_names[] = {"prefill", "decode", "mixed"};
  for (int r = 0; r < job->replicas; r++) {
    char name[64];
    snprintf(name, sizeof name, "replica %d (ranks %d-%d)", r, r * job->spec.tp, r * job->spec.tp + job->spec.tp - 1);
    npu_trace_name(t, r, -1, name);
    npu_trace_name(t, r, 0, "engine steps");
  }
  for (size_t i = 0; i < st->nrec; i++) {
    const struct sv_step_rec *s = &st->rec[i];
    int kind = !s->prefill_tokens ? 1 : s->decode ? 2 : 0;
    npu_trace_add(t, s->replica, 0, step_names[kind], s->start_s, s->time_s);
  }
  int lanes_cap = 0;
  double *lane_end = NULL; /* per replica x lane */
  int *nlanes = npu_xcalloc((size_t)job->replicas, sizeof *nlanes);
  for (int i = 0; i < job->nreq; i++) {
    const struct sv_request *q = &job->req[i];
    int r = q->replica, l = 0;
    while (l < nlanes[r] && lane_end[(size_t)r * lanes_cap + l] > q->arrival_s) l++;
    if (l == lanes_cap) { /* widen every replica's lanes */
      int cap = lanes_cap ? 2 * lanes_cap : 16;
      double *v = npu_xcalloc((size_t)job->replicas * cap, sizeof *v);
      for (int k = 0; k < job->replicas; k++)
        memcpy(v + (size_t)k * cap, lane_end + (size_t)k * lanes_cap, (size_t)lanes_cap * sizeof *v);
      free(lane_end);
      lane_end = v;
      lanes_cap = cap;
    }
    if (l == nlanes[r]) {
      nlanes[r]++;
      char name[32];
      snprintf(name, sizeof name, "requests %d", l);
      npu_trace_name(t, r, 1 + l, name);
    }
    lane_end[(size_t)r * lanes_cap + l] = out[i].finish_s;
    char name[48];
    snprintf(name, sizeof name, "req %d (%d+%d)", i, q->prompt, q->output);
    const char *nm = npu_trace_intern(t, name);
    npu_trace_add(t, r, 1 + l, nm, q->arrival_s, out[i].finish_s - q->arrival_s);
  }
  free(lane_end);
  free(nlanes);
}

int sv_run(struct sv_job *job, struct npu_trace *trace, struct sv_result *res, struct npu_diag *diag)
{
  memset(res, 0, sizeof *res);
  const struct sv_spec *s = &job->spec;
  const struct wl_model *m = &job->model;
  int n = job->nreq;
  struct op_cache *cache = op_cache_open(job->run.cost_cache[0] ? job->run.cost_cache : NULL, stderr);
  struct sv_target tg = {m, &job->sys, job->run.fidelity, job->path, "serve.tp"};
  int rows = s->max_num_seqs < s->max_batched_tokens ? s->max_num_seqs : s->max_batched_tokens;
  struct sv_infer_shape shape = {s->max_batched_tokens, rows, job->longest, s->max_num_seqs, 0};
  struct sv_colls colls = {0};
  struct sv_infer x;
  int rc = sv_infer_init(&x, &tg, cache, &colls, 0, s->tp, s->expert_parallel, &shape, s->step_overhead_s,
                         s->seq_overhead_s, diag);
  struct sv_group g = {0, s->tp, 1, "serve.tp"};
  if (!rc) rc = sv_probe(&job->sys, job->devices, &colls, &g, 1, job->path, diag);
  op_cache_close(cache);
  if (rc) {
    sv_colls_release(&colls);
    return rc;
  }
  struct sv_engine_cfg cfg = {s->max_num_seqs, s->max_batched_tokens, job->kv_blocks, s->block_size,
                              s->chunked_prefill, s->preemption == SV_PREEMPT_RESERVE, s->prefix_caching,
                              job->ngraph ? job->graph_sizes : NULL, job->ngraph, job->replicas, s->router};
  struct sv_req_out *out = npu_xcalloc((size_t)n, sizeof *out);
  struct sv_engine_stats st;
  sv_engine_run(&cfg, step_fn, &x, job->req, n, out, trace != NULL, &st);

  /* per request */
  double *v = npu_xmalloc((size_t)n * sizeof *v);
  double end = 0, start = n ? job->req[0].arrival_s : 0, flops = 0;
  int good = 0;
  for (int i = 0; i < n; i++) {
    const struct sv_request *q = &job->req[i];
    end = out[i].finish_s > end ? out[i].finish_s : end;
    res->input_tokens += q->prompt;
    res->output_tokens += q->output;
    flops += q->prompt * sv_token_flops(m, q->prompt / 2.0) + (q->output - 1) * sv_token_flops(m, q->prompt + q->output / 2.0);
    double ttft = out[i].first_s - q->arrival_s, e2e = out[i].finish_s - q->arrival_s;
    double tpot = q->output > 1 ? (out[i].finish_s - out[i].first_s) / (q->output - 1) : 0;
    bool ok = (!s->slo_ttft_s || ttft <= s->slo_ttft_s) && (!s->slo_tpot_s || tpot <= s->slo_tpot_s) &&
              (!s->slo_e2e_s || e2e <= s->slo_e2e_s);
    good += ok;
  }
  for (int i = 0; i < n; i++) v[i] = out[i].first_s - job->req[i].arrival_s;
  latency(v, n, &res->ttft);
  for (int i = 0; i < n; i++) v[i] = out[i].finish_s - job->req[i].arrival_s;
  latency(v, n, &res->e2e);
  int nt = 0;
  for (int i = 0; i < n; i++)
    if (job->req[i].output > 1) v[nt++] = (out[i].finish_s - out[i].first_s) / (job->req[i].output - 1);
  latency(v, nt, &res->tpot);
  res->itl.n = (int)st.gaps->n;
  res->itl.mean = st.gaps->n > 0 ? st.gaps->sum / st.gaps->n : 0;
  res->itl.p50 = sv_gaps_quantile(st.gaps, 0.50);
  res->itl.p90 = sv_gaps_quantile(st.gaps, 0.90);
  res->itl.p99 = sv_gaps_quantile(st.gaps, 0.99);
  for (int i = 0; i < n; i++) res->itl.max = out[i].max_gap_s > res->itl.max ? out[i].max_gap_s : res->itl.max;
  free(v);

  /* the run */
  double dur = end - start;
  res->duration_s = dur;
  int devices = job->replicas * s->tp;
  if (dur > 0) {
    res->request_rate = n / dur;
    res->input_tokens_per_s = res->input_tokens / dur;
    res->output_tokens_per_s = res->output_tokens / dur;
    res->output_tokens_per_s_per_device = res->output_tokens_per_s / devices;
    res->goodput = good / dur;
    res->busy = st.busy_s / (job->replicas * dur);
    res->kv_mean = job->kv_blocks ? st.kv_block_s / (job->replicas * dur * (double)job->kv_blocks) : 0;
  }
  res->slo_attainment = n ? (double)good / n : 0;
  res->kv_peak = job->kv_blocks ? (double)st.kv_peak / job->kv_blocks : 0;
  res->mean_batch = st.steps ? st.batch_steps / st.steps : 0;
  res->running_peak = st.running_peak;
  res->steps = st.steps;
  res->preemptions = st.preemptions;
  res->recomputed_tokens = st.recomputed_tokens;
  res->cached_tokens = st.cached_tokens;
  memcpy(res->parts_s, st.parts_s, sizeof res->parts_s);
  res->kind_s[SV_STEP_PREFILL] = st.prefill_s;
  res->kind_s[SV_STEP_DECODE] = st.decode_s;
  res->kind_s[SV_STEP_MIXED] = st.mixed_s;
  memcpy(res->kind_parts_s, st.kind_parts_s, sizeof res->kind_parts_s);
  struct arch_derived dv;
  arch_derive(&job->sys, &dv);
  res->peak_flops_per_s = dv.peak_flops_per_s[NPU_DT_BF16];
  res->flops = flops;
  res->mfu = dur > 0 && res->peak_flops_per_s > 0 ? flops / (dur * devices * res->peak_flops_per_s) : 0;
  /* the timeline, averaged over replicas and each bin */
  const struct sv_tl *tl = &st.tl;
  res->timeline_width_s = tl->width_s;
  res->timeline_n = tl->n;
  for (int b = 0; b < tl->n; b++) {
    struct sv_timeline_bin *o = &res->timeline[b];
    double span = tl->width_s * job->replicas;
    o->busy = tl->busy_s[b] / span;
    o->running = tl->running_s[b] / span;
    o->waiting = tl->waiting_s[b] / span;
    o->kv_used = job->kv_blocks ? tl->kv_s[b] / (span * (double)job->kv_blocks) : 0;
    o->preemptions = tl->preemptions[b];
    o->tokens = tl->tokens[b];
    o->arrivals = tl->arrivals[b];
  }
  bottleneck(job, res);
  if (trace) add_trace(job, out, &st, trace);
  sv_engine_stats_release(&st);
  sv_colls_release(&colls);
  free(out);
  return 0;
}
