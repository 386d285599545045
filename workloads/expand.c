/*
 * expand.c - the kernels and tensor-parallel collectives of a training step, per segment.
 *
 * Shapes, for micro-batch b, sequence s (per context-parallel rank), hidden h, heads a, KV
 * heads g, head dimension d, MLP size f, vocabulary V, TP size t; T = b s tokens, and the
 * sequence-parallel share T/t where norms run with SP:
 *
 *   layer forward   norm (fused residual add) -> [SP: all-gather T h] -> QKV GEMM (T x h x
 *                   (a+2g)d/t) -> RoPE -> attention (FlashAttention, or QK^T, softmax, PV as
 *                   batched GEMMs) -> output GEMM (T x ad/t x h) -> [SP: reduce-scatter, else
 *                   all-reduce T h] -> norm -> [all-gather] -> up GEMM (T x h x 2f/t for SwiGLU,
 *                   f/t for GeLU) -> activation -> down GEMM (T x f/t x h) -> [reduce-scatter
 *                   or all-reduce]
 *   layer backward  for each GEMM a data-gradient GEMM and a weight-gradient GEMM, the attention
 *                   backward, each vector kernel's backward, and the transposed collectives
 *                   (all-gather <-> reduce-scatter); recomputation first: selective recomputes
 *                   the attention core of standard attention (FlashAttention recomputes it
 *                   inside its backward already), full the whole layer forward
 *   embedding       a row gather of T x h (vocab-parallel: then all-reduce / reduce-scatter)
 *   head            final norm, [all-gather], output GEMM (T x h x V/t), cross-entropy over the
 *                   vocab-parallel logits with three small all-reduces (max, sum, target)
 *
 * Kernels the operator library does not have a backward for are costed by a forward kernel of
 * the same traffic (documented per call below): a norm's backward reads x and dy and writes
 * dx, as its fused forward reads x and the residual and writes h and y; SwiGLU's backward moves
 * 5/3 of its forward's bytes; RoPE's backward is a rotation by -theta; the embedding gather is
 * costed as a row copy of the same bytes (an un-fused RMSNorm pass).
 */
#include "workloads/expand.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/op.h"
#include "workloads/schedule.h"
#include "workloads/workloads_int.h"

static const char *const cat_names[WL_CAT_COUNT] = {
#define WL__CAT_NAME(e, name, desc) name,
    WL_CAT_MAP(WL__CAT_NAME)
#undef WL__CAT_NAME
};
static const char *const cat_descs[WL_CAT_COUNT] = {
#define WL__CAT_DESC(e, name, desc) desc,
    WL_CAT_MAP(WL__CAT_DESC)
#undef WL__CAT_DESC
};

const char *wl_cat_name(enum wl_cat c)
{
  NPU_ASSERT(c >= 0 && c < WL_CAT_COUNT);
  return cat_names[c];
}

const char *wl_cat_desc(enum wl_cat c)
{
  NPU_ASSERT(c >= 0 && c < WL_CAT_COUNT);
  return cat_descs[c];
}

bool wl_cat_is_compute(enum wl_cat c)
{
  return c <= WL_CAT_OPTIM;
}

/* ------------------------------------------------------------------ building */

static int add_kernel(struct wl_program *j, const char *op, const char *args)
{
  for (int i = 0; i < j->nkernels; i++)
    if (!strcmp(j->kernels[i].op, op) && !strcmp(j->kernels[i].args, args)) return i;
  if (j->nkernels == j->cap_kernels) {
    j->cap_kernels = j->cap_kernels ? 2 * j->cap_kernels : 32;
    j->kernels = npu_xrealloc(j->kernels, (size_t)j->cap_kernels * sizeof *j->kernels);
  }
  struct wl_kernel *k = &j->kernels[j->nkernels];
  memset(k, 0, sizeof *k);
  snprintf(k->op, sizeof k->op, "%s", op);
  snprintf(k->args, sizeof k->args, "%s", args);
  return j->nkernels++;
}

static int add_coll(struct wl_program *j, enum ic_op op, double bytes, int dim)
{
  for (int i = 0; i < j->ncolls; i++)
    if (j->colls[i].op == op && j->colls[i].bytes == bytes && j->colls[i].dim == dim) return i;
  if (j->ncolls == j->cap_colls) {
    j->cap_colls = j->cap_colls ? 2 * j->cap_colls : 16;
    j->colls = npu_xrealloc(j->colls, (size_t)j->cap_colls * sizeof *j->colls);
  }
  struct wl_coll *c = &j->colls[j->ncolls];
  memset(c, 0, sizeof *c);
  c->op = op;
  c->bytes = bytes;
  c->dim = dim;
  return j->ncolls++;
}

