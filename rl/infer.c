/*
 * infer.c - inference costs of the policy from the chip model: prefill, decode steps, and the
 * forward passes that compute log-probs and values.
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
 *   with rl.rollout.expert_parallel) - all-reduce T h
 *
 * Prefill: attention is the FlashAttention forward kernel over the prompts (compute-bound for
 * long prompts). Decode (T = batch): the GEMMs at m = batch read every weight once per step
 * (memory-bound), and attention reads the KV cache: per step, the context tokens of the batch
 * x bytes of K and V per token per device / (HBM bandwidth x chip.calib.hbm). TP collectives
 * are timed alone on the engine's links by the interconnect (probe.c). A decode step also costs
 * the engine's time beyond its kernels, step_overhead + batch x seq_overhead (rl.rollout.*):
 * vLLM's scheduler, input preparation, sampling and output processing, measured as what a real
 * engine takes per step beyond this kernel model (rl/spec.c gives the source).
 */
#include "rl/rl_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"

double rl__weight_bytes(const struct wl_model *m, int tp)
{
  return 2.0 * wl_model_params(m) / tp;
}

static int kv_heads_per_rank(const struct wl_model *m, int tp)
{
  return m->kv_heads >= tp ? m->kv_heads / tp : 1; /* replicated when tp exceeds the KV heads */
}

double rl__kv_token_bytes(const struct wl_model *m, int tp)
{
  return (double)m->layers * 2.0 * kv_heads_per_rank(m, tp) * wl_model_head_dim(m) * 2.0;
}

/* Live activations of one prefill chunk of `tokens` tokens (bf16): the residual stream, QKV,
 * the attention output and the MLP's inner activations (gate, up, product), per device. */
double rl__activation_bytes(const struct wl_model *m, int tp, int tokens)
{
  double f = m->moe.experts ? (double)m->moe.ffn * m->moe.top_k : m->ffn;
  return (double)tokens * 2.0 * (4.0 * m->hidden + 3.0 * f / tp);
}

double rl__token_flops(const struct wl_model *m, double ctx)
{
  double mm = wl_model_active_params(m) - (m->tied_embeddings ? 0 : (double)m->vocab * m->hidden);
  return 2.0 * mm + 4.0 * m->layers * ctx * m->heads * wl_model_head_dim(m);
}

/* ------------------------------------------------------------------ costing */

struct ctx {
  struct rl_infer *x;
  struct rl_cost *c;
  struct npu_diag *diag;
};

static int __attribute__((format(printf, 4, 5))) kern(struct ctx *k, double times, const char *op, const char *fmt, ...)
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
  int rc = op_args_parse(d, &a, (const char *const *)kv, n, k->diag);
  struct op_cost cost;
  const struct rl_job *job = k->x->job;
  if (!rc) rc = op_cost_get(k->x->cache, d, &a, &job->sys, (enum core_fidelity)job->run.fidelity, &cost, k->diag);
  if (rc) {
    char msg[512];
    npu_diag_format(k->diag, msg, sizeof msg);
    return npu_diag_set(k->diag, job->path, 0, "rl.rollout.tp", "inference kernel %s %s: %s", op, args, msg), rc;
  }
  k->c->kernel_s += times * (cost.time_s - cost.launch_s + job->sys.chip.stream_gap_s);
  k->c->flops += times * cost.flops;
  return 0;
}

