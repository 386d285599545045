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

static int add_kernel(struct wl_job *j, const char *op, const char *args)
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

static int add_coll(struct wl_job *j, enum ic_op op, double bytes, int dim)
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

static void push(struct wl_job *j, enum wl_cat cat, bool recompute, bool coll, int index)
{
  if (j->nitems == j->cap_items) {
    j->cap_items = j->cap_items ? 2 * j->cap_items : 128;
    j->items = npu_xrealloc(j->items, (size_t)j->cap_items * sizeof *j->items);
  }
  j->items[j->nitems++] = (struct wl_item){.cat = (uint8_t)cat, .recompute = recompute, .coll = coll, .index = index};
}

/* A kernel item: op with printf-style arguments. */
static void __attribute__((format(printf, 5, 6)))
kern(struct wl_job *j, enum wl_cat cat, bool rc, const char *op, const char *fmt, ...)
{
  char args[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  push(j, cat, rc, false, add_kernel(j, op, args));
}

/* A tensor-parallel collective item (skipped when the group has one rank). */
static void tpcoll(struct wl_job *j, bool rc, enum ic_op op, double bytes)
{
  if (j->plan.tp < 2 || bytes <= 0) return;
  push(j, WL_CAT_TP, rc, true, add_coll(j, op, bytes, WL_DIM_TP));
}

static void seg_begin(struct wl_job *j, enum wl_seg_kind k)
{
  j->seg[k].first_item = j->nitems;
}

static void seg_end(struct wl_job *j, enum wl_seg_kind k)
{
  j->seg[k].nitems = j->nitems - j->seg[k].first_item;
}

/* ------------------------------------------------------------------ shapes */

struct shape {
  int T, Tn;        /* tokens of a micro-batch; rows the norms see (T / t with SP) */
  int t, h, a, g, d, f, V, s, b;
  const char *dt;
  double act_bytes; /* T x h activations in the training type */
};

static struct shape shape_of(const struct wl_job *j)
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
  s.dt = p->dtype == 1 ? "fp16" : "bf16";
  s.act_bytes = (double)s.T * s.h * 2;
  return s;
}

/* The collective that gathers a sequence-parallel activation for a TP region, or nothing. */
static void sp_gather(struct wl_job *j, const struct shape *s, bool rc)
{
  if (j->plan.sp) tpcoll(j, rc, IC_OP_ALLGATHER, s->act_bytes);
}

/* The collective that leaves a TP region: reduce-scatter with SP, else all-reduce. */
static void tp_reduce(struct wl_job *j, const struct shape *s, bool rc)
{
  tpcoll(j, rc, j->plan.sp ? IC_OP_REDUCESCATTER : IC_OP_ALLREDUCE, s->act_bytes);
}

/* Y = X W^T with W [n, k] as Megatron stores it: forward GEMM T x k -> n. */
static void gemm_fwd(struct wl_job *j, const struct shape *s, bool rc, int k, int n)
{
  kern(j, WL_CAT_GEMM, rc, "gemm", "m=%d n=%d k=%d dtype=%s trans_b=true", s->T, n, k, s->dt);
}

/* dX = dY W (T x n -> k) and dW = dY^T X (n x T -> k). */
static void gemm_bwd(struct wl_job *j, const struct shape *s, int k, int n)
{
  kern(j, WL_CAT_GEMM, false, "gemm", "m=%d n=%d k=%d dtype=%s", s->T, k, n, s->dt);
  kern(j, WL_CAT_GEMM, false, "gemm", "m=%d n=%d k=%d dtype=%s trans_a=true", n, k, s->T, s->dt);
}

static void norm(struct wl_job *j, const struct shape *s, bool rc, bool fused)
{
  if (j->model.norm == WL_NORM_RMS)
    kern(j, WL_CAT_VEC, rc, "rms_norm", "rows=%d hidden=%d dtype=%s residual=%s", s->Tn, s->h, s->dt,
         fused ? "true" : "false");
  else
    kern(j, WL_CAT_VEC, rc, "layer_norm", "rows=%d hidden=%d dtype=%s", s->Tn, s->h, s->dt);
}