static void push(struct wl_program *j, enum wl_cat cat, bool recompute, bool coll, int index)
{
  if (j->nitems == j->cap_items) {
    j->cap_items = j->cap_items ? 2 * j->cap_items : 128;
    j->items = npu_xrealloc(j->items, (size_t)j->cap_items * sizeof *j->items);
  }
  j->items[j->nitems++] = (struct wl_item){.cat = (uint8_t)cat, .recompute = recompute, .coll = coll, .index = index, .hide = -1};
}

/* A kernel item: op with printf-style arguments. */
static void __attribute__((format(printf, 5, 6)))
kern(struct wl_program *j, enum wl_cat cat, bool rc, const char *op, const char *fmt, ...)
{
  char args[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  push(j, cat, rc, false, add_kernel(j, op, args));
}

/* A tensor-parallel collective item (skipped when the group has one rank). */
static void tpcoll(struct wl_program *j, bool rc, enum ic_op op, double bytes)
{
  if (j->plan.tp < 2 || bytes <= 0) return;
  push(j, WL_CAT_TP, rc, true, add_coll(j, op, bytes, WL_DIM_TP));
}

static void seg_begin(struct wl_program *j, enum wl_seg_kind k)
{
  j->seg[k].first_item = j->nitems;
}

static void seg_end(struct wl_program *j, enum wl_seg_kind k)
{
  j->seg[k].nitems = j->nitems - j->seg[k].first_item;
}

/* ------------------------------------------------------------------ shapes */

/* What a backward call emits: everything (a forward, or a full backward), only the input
 * gradients (BI), or only the weight-gradient GEMMs (W). */
enum emit { EM_ALL, EM_BI, EM_W };

struct shape {
  int mode;         /* enum emit */
  bool fp8;         /* linear layers in fp8 (plan.dtype) */
  int T, Tn;        /* tokens of a micro-batch; rows the norms see (T / t with SP) */
  int t, h, a, g, d, f, V, s, b;
  const char *dt;
  double act_bytes; /* T x h activations in the training type */
};

static struct shape shape_of(const struct wl_program *j)
{
  const struct wl_model *m = &j->model;
  const struct wl_plan *p = &j->plan;
  struct shape s;
  s.b = p->micro_batch;
  s.s = m->seq_len / p->cp;
  s.T = s.b * s.s;
  s.t = p->tp;
  s.Tn = p->sp ? s.T / s.t : s.T;
  s.h = m->hidden;
  s.a = m->heads;
  s.g = m->kv_heads;
  s.d = wl_model_head_dim(m);
  s.f = m->ffn;
  s.V = m->vocab;
  s.mode = EM_ALL;
  s.fp8 = p->dtype == 2;
  s.dt = p->dtype == 1 ? "fp16" : "bf16";
  s.act_bytes = (double)s.T * s.h * 2;
  return s;
}

/* The collective that gathers a sequence-parallel activation for a TP region, or nothing. */
static void sp_gather(struct wl_program *j, const struct shape *s, bool rc)
{
  if (j->plan.sp) tpcoll(j, rc, IC_OP_ALLGATHER, s->act_bytes);
}

/* The collective that leaves a TP region: reduce-scatter with SP, else all-reduce. */
static void tp_reduce(struct wl_program *j, const struct shape *s, bool rc)
{
  tpcoll(j, rc, j->plan.sp ? IC_OP_REDUCESCATTER : IC_OP_ALLREDUCE, s->act_bytes);
}

/* fp8 training (plan.fp8_recipe): the GEMM's input type and the quantization of its operand
 * (rows x cols of the training type) before it: per-tensor scaling (an amax pass and a
 * quantize pass), 1x128 blocks (DeepSeek-V3's activations), or MXFP8 (32-element blocks). */
static const char *fp8_gemm_type(const struct wl_program *j)
{
  return j->plan.fp8_recipe == 2 ? "mxfp8" : "fp8_e4m3";
}

static void fp8_quantize(struct wl_program *j, const struct shape *s, bool rc, long rows, int cols)
{
  static const char *const gran[] = {"tensor", "block1x128", "block1x32"};
  kern(j, WL_CAT_VEC, rc, "quantize", "rows=%ld cols=%d in=%s dtype=%s granularity=%s", rows, cols, s->dt,
       j->plan.fp8_recipe == 2 ? "mxfp8" : "fp8_e4m3", gran[j->plan.fp8_recipe]);
}

/* A linear layer's GEMM m x k x n (A transposed when ta, B when tb), in the training type or fp8. */
static void linear(struct wl_program *j, const struct shape *s, bool rc, long m, int n, long k, bool ta, bool tb)
{
  /* a GEMM whose quantized operand's rows are not whole scaling blocks stays in the training type */
  int block = j->plan.fp8_recipe == 1 ? 128 : j->plan.fp8_recipe == 2 ? 32 : 1;
  if (s->fp8 && (ta ? m : k) % block == 0) {
    fp8_quantize(j, s, rc, ta ? k : m, (int)(ta ? m : k));
    kern(j, WL_CAT_GEMM, rc, "gemm", "m=%ld n=%d k=%ld dtype=%s out=bf16%s%s", m, n, k, fp8_gemm_type(j),
         ta ? " trans_a=true" : "", tb ? " trans_b=true" : "");
    return;
  }
  kern(j, WL_CAT_GEMM, rc, "gemm", "m=%ld n=%d k=%ld dtype=%s%s%s", m, n, k, s->dt, ta ? " trans_a=true" : "",
       tb ? " trans_b=true" : "");
}

/* Y = X W^T with W [n, k] as Megatron stores it: forward GEMM T x k -> n. */
static void gemm_fwd(struct wl_program *j, const struct shape *s, bool rc, int k, int n)
{
  linear(j, s, rc, s->T, n, k, false, true);
}

/* dX = dY W (T x n -> k: with the input gradients, BI) and dW = dY^T X (n x T -> k: W). */
static void gemm_bwd(struct wl_program *j, const struct shape *s, int k, int n)
{
  if (s->mode != EM_W) linear(j, s, false, s->T, k, n, false, false);
  if (s->mode != EM_BI) linear(j, s, false, n, k, s->T, true, false);
}

/* Whether a backward item other than a weight gradient is emitted now. */
static bool bi(const struct shape *s)
{
  return s->mode != EM_W;
}

static void norm(struct wl_program *j, const struct shape *s, bool rc, bool fused)
{
  if (j->model.norm == WL_NORM_RMS)
    kern(j, WL_CAT_VEC, rc, "rms_norm", "rows=%d hidden=%d dtype=%s residual=%s", s->Tn, s->h, s->dt,
         fused ? "true" : "false");
  else
    kern(j, WL_CAT_VEC, rc, "layer_norm", "rows=%d hidden=%d dtype=%s", s->Tn, s->h, s->dt);
}

/* Dropout on rows x cols (forward or backward: the same kernel), when the model has it. */
static void dropout(struct wl_program *j, const struct shape *s, bool rc, long rows, int cols, enum wl_cat cat)
{
  if (j->model.dropout > 0)
    kern(j, cat, rc, "dropout", "rows=%ld cols=%d dtype=%s p=%g", rows, cols, s->dt, j->model.dropout);
}

/* Standard attention's core: QK^T and PV as batched GEMMs, the softmax between them. */
static void attn_core_std(struct wl_program *j, const struct shape *s, bool rc)
{
  int heads = s->b * s->a / s->t;
  kern(j, WL_CAT_ATTN, rc, "grouped_gemm", "groups=%d m=%d n=%d k=%d dtype=%s", heads, heads * s->s, s->s, s->d,
       s->dt);
  kern(j, WL_CAT_ATTN, rc, "softmax", "rows=%d cols=%d dtype=%s", heads * s->s, s->s, s->dt);
  dropout(j, s, rc, (long)heads * s->s, s->s, WL_CAT_ATTN);
  kern(j, WL_CAT_ATTN, rc, "grouped_gemm", "groups=%d m=%d n=%d k=%d dtype=%s", heads, heads * s->s, s->d, s->s,
       s->dt);
}

/* With context parallelism a rank's queries (s / cp, in balanced causal chunks) meet every key:
 * the work of cp causal blocks of s / cp, costed as FlashAttention over a batch cp times larger. */
static void attention_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  if (j->model.attention == WL_ATTN_FLASH)
    kern(j, WL_CAT_ATTN, rc, "flash_attention", "batch=%d heads=%d kv_heads=%d seq=%d dim=%d dtype=%s pass=fwd",
         s->b * j->plan.cp, s->a / s->t, s->g / s->t, s->s, s->d, s->dt);
  else
    attn_core_std(j, s, rc);
}

