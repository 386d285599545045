/*
 * infer.c - inference costs from the chip model: an engine step's linear work, attention,
 * sampling head and TP collectives; the forward with log-probs the RL replay needs.
 *
 * Every kernel is costed through the operator cost cache (ops/), as the training replay does
 * (workloads/expand.c), with kernels queued ahead (the stream gap replaces the launch
 * overhead: CUDA graphs / ACL graph mode). Per layer, for T tokens on an engine of TP size t
 * (hidden h, heads a, KV heads g, head dim d, MLP f, experts E of size F with top-k k):
 *
 *   norm - QKV GEMM (T x h -> (a/t + 2 max(g/t,1)) d) - RoPE - attention - output GEMM
 *   (T x ad/t -> h) - all-reduce T h - norm - MLP: gate+up GEMM (T x h -> 2f/t), SwiGLU, down
 *   GEMM (T x f/t -> h); MoE: router GEMM (T x h -> E), grouped GEMMs over the experts the
 *   tokens touch (E (1 - (1 - k/E)^T) of them, TP-sharded F/t, or E/t whole experts per rank
 *   with expert parallelism) - all-reduce T h
 *
 * The linear work is costed at T = 1, 2, 4, ... up to the step's token budget and interpolated
 * linearly between buckets (GEMMs at small m are weight-bound, so a step of a few tokens costs
 * about what one token does). Attention is costed apart, as the engines run it:
 *   prefill: a chunk of c tokens after p cached ones does 4 c (p + c/2) d FLOPs per layer and
 *     query head (causal), at the FLOP rate the FlashAttention forward kernel reaches over a
 *     context of the next bucket (128, 256, ... tokens; the rate grows with the context);
 *   decode: the paged-attention kernel (ops/paged_attention.c, vLLM's v2) at a reference batch
 *     and two contexts gives its time per step and per context token read, linear between.
 * The head (final norm, vocabulary-parallel projection, softmax, logits all-gather) runs over
 * the rows that sample. TP collectives are registered and timed by the caller's probe on the
 * engine's links.
 */
#include "serve/infer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/op.h"

int sv_coll(struct sv_colls *c, enum ic_op op, double bytes, int group)
{
  for (int i = 0; i < c->n; i++)
    if (c->v[i].op == op && c->v[i].bytes == bytes && c->v[i].group == group) return i;
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 16;
    c->v = npu_xrealloc(c->v, (size_t)c->cap * sizeof *c->v);
  }
  c->v[c->n] = (struct sv_coll){op, bytes, group, 0};
  return c->n++;
}

void sv_colls_release(struct sv_colls *c)
{
  free(c->v);
  memset(c, 0, sizeof *c);
}

double sv_weight_bytes(const struct wl_model *m, int tp)
{
  return 2.0 * wl_model_params(m) / tp;
}

static int kv_heads_per_rank(const struct wl_model *m, int tp)
{
  return m->kv_heads >= tp ? m->kv_heads / tp : 1; /* replicated when tp exceeds the KV heads */
}

double sv_kv_token_bytes(const struct wl_model *m, int tp)
{
  return (double)m->layers * 2.0 * kv_heads_per_rank(m, tp) * wl_model_head_dim(m) * 2.0;
}

/* The residual stream, QKV, the attention output and the MLP's inner activations (gate, up,
 * product) of a step's tokens, per device. */
double sv_activation_bytes(const struct wl_model *m, int tp, int tokens)
{
  double f = m->moe.experts ? (double)m->moe.ffn * m->moe.top_k : m->ffn;
  return (double)tokens * 2.0 * (4.0 * m->hidden + 3.0 * f / tp);
}

double sv_token_flops(const struct wl_model *m, double ctx)
{
  double mm = wl_model_active_params(m) - (m->tied_embeddings ? 0 : (double)m->vocab * m->hidden);
  return 2.0 * mm + 4.0 * m->layers * ctx * m->heads * wl_model_head_dim(m);
}

const char *sv_part_name(int p)
{
  static const char *const names[] = {"linear", "attention", "communication", "head", "engine", "draft"};
  return p >= 0 && p < SV_PART_COUNT ? names[p] : "?";
}

/* ------------------------------------------------------------------ costing */

struct ctx {
  struct sv_infer *x;
  struct sv_cost *c;
  struct npu_diag *diag;
};