/* Dropout on rows x cols (forward or backward: the same kernel), when the model has it. */
static void dropout(struct wl_job *j, const struct shape *s, bool rc, long rows, int cols, enum wl_cat cat)
{
  if (j->model.dropout > 0)
    kern(j, cat, rc, "dropout", "rows=%ld cols=%d dtype=%s p=%g", rows, cols, s->dt, j->model.dropout);
}

/* Standard attention's core: QK^T and PV as batched GEMMs, the softmax between them. */
static void attn_core_std(struct wl_job *j, const struct shape *s, bool rc)
{
  int heads = s->b * s->a / s->t;
  kern(j, WL_CAT_ATTN, rc, "grouped_gemm", "groups=%d m=%d n=%d k=%d dtype=%s", heads, heads * s->s, s->s, s->d,
       s->dt);
  kern(j, WL_CAT_ATTN, rc, "softmax", "rows=%d cols=%d dtype=%s", heads * s->s, s->s, s->dt);
  dropout(j, s, rc, (long)heads * s->s, s->s, WL_CAT_ATTN);
  kern(j, WL_CAT_ATTN, rc, "grouped_gemm", "groups=%d m=%d n=%d k=%d dtype=%s", heads, heads * s->s, s->d, s->s,
       s->dt);
}

static void attention_fwd(struct wl_job *j, const struct shape *s, bool rc)
{
  if (j->model.attention == WL_ATTN_FLASH)
    kern(j, WL_CAT_ATTN, rc, "flash_attention", "batch=%d heads=%d kv_heads=%d seq=%d dim=%d dtype=%s pass=fwd", s->b,
         s->a / s->t, s->g / s->t, s->s, s->d, s->dt);
  else
    attn_core_std(j, s, rc);
}