static void attention_bwd(struct wl_program *j, const struct shape *s)
{
  if (j->model.attention == WL_ATTN_FLASH) {
    kern(j, WL_CAT_ATTN, false, "flash_attention", "batch=%d heads=%d kv_heads=%d seq=%d dim=%d dtype=%s pass=bwd",
         s->b * j->plan.cp, s->a / s->t, s->g / s->t, s->s, s->d, s->dt);
    return;
  }
  /* dV = P^T dO, dP = dO V^T, softmax backward (costed as a softmax pass), dQ = dS K, dK = dS^T Q */
  int heads = s->b * s->a / s->t;
  const char *fmt = "groups=%d m=%d n=%d k=%d dtype=%s";
  kern(j, WL_CAT_ATTN, false, "grouped_gemm", fmt, heads, heads * s->s, s->d, s->s, s->dt);
  kern(j, WL_CAT_ATTN, false, "grouped_gemm", fmt, heads, heads * s->s, s->s, s->d, s->dt);
  dropout(j, s, false, (long)heads * s->s, s->s, WL_CAT_ATTN);
  kern(j, WL_CAT_ATTN, false, "softmax", "rows=%d cols=%d dtype=%s", heads * s->s, s->s, s->dt);
  kern(j, WL_CAT_ATTN, false, "grouped_gemm", fmt, heads, heads * s->s, s->d, s->s, s->dt);
  kern(j, WL_CAT_ATTN, false, "grouped_gemm", fmt, heads, heads * s->s, s->d, s->s, s->dt);
}