/* The cost of op at args (one kernel, queued behind the previous one), or an error naming the key. */
static int __attribute__((format(printf, 4, 5))) cost_of(struct ctx *k, struct op_cost *cost, const char *op,
                                                         const char *fmt, ...)
{
  char args[256], buf[256], *kv[OP_MAX_PARAMS];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  const struct op_desc *d = op_find(op);
  NPU_ASSERT(d != NULL);
  snprintf(buf, sizeof buf, "%s", args);
  int n = 0;
  for (char *tok = strtok(buf, " "); tok && n < OP_MAX_PARAMS; tok = strtok(NULL, " ")) kv[n++] = tok;
  struct op_args a;
  const struct sv_target *tg = &k->x->tg;
  int rc = op_args_parse(d, &a, (const char *const *)kv, n, k->diag);
  if (!rc) rc = op_cost_get(k->x->cache, d, &a, tg->sys, (enum core_fidelity)tg->fidelity, cost, k->diag);
  if (rc) {
    char msg[512];
    npu_diag_format(k->diag, msg, sizeof msg);
    return npu_diag_set(k->diag, tg->path, 0, tg->key, "inference kernel %s %s: %s", op, args, msg), rc;
  }
  cost->time_s += tg->sys->chip.stream_gap_s - cost->launch_s;
  return 0;
}

#define KERN(k, times, op, ...)                                              \
  do {                                                                       \
    struct op_cost cost_;                                                    \
    if (!rc) rc = cost_of((k), &cost_, (op), __VA_ARGS__);                   \
    if (!rc) {                                                               \
      (k)->c->kernel_s += (times) * cost_.time_s;                            \
      (k)->c->flops += (times) * cost_.flops;                                \
    }                                                                        \
  } while (0)

static void coll(struct ctx *k, enum ic_op op, double bytes, int mult)
{
  if (k->x->tp < 2 || bytes <= 0 || mult <= 0) return;
  int i = sv_coll(k->x->colls, op, bytes, k->x->group);
  struct sv_cost *c = k->c;
  for (int j = 0; j < c->ncoll; j++)
    if (c->coll[j] == i) {
      c->mult[j] += mult;
      return;
    }
  NPU_ASSERT(c->ncoll < SV_MAX_REFS);
  c->coll[c->ncoll] = i;
  c->mult[c->ncoll++] = mult;
}

/* Of n experts (of E in all), those T tokens with top-k routing touch (expected, uniform routing:
 * each expert is missed by a token with probability 1 - k/E). */
static int touched(int n, int E, int topk, double T)
{
  double g = n * (1.0 - pow(1.0 - (double)topk / E, T));
  int c = (int)ceil(g - 1e-9);
  return c < 1 ? 1 : c > n ? n : c;
}

/* Every layer over T tokens: the linear work, and FlashAttention over b sequences of s when s > 0. */
static int body(struct ctx *k, int T, int b, int s)
{
  const struct sv_infer *x = k->x;
  const struct wl_model *m = x->tg.model;
  int t = x->tp, h = m->hidden, a = m->heads / t, g = kv_heads_per_rank(m, t), d = wl_model_head_dim(m);
  int L = m->layers, Lm = wl_model_moe_layers(m), Ld = L - Lm;
  double act = (double)T * h * 2;
  int rc = 0;
  KERN(k, 2.0 * L, "rms_norm", "rows=%d hidden=%d dtype=bf16 residual=true", T, h);
  KERN(k, L, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, (a + 2 * g) * d, h);
  KERN(k, L, "rope", "tokens=%d heads=%d head_dim=%d dtype=bf16", T, a + g, d);
  if (s > 0)
    KERN(k, L, "flash_attention", "batch=%d heads=%d kv_heads=%d seq=%d dim=%d dtype=bf16 pass=fwd", b, a, g, s, d);
  KERN(k, L, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, h, a * d);
  coll(k, IC_OP_ALLREDUCE, act, 2 * L);
  if (Ld) {
    int f = m->ffn / t;
    KERN(k, Ld, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, 2 * f, h);
    KERN(k, Ld, "swiglu", "rows=%d ffn=%d dtype=bf16", T, f);
    KERN(k, Ld, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, h, f);
  }
  if (Lm) {
    int E = m->moe.experts, K = m->moe.top_k, F = m->moe.ffn;
    KERN(k, Lm, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, E, h);
    int groups, rows, fr;
    if (x->ep) { /* whole experts, E/t per rank; each rank sees every token, keeps the copies routed to it */
      groups = touched(E / t, E, K, T);
      rows = (T * K + t - 1) / t;
      fr = F;
    } else {
      groups = touched(E, E, K, T);
      rows = T * K;
      fr = F / t;
    }
    if (rows < groups) rows = groups;
    KERN(k, Lm, "grouped_gemm", "groups=%d m=%d n=%d k=%d dtype=bf16", groups, rows, 2 * fr, h);
    KERN(k, Lm, "swiglu", "rows=%d ffn=%d dtype=bf16", rows, fr);
    KERN(k, Lm, "grouped_gemm", "groups=%d m=%d n=%d k=%d dtype=bf16", groups, rows, h, fr);
    if (m->moe.shared) {
      int fs = m->moe.shared * F / t;
      KERN(k, Lm, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, 2 * fs, h);
      KERN(k, Lm, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, h, fs);
    }
  }
  return rc;
}

