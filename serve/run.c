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
  const struct sv_spec *s = &job->spec;
  if ((s->slo_ttft_s || s->slo_tpot_s || s->slo_e2e_s) && r->slo_attainment < 0.9) {
    static const char *const slo[] = {"TTFT", "TPOT", "E2E"};
    n += (size_t)snprintf(r->bottleneck + n, sizeof r->bottleneck - n, "; %s the SLOs (", r->slo_attainment > 0 ?
                          "few requests meet" : "no request meets");
    const double given[] = {s->slo_ttft_s, s->slo_tpot_s, s->slo_e2e_s};
    for (int i = 0, first = 1; i < 3 && n < sizeof r->bottleneck; i++)
      if (given[i]) {
        n += (size_t)snprintf(r->bottleneck + n, sizeof r->bottleneck - n, "%s%s met by %.0f%%", first ? "" : ", ",
                              slo[i], 100 * r->slo_met[i]);
        first = 0;
      }
    if (n < sizeof r->bottleneck) n += (size_t)snprintf(r->bottleneck + n, sizeof r->bottleneck - n, ")");
    if (n >= sizeof r->bottleneck) return;
  }
  if (job->prefill_replicas) {
    n += (size_t)snprintf(r->bottleneck + n, sizeof r->bottleneck - n, "; %s pool the busier (prefill %.0f%%, decode "
                          "%.0f%%)", r->prefill_busy > r->decode_busy ? "prefill" : "decode", 100 * r->prefill_busy,
                          100 * r->decode_busy);
    if (n >= sizeof r->bottleneck) return;
  }
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

/* Slices on lanes per process: a lane holds slices that do not overlap; slices of a process
 * come in order of their starts. */
struct lanes {
  double *end; /* per process x lane */
  int *n;      /* lanes per process */
  int cap, procs;
};

static void lane_slice(struct lanes *L, struct npu_trace *t, int pid, const char *name, double start, double end)
{
  int l = 0;
  while (l < L->n[pid] && L->end[(size_t)pid * L->cap + l] > start) l++;
  if (l == L->cap) { /* widen every process's lanes */
    int cap = L->cap ? 2 * L->cap : 16;
    double *v = npu_xcalloc((size_t)L->procs * cap, sizeof *v);
    for (int k = 0; k < L->procs; k++)
      memcpy(v + (size_t)k * cap, L->end + (size_t)k * L->cap, (size_t)L->cap * sizeof *v);
    free(L->end);
    L->end = v;
    L->cap = cap;
  }
  if (l == L->n[pid]) {
    L->n[pid]++;
    char lane[32];
    snprintf(lane, sizeof lane, "requests %d", l);
    npu_trace_name(t, pid, 1 + l, lane);
  }
  L->end[(size_t)pid * L->cap + l] = end;
  npu_trace_add(t, pid, 1 + l, name, start, end - start);
}

/* A pool's engines as processes first .. first + replicas - 1, their steps on track 0. */
static void trace_pool(struct npu_trace *t, const char *what, int first, int replicas, int rank0, int tp,
                       const struct sv_engine_stats *st)
{
  static const char *const step_names[] = {"prefill", "decode", "mixed"};
  for (int r = 0; r < replicas; r++) {
    char name[96];
    snprintf(name, sizeof name, "%s %d (ranks %d-%d)", what, r, rank0 + r * tp, rank0 + r * tp + tp - 1);
    npu_trace_name(t, first + r, -1, name);
    npu_trace_name(t, first + r, 0, "engine steps");
  }
  for (size_t i = 0; i < st->nrec; i++) {
    const struct sv_step_rec *s = &st->rec[i];
    int kind = !s->prefill_tokens ? 1 : s->decode ? 2 : 0;
    npu_trace_add(t, first + s->replica, 0, step_names[kind], s->start_s, s->time_s);
  }
}

static const char *req_name(struct npu_trace *t, int i, const struct sv_request *q)
{
  char name[48];
  snprintf(name, sizeof name, "req %d (%d+%d)", i, q->prompt, q->output);
  return npu_trace_intern(t, name);
}

/* One pool of engines: its layout, costs, requests and what they did. */
struct pool {
  int rank0, replicas, tp;
  long kv_blocks;
  struct sv_infer x;
  struct sv_request *req; /* the pool's requests (arrivals non-decreasing) */
  int *of;                /* pool request k is job request of[k] */
  int n;
  struct sv_req_out *out;
  struct sv_engine_stats st;
};

static void pool_release(struct pool *p)
{
  free(p->req);
  free(p->of);
  free(p->out);
  sv_engine_stats_release(&p->st);
}