/*
 * Context parallelism: each rank holds s / cp of the sequence (balanced causal chunks), and
 * attention needs every rank's keys and values. Megatron's ring (cp_comm_type p2p) passes
 * K/V blocks around the CP group, cp - 1 steps each overlapped with a block of attention; it is
 * costed as the all-gather of K and V over the CP group (the same bytes per rank), memoised
 * like TP collectives, minus the attention kernel it overlaps (exposed only when longer). The
 * backward sends dK, dV back: a reduce-scatter of the same size.
 */
static void cp_exchange(struct wl_program *j, const struct shape *s, bool bwd)
{
  if (j->plan.cp < 2) return;
  double kv = 2.0 * s->b * j->model.seq_len * (s->g / s->t) * s->d * 2; /* K and V of the whole sequence */
  int c = add_coll(j, bwd ? IC_OP_REDUCESCATTER : IC_OP_ALLGATHER, kv, WL_DIM_CP);
  push(j, WL_CAT_CP, false, true, c);
  j->items[j->nitems - 1].hide = j->nitems - 2; /* under the attention kernel just before it */
}

static int mlp_up_cols(const struct wl_program *j, const struct shape *s)
{
  return (j->model.act == WL_ACT_SWIGLU ? 2 : 1) * s->f / s->t;
}

static void activation(struct wl_program *j, const struct shape *s, bool rc, bool bwd)
{
  if (j->model.act == WL_ACT_SWIGLU) /* backward: 5/3 of the forward's bytes */
    kern(j, WL_CAT_VEC, rc, "swiglu", "rows=%d ffn=%d dtype=%s", bwd ? (s->T * 5 + 2) / 3 : s->T, s->f / s->t, s->dt);
  else /* GeLU: an elementwise pass over T x f/t, costed by the SwiGLU kernel of half the width */
    kern(j, WL_CAT_VEC, rc, "swiglu", "rows=%d ffn=%d dtype=%s", bwd ? 2 * s->T : s->T, s->f / s->t / 2, s->dt);
}

static void rope(struct wl_program *j, const struct shape *s, bool rc)
{
  if (j->model.pos == WL_POS_ROPE)
    kern(j, WL_CAT_VEC, rc, "rope", "tokens=%d heads=%d head_dim=%d dtype=%s", s->T, (s->a + s->g) / s->t, s->d,
         s->dt);
}

/*
 * MLA (DeepSeek-V2/V3): queries through a low-rank bottleneck (down projection, RMSNorm, up
 * projection to heads x (nope + rope)), keys and values from one compressed latent (down to
 * kv_lora + rope, RMSNorm, up to heads x (nope + v)); the down projections are small and kept
 * whole on every TP rank, the up projections split by heads. The core attention (query/key
 * dimension nope + rope, value dimension v) is costed by the FlashAttention kernel at head
 * dimension 128 with the heads scaled to the same FLOPs: heads x (qk + v) / 256.
 */
static int mla_fa_heads(const struct wl_program *j, const struct shape *s)
{
  int qh, kvh, qk, v;
  wl_model_attn_shape(&j->model, &qh, &kvh, &qk, &v);
  return (int)ceil((double)qh / s->t * (qk + v) / 256.0);
}

static void mla_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  const struct wl_model *m = &j->model;
  int qh, kvh, qk, v, h = qh = 0;
  wl_model_attn_shape(m, &qh, &kvh, &qk, &v);
  h = qh / s->t;
  if (m->mla.q_lora_rank) {
    gemm_fwd(j, s, rc, s->h, m->mla.q_lora_rank);
    kern(j, WL_CAT_VEC, rc, "rms_norm", "rows=%d hidden=%d dtype=%s residual=false", s->T, m->mla.q_lora_rank, s->dt);
    gemm_fwd(j, s, rc, m->mla.q_lora_rank, h * qk);
  } else {
    gemm_fwd(j, s, rc, s->h, h * qk);
  }
  gemm_fwd(j, s, rc, s->h, m->mla.kv_lora_rank + m->mla.qk_rope_head_dim);
  kern(j, WL_CAT_VEC, rc, "rms_norm", "rows=%d hidden=%d dtype=%s residual=false", s->T, m->mla.kv_lora_rank, s->dt);
  gemm_fwd(j, s, rc, m->mla.kv_lora_rank, h * (m->mla.qk_nope_head_dim + v));
  kern(j, WL_CAT_VEC, rc, "rope", "tokens=%d heads=%d head_dim=%d dtype=%s", s->T, h + 1, m->mla.qk_rope_head_dim, s->dt);
  int fh = mla_fa_heads(j, s);
  kern(j, WL_CAT_ATTN, rc, "flash_attention", "batch=%d heads=%d kv_heads=%d seq=%d dim=128 dtype=%s pass=fwd",
       s->b * j->plan.cp, fh, fh, s->s, s->dt);
  cp_exchange(j, s, false);
  gemm_fwd(j, s, rc, h * v, s->h);
}