static void attention_bwd(struct wl_job *j, const struct shape *s)
{
  if (j->model.attention == WL_ATTN_FLASH) {
    kern(j, WL_CAT_ATTN, false, "flash_attention", "batch=%d heads=%d kv_heads=%d seq=%d dim=%d dtype=%s pass=bwd",
         s->b, s->a / s->t, s->g / s->t, s->s, s->d, s->dt);
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

static int mlp_up_cols(const struct wl_job *j, const struct shape *s)
{
  return (j->model.act == WL_ACT_SWIGLU ? 2 : 1) * s->f / s->t;
}

static void activation(struct wl_job *j, const struct shape *s, bool rc, bool bwd)
{
  if (j->model.act == WL_ACT_SWIGLU) /* backward: 5/3 of the forward's bytes */
    kern(j, WL_CAT_VEC, rc, "swiglu", "rows=%d ffn=%d dtype=%s", bwd ? (s->T * 5 + 2) / 3 : s->T, s->f / s->t, s->dt);
  else /* GeLU: an elementwise pass over T x f/t, costed by the SwiGLU kernel of half the width */
    kern(j, WL_CAT_VEC, rc, "swiglu", "rows=%d ffn=%d dtype=%s", bwd ? 2 * s->T : s->T, s->f / s->t / 2, s->dt);
}

static void rope(struct wl_job *j, const struct shape *s, bool rc)
{
  if (j->model.pos == WL_POS_ROPE)
    kern(j, WL_CAT_VEC, rc, "rope", "tokens=%d heads=%d head_dim=%d dtype=%s", s->T, (s->a + s->g) / s->t, s->d,
         s->dt);
}

/* One layer's forward; rc: as recomputation inside the backward. */
static void layer_fwd(struct wl_job *j, const struct shape *s, bool rc)
{
  norm(j, s, rc, true);
  sp_gather(j, s, rc);
  gemm_fwd(j, s, rc, s->h, (s->a + 2 * s->g) * s->d / s->t);
  rope(j, s, rc);
  attention_fwd(j, s, rc);
  gemm_fwd(j, s, rc, s->a * s->d / s->t, s->h);
  tp_reduce(j, s, rc);
  dropout(j, s, rc, s->Tn, s->h, WL_CAT_VEC);
  norm(j, s, rc, true);
  sp_gather(j, s, rc);
  gemm_fwd(j, s, rc, s->h, mlp_up_cols(j, s));
  activation(j, s, rc, false);
  gemm_fwd(j, s, rc, s->f / s->t, s->h);
  tp_reduce(j, s, rc);
  dropout(j, s, rc, s->Tn, s->h, WL_CAT_VEC);
}

static void layer_bwd(struct wl_job *j, const struct shape *s)
{
  if (j->plan.recompute == WL_RECOMPUTE_FULL)
    layer_fwd(j, s, true);
  else if (j->plan.recompute == WL_RECOMPUTE_SELECTIVE && j->model.attention == WL_ATTN_STANDARD)
    attn_core_std(j, s, true);
  /* MLP: dropout, the transposed collectives, down, activation, up */
  dropout(j, s, false, s->Tn, s->h, WL_CAT_VEC);
  sp_gather(j, s, false); /* the reduce-scatter's backward */
  gemm_bwd(j, s, s->f / s->t, s->h);
  activation(j, s, false, true);
  gemm_bwd(j, s, s->h, mlp_up_cols(j, s));
  tp_reduce(j, s, false); /* the all-gather's backward */
  norm(j, s, false, true);
  /* attention */
  dropout(j, s, false, s->Tn, s->h, WL_CAT_VEC);
  sp_gather(j, s, false);
  gemm_bwd(j, s, s->a * s->d / s->t, s->h);
  attention_bwd(j, s);
  rope(j, s, false);
  gemm_bwd(j, s, s->h, (s->a + 2 * s->g) * s->d / s->t);
  tp_reduce(j, s, false);
  norm(j, s, false, true);
}

/* The embedding gather, costed as a row copy of the same bytes (an un-fused RMSNorm pass). */
static void embed(struct wl_job *j, const struct shape *s)
{
  kern(j, WL_CAT_VEC, false, "rms_norm", "rows=%d hidden=%d dtype=%s residual=false", s->T, s->h, s->dt);
}

static void head_fwd(struct wl_job *j, const struct shape *s)
{
  norm(j, s, false, false);
  sp_gather(j, s, false);
  gemm_fwd(j, s, false, s->h, s->V / s->t);
  kern(j, WL_CAT_VEC, false, "cross_entropy", "rows=%d vocab=%d dtype=%s", s->T, s->V / s->t, s->dt);
  for (int i = 0; i < 3; i++) tpcoll(j, false, IC_OP_ALLREDUCE, (double)s->T * 4); /* max, sum, target */
}

static void head_bwd(struct wl_job *j, const struct shape *s)
{
  kern(j, WL_CAT_VEC, false, "cross_entropy", "rows=%d vocab=%d dtype=%s", s->T, s->V / s->t, s->dt);
  gemm_bwd(j, s, s->h, s->V / s->t);
  tp_reduce(j, s, false);
  norm(j, s, false, false);
}

/* ------------------------------------------------------------------ parameters */

/* Parameters one rank of `stage` holds: its layers, the embedding on the first stage, the
 * final norm and output projection on the last (TP-sharded; norms replicated). */
static double stage_params(const struct wl_job *j, int stage)
{
  const struct wl_model *m = &j->model;
  const struct wl_plan *p = &j->plan;
  double per = 0;
  int chunks = wl_schedule_chunks((enum wl_schedule)p->schedule, p->vpp), mc = p->pp * chunks;
  for (int c = 0; c < chunks; c++) {
    int k = wl_schedule_model_chunk((enum wl_schedule)p->schedule, p->pp, p->vpp, stage, c);
    int first = wl_plan_chunk_first_layer(p, m->layers, mc, k), n = wl_plan_chunk_layers(p, m->layers, mc, k);
    for (int l = first; l < first + n; l++) per += wl_model_layer_params(m, l);
  }
  per /= p->tp;
  double emb = (double)m->vocab * m->hidden / p->tp;
  if (stage == 0) per += emb + (m->pos == WL_POS_LEARNED ? (double)m->seq_len * m->hidden : 0);
  if (stage == p->pp - 1) per += emb + m->hidden; /* output projection (a copy when tied) + final norm */
  return per;
}

void wl_expand(struct wl_job *j)
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
  seg_begin(j, WL_SEG_LAYER_B);
  layer_bwd(j, &s);
  seg_end(j, WL_SEG_LAYER_B);
  seg_begin(j, WL_SEG_HEAD_F);
  head_fwd(j, &s);
  seg_end(j, WL_SEG_HEAD_F);
  seg_begin(j, WL_SEG_HEAD_B);
  head_bwd(j, &s);
  seg_end(j, WL_SEG_HEAD_B);
  /* the optimizer: AdamW over the rank's shard of fp32 master weights (ZeRO >= 1: / dp) */
  int pp = j->plan.pp;
  j->optim = npu_xcalloc((size_t)pp, sizeof *j->optim);
  j->stage_params = npu_xcalloc((size_t)pp, sizeof *j->stage_params);
  j->layer_params = wl_model_layer_params(&j->model, 0) / j->plan.tp;
  for (int st = 0; st < pp; st++) {
    j->stage_params[st] = stage_params(j, st);
    double n = j->stage_params[st] / (j->plan.zero >= 1 ? j->plan.dp * j->plan.cp : 1);
    j->optim[st].first_item = j->nitems;
    kern(j, WL_CAT_OPTIM, false, "adamw", "n=%.0f grad=fp32 param=%s", ceil(n), s.dt);
    j->optim[st].nitems = 1;
  }
}

/* ------------------------------------------------------------------ costing */

int wl_cost_kernels(struct wl_job *j, struct op_cache *cache, struct npu_diag *diag)
{
  for (int i = 0; i < j->nkernels; i++) {
    struct wl_kernel *k = &j->kernels[i];
    const struct op_desc *d = op_find(k->op);
    NPU_ASSERT(d != NULL);
    /* split "a=1 b=2" into the parser's "a=1", "b=2" */
    char buf[256], *kv[OP_MAX_PARAMS];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", k->args);
    for (char *tok = strtok(buf, " "); tok && n < OP_MAX_PARAMS; tok = strtok(NULL, " ")) kv[n++] = tok;
    struct op_args a;
    int rc = op_args_parse(d, &a, (const char *const *)kv, n, diag);
    if (!rc) {
      struct op_cost c;
      rc = op_cost_get(cache, d, &a, &j->sys, (enum core_fidelity)j->run.fidelity, &c, diag);
      if (!rc) {
        /* inside a step kernels are queued ahead: the stream gap replaces the launch overhead */
        k->time_s = c.time_s - c.launch_s + j->sys.chip.stream_gap_s;
        k->flops = c.flops;
        snprintf(k->bottleneck, sizeof k->bottleneck, "%s", c.bottleneck);
      }
    }
    if (rc) {
      char msg[512];
      npu_diag_format(diag, msg, sizeof msg);
      return npu_diag_set(diag, j->path, 0, k->op, "kernel %s %s: %s", k->op, k->args, msg), rc;
    }
  }
  return 0;
}

static void sum_seg(const struct wl_job *j, struct wl_seg *sg)
{
  double keep_first = sg->first_item;
  int n = sg->nitems;
  memset(sg, 0, sizeof *sg);
  sg->first_item = (int)keep_first;
  sg->nitems = n;
  for (int i = sg->first_item; i < sg->first_item + n; i++) {
    const struct wl_item *it = &j->items[i];
    double t, f = 0;
    if (it->coll) {
      t = j->colls[it->index].time_s;
    } else {
      t = j->kernels[it->index].time_s;
      f = j->kernels[it->index].flops;
    }
    sg->time_s += t;
    sg->cat_s[it->cat] += t;
    sg->flops += f;
    if (!it->recompute) sg->model_flops += f;
  }
}

void wl_sum_segments(struct wl_job *j)
{
  for (int k = 0; k < WL_SEG_KINDS; k++) sum_seg(j, &j->seg[k]);
  for (int s = 0; s < j->plan.pp; s++) sum_seg(j, &j->optim[s]);
}

void wl_kernel_label(const struct wl_kernel *k, char *buf, size_t n)
{
  snprintf(buf, n, "%s %s", k->op, k->args);
}