static void pool_run(struct pool *p, const struct sv_job *job, int route, bool record)
{
  const struct sv_spec *s = &job->spec;
  struct sv_engine_cfg cfg = {s->max_num_seqs, s->max_batched_tokens, p->kv_blocks, s->block_size,
                              s->chunked_prefill, s->preemption == SV_PREEMPT_RESERVE, s->prefix_caching,
                              job->ngraph ? job->graph_sizes : NULL, job->ngraph, p->replicas, route,
                              s->speculative != SV_SPEC_NONE ? s->spec_tokens : 0, s->spec_acceptance,
                              (unsigned long)s->seed, job->model.dsa.topk ? job->model.dsa.topk : job->model.window};
  p->out = npu_xcalloc((size_t)(p->n > 0 ? p->n : 1), sizeof *p->out);
  sv_engine_run(&cfg, step_fn, &p->x, p->req, p->n, p->out, record, &p->st);
}

/* A request's KV cache ready at a decode engine; the decode pool takes them in this order. */
struct ready {
  double t;
  int i;
};

static int cmp_ready(const void *a, const void *b)
{
  const struct ready *x = a, *y = b;
  return x->t < y->t ? -1 : x->t > y->t ? 1 : x->i - y->i;
}

int sv_run(struct sv_job *job, struct npu_trace *trace, struct sv_result *res, struct npu_diag *diag)
{
  memset(res, 0, sizeof *res);
  const struct sv_spec *s = &job->spec;
  const struct wl_model *m = &job->model;
  int n = job->nreq;
  bool disagg = job->prefill_replicas > 0;
  int prefill_ranks = job->prefill_replicas * job->prefill_tp;
  struct pool dec = {0}, pre = {0};
  dec.rank0 = prefill_ranks;
  dec.replicas = job->replicas;
  dec.tp = s->tp;
  dec.kv_blocks = job->kv_blocks;
  pre.replicas = job->prefill_replicas;
  pre.tp = job->prefill_tp;
  pre.kv_blocks = job->prefill_kv_blocks;
  struct op_cache *cache = op_cache_open(job->run.cost_cache[0] ? job->run.cost_cache : NULL, stderr);
  struct sv_target tg = {m, &job->sys, job->run.fidelity, job->path, "serve.tp"};
  int rows = s->max_num_seqs < s->max_batched_tokens ? s->max_num_seqs : s->max_batched_tokens;
  struct sv_infer_shape shape = {s->max_batched_tokens, rows, job->longest, s->max_num_seqs, 0};
  struct sv_colls colls = {0};
  /* groups: the (decode) engines' TP, the prefill engines' TP, a prefill rank and a decode rank */
  struct sv_group g[3] = {{prefill_ranks, s->tp, 1, "serve.tp", s->custom_allreduce},
                          {0, job->prefill_tp, 1, s->prefill_tp ? "serve.prefill.tp" : "serve.tp", s->custom_allreduce},
                          {0, 2, prefill_ranks, "serve.prefill.replicas", false}};
  int rc = sv_infer_init(&dec.x, &tg, cache, &colls, 0, s->tp, s->expert_parallel, &shape, &s->engine, diag);
  dec.x.draft_layers = s->speculative == SV_SPEC_MTP ? 1 : 0;
  int kv_small = -1, kv_big = -1;
  const double small = 1 << 20, big = 64.0 * (1 << 20);
  if (!rc && disagg) {
    struct sv_target tp = tg;
    tp.key = g[1].key;
    struct sv_infer_shape sp = {s->max_batched_tokens, rows, job->longest, 0, 0}; /* it never decodes */
    rc = sv_infer_init(&pre.x, &tp, cache, &colls, 1, job->prefill_tp, s->expert_parallel, &sp, &s->engine, diag);
    kv_small = sv_coll(&colls, IC_OP_SEND, small, 2);
    kv_big = sv_coll(&colls, IC_OP_SEND, big, 2);
  }
  if (!rc) rc = sv_probe(&job->sys, job->devices, &colls, g, disagg ? 3 : 1, job->path, diag);
  op_cache_close(cache);
  if (rc) {
    sv_colls_release(&colls);
    return rc;
  }
  struct sv_req_out *out = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *out);
  struct sv_engine_stats *st;
  if (!disagg) {
    dec.req = job->req; /* borrowed: the engine sets each request's replica */
    dec.n = n;
    pool_run(&dec, job, s->router, trace != NULL);
    memcpy(out, dec.out, (size_t)n * sizeof *out);
    dec.req = NULL;
    st = &dec.st;
  } else {
    /* prefill engines: each request's prompt and its first token */
    pre.n = n;
    pre.req = npu_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *pre.req);
    for (int i = 0; i < n; i++) {
      pre.req[i] = job->req[i];
      pre.req[i].output = 1;
    }
    pool_run(&pre, job, s->router, trace != NULL);
    /* the KV cache to a decode engine: each prefill rank sends its shard to one decode rank, all
     * pairs at once; a + bytes / B fitted to two sends between the first engines' first ranks */
    double t1 = colls.v[kv_small].time_s, t2 = colls.v[kv_big].time_s;
    double bw = t2 > t1 ? (big - small) / (t2 - t1) : INFINITY, lat = t1 - small / bw;
    res->kv_link_latency_s = lat > 0 ? lat : 0;
    res->kv_link_bytes_per_s = bw;
    double shard = sv_kv_token_bytes(m, job->prefill_tp);
    struct ready *rd = npu_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *rd);
    double xfer = 0;
    for (int i = 0; i < n; i++) {
      const struct sv_request *q = &job->req[i];
      double dt = res->kv_link_latency_s + q->prompt * shard / bw;
      xfer += dt;
      res->kv_transfer_bytes += q->prompt * shard * job->prefill_tp;
      out[i] = pre.out[i];
      if (q->output > 1) rd[dec.n++] = (struct ready){pre.out[i].first_s + dt, i};
    }
    res->kv_transfer_mean_s = n ? xfer / n : 0;
    qsort(rd, (size_t)dec.n, sizeof *rd, cmp_ready);
    /* decode engines: the remaining tokens, the prompt's KV arrived (no prefix to route by) */
    dec.req = npu_xcalloc((size_t)(dec.n > 0 ? dec.n : 1), sizeof *dec.req);
    dec.of = npu_xmalloc((size_t)(dec.n > 0 ? dec.n : 1) * sizeof *dec.of);
    for (int k = 0; k < dec.n; k++) {
      const struct sv_request *q = &job->req[rd[k].i];
      dec.of[k] = rd[k].i;
      dec.req[k] = (struct sv_request){rd[k].t, q->prompt, q->output - 1, -1, 0, 0, true};
    }
    free(rd);
    pool_run(&dec, job, s->router == SV_ROUTE_PREFIX ? SV_ROUTE_LEAST_LOADED : s->router, trace != NULL);
    for (int k = 0; k < dec.n; k++) {
      int i = dec.of[k];
      const struct sv_req_out *d = &dec.out[k];
      double gap = d->first_s - out[i].first_s; /* the first token (prefill engine) to the second */
      sv_gaps_add(dec.st.gaps, gap);
      out[i].finish_s = d->finish_s;
      out[i].max_gap_s = d->max_gap_s > gap ? d->max_gap_s : gap;
      out[i].preemptions += d->preemptions;
    }
    sv_engine_stats_add(&pre.st, &dec.st);
    st = &pre.st;
  }

  /* per request */
  double *v = npu_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *v);
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
    bool met[3] = {!s->slo_ttft_s || ttft <= s->slo_ttft_s, !s->slo_tpot_s || tpot <= s->slo_tpot_s,
                   !s->slo_e2e_s || e2e <= s->slo_e2e_s};
    for (int k = 0; k < 3; k++) res->slo_met[k] += met[k];
    good += met[0] && met[1] && met[2];
  }
  for (int i = 0; i < n; i++) v[i] = out[i].first_s - job->req[i].arrival_s;
  latency(v, n, &res->ttft);
  for (int i = 0; i < n; i++) v[i] = out[i].finish_s - job->req[i].arrival_s;
  latency(v, n, &res->e2e);
  int nt = 0;
  for (int i = 0; i < n; i++)
    if (job->req[i].output > 1) v[nt++] = (out[i].finish_s - out[i].first_s) / (job->req[i].output - 1);
  latency(v, nt, &res->tpot);
  res->itl.n = (int)st->gaps->n;
  res->itl.mean = st->gaps->n > 0 ? st->gaps->sum / st->gaps->n : 0;
  res->itl.p50 = sv_gaps_quantile(st->gaps, 0.50);
  res->itl.p90 = sv_gaps_quantile(st->gaps, 0.90);
  res->itl.p99 = sv_gaps_quantile(st->gaps, 0.99);
  for (int i = 0; i < n; i++) res->itl.max = out[i].max_gap_s > res->itl.max ? out[i].max_gap_s : res->itl.max;
  free(v);

  /* the run */
  double dur = end - start;
  res->duration_s = dur;
  int engines = job->replicas + job->prefill_replicas;
  int devices = job->replicas * s->tp + prefill_ranks;
  /* KV cache shares, each pool's blocks its own */
  double kv_share_s = dec.kv_blocks ? dec.st.kv_block_s / (double)dec.kv_blocks : 0;
  double kv_peak = dec.kv_blocks ? (double)dec.st.kv_peak / dec.kv_blocks : 0;
  if (disagg && pre.kv_blocks) {
    kv_share_s += pre.st.kv_block_s / (double)pre.kv_blocks;
    kv_peak = fmax(kv_peak, (double)pre.st.kv_peak / pre.kv_blocks);
  }
  if (dur > 0) {
    res->request_rate = n / dur;
    res->input_tokens_per_s = res->input_tokens / dur;
    res->output_tokens_per_s = res->output_tokens / dur;
    res->output_tokens_per_s_per_device = res->output_tokens_per_s / devices;
    res->goodput = good / dur;
    res->busy = st->busy_s / (engines * dur);
    res->kv_mean = kv_share_s / (engines * dur);
    if (disagg) {
      res->prefill_busy = (st->busy_s - dec.st.busy_s) / (job->prefill_replicas * dur);
      res->decode_busy = dec.st.busy_s / (job->replicas * dur);
    }
  }
  res->slo_attainment = n ? (double)good / n : 0;
  for (int k = 0; k < 3; k++) res->slo_met[k] = n ? res->slo_met[k] / n : 0;
  res->kv_peak = kv_peak;
  res->mean_batch = st->steps ? st->batch_steps / st->steps : 0;
  res->running_peak = st->running_peak;
  res->steps = st->steps;
  res->preemptions = st->preemptions;
  res->recomputed_tokens = st->recomputed_tokens;
  res->cached_tokens = st->cached_tokens;
  res->spec_draft_tokens = st->draft_tokens;
  res->spec_accepted_tokens = st->accepted_tokens;
  res->spec_accepted_per_step = st->verify_steps > 0 ? st->accepted_tokens / st->verify_steps : 0;
  memcpy(res->parts_s, st->parts_s, sizeof res->parts_s);
  res->kind_s[SV_STEP_PREFILL] = st->prefill_s;
  res->kind_s[SV_STEP_DECODE] = st->decode_s;
  res->kind_s[SV_STEP_MIXED] = st->mixed_s;
  memcpy(res->kind_parts_s, st->kind_parts_s, sizeof res->kind_parts_s);
  struct arch_derived dv;
  arch_derive(&job->sys, &dv);
  res->peak_flops_per_s = dv.peak_flops_per_s[NPU_DT_BF16];
  res->flops = flops;
  res->mfu = dur > 0 && res->peak_flops_per_s > 0 ? flops / (dur * devices * res->peak_flops_per_s) : 0;
  /* the timeline, averaged over the engines and each bin */
  const struct sv_tl *tl = &st->tl;
  res->timeline_width_s = tl->width_s;
  res->timeline_n = tl->n;
  for (int b = 0; b < tl->n; b++) {
    struct sv_timeline_bin *o = &res->timeline[b];
    double span = tl->width_s * engines;
    o->busy = tl->busy_s[b] / span;
    o->running = tl->running_s[b] / span;
    o->waiting = tl->waiting_s[b] / span;
    o->kv_used = tl->kv_s[b] / span;
    o->preemptions = tl->preemptions[b];
    o->tokens = tl->tokens[b];
    o->arrivals = tl->arrivals[b];
  }
  bottleneck(job, res);
  if (trace) {
    struct lanes L = {NULL, npu_xcalloc((size_t)engines, sizeof(int)), 0, engines};
    if (!disagg) {
      trace_pool(trace, "replica", 0, dec.replicas, 0, s->tp, &dec.st);
      for (int i = 0; i < n; i++)
        lane_slice(&L, trace, job->req[i].replica, req_name(trace, i, &job->req[i]), job->req[i].arrival_s,
                   out[i].finish_s);
    } else {
      trace_pool(trace, "prefill", 0, pre.replicas, 0, pre.tp, &pre.st);
      trace_pool(trace, "decode", pre.replicas, dec.replicas, prefill_ranks, dec.tp, &dec.st);
      for (int i = 0; i < n; i++)
        lane_slice(&L, trace, pre.req[i].replica, req_name(trace, i, &job->req[i]), job->req[i].arrival_s,
                   out[i].first_s);
      for (int k = 0; k < dec.n; k++)
        lane_slice(&L, trace, pre.replicas + dec.req[k].replica, req_name(trace, dec.of[k], &job->req[dec.of[k]]),
                   dec.req[k].arrival_s, dec.out[k].finish_s);
    }
    free(L.end);
    free(L.n);
  }
  pool_release(&pre);
  pool_release(&dec);
  sv_colls_release(&colls);
  free(out);
  return 0;
}