static void mla_bwd(struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  int qh, kvh, qk, v;
  wl_model_attn_shape(m, &qh, &kvh, &qk, &v);
  int h = qh / s->t, fh = mla_fa_heads(j, s);
  gemm_bwd(j, s, h * v, s->h);
  if (bi(s)) {
    kern(j, WL_CAT_ATTN, false, "flash_attention", "batch=%d heads=%d kv_heads=%d seq=%d dim=128 dtype=%s pass=bwd",
         s->b * j->plan.cp, fh, fh, s->s, s->dt);
    cp_exchange(j, s, true);
    kern(j, WL_CAT_VEC, false, "rope", "tokens=%d heads=%d head_dim=%d dtype=%s", s->T, h + 1, m->mla.qk_rope_head_dim,
         s->dt);
  }
  gemm_bwd(j, s, m->mla.kv_lora_rank, h * (m->mla.qk_nope_head_dim + v));
  if (bi(s))
    kern(j, WL_CAT_VEC, false, "rms_norm", "rows=%d hidden=%d dtype=%s residual=false", s->T, m->mla.kv_lora_rank, s->dt);
  gemm_bwd(j, s, s->h, m->mla.kv_lora_rank + m->mla.qk_rope_head_dim);
  if (m->mla.q_lora_rank) {
    gemm_bwd(j, s, m->mla.q_lora_rank, h * qk);
    if (bi(s))
      kern(j, WL_CAT_VEC, false, "rms_norm", "rows=%d hidden=%d dtype=%s residual=false", s->T, m->mla.q_lora_rank, s->dt);
    gemm_bwd(j, s, s->h, m->mla.q_lora_rank);
  } else {
    gemm_bwd(j, s, s->h, h * qk);
  }
}

/* The attention block's forward: norm, QKV, RoPE, attention (with the CP exchange), output
 * projection; rc: as recomputation inside the backward. */
static void attn_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  if (wl_model_is_mla(&j->model)) {
    norm(j, s, rc, true);
    sp_gather(j, s, rc);
    mla_fwd(j, s, rc);
    tp_reduce(j, s, rc);
    if (j->model.sandwich_norm) norm(j, s, rc, false);
    dropout(j, s, rc, s->Tn, s->h, WL_CAT_VEC);
    return;
  }
  norm(j, s, rc, true);
  sp_gather(j, s, rc);
  gemm_fwd(j, s, rc, s->h, (s->a + 2 * s->g) * s->d / s->t);
  rope(j, s, rc);
  attention_fwd(j, s, rc);
  cp_exchange(j, s, false);
  gemm_fwd(j, s, rc, s->a * s->d / s->t, s->h);
  tp_reduce(j, s, rc);
  if (j->model.sandwich_norm) norm(j, s, rc, false); /* Pangu Ultra: a norm after the sublayer too */
  dropout(j, s, rc, s->Tn, s->h, WL_CAT_VEC);
}

/* The dense MLP's forward. */
static void mlp_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  norm(j, s, rc, true);
  sp_gather(j, s, rc);
  gemm_fwd(j, s, rc, s->h, mlp_up_cols(j, s));
  activation(j, s, rc, false);
  gemm_fwd(j, s, rc, s->f / s->t, s->h);
  tp_reduce(j, s, rc);
  if (j->model.sandwich_norm) norm(j, s, rc, false);
  dropout(j, s, rc, s->Tn, s->h, WL_CAT_VEC);
}

/* One dense layer's forward; rc: as recomputation inside the backward. */
static void layer_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  attn_fwd(j, s, rc);
  mlp_fwd(j, s, rc);
}

/* The recomputation a layer's backward starts with (BI only). */
static void recompute(struct wl_program *j, const struct shape *s, void (*fwd)(struct wl_program *, const struct shape *, bool))
{
  if (!bi(s)) return;
  if (j->plan.recompute == WL_RECOMPUTE_FULL)
    fwd(j, s, true);
  else if (j->plan.recompute == WL_RECOMPUTE_SELECTIVE && j->model.attention == WL_ATTN_STANDARD)
    attn_core_std(j, s, true);
}

