/*
 * rollout.c - the rollout: seeded response lengths, then generation on serve/'s engines.
 *
 * Lengths are drawn from GSL's mt19937 seeded with rl.seed (reported), never from the
 * environment: fixed, uniform, lognormal, or a measured histogram (a bin picked with probability
 * proportional to its weight, gsl_ran_discrete). Every engine (rollout.tp devices) serves a
 * contiguous chunk of the iteration's sequences, as veRL dispatches a batch over its rollout
 * workers, so a GRPO group stays on one engine. Generation is a serving run with the rollout's
 * request pattern (serve/engine.h): every sequence arrives at t = 0, the engine admits them while
 * fewer than max_num_seqs run and the KV cache can hold each whole sequence (blocks reserved for
 * prompt and response: no preemption), prefills prompts in chunks of the token budget alongside
 * the running decodes (vLLM v1), decodes one token per running sequence per step; every step is
 * costed by serve/infer.h (the paged-attention kernel for the KV reads, the engine's time beyond
 * its kernels per step and sequence).
 */
#include "rl/rl_int.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

void rl__draw_lengths(const struct rl_spec *s, int n, int *out)
{
  gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
  NPU_ASSERT(r != NULL);
  gsl_rng_set(r, (unsigned long)s->seed);
  sv_dist_draw(&s->response, r, n, out);
  gsl_rng_free(r);
}

/* What one engine did, from its step records. */
struct engine_out {
  double end_s, prefill_s, decode_s, last_admit_s;
  long steps;
};

static double step_cost(const void *ctx, const struct sv_step *s, double parts[SV_PART_COUNT])
{
  return sv_step_s(ctx, s, parts);
}

void rl__rollout(const struct sv_infer *x, const struct rl_job *job, const int *len, int n, int prompt_len,
                 long kv_blocks, struct rl_rollout_stats *st)
{
  memset(st, 0, sizeof *st);
  const struct rl_spec *s = &job->spec;
  int engines = job->engines;
  struct sv_request *req = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *req);
  for (int e = 0; e < engines; e++) {
    int lo = (int)((long long)e * n / engines), hi = (int)((long long)(e + 1) * n / engines);
    for (int i = lo; i < hi; i++) req[i] = (struct sv_request){0, prompt_len, len[i], -1, 0, e, false};
  }
  int graph[SV_GRAPH_MAX];
  int ngraph = sv_graph_sizes(s->rollout.max_num_seqs, graph);
  struct sv_engine_cfg cfg = {s->rollout.max_num_seqs, s->rollout.max_batched_tokens, kv_blocks, RL_BLOCK_TOKENS,
                              true, true, false, graph, ngraph, engines, SV_ROUTE_FIXED, 0, 0, 0,
                              job->model.dsa.topk ? job->model.dsa.topk : job->model.window};
  struct sv_req_out *out = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *out);
  struct sv_engine_stats es;
  sv_engine_run(&cfg, step_cost, x, req, n, out, true, &es);
  struct engine_out *o = npu_xcalloc((size_t)engines, sizeof *o);
  for (size_t i = 0; i < es.nrec; i++) {
    const struct sv_step_rec *r = &es.rec[i];
    struct engine_out *eo = &o[r->replica];
    double end = r->start_s + r->time_s;
    eo->end_s = end > eo->end_s ? end : eo->end_s;
    eo->steps++;
    if (r->prefill_tokens) {
      eo->prefill_s += r->time_s; /* steps with prompt chunks (decodes may ride along) */
      eo->last_admit_s = r->start_s;
    } else {
      eo->decode_s += r->time_s;
    }
  }
  int slow = 0;
  for (int e = 1; e < engines; e++)
    if (o[e].end_s > o[slow].end_s) slow = e;
  st->max_batch = s->rollout.max_num_seqs;
  st->kv_capacity_tokens = (double)kv_blocks * RL_BLOCK_TOKENS;
  st->time_s = o[slow].end_s;
  st->prefill_s = o[slow].prefill_s;
  st->decode_s = o[slow].decode_s;
  st->tail_s = o[slow].end_s - o[slow].last_admit_s;
  st->decode_steps = o[slow].steps;
  for (int e = 0; e < engines; e++) st->idle_s += (st->time_s - o[e].end_s) / engines;
  st->mean_batch = es.steps > 0 ? es.batch_steps / es.steps : 0;
  const struct wl_model *m = &job->model;
  double per_tok = sv_token_flops(m, 0), attn = sv_token_flops(m, 1) - per_tok;
  for (int i = 0; i < n; i++) {
    double L = len[i], P = prompt_len;
    st->generated_tokens += L;
    st->longest = L > st->longest ? L : st->longest;
    /* prefill: P tokens at contexts 0..P-1; decode: L tokens at contexts P..P+L-1 */
    st->flops += (P + L) * per_tok + attn * ((P + L) * (P + L - 1) / 2);
  }
  st->mean_len = n ? st->generated_tokens / n : 0;
  sv_engine_stats_release(&es);
  free(o);
  free(out);
  free(req);
}