/* The head over rows rows: final norm, vocabulary-parallel projection, then log-softmax or sampling. */
static int head(struct ctx *k, int rows, bool logprob)
{
  const struct wl_model *m = k->x->tg.model;
  int t = k->x->tp, h = m->hidden, V = (m->vocab + t - 1) / t;
  int rc = 0;
  KERN(k, 1, "rms_norm", "rows=%d hidden=%d dtype=bf16 residual=false", rows, h);
  KERN(k, 1, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", rows, V, h);
  KERN(k, 1, "softmax", "rows=%d cols=%d dtype=bf16", rows, V);
  if (logprob) coll(k, IC_OP_ALLREDUCE, 3.0 * rows * 4, 1);       /* max, sum, target (Megatron's) */
  else coll(k, IC_OP_ALLGATHER, (double)rows * m->vocab * 2, 1);  /* logits for sampling */
  return rc;
}

/* Buckets 1, 2, 4, ... up to max (at most SV_MAX_BUCKETS; max itself last). */
static int buckets(int max, int *out)
{
  int n = 0;
  for (int b = 1; n < SV_MAX_BUCKETS; b *= 2) {
    out[n++] = b < max ? b : max;
    if (b >= max) break;
  }
  out[n - 1] = max;
  return n;
}

double sv_engine_step_s(const struct sv_engine_time *et, int tp)
{
  return et->step_s + (tp > 1 ? et->worker_s + et->worker_rank_s * (tp - 2) : 0);
}

int sv_infer_init(struct sv_infer *x, const struct sv_target *tg, struct op_cache *cache, struct sv_colls *colls,
                  int group, int tp, bool ep, const struct sv_infer_shape *shape, const struct sv_engine_time *et,
                  struct npu_diag *diag)
{
  memset(x, 0, sizeof *x);
  x->tg = *tg;
  x->cache = cache;
  x->colls = colls;
  x->group = group;
  x->tp = tp;
  const struct wl_model *m = tg->model;
  x->ep = ep && m->moe.experts > 0;
  x->weight_bytes = sv_weight_bytes(m, tp);
  x->kv_token_bytes = sv_kv_token_bytes(m, tp);
  for (int l = 0; l < m->layers; l++) x->local_layers += wl_model_layer_keys(m, l) > 0; /* window, sparse */
  x->step_overhead_s = et ? sv_engine_step_s(et, tp) : 0;
  x->seq_overhead_s = et ? et->seq_s : 0;
  struct ctx k = {x, NULL, diag};
  int rc = 0;
  if (shape->max_tokens > 0) {
    x->nb = buckets(shape->max_tokens, x->tokens);
    for (int i = 0; !rc && i < x->nb; i++) {
      k.c = &x->body[i];
      rc = body(&k, x->tokens[i], 1, 0);
    }
  }
  if (!rc && shape->max_rows > 0) {
    x->nh = buckets(shape->max_rows, x->rows);
    for (int i = 0; !rc && i < x->nh; i++) {
      k.c = &x->head[i];
      rc = head(&k, x->rows[i], false);
    }
  }
  int t = tp, a = m->heads / t, g = kv_heads_per_rank(m, t), d = wl_model_head_dim(m), L = m->layers;
  if (!rc && shape->max_context > 0) {
    /* FlashAttention forward, causal, one sequence of s: its FLOPs over its time */
    int top = (shape->max_context + 127) / 128 * 128;
    for (int s = 128; !rc && x->na < SV_MAX_BUCKETS; s *= 2) {
      int ss = s < top ? s : top;
      struct op_cost c;
      rc = cost_of(&k, &c, "flash_attention", "batch=1 heads=%d kv_heads=%d seq=%d dim=%d dtype=bf16 pass=fwd", a, g,
                   ss, d);
      if (rc) break;
      x->context[x->na] = ss;
      x->attn_rate[x->na++] = c.flops / c.time_s;
      if (ss == top) break;
    }
  }
  if (!rc && shape->decode_batch > 0) {
    /* paged attention at the reference batch over 1K and 4K contexts: linear in the tokens read */
    int B = shape->decode_batch, c1 = 1024, c2 = 4096;
    struct op_cost t1, t2;
    rc = cost_of(&k, &t1, "paged_attention", "batch=%d heads=%d kv_heads=%d context=%d dim=%d dtype=bf16", B, a, g, c1,
                 d);
    if (!rc)
      rc = cost_of(&k, &t2, "paged_attention", "batch=%d heads=%d kv_heads=%d context=%d dim=%d dtype=bf16", B, a, g,
                   c2, d);
    if (!rc) {
      double slope = (t2.time_s - t1.time_s) / ((double)B * (c2 - c1));
      double fixed = t1.time_s - slope * B * c1;
      x->decode_attn_token_s = slope > 0 ? slope : 0; /* per layer */
      x->decode_attn_step_s = L * (fixed > 0 ? fixed : 0); /* a kernel's fixed part is not negative */
    }
  }
  if (!rc && shape->fwd_seq > 0) {
    x->fwd_seq = shape->fwd_seq;
    k.c = &x->forward;
    rc = body(&k, shape->fwd_seq, 1, shape->fwd_seq);
    if (!rc) rc = head(&k, shape->fwd_seq, true);
  }
  return rc;
}

double sv_cost_s(const struct sv_infer *x, const struct sv_cost *c)
{
  double t = c->kernel_s;
  for (int i = 0; i < c->ncoll; i++) t += c->mult[i] * x->colls->v[c->coll[i]].time_s;
  return t;
}

static double comm_s(const struct sv_infer *x, const struct sv_cost *c)
{
  return sv_cost_s(x, c) - c->kernel_s;
}

/* Linear interpolation of the bucketed costs at v (the last bucket's cost scaled beyond it). */
static void interp(const struct sv_infer *x, const int *at, const struct sv_cost *cost, int n, double v,
                   double *kernel, double *comm)
{
  NPU_ASSERT(n > 0);
  if (v <= 0) {
    *kernel = *comm = 0;
    return;
  }
  int i = 0;
  while (i + 1 < n && at[i + 1] < v) i++;
  if (v <= at[0] || n == 1) {
    double f = v > at[0] ? v / at[0] : 1;
    *kernel = f * cost[0].kernel_s;
    *comm = f * comm_s(x, &cost[0]);
  } else if (v >= at[n - 1]) {
    double f = v / at[n - 1];
    *kernel = f * cost[n - 1].kernel_s;
    *comm = f * comm_s(x, &cost[n - 1]);
  } else {
    double w = (v - at[i]) / (double)(at[i + 1] - at[i]);
    *kernel = cost[i].kernel_s + w * (cost[i + 1].kernel_s - cost[i].kernel_s);
    *comm = comm_s(x, &cost[i]) + w * (comm_s(x, &cost[i + 1]) - comm_s(x, &cost[i]));
  }
}

double sv_step_s(const struct sv_infer *x, const struct sv_step *s, double parts[SV_PART_COUNT])
{
  double p[SV_PART_COUNT] = {0}, k, c;
  interp(x, x->tokens, x->body, x->nb, s->tokens, &k, &c);
  p[SV_PART_LINEAR] = k;
  p[SV_PART_COMM] = c;
  if (s->rows > 0) {
    interp(x, x->rows, x->head, x->nh, s->rows, &k, &c);
    p[SV_PART_HEAD] = k;
    p[SV_PART_COMM] += c;
  }
  /* the global layers read the whole context, the sliding-window ones (model.window) the window */
  const struct wl_model *m = x->tg.model;
  double local = x->local_layers, global = m->layers - local;
  if (s->decode > 0)
    p[SV_PART_ATTENTION] = x->decode_attn_step_s +
                           (global * s->decode_context + local * s->decode_window_context) * x->decode_attn_token_s;
  if (s->prefill_pairs > 0) {
    NPU_ASSERT(x->na > 0);
    int i = 0;
    while (i + 1 < x->na && x->context[i] < s->prefill_context) i++;
    double pairs = global * s->prefill_pairs + local * s->prefill_window_pairs;
    double flops = 4.0 * pairs * wl_model_head_dim(m) * (m->heads / x->tp);
    p[SV_PART_ATTENTION] += flops / x->attn_rate[i];
  }
  p[SV_PART_ENGINE] = x->step_overhead_s + s->seqs * x->seq_overhead_s;
  if (s->draft_passes > 0 && x->draft_layers > 0) {
    /* each pass: the draft module's layers and the head over one token per drafting sequence */
    double kb, cb, kh, ch;
    interp(x, x->tokens, x->body, x->nb, s->draft_seqs, &kb, &cb);
    interp(x, x->rows, x->head, x->nh, s->draft_seqs, &kh, &ch);
    double layer = (double)x->draft_layers / x->tg.model->layers;
    p[SV_PART_DRAFT] = s->draft_passes * (layer * (kb + cb) + kh + ch);
  }
  double t = 0;
  for (int i = 0; i < SV_PART_COUNT; i++) t += p[i];
  if (parts) memcpy(parts, p, sizeof p);
  return t;
}