/* The dense MLP's backward: dropout, the transposed collectives, down, activation, up. */
static void mlp_bwd(struct wl_program *j, const struct shape *s)
{
  if (bi(s)) {
    dropout(j, s, false, s->Tn, s->h, WL_CAT_VEC);
    if (j->model.sandwich_norm) norm(j, s, false, false);
    sp_gather(j, s, false); /* the reduce-scatter's backward */
  }
  gemm_bwd(j, s, s->f / s->t, s->h);
  if (bi(s)) activation(j, s, false, true);
  gemm_bwd(j, s, s->h, mlp_up_cols(j, s));
  if (bi(s)) {
    tp_reduce(j, s, false); /* the all-gather's backward */
    norm(j, s, false, true);
  }
}

/* The attention block's backward. */
static void attn_bwd(struct wl_program *j, const struct shape *s)
{
  if (bi(s)) {
    dropout(j, s, false, s->Tn, s->h, WL_CAT_VEC);
    if (j->model.sandwich_norm) norm(j, s, false, false);
    sp_gather(j, s, false);
  }
  if (wl_model_is_mla(&j->model)) {
    mla_bwd(j, s);
    if (bi(s)) {
      tp_reduce(j, s, false);
      norm(j, s, false, true);
    }
    return;
  }
  gemm_bwd(j, s, s->a * s->d / s->t, s->h);
  if (bi(s)) {
    attention_bwd(j, s);
    cp_exchange(j, s, true);
    rope(j, s, false);
  }
  gemm_bwd(j, s, s->h, (s->a + 2 * s->g) * s->d / s->t);
  if (bi(s)) {
    tp_reduce(j, s, false);
    norm(j, s, false, true);
  }
}

static void layer_bwd(struct wl_program *j, const struct shape *s)
{
  recompute(j, s, layer_fwd);
  mlp_bwd(j, s);
  attn_bwd(j, s);
}

/* ------------------------------------------------------------------ MoE layers */

/*
 * An MoE layer (Megatron's all-to-all token dispatcher): the attention block, the norm, the
 * router GEMM (T x h x experts), gating (top-k, softmax or sigmoid, group-limited), permute
 * (tokens sorted by expert) | dispatch all-to-all | the rank's experts | combine all-to-all |
 * unpermute with the weighted sum, and the shared experts as a dense MLP. Tokens routed are the
 * rank's sequence-parallel share. Backward proxies: permute's backward (a gather and sum of k
 * rows per token) is costed by unpermute, unpermute's by permute, gating's by gating.
 */
static int moe_tokens(const struct shape *s)
{
  return s->Tn;
}

static void moe_route(struct wl_program *j, const struct shape *s, bool rc)
{
  const struct wl_model *m = &j->model;
  int T = moe_tokens(s);
  linear(j, s, rc, T, m->moe.experts, s->h, false, true); /* router */
  kern(j, WL_CAT_VEC, rc, "moe_gating", "tokens=%d experts=%d topk=%d dtype=%s score=%s groups=%d topk_groups=%d norm=true",
       T, m->moe.experts, m->moe.top_k, s->dt, m->moe.score == 1 ? "sigmoid" : "softmax",
       m->moe.groups ? m->moe.groups : 1, m->moe.top_groups);
}

static void moe_permute(struct wl_program *j, const struct shape *s, bool rc, bool as_unpermute)
{
  const struct wl_model *m = &j->model;
  if (as_unpermute)
    kern(j, WL_CAT_VEC, rc, "moe_unpermute", "tokens=%d hidden=%d experts=%d topk=%d dtype=%s", moe_tokens(s), s->h,
         m->moe.experts, m->moe.top_k, s->dt);
  else
    kern(j, WL_CAT_VEC, rc, "moe_permute", "tokens=%d hidden=%d experts=%d topk=%d dtype=%s", moe_tokens(s), s->h,
         m->moe.experts, m->moe.top_k, s->dt);
}

/* The shared experts: a dense MLP of shared x expert size over the rank's tokens. */
static struct shape shared_shape(const struct wl_program *j, const struct shape *s)
{
  struct shape sh = *s;
  sh.f = j->model.moe.shared * j->model.moe.ffn;
  return sh;
}

static void shared_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  if (!j->model.moe.shared) return;
  struct shape sh = shared_shape(j, s);
  sp_gather(j, &sh, rc);
  gemm_fwd(j, &sh, rc, sh.h, mlp_up_cols(j, &sh));
  activation(j, &sh, rc, false);
  gemm_fwd(j, &sh, rc, sh.f / sh.t, sh.h);
  tp_reduce(j, &sh, rc);
}

static void shared_bwd(struct wl_program *j, const struct shape *s)
{
  if (!j->model.moe.shared) return;
  struct shape sh = shared_shape(j, s);
  if (bi(&sh)) sp_gather(j, &sh, false);
  gemm_bwd(j, &sh, sh.f / sh.t, sh.h);
  if (bi(&sh)) activation(j, &sh, false, true);
  gemm_bwd(j, &sh, sh.h, mlp_up_cols(j, &sh));
  if (bi(&sh)) tp_reduce(j, &sh, false);
}

