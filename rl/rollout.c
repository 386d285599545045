/*
 * rollout.c - rollout generation with continuous batching over seeded response lengths.
 *
 * Lengths are drawn from GSL's mt19937 seeded with rl.seed (reported), never from the
 * environment: fixed, uniform, lognormal, or a measured histogram (a bin picked with probability
 * proportional to its weight, gsl_ran_discrete). Every engine (rollout.tp devices) serves a contiguous chunk of the iteration's
 * sequences, as veRL dispatches a batch over its rollout workers, so a GRPO group stays on one
 * engine. An engine admits queued sequences while fewer than max_batch run and the KV cache can
 * hold the prompt and the whole response of each (blocks are reserved for the full sequence:
 * vLLM with no preemption), prefills the newly admitted prompts in chunks, then decodes one
 * token per running sequence per step; a sequence leaves after its last token and frees its
 * blocks. Between two admissions or departures the batch is constant and each step reads B
 * more context tokens than the one before, so the steps of such a stretch are summed in closed
 * form: k a(B) + kv (k ctx0 + B k (k - 1) / 2), with a(B) the step's weight-bound part plus the
 * engine's time per step beyond its kernels (step_overhead + B seq_overhead) and kv the time per
 * context token read (infer.c).
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
  gsl_ran_discrete_t *hist = NULL;
  if (s->response.distribution == RL_DIST_HISTOGRAM) {
    hist = gsl_ran_discrete_preproc((size_t)s->response.hist_n, s->response.hist_w);
    NPU_ASSERT(hist != NULL); /* the loader checked the weights */
  }
  for (int i = 0; i < n; i++) {
    double v = s->response.mean;
    if (s->response.distribution == RL_DIST_UNIFORM) {
      int lo = s->response.min, hi = 2 * s->response.mean - s->response.min;
      v = lo + (double)gsl_rng_uniform_int(r, (unsigned long)(hi - lo + 1));
    } else if (s->response.distribution == RL_DIST_LOGNORMAL) {
      v = floor(gsl_ran_lognormal(r, log((double)s->response.mean), s->response.sigma) + 0.5);
    } else if (s->response.distribution == RL_DIST_HISTOGRAM) {
      v = s->response.hist_len[gsl_ran_discrete(r, hist)];
    }
    if (v < s->response.min) v = s->response.min;
    if (v > s->response.max) v = s->response.max;
    out[i] = (int)v;
  }
  if (hist) gsl_ran_discrete_free(hist);
  gsl_rng_free(r);
}

struct engine_out {
  double end_s, prefill_s, decode_s, last_admit_s;
  double batch_steps;  /* sum over steps of the running batch */
  long steps;
};

static void engine(const struct rl_infer *x, const int *len, int lo, int hi, int prompt_len, int max_batch,
                   double cap_tokens, struct engine_out *o)
{
  memset(o, 0, sizeof *o);
  int n = hi - lo;
  int *left = npu_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *left);
  int *run = npu_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *run); /* indices into len, running */
  double *ctx = npu_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *ctx);
  int nrun = 0, q = lo;
  double t = 0, reserved = 0, ctx_sum = 0;
  double prefill_tok_s = x->chunk_tokens > 0 ? rl__cost_s(x, &x->prefill) / x->chunk_tokens : 0;
  for (;;) {
    int admitted = 0;
    while (q < hi && nrun < max_batch && reserved + prompt_len + len[q] <= cap_tokens) {
      reserved += prompt_len + len[q];
      left[nrun] = len[q];
      ctx[nrun] = prompt_len;
      ctx_sum += prompt_len;
      run[nrun++] = q++;
      admitted++;
    }
    if (admitted) {
      double p = (double)admitted * prompt_len * prefill_tok_s;
      t += p;
      o->prefill_s += p;
      if (q == hi) o->last_admit_s = t;
    }
    if (!nrun) break;
    int k = left[0];
    for (int i = 1; i < nrun; i++) k = left[i] < k ? left[i] : k;
    double B = nrun;
    double step = rl__decode_step_s(x, nrun, 0);
    double dt = k * step + x->kv_token_s * (k * ctx_sum + B * (double)k * (k - 1) / 2);
    t += dt;
    o->decode_s += dt;
    o->steps += k;
    o->batch_steps += B * k;
    int w = 0;
    ctx_sum = 0;
    for (int i = 0; i < nrun; i++) {
      left[i] -= k;
      ctx[i] += k;
      if (left[i] == 0) {
        reserved -= prompt_len + len[run[i]];
        continue;
      }
      left[w] = left[i];
      ctx[w] = ctx[i];
      run[w++] = run[i];
      ctx_sum += ctx[i];
    }
    nrun = w;
  }
  NPU_ASSERT(q == hi); /* the loader checked that one sequence fits */
  o->end_s = t;
  free(left);
  free(run);
  free(ctx);
}

void rl__rollout(const struct rl_infer *x, const int *len, int n, int engines, int prompt_len, int max_batch,
                 double kv_capacity_tokens, struct rl_rollout_stats *st)
{
  memset(st, 0, sizeof *st);
  st->max_batch = max_batch;
  st->kv_capacity_tokens = kv_capacity_tokens;
  struct engine_out *o = npu_xcalloc((size_t)engines, sizeof *o);
  int slow = 0;
  double steps = 0, bsteps = 0;
  for (int e = 0; e < engines; e++) {
    int lo = (int)((long long)e * n / engines), hi = (int)((long long)(e + 1) * n / engines);
    engine(x, len, lo, hi, prompt_len, max_batch, kv_capacity_tokens, &o[e]);
    if (o[e].end_s > o[slow].end_s) slow = e;
    steps += o[e].steps;
    bsteps += o[e].batch_steps;
  }
  st->time_s = o[slow].end_s;
  st->prefill_s = o[slow].prefill_s;
  st->decode_s = o[slow].decode_s;
  st->tail_s = o[slow].end_s - o[slow].last_admit_s;
  st->decode_steps = o[slow].steps;
  for (int e = 0; e < engines; e++) st->idle_s += (st->time_s - o[e].end_s) / engines;
  st->mean_batch = steps > 0 ? bsteps / steps : 0;
  const struct wl_model *m = &x->job->model;
  double per_tok = rl__token_flops(m, 0), attn = rl__token_flops(m, 1) - per_tok;
  for (int i = 0; i < n; i++) {
    double L = len[i], P = prompt_len;
    st->generated_tokens += L;
    st->longest = L > st->longest ? L : st->longest;
    /* prefill: P tokens at contexts 0..P-1; decode: L tokens at contexts P..P+L-1 */
    st->flops += (P + L) * per_tok + attn * ((P + L) * (P + L - 1) / 2);
  }
  st->mean_len = n ? st->generated_tokens / n : 0;
  free(o);
}