static void coll(struct ctx *k, enum ic_op op, double bytes, int mult)
{
  if (k->x->tp < 2 || bytes <= 0 || mult <= 0) return;
  int i = rl__coll(k->x->colls, op, bytes, k->x->group);
  struct rl_cost *c = k->c;
  for (int j = 0; j < c->ncoll; j++)
    if (c->coll[j] == i) {
      c->mult[j] += mult;
      return;
    }
  NPU_ASSERT(c->ncoll < RL_MAX_REFS);
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

/*
 * One pass of every layer over T tokens (b sequences of s when attention is FlashAttention;
 * s = 0: decode, attention costed from the KV reads elsewhere), then the head over head_rows
 * rows (log-softmax when logprob).
 */
static int pass(struct ctx *k, int T, int b, int s, int head_rows, bool logprob)
{
  const struct rl_infer *x = k->x;
  const struct wl_model *m = &x->job->model;
  int t = x->tp, h = m->hidden, a = m->heads / t, g = kv_heads_per_rank(m, t), d = wl_model_head_dim(m);
  int L = m->layers, Lm = wl_model_moe_layers(m), Ld = L - Lm;
  double act = (double)T * h * 2;
  int rc = 0;
  rc = rc ? rc : kern(k, 2.0 * L, "rms_norm", "rows=%d hidden=%d dtype=bf16 residual=true", T, h);
  rc = rc ? rc : kern(k, L, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, (a + 2 * g) * d, h);
  rc = rc ? rc : kern(k, L, "rope", "tokens=%d heads=%d head_dim=%d dtype=bf16", T, a + g, d);
  if (s > 0)
    rc = rc ? rc : kern(k, L, "flash_attention", "batch=%d heads=%d kv_heads=%d seq=%d dim=%d dtype=bf16 pass=fwd",
                        b, a, g, s, d);
  else
    k->c->kernel_s += L * x->job->sys.chip.stream_gap_s; /* the decode attention kernel's slot; its time is the KV reads */
  rc = rc ? rc : kern(k, L, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, h, a * d);
  coll(k, IC_OP_ALLREDUCE, act, 2 * L);
  if (Ld) {
    int f = m->ffn / t;
    rc = rc ? rc : kern(k, Ld, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, 2 * f, h);
    rc = rc ? rc : kern(k, Ld, "swiglu", "rows=%d ffn=%d dtype=bf16", T, f);
    rc = rc ? rc : kern(k, Ld, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, h, f);
  }
  if (Lm) {
    int E = m->moe.experts, K = m->moe.top_k, F = m->moe.ffn;
    rc = rc ? rc : kern(k, Lm, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, E, h);
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
    rc = rc ? rc : kern(k, Lm, "grouped_gemm", "groups=%d m=%d n=%d k=%d dtype=bf16", groups, rows, 2 * fr, h);
    rc = rc ? rc : kern(k, Lm, "swiglu", "rows=%d ffn=%d dtype=bf16", rows, fr);
    rc = rc ? rc : kern(k, Lm, "grouped_gemm", "groups=%d m=%d n=%d k=%d dtype=bf16", groups, rows, h, fr);
    if (m->moe.shared) {
      int fs = m->moe.shared * F / t;
      rc = rc ? rc : kern(k, Lm, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, 2 * fs, h);
      rc = rc ? rc : kern(k, Lm, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", T, h, fs);
    }
  }
  /* head: final norm, vocab-parallel output projection, then log-softmax or sampling */
  int V = (m->vocab + t - 1) / t;
  rc = rc ? rc : kern(k, 1, "rms_norm", "rows=%d hidden=%d dtype=bf16 residual=false", head_rows, h);
  rc = rc ? rc : kern(k, 1, "gemm", "m=%d n=%d k=%d dtype=bf16 trans_b=true", head_rows, V, h);
  rc = rc ? rc : kern(k, 1, "softmax", "rows=%d cols=%d dtype=bf16", head_rows, V);
  if (logprob) coll(k, IC_OP_ALLREDUCE, 3.0 * head_rows * 4, 1);       /* max, sum, target (Megatron's) */
  else coll(k, IC_OP_ALLGATHER, (double)head_rows * m->vocab * 2, 1);  /* logits for sampling */
  return rc;
}

int rl__infer_init(struct rl_infer *x, const struct rl_job *job, struct op_cache *cache, struct rl_colls *colls,
                   int group, int tp, bool ep, int max_batch, int chunk_tokens, int prompt_len, int fwd_seq,
                   struct npu_diag *diag)
{
  memset(x, 0, sizeof *x);
  x->job = job;
  x->cache = cache;
  x->colls = colls;
  x->group = group;
  x->tp = tp;
  x->ep = ep && job->model.moe.experts > 0;
  x->weight_bytes = rl__weight_bytes(&job->model, tp);
  x->kv_token_bytes = rl__kv_token_bytes(&job->model, tp);
  x->kv_token_s = x->kv_token_bytes / (job->sys.chip.hbm.bw_bytes_per_s * job->sys.chip.calib.hbm.value);
  x->step_overhead_s = job->spec.rollout.step_overhead_s;
  x->seq_overhead_s = job->spec.rollout.seq_overhead_s;
  struct ctx k = {x, NULL, diag};
  int rc = 0;
  if (max_batch > 0) {
    for (int b = 1; x->nb < RL_MAX_BUCKETS; b *= 2) {
      int bb = b < max_batch ? b : max_batch;
      x->batch[x->nb] = bb;
      k.c = &x->decode[x->nb++];
      rc = pass(&k, bb, bb, 0, bb, false);
      if (rc || bb == max_batch) break;
    }
  }
  if (!rc && chunk_tokens > 0) {
    int s = (prompt_len + 127) / 128 * 128;
    int b = chunk_tokens / s > 0 ? chunk_tokens / s : 1;
    x->chunk_tokens = b * prompt_len; /* prompt tokens the chunk prefills (padded to 128 in the kernels) */
    k.c = &x->prefill;
    rc = pass(&k, b * s, b, s, b, false);
  }
  if (!rc && fwd_seq > 0) {
    x->fwd_seq = fwd_seq;
    k.c = &x->forward;
    rc = pass(&k, fwd_seq, 1, fwd_seq, fwd_seq, true);
  }
  return rc;
}

double rl__cost_s(const struct rl_infer *x, const struct rl_cost *c)
{
  double t = c->kernel_s;
  for (int i = 0; i < c->ncoll; i++) t += c->mult[i] * x->colls->v[c->coll[i]].time_s;
  return t;
}

double rl__decode_step_s(const struct rl_infer *x, int batch, double ctx_tokens)
{
  NPU_ASSERT(x->nb > 0 && batch >= 1);
  int i = 0;
  while (i + 1 < x->nb && x->batch[i + 1] < batch) i++;
  double t;
  if (batch <= x->batch[0] || x->nb == 1) {
    t = rl__cost_s(x, &x->decode[0]);
  } else if (batch >= x->batch[x->nb - 1]) {
    t = rl__cost_s(x, &x->decode[x->nb - 1]);
  } else { /* linear between the buckets around batch */
    double t0 = rl__cost_s(x, &x->decode[i]), t1 = rl__cost_s(x, &x->decode[i + 1]);
    double b0 = x->batch[i], b1 = x->batch[i + 1];
    t = t0 + (t1 - t0) * (batch - b0) / (b1 - b0);
  }
  return t + ctx_tokens * x->kv_token_s + x->step_overhead_s + batch * x->seq_overhead_s;
}