static void moe_pre_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  attn_fwd(j, s, rc);
  norm(j, s, rc, true);
  moe_route(j, s, rc);
  moe_permute(j, s, rc, false);
}

static void moe_post_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  moe_permute(j, s, rc, true);
  shared_fwd(j, s, rc);
}

/* A whole MoE layer's forward without the experts (recomputation of everything else). */
static void moe_fwd_no_experts(struct wl_program *j, const struct shape *s, bool rc)
{
  moe_pre_fwd(j, s, rc);
  moe_post_fwd(j, s, rc);
}

static void moe_post_bwd(struct wl_program *j, const struct shape *s)
{
  shared_bwd(j, s);
  if (bi(s)) moe_permute(j, s, false, false);
}

static void moe_pre_bwd(struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  if (bi(s)) {
    moe_permute(j, s, false, true);
    kern(j, WL_CAT_VEC, false, "moe_gating", "tokens=%d experts=%d topk=%d dtype=%s score=%s groups=%d topk_groups=%d norm=true",
         moe_tokens(s), m->moe.experts, m->moe.top_k, s->dt, m->moe.score == 1 ? "sigmoid" : "softmax",
         m->moe.groups ? m->moe.groups : 1, m->moe.top_groups);
  }
  /* router gradients: dX (T x experts -> h) and dW */
  if (s->mode != EM_W) linear(j, s, false, moe_tokens(s), s->h, m->moe.experts, false, false);
  if (s->mode != EM_BI) linear(j, s, false, m->moe.experts, s->h, moe_tokens(s), true, false);
  if (bi(s)) norm(j, s, false, true);
  attn_bwd(j, s);
}

/* The embedding gather, costed as a row copy of the same bytes (an un-fused RMSNorm pass). */
static void embed(struct wl_program *j, const struct shape *s)
{
  kern(j, WL_CAT_VEC, false, "rms_norm", "rows=%d hidden=%d dtype=%s residual=false", s->T, s->h, s->dt);
}

static void head_fwd(struct wl_program *j, const struct shape *s)
{
  norm(j, s, false, false);
  sp_gather(j, s, false);
  gemm_fwd(j, s, false, s->h, s->V / s->t);
  kern(j, WL_CAT_VEC, false, "cross_entropy", "rows=%d vocab=%d dtype=%s", s->T, s->V / s->t, s->dt);
  for (int i = 0; i < 3; i++) tpcoll(j, false, IC_OP_ALLREDUCE, (double)s->T * 4); /* max, sum, target */
}

static void head_bwd(struct wl_program *j, const struct shape *s)
{
  if (bi(s)) kern(j, WL_CAT_VEC, false, "cross_entropy", "rows=%d vocab=%d dtype=%s", s->T, s->V / s->t, s->dt);
  gemm_bwd(j, s, s->h, s->V / s->t);
  if (bi(s)) {
    tp_reduce(j, s, false);
    norm(j, s, false, false);
  }
}

/* ------------------------------------------------------------------ parameters */

/* Parameters one rank of `stage` holds: its layers, the embedding on the first stage, the
 * final norm and output projection on the last (TP-sharded; norms replicated). */
void wl_layer_rank_params(const struct wl_program *j, int l, double *dense, double *expert)
{
  const struct wl_model *m = &j->model;
  double all = wl_model_layer_params(m, l) / j->plan.tp, routed = 0;
  if (wl_model_layer_is_moe(m, l) && j->plan.ep > 1) /* ep 1: experts TP-split and replicated like the rest */
    routed = (m->act == WL_ACT_SWIGLU ? 3 : 2) * (double)m->hidden * (double)m->moe.ffn * m->moe.experts;
  *dense = all - routed / j->plan.tp;
  if (*dense < 0) *dense = 0;
  *expert = routed / j->plan.ep;
}

/* One rank's parameters of a pipeline stage: non-expert (returned) and routed experts (*eparams). */
static double stage_params(const struct wl_program *j, int stage, double *eparams)
{
  const struct wl_model *m = &j->model;
  const struct wl_plan *p = &j->plan;
  double per = 0, ex = 0, emb = (double)m->vocab * m->hidden / p->tp;
  /* the model's chunks: pp x vpp (DualPipe: pp, each rank holding chunks s and pp - 1 - s) */
  int chunks = wl_schedule_chunks((enum wl_schedule)p->schedule, p->vpp), mc = p->pp * p->vpp;
  for (int c = 0; c < chunks; c++) {
    int k = wl_schedule_model_chunk((enum wl_schedule)p->schedule, p->pp, p->vpp, stage, c);
    int first = wl_plan_chunk_first_layer(p, m->layers, mc, k), n = wl_plan_chunk_layers(p, m->layers, mc, k);
    for (int l = first; l < first + n; l++) {
      double d, e;
      wl_layer_rank_params(j, l, &d, &e);
      per += d;
      ex += e;
    }
    if (k == 0) per += emb + (m->pos == WL_POS_LEARNED ? (double)m->seq_len * m->hidden / p->tp : 0);
    if (k == mc - 1) per += emb + m->hidden / p->tp; /* output projection (a copy when tied) + final norm */
  }
  *eparams = ex;
  return per;
}

void wl_expand(struct wl_program *j)
{
  struct shape s = shape_of(j);
  seg_begin(j, WL_SEG_EMBED_F);
  embed(j, &s);
  tp_reduce(j, &s, false);
  dropout(j, &s, false, s.Tn, s.h, WL_CAT_VEC);
  seg_end(j, WL_SEG_EMBED_F);
  seg_begin(j, WL_SEG_EMBED_B);
  dropout(j, &s, false, s.Tn, s.h, WL_CAT_VEC);
  sp_gather(j, &s, false);
  embed(j, &s);
  seg_end(j, WL_SEG_EMBED_B);
  seg_begin(j, WL_SEG_LAYER_F);
  layer_fwd(j, &s, false);
  seg_end(j, WL_SEG_LAYER_F);
  s.mode = EM_BI;
  seg_begin(j, WL_SEG_LAYER_BI);
  layer_bwd(j, &s);
  seg_end(j, WL_SEG_LAYER_BI);
  s.mode = EM_W;
  seg_begin(j, WL_SEG_LAYER_W);
  layer_bwd(j, &s);
  seg_end(j, WL_SEG_LAYER_W);
  s.mode = EM_ALL;
  if (j->model.moe.experts) {
    seg_begin(j, WL_SEG_MOE_PRE_F);
    moe_pre_fwd(j, &s, false);
    seg_end(j, WL_SEG_MOE_PRE_F);
    seg_begin(j, WL_SEG_MOE_POST_F);
    moe_post_fwd(j, &s, false);
    seg_end(j, WL_SEG_MOE_POST_F);
    s.mode = EM_BI;
    seg_begin(j, WL_SEG_MOE_POST_BI);
    recompute(j, &s, moe_fwd_no_experts);
    moe_post_bwd(j, &s);
    seg_end(j, WL_SEG_MOE_POST_BI);
    seg_begin(j, WL_SEG_MOE_PRE_BI);
    moe_pre_bwd(j, &s);
    seg_end(j, WL_SEG_MOE_PRE_BI);
    s.mode = EM_W;
    seg_begin(j, WL_SEG_MOE_W);
    moe_post_bwd(j, &s);
    moe_pre_bwd(j, &s);
    seg_end(j, WL_SEG_MOE_W);
    s.mode = EM_ALL;
  }
  seg_begin(j, WL_SEG_HEAD_F);
  head_fwd(j, &s);
  seg_end(j, WL_SEG_HEAD_F);
  s.mode = EM_BI;
  seg_begin(j, WL_SEG_HEAD_BI);
  head_bwd(j, &s);
  seg_end(j, WL_SEG_HEAD_BI);
  s.mode = EM_W;
  seg_begin(j, WL_SEG_HEAD_W);
  head_bwd(j, &s);
  seg_end(j, WL_SEG_HEAD_W);
  s.mode = EM_ALL;
  /* the optimizer: AdamW over the rank's shard of fp32 master weights (ZeRO >= 1: / dp) */
  int pp = j->plan.pp;
  j->optim = npu_xcalloc((size_t)pp, sizeof *j->optim);
  j->stage_params = npu_xcalloc((size_t)pp, sizeof *j->stage_params);
  j->stage_eparams = npu_xcalloc((size_t)pp, sizeof *j->stage_eparams);
  j->layer_params = wl_model_layer_params(&j->model, 0) / j->plan.tp;
  double dpcp = (double)j->plan.dp * j->plan.cp, edp = dpcp / j->plan.ep;
  for (int st = 0; st < pp; st++) {
    j->stage_params[st] = stage_params(j, st, &j->stage_eparams[st]);
    /* ZeRO >= 1: dense master weights shard over dp x cp, experts over their data-parallel group */
    double n = j->plan.zero >= 1 ? j->stage_params[st] / dpcp + j->stage_eparams[st] / edp
                                 : j->stage_params[st] + j->stage_eparams[st];
    j->optim[st].first_item = j->nitems;
    kern(j, WL_CAT_OPTIM, false, "adamw", "n=%.0f grad=fp32 param=%s", ceil(n), s.dt);
    j->optim[st].nitems = 1;
  }
}

/* ------------------------------------------------------------------ for cost.c */

int wl__kernel_add(struct wl_program *p, const char *op, const char *args)
{
  return add_kernel(p, op, args);
}
