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
 * Every kernel is a typed operator call (ops/op.h), checked as it is built. A forward kernel's
 * backward is what its operator's rule builds (op_call_backward; `npusim kernel list` prints
 * each rule, and the reason where it is a proxy of the same traffic); only the proxies for
 * operators ops/ does not have stay here: GeLU (a SwiGLU pass of half the width) and the
 * embedding gather (a row copy of the same bytes, an un-fused RMSNorm pass).
 *
 * Size: one job, the kernels of each segment of a step, over ~1,000 lines: the dense, attention,
 * MoE and head expansions share the shape struct, the typed-call builders and the item list, and
 * splitting them would export those internals. The layer types of the coverage issue (linear
 * attention, MTP, vision) are the point to split it by layer family.
 */
#include "workloads/expand.h"

#include <math.h>
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

/* The index of call c on chip variant sys (0: the system's) among the job's distinct kernels
 * (added when new). */
/* Call c as the scenario costs it: c itself, or the same parameters given to the operator that
 * model.kernels.<op> substitutes for c's (the parameters they share by name and type). */
static struct op_call substituted(const struct wl_program *j, const struct op_call *c)
{
  const char *to = c->desc ? wl_model_kernel_for(&j->model, c->desc->name) : NULL;
  if (c->err || !to || !strcmp(to, c->desc->name)) return *c;
  struct op_call n;
  op_call_init_at(&n, to, c->file, c->line);
  op_call_copy_given(&n, c);
  return n;
}

static int add_kernel_on(struct wl_program *j, const struct op_call *call, int sys)
{
  struct op_call sub = substituted(j, call);
  const struct op_call *c = &sub;
  for (int i = 0; i < j->nkernels; i++)
    if (j->kernels[i].sys == sys && op_call_equal(&j->kernels[i].call, c)) return i;
  if (j->nkernels == j->cap_kernels) {
    j->cap_kernels = j->cap_kernels ? 2 * j->cap_kernels : 32;
    j->kernels = npu_xrealloc(j->kernels, (size_t)j->cap_kernels * sizeof *j->kernels);
  }
  struct wl_kernel *k = &j->kernels[j->nkernels];
  memset(k, 0, sizeof *k);
  k->call = *c;
  k->sys = sys;
  k->op = c->name;
  op_call_args_text(c, k->args, sizeof k->args);
  return j->nkernels++;
}

static int add_kernel(struct wl_program *j, const struct op_call *c)
{
  return add_kernel_on(j, c, 0);
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
  j->items[j->nitems++] = (struct wl_item){
      .cat = (uint8_t)cat, .recompute = recompute, .coll = coll, .index = index, .hide = -1, .chunk = -1, .slowed = -1};
}

/* A kernel item: the typed call c (an invalid call is kept, and reported when costed). */
static void kern(struct wl_program *j, enum wl_cat cat, bool rc, const struct op_call *c)
{
  push(j, cat, rc, false, add_kernel(j, c));
}

/* A tensor-parallel collective item (skipped when the group has one rank). */
static void tpcoll(struct wl_program *j, bool rc, enum ic_op op, double bytes)
{
  if (j->plan.tp < 2 || bytes <= 0) return;
  push(j, WL_CAT_TP, rc, true, add_coll(j, op, bytes, WL_DIM_TP));
}

static void seg_begin(struct wl_program *j, enum wl_seg_kind k)
{
  j->seg[j->seg_off + k].first_item = j->nitems;
}

/* ------------------------------------------------------------------ overlapped TP communication */

/*
 * plan.tp_overlap pairs each sequence-parallel all-gather of a layer with the GEMM that consumes
 * it and each reduce-scatter with a GEMM that produces it or runs beside it, as the frameworks do
 * (docs/TRAINING.md, "Overlapped TP communication"):
 *   megatron: Transformer Engine's userbuffers with its defaults (transformer_engine/pytorch/
 *     module/base.py, initialize_ub): all-gathers by ring exchange on the copy engines (tp
 *     steps, no SMs), the forward reduce-scatters pipelined in 4 splits on 16 SMs with the GEMM
 *     on the other SMs (num_sm 16, set_sm_margin), the backward ones in bulk beside the weight
 *     gradient (16 SMs);
 *   mc2: CANN's AllGatherMatmul and MatmulReduceScatter as MindSpeed calls them (the column-
 *     parallel backward's reduce-scatter fused with the input gradient): tp chunks, one per
 *     peer, communication driven by the AI CPU (torch_npu's default comm_mode "ai_cpu",
 *     Ascend/op-plugin #5375), so no AI core is taken; with plan.mc2_comm_mode = "aiv" the pair
 *     is one MC2 kernel whose vector cores move the data, costed by its operator (ops/mc2.c: at
 *     the analytic fidelity its closed form), which takes the place of both.
 * Whatever the method, the collective's data crosses HBM: it takes (2 for an all-gather, 3 for
 * a reduce-scatter, which also reads the partial it adds to) x the device's link bandwidth from
 * the GEMM beside it, at most half of HBM (the chip variants of ovl_sys).
 */
#define OVL_MEGATRON_SPLITS 4  /* Transformer Engine's pipeline num_splits */
#define OVL_MEGATRON_SMS 16    /* its num_sm for pipeline and bulk overlaps */

/* The chip variant (1-based index into j->slow_sys) whose HBM gives up factor x the device's
 * link bandwidth; 0 when nothing is taken. */
static int ovl_sys(struct wl_program *j, int factor)
{
  const struct arch_system *sys = &j->job->sys;
  if (!sys->has_node) return 0;
  const struct arch_node *n = &sys->node;
  double inj = n->link.bw_bytes_per_s * n->link.ports * n->link_efficiency.value;
  double take = fmin(factor * inj, 0.5 * sys->chip.hbm.bw_bytes_per_s);
  if (!(take > 0)) return 0;
  struct arch_system v = *sys;
  v.chip.hbm.bw_bytes_per_s -= take;
  return wl__slow_sys(j, &v);
}

int wl__slow_sys(struct wl_program *j, const struct arch_system *v)
{
  uint64_t f = arch_chip_fingerprint(v);
  for (int i = 0; i < j->nslow_sys; i++)
    if (arch_chip_fingerprint(&j->slow_sys[i]) == f) return i + 1;
  j->slow_sys = npu_xrealloc(j->slow_sys, (size_t)(j->nslow_sys + 1) * sizeof *j->slow_sys);
  j->slow_sys[j->nslow_sys] = *v;
  return ++j->nslow_sys;
}

static bool item_is_op(const struct wl_program *j, int i, const char *op)
{
  return !j->items[i].coll && !strcmp(j->kernels[j->items[i].index].op, op);
}

static bool item_is_gemm(const struct wl_program *j, int i)
{
  return !j->items[i].coll && j->items[i].cat == WL_CAT_GEMM && item_is_op(j, i, "gemm");
}

/* A gradient accumulation's add (wl__grad_accum_call), which follows its weight gradient. */
static bool item_is_accum(const struct wl_program *j, int i)
{
  return !j->items[i].coll && j->items[i].accum;
}

/* Pair collective item i with GEMM item g: method m in n steps, cores SMs taken from the GEMM. */
static void ovl_pair(struct wl_program *j, int i, int g, enum wl_ovl m, int n, int cores)
{
  struct wl_item *it = &j->items[i];
  const struct wl_coll *c = &j->colls[it->index];
  struct op_call slow = j->kernels[j->items[g].index].call;
  if (cores > 0) op_call_dim(&slow, "cores", j->job->sys.chip.aic_count - cores);
  int sys = ovl_sys(j, c->op == IC_OP_REDUCESCATTER ? 3 : 2);
  int slowed = add_kernel_on(j, &slow, sys);
  it->ovl = (uint8_t)m;
  it->hide = g;
  it->nchunks = n;
  it->slowed = slowed;
  if (m == WL_OVL_PIPE) {
    struct wl_coll whole = *c;
    it->chunk = add_coll(j, whole.op, whole.bytes / n, whole.dim); /* may move colls */
  }
}

/* MC2 in AIV mode (plan.mc2_comm_mode = "aiv"): collective item i and GEMM item g run as one MC2
 * kernel, the GEMM's call as CANN's AllGatherMatmul (gather: the all-gather feeding it, each rank
 * holding 1 / tp of its rows) or MatmulReduceScatter (the reduce-scatter of its output, each rank
 * keeping 1 / tp of the rows), on the TP group's server. */
static void ovl_fused(struct wl_program *j, int i, int g, bool gather)
{
  const struct op_call *gc = &j->kernels[j->items[g].index].call;
  int tp = j->plan.tp;
  struct op_call c;
  op_call_init(&c, gather ? "all_gather_matmul" : "matmul_reduce_scatter");
  op_call_dim(&c, "m", (int64_t)op_call_u(gc, "m") / tp);
  op_call_dim(&c, "k", (int64_t)op_call_u(gc, "k"));
  op_call_dim(&c, "n", (int64_t)op_call_u(gc, "n"));
  op_call_dtype(&c, "dtype", (enum npu_dtype)op_call_u(gc, "dtype"));
  if (op_call_u(gc, "trans_b")) op_call_bool(&c, "trans_b", true);
  op_call_dim(&c, "ranks", tp);
  NPU_ASSERT(!op_call_u(gc, "trans_a") && op_call_u(gc, "m") % (uint64_t)tp == 0);
  struct wl_item *it = &j->items[i];
  it->slowed = add_kernel(j, &c); /* may move kernels, not items */
  it->ovl = WL_OVL_FUSED;
  it->hide = g;
  it->nchunks = 1;
}

static void tp_overlap_pairs(struct wl_program *j, int first, int end)
{
  /* a chip with no more SMs than Transformer Engine's communication takes keeps them all */
  int tp = j->plan.tp, sms = j->job->sys.chip.aic_count > 2 * OVL_MEGATRON_SMS ? OVL_MEGATRON_SMS : 0;
  bool mc2 = j->plan.tp_overlap == WL_TPO_MC2, aiv = mc2 && j->plan.mc2_comm == WL_MC2_AIV;
  bool *taken = npu_xcalloc((size_t)(end - first + 1), sizeof *taken);
  for (int i = first; i < end; i++) {
    const struct wl_item *it = &j->items[i];
    if (!it->coll || it->cat != WL_CAT_TP || it->hide >= 0) continue;
    enum ic_op op = j->colls[it->index].op;
    int g;
    if (op == IC_OP_ALLGATHER) {
      g = i + 1;
      if (g < end && item_is_op(j, g, "quantize")) g++;
      if (g >= end || !item_is_gemm(j, g)) continue;
      if (taken[g - first]) continue;
      if (aiv)
        ovl_fused(j, i, g, true);
      else
        ovl_pair(j, i, g, WL_OVL_RING, tp, 0);
      taken[g - first] = true;
    } else if (op == IC_OP_REDUCESCATTER) {
      g = i - 1;
      while (g >= first && item_is_accum(j, g)) g--;
      if (mc2) /* MindSpeed fuses the input gradient with the reduce-scatter; the weight gradient follows */
        while (g >= first && (item_is_op(j, g, "quantize") || item_is_accum(j, g) ||
                              (item_is_gemm(j, g) && j->items[g].wgrad)))
          g--;
      if (g < first || !item_is_gemm(j, g) || taken[g - first]) continue;
      if (aiv)
        ovl_fused(j, i, g, false);
      else if (mc2)
        ovl_pair(j, i, g, WL_OVL_PIPE, tp, 0);
      else if (j->items[g].wgrad)
        ovl_pair(j, i, g, WL_OVL_BULK, 1, sms);
      else
        ovl_pair(j, i, g, WL_OVL_PIPE, OVL_MEGATRON_SPLITS, sms);
      taken[g - first] = true;
    }
  }
  free(taken);
}

static void seg_end(struct wl_program *j, enum wl_seg_kind k)
{
  struct wl_seg *sg = &j->seg[j->seg_off + k];
  sg->nitems = j->nitems - sg->first_item;
  bool layer = (k >= WL_SEG_LAYER_F && k <= WL_SEG_MOE_W) || k == WL_SEG_LAYER_BI_KEEP || k == WL_SEG_MOE_POST_BI_KEEP ||
               k == WL_SEG_MOE_RC_F;
  if (layer && j->plan.tp_overlap != WL_TPO_NONE && j->plan.tp > 1) tp_overlap_pairs(j, sg->first_item, j->nitems);
}

/* ------------------------------------------------------------------ operator calls */

/* The calls of the operators a step uses, by their parameters (op.h checks each as it is set). */

static struct op_call gemm_call(int64_t m, int64_t n, int64_t k, bool ta, bool tb, enum npu_dtype dt)
{
  struct op_call c;
  op_call_init(&c, "gemm");
  op_call_dim(&c, "m", m);
  op_call_dim(&c, "n", n);
  op_call_dim(&c, "k", k);
  op_call_dtype(&c, "dtype", dt);
  if (ta) op_call_bool(&c, "trans_a", true);
  if (tb) op_call_bool(&c, "trans_b", true);
  return c;
}

struct op_call wl__grouped_gemm_call(int64_t groups, int64_t m, int64_t n, int64_t k, enum npu_dtype dt)
{
  struct op_call c;
  op_call_init(&c, "grouped_gemm");
  op_call_dim(&c, "groups", groups);
  op_call_dim(&c, "m", m);
  op_call_dim(&c, "n", n);
  op_call_dim(&c, "k", k);
  op_call_dtype(&c, "dtype", dt);
  return c;
}

static struct op_call rms_norm_call(int64_t rows, int64_t hidden, enum npu_dtype dt, bool residual)
{
  struct op_call c;
  op_call_init(&c, "rms_norm");
  op_call_dim(&c, "rows", rows);
  op_call_dim(&c, "hidden", hidden);
  op_call_dtype(&c, "dtype", dt);
  op_call_bool(&c, "residual", residual);
  return c;
}

static struct op_call layer_norm_call(int64_t rows, int64_t hidden, enum npu_dtype dt)
{
  struct op_call c;
  op_call_init(&c, "layer_norm");
  op_call_dim(&c, "rows", rows);
  op_call_dim(&c, "hidden", hidden);
  op_call_dtype(&c, "dtype", dt);
  return c;
}

static struct op_call rows_cols_call(const char *op, int64_t rows, int64_t cols, enum npu_dtype dt)
{
  struct op_call c;
  op_call_init(&c, op);
  op_call_dim(&c, "rows", rows);
  op_call_dim(&c, "cols", cols);
  op_call_dtype(&c, "dtype", dt);
  return c;
}

static struct op_call ce_call(int64_t rows, int64_t vocab, enum npu_dtype dt)
{
  struct op_call c;
  op_call_init(&c, "cross_entropy");
  op_call_dim(&c, "rows", rows);
  op_call_dim(&c, "vocab", vocab);
  op_call_dtype(&c, "dtype", dt);
  return c;
}

struct op_call wl__swiglu_call(int64_t rows, int64_t ffn, enum npu_dtype dt)
{
  struct op_call c;
  op_call_init(&c, "swiglu");
  op_call_dim(&c, "rows", rows);
  op_call_dim(&c, "ffn", ffn);
  op_call_dtype(&c, "dtype", dt);
  return c;
}

static struct op_call rope_call(int64_t tokens, int64_t heads, int64_t head_dim, enum npu_dtype dt)
{
  struct op_call c;
  op_call_init(&c, "rope");
  op_call_dim(&c, "tokens", tokens);
  op_call_dim(&c, "heads", heads);
  op_call_dim(&c, "head_dim", head_dim);
  op_call_dtype(&c, "dtype", dt);
  return c;
}

/* The forward pass of FlashAttention. */
static struct op_call flash_call(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t dim,
                                 enum npu_dtype dt)
{
  struct op_call c;
  op_call_init(&c, "flash_attention");
  op_call_dim(&c, "batch", batch);
  op_call_dim(&c, "heads", heads);
  op_call_dim(&c, "kv_heads", kv_heads);
  op_call_dim(&c, "seq", seq);
  op_call_dim(&c, "dim", dim);
  op_call_dtype(&c, "dtype", dt);
  op_call_choice(&c, "pass", "fwd");
  return c;
}

/* ------------------------------------------------------------------ shapes */

/* What a backward call emits: everything (a forward, or a full backward), only the input
 * gradients (BI), or only the weight-gradient GEMMs (W). */
enum emit { EM_ALL, EM_BI, EM_W };

struct shape {
  int mode;         /* enum emit */
  bool keep;        /* a layer a partial full recompute leaves out: no recomputation */
  bool fp8;         /* linear layers in fp8 (plan.dtype) */
  int window;       /* FlashAttention's sliding window in this layer's segments; 0: none */
  int T, Tn;        /* tokens of a micro-batch; rows the norms see (T / t with SP) */
  int t, h, a, g, d, f, V, s, b;
  enum npu_dtype dt; /* the training type */
  double act_bytes; /* T x h activations in the training type */
  bool linear;      /* the segments of linear-attention (gated delta-rule) layers (model.linear) */
};

static struct shape shape_of(const struct wl_program *j)
{
  const struct wl_model *m = &j->model;
  const struct wl_plan *p = &j->plan;
  struct shape s = {0}; /* every field not set below (keep: false) */
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
  s.fp8 = wl_plan_is_fp8(p);
  s.dt = wl_plan_wide_dtype(p);
  s.act_bytes = (double)s.T * s.h * 2;
  return s;
}

/* Whether a backward call computing gradient g is emitted now. */
static bool emits(const struct shape *s, enum op_grad g)
{
  return g == OP_GRAD_WEIGHT ? s->mode != EM_BI : s->mode != EM_W;
}

/* The backward of forward call fwd, as its operator costs it (its struct op_bwd): the calls of
 * the gradients emitted now, in category cat. */
static void kern_bwd(struct wl_program *j, const struct shape *s, enum wl_cat cat, const struct op_call *fwd)
{
  struct op_call b[OP_MAX_BWD_CALLS];
  enum op_grad g[OP_MAX_BWD_CALLS];
  int n = op_call_backward(fwd, b, g);
  for (int i = 0; i < n; i++)
    if (emits(s, g[i])) kern(j, cat, false, &b[i]);
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
static enum npu_dtype fp8_gemm_type(const struct wl_program *j)
{
  return wl_plan_fp8_dtype(&j->plan);
}

static void fp8_quantize(struct wl_program *j, const struct shape *s, bool rc, int64_t rows, int64_t cols)
{
  static const char *const gran[] = {"tensor", "block1x128", "block1x32"};
  struct op_call c;
  op_call_init(&c, "quantize");
  op_call_dim(&c, "rows", rows);
  op_call_dim(&c, "cols", cols);
  op_call_dtype(&c, "in", s->dt);
  op_call_dtype(&c, "dtype", fp8_gemm_type(j));
  op_call_choice(&c, "granularity", gran[j->plan.fp8_recipe]);
  kern(j, WL_CAT_VEC, rc, &c);
}

/* A linear layer's GEMM call c (in the training type), run in fp8 when the plan trains in fp8. */
static void linear_call(struct wl_program *j, const struct shape *s, bool rc, const struct op_call *c)
{
  if (!s->fp8 || !op_call_ok(c)) {
    kern(j, WL_CAT_GEMM, rc, c);
    return;
  }
  uint64_t m = op_call_u(c, "m"), k = op_call_u(c, "k");
  bool ta = op_call_u(c, "trans_a") != 0;
  /* a GEMM whose quantized operand's rows are not whole scaling blocks stays in the training type */
  uint64_t block = j->plan.fp8_recipe == WL_FP8_BLOCK ? 128 : j->plan.fp8_recipe == WL_FP8_MX ? 32 : 1;
  if ((ta ? m : k) % block) {
    kern(j, WL_CAT_GEMM, rc, c);
    return;
  }
  fp8_quantize(j, s, rc, (int64_t)(ta ? k : m), (int64_t)(ta ? m : k));
  struct op_call q = *c;
  op_call_dtype(&q, "dtype", fp8_gemm_type(j));
  if (op_call_u(c, "out") == 0) op_call_choice(&q, "out", "bf16"); /* unless the caller chose (wgrad_out) */
  kern(j, WL_CAT_GEMM, rc, &q);
}

/* A linear layer's forward GEMM m x k by k x n (A transposed when ta, B when tb). */
static void linear(struct wl_program *j, const struct shape *s, bool rc, int64_t m, int64_t n, int64_t k, bool ta,
                   bool tb)
{
  struct op_call c = gemm_call(m, n, k, ta, tb, s->dt);
  linear_call(j, s, rc, &c);
}

/*
 * Gradient accumulation (plan.grad_accum_fusion). With a gradient buffer (ZeRO <= 2: Megatron's
 * main_grad, fp32 or bf16 with plan.grad_reduce_dtype) a weight gradient is added into it every
 * micro-batch. Fused (Megatron's default: apex's wgrad_gemm_accum_fp32, Transformer Engine's
 * fuse_wgrad_accumulation) the GEMM writes the buffer's type; its read of the buffer is not
 * modelled. Unfused (--no-gradient-accumulation-fusion) the GEMM writes the training type into
 * param.grad and the DDP hook's main_grad.add_(grad) reads both and writes the buffer: one
 * eltwise `acc` over the weight's elements. ZeRO-3 (FSDP, DeepSpeed stage 3) reduces the GEMM's
 * own output: neither.
 */
enum npu_dtype wl__grad_buffer_dtype(const struct wl_plan *p)
{
  return p->grad_reduce ? NPU_DT_BF16 : NPU_DT_FP32;
}

bool wl__grad_accum_add(const struct wl_plan *p)
{
  return !p->grad_accum_fusion && !wl_plan_zero3(p);
}

/* The eltwise operator's call: fn over n elements, reading in and writing out. */
static struct op_call eltwise_call(int64_t n, const char *fn, enum npu_dtype in, enum npu_dtype out)
{
  struct op_call c;
  op_call_init(&c, "eltwise");
  op_call_dim(&c, "n", n);
  op_call_choice(&c, "fn", fn);
  op_call_dtype(&c, "in", in);
  op_call_dtype(&c, "out", out);
  return c;
}

struct op_call wl__grad_accum_call(const struct wl_plan *p, int64_t elements)
{
  return eltwise_call(elements, "acc", wl_plan_wide_dtype(p), wl__grad_buffer_dtype(p));
}

/* The backward of the linear layer Y = X W^T (m x k -> n, W [n, k] as Megatron stores it): the
 * GEMM operator's input gradient dX (with the input gradients, BI) and weight gradient dW (W),
 * accumulated into the gradient buffer as the plan says. */
static void linear_bwd(struct wl_program *j, const struct shape *s, int64_t m, int64_t n, int64_t k)
{
  struct op_call fwd = gemm_call(m, n, k, false, true, s->dt), b[OP_MAX_BWD_CALLS];
  enum op_grad g[OP_MAX_BWD_CALLS];
  int nb = op_call_backward(&fwd, b, g);
  const struct wl_plan *p = &j->plan;
  for (int i = 0; i < nb; i++)
    if (emits(s, g[i])) {
      bool w = g[i] == OP_GRAD_WEIGHT;
      if (w && p->grad_accum_fusion && !wl_plan_zero3(p) && wl__grad_buffer_dtype(p) == NPU_DT_FP32)
        op_call_choice(&b[i], "out", "fp32");
      linear_call(j, s, false, &b[i]);
      j->items[j->nitems - 1].wgrad = w;
      if (w && wl__grad_accum_add(p)) {
        struct op_call acc = wl__grad_accum_call(p, n * k);
        kern(j, WL_CAT_VEC, false, &acc);
        j->items[j->nitems - 1].accum = true;
      }
    }
}

/* Y = X W^T with W [n, k]: forward GEMM T x k -> n. */
static void gemm_fwd(struct wl_program *j, const struct shape *s, bool rc, int k, int n)
{
  linear(j, s, rc, s->T, n, k, false, true);
}

/* Its backward: dX = dY W (T x n -> k: BI) and dW = dY^T X (n x T -> k: W). */
static void gemm_bwd(struct wl_program *j, const struct shape *s, int k, int n)
{
  linear_bwd(j, s, s->T, n, k);
}

/* Whether a backward item other than a weight gradient is emitted now. */
static bool bi(const struct shape *s)
{
  return s->mode != EM_W;
}

/* ------------------------------------------------------------------ eager modules (plan.fusion) */

/*
 * plan.fusion = eager: the norms, rotary embedding, activation and residual adds as PyTorch
 * modules without a compiler launch them, one eltwise kernel per tensor operation, after Hugging
 * Face transformers' Llama (modeling_llama.py: LlamaRMSNorm, apply_rotary_pos_emb with
 * rotate_half, LlamaMLP) and autograd's kernels for their backward. A step of a recipe is a
 * function, its input and output types (the training type or fp32) and its size: the tensor's
 * n elements, its r rows, or half of it. A multiply by a broadcast operand (the norm's weight
 * or per-row scale, RoPE's cos and sin) moves the bytes of a one-input operation and is costed
 * as `square`; a scalar add on r rows (+ eps) as `neg`; a mean over the hidden size as `sum64`,
 * which reads what the mean reads.
 */
enum ew_size { EW_N, EW_R, EW_HALF };
struct ew_step {
  const char *fn;
  bool in32, out32; /* fp32, else the training type */
  uint8_t size;     /* enum ew_size */
};

/* LlamaRMSNorm: x.to(fp32), pow(2), mean(-1), + eps, rsqrt, x * r, .to(dtype), weight * x. */
static const struct ew_step rmsnorm_f[] = {
    {"cast", false, true, EW_N}, {"square", true, true, EW_N}, {"sum64", true, true, EW_N},
    {"neg", true, true, EW_R},   {"rsqrt", true, true, EW_R},  {"square", true, true, EW_N},
    {"cast", true, false, EW_N}, {"square", false, false, EW_N}};
/* Its backward: dy * weight, the weight's gradient (dy * x_n summed over rows), the cast back,
 * g * r and the per-row gradient of r (g * x summed), rsqrt's and the mean's on r rows, pow's
 * (2 x, times the broadcast gradient), the two paths into x added, the cast to the type. */
static const struct ew_step rmsnorm_b[] = {
    {"square", false, false, EW_N}, {"mul", false, false, EW_N}, {"sum64", false, true, EW_N},
    {"cast", false, true, EW_N},    {"square", true, true, EW_N}, {"mul", true, true, EW_N},
    {"sum64", true, true, EW_N},    {"neg", true, true, EW_R},    {"neg", true, true, EW_R},
    {"square", true, true, EW_N},   {"square", true, true, EW_N}, {"add", true, true, EW_N},
    {"cast", true, false, EW_N}};
/* apply_rotary_pos_emb on one of q, k: x * cos, rotate_half (-x2, then the concatenation), * sin,
 * the sum; its backward: g * cos, g * sin, the negation's and the concatenation's (a half and a
 * whole copy), and the three paths into x added. */
static const struct ew_step rope_f[] = {{"square", false, false, EW_N}, {"neg", false, false, EW_HALF},
                                        {"cast", false, false, EW_N},   {"square", false, false, EW_N},
                                        {"add", false, false, EW_N}};
static const struct ew_step rope_b[] = {{"square", false, false, EW_N}, {"square", false, false, EW_N},
                                        {"neg", false, false, EW_HALF}, {"cast", false, false, EW_N},
                                        {"add", false, false, EW_N},    {"add", false, false, EW_N}};
/* LlamaMLP's act_fn(gate) * up; its backward: dy * up, dy * act, silu's backward (one kernel
 * reading the gradient and the input, PyTorch's silu_backward). */
static const struct ew_step swiglu_f[] = {{"silu", false, false, EW_N}, {"mul", false, false, EW_N}};
static const struct ew_step swiglu_b[] = {{"mul", false, false, EW_N}, {"mul", false, false, EW_N},
                                          {"mul", false, false, EW_N}};
/* A residual add, and in the backward the gradients of the branch point added. */
static const struct ew_step add_1[] = {{"add", false, false, EW_N}};
/* A copy of the same size (transpose(1, 2).contiguous() of the attention output). */
static const struct ew_step copy_1[] = {{"cast", false, false, EW_N}};

/* A module's forward and backward recipes. */
struct ew_module {
  const struct ew_step *f, *b;
  int nf, nb;
};
#define EW_MODULE(fw, bw) {(fw), (bw), (int)(sizeof(fw) / sizeof((fw)[0])), (int)(sizeof(bw) / sizeof((bw)[0]))}
static const struct ew_module ew_rmsnorm = EW_MODULE(rmsnorm_f, rmsnorm_b), ew_rope = EW_MODULE(rope_f, rope_b),
                              ew_swiglu = EW_MODULE(swiglu_f, swiglu_b), ew_add = EW_MODULE(add_1, add_1),
                              ew_copy = EW_MODULE(copy_1, copy_1);

static bool eager(const struct wl_program *j)
{
  return j->plan.fusion == WL_FUSION_EAGER;
}

/* The kernels of module md's forward, or (bwd) backward, on a tensor of n elements in r rows. */
static void ew_emit(struct wl_program *j, const struct shape *s, bool rc, const struct ew_module *md, bool bwd,
                    int64_t n, int64_t r)
{
  const struct ew_step *st = bwd ? md->b : md->f;
  for (int i = 0; i < (bwd ? md->nb : md->nf); i++) {
    int64_t m = st[i].size == EW_N ? n : st[i].size == EW_R ? r : n / 2;
    struct op_call c =
        eltwise_call(m, st[i].fn, st[i].in32 ? NPU_DT_FP32 : s->dt, st[i].out32 ? NPU_DT_FP32 : s->dt);
    kern(j, WL_CAT_VEC, rc && !bwd, &c);
  }
}

static struct op_call norm_call(const struct wl_program *j, const struct shape *s, bool fused)
{
  if (j->model.norm == WL_NORM_RMS) return rms_norm_call(s->Tn, s->h, s->dt, fused);
  return layer_norm_call(s->Tn, s->h, s->dt);
}

/* plan.fusion = eager: the residual add before a norm (fused) and an RMSNorm as their eager
 * recipes, forward or (bwd) backward; true when that was the whole norm (PyTorch's layer_norm is
 * one kernel either way: then *fused is cleared, the add being apart). */
static bool eager_norm(struct wl_program *j, const struct shape *s, bool rc, bool *fused, bool bwd)
{
  if (!eager(j)) return false;
  int64_t n = (int64_t)s->Tn * s->h;
  if (*fused) ew_emit(j, s, rc, &ew_add, bwd, n, s->Tn);
  *fused = false;
  if (j->model.norm != WL_NORM_RMS) return false;
  ew_emit(j, s, rc, &ew_rmsnorm, bwd, n, s->Tn);
  return true;
}

/* A norm; fused: with the residual add before it. */
static void norm(struct wl_program *j, const struct shape *s, bool rc, bool fused)
{
  if (eager_norm(j, s, rc, &fused, false)) return;
  struct op_call c = norm_call(j, s, fused);
  kern(j, WL_CAT_VEC, rc, &c);
}

/* The norm's backward, as the norm operator costs it (eager: with a residual, the branch point's
 * gradients added, then the recipe's backward). */
static void norm_bwd(struct wl_program *j, const struct shape *s, bool fused)
{
  if (eager_norm(j, s, false, &fused, true)) return;
  struct op_call c = norm_call(j, s, fused);
  kern_bwd(j, s, WL_CAT_VEC, &c);
}

/* Dropout on rows x cols, when the model has it. */
static void dropout(struct wl_program *j, const struct shape *s, bool rc, int64_t rows, int64_t cols, enum wl_cat cat)
{
  if (j->model.dropout <= 0) return;
  struct op_call c = rows_cols_call("dropout", rows, cols, s->dt);
  op_call_real(&c, "p", j->model.dropout);
  kern(j, cat, rc, &c);
}

/* Dropout's backward (the dropout operator's rule: the same kernel). */
static void dropout_bwd(struct wl_program *j, const struct shape *s, int64_t rows, int64_t cols, enum wl_cat cat)
{
  if (j->model.dropout <= 0) return;
  struct op_call c = rows_cols_call("dropout", rows, cols, s->dt);
  op_call_real(&c, "p", j->model.dropout);
  kern_bwd(j, s, cat, &c);
}

/* Standard attention's core: QK^T and PV as batched GEMMs, the softmax between them. */
static void attn_core_std(struct wl_program *j, const struct shape *s, bool rc)
{
  int heads = s->b * s->a / s->t;
  struct op_call qk = wl__grouped_gemm_call(heads, (int64_t)heads * s->s, s->s, s->d, s->dt);
  struct op_call sm = rows_cols_call("softmax", (int64_t)heads * s->s, s->s, s->dt);
  struct op_call pv = wl__grouped_gemm_call(heads, (int64_t)heads * s->s, s->d, s->s, s->dt);
  kern(j, WL_CAT_ATTN, rc, &qk);
  kern(j, WL_CAT_ATTN, rc, &sm);
  dropout(j, s, rc, (long)heads * s->s, s->s, WL_CAT_ATTN);
  kern(j, WL_CAT_ATTN, rc, &pv);
}

/* With context parallelism a rank's queries (s / cp, in balanced causal chunks) meet every key:
 * the work of cp causal blocks of s / cp, costed as FlashAttention over a batch cp times larger.
 * Packed documents (model.doc_len) are attended alone, each split over CP the same way: cp
 * blocks of doc_len / cp per document. */
static struct op_call attn_flash_call(const struct wl_program *j, const struct shape *s)
{
  int docs = j->model.seq_len / wl_model_attn_len(&j->model);
  struct op_call c = flash_call((int64_t)s->b * j->plan.cp * docs, s->a / s->t, s->g / s->t, s->s / docs, s->d, s->dt);
  if (s->window) op_call_dim(&c, "window", s->window); /* a local layer (no CP, no documents) */
  if (j->model.pos == WL_POS_ALIBI) op_call_bool(&c, "alibi", true);
  if (j->model.sinks) op_call_bool(&c, "sinks", true);
  return c;
}

/*
 * DeepSeek sparse attention (model.dsa; DeepSeek-V3.2-Exp report, Sec. 2.1): a lightning
 * indexer scores each query's earlier tokens, I(t,s) = sum_j w(t,j) ReLU(q_I(t,j) . k_I(s))
 * over its heads of dim, and attention reads each query's topk best keys. Costed as: the
 * indexer's projections (q_I from the query latent, or the hidden state without one; k_I with
 * its LayerNorm and the heads' weights w from the hidden state) as GEMMs; its logits as one GEMM
 * per sequence of s x s/2 x heads dim in fp8 where the cube takes it (the causal half: the FLOPs
 * of the heads' GEMMs of dim, whose ReLU and weighted sum the real kernel, DeepGEMM's
 * fp8_mqa_logits, fuses into the epilogue); the selection as two streaming passes over the fp32
 * scores (a radix select's histogram and selection passes; npusim has no top-k kernel, the
 * eltwise kernel's sum64 pass stands for each); attention as FlashAttention's band of topk keys
 * (the keys and FLOPs each query has; a gather of scattered key rows is not modelled). The
 * indexer is whole on every TP rank, without communication. Backward: the indexer learns from
 * its KL loss on a detached input (the report's continued pre-training), so only its own GEMMs'
 * backward; the attention distribution it matches comes from the attention kernel (not costed).
 */
static enum npu_dtype dsa_dtype(const struct wl_program *j, const struct shape *s)
{
  return j->job->sys.chip.cube.macs_per_cycle[NPU_DT_FP8_E4M3] > 0 ? NPU_DT_FP8_E4M3 : s->dt;
}

static int dsa_query_in(const struct wl_program *j, const struct shape *s)
{
  return wl_model_is_mla(&j->model) && j->model.mla.q_lora_rank ? j->model.mla.q_lora_rank : s->h;
}

static struct op_call dsa_logits_call(const struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  return wl__grouped_gemm_call(s->b, (int64_t)s->b * s->s, s->s / 2, m->dsa.heads * m->dsa.dim, dsa_dtype(j, s));
}

static struct op_call dsa_norm_call(const struct wl_program *j, const struct shape *s)
{
  return layer_norm_call(s->T, j->model.dsa.dim, s->dt);
}

static struct op_call dsa_select_call(const struct shape *s)
{
  return eltwise_call((int64_t)s->b * s->s * (s->s / 2), "sum64", NPU_DT_FP32, NPU_DT_FP32);
}

static void dsa_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  const struct wl_model *m = &j->model;
  if (!m->dsa.topk) return;
  gemm_fwd(j, s, rc, dsa_query_in(j, s), m->dsa.heads * m->dsa.dim);
  gemm_fwd(j, s, rc, s->h, m->dsa.dim + m->dsa.heads);
  struct op_call kn = dsa_norm_call(j, s);
  kern(j, WL_CAT_VEC, rc, &kn);
  struct op_call lg = dsa_logits_call(j, s), sel = dsa_select_call(s);
  kern(j, WL_CAT_ATTN, rc, &lg);
  for (int pass = 0; pass < 2; pass++) kern(j, WL_CAT_ATTN, rc, &sel);
}

/* The indexer's backward (its KL loss's gradient): the logits GEMM's, the key norm's (BI), the
 * projections' (BI and W). */
static void dsa_bwd(struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  if (!m->dsa.topk) return;
  if (bi(s)) {
    struct op_call lg = dsa_logits_call(j, s);
    kern_bwd(j, s, WL_CAT_ATTN, &lg);
    struct op_call kn = dsa_norm_call(j, s);
    kern_bwd(j, s, WL_CAT_VEC, &kn);
  }
  gemm_bwd(j, s, s->h, m->dsa.dim + m->dsa.heads);
  gemm_bwd(j, s, dsa_query_in(j, s), m->dsa.heads * m->dsa.dim);
}

static void attention_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  dsa_fwd(j, s, rc);
  if (j->model.attention == WL_ATTN_FLASH) {
    struct op_call c = attn_flash_call(j, s);
    kern(j, WL_CAT_ATTN, rc, &c);
  } else {
    attn_core_std(j, s, rc);
  }
}

static void attention_bwd(struct wl_program *j, const struct shape *s)
{
  if (j->model.attention == WL_ATTN_FLASH) {
    struct op_call c = attn_flash_call(j, s);
    kern_bwd(j, s, WL_CAT_ATTN, &c);
    dsa_bwd(j, s);
    return;
  }
  /* The batched GEMMs of the backward, written out (both operands are activations: no weight
   * gradient): dV = P^T dO, dP = dO V^T, then dropout's and softmax's backward (their
   * operators' rules), dQ = dS K, dK = dS^T Q. */
  int heads = s->b * s->a / s->t;
  int64_t rows = (int64_t)heads * s->s;
  struct op_call dv = wl__grouped_gemm_call(heads, rows, s->d, s->s, s->dt);
  struct op_call dp = wl__grouped_gemm_call(heads, rows, s->s, s->d, s->dt);
  struct op_call sm = rows_cols_call("softmax", rows, s->s, s->dt);
  kern(j, WL_CAT_ATTN, false, &dv);
  kern(j, WL_CAT_ATTN, false, &dp);
  dropout_bwd(j, s, rows, s->s, WL_CAT_ATTN);
  kern_bwd(j, s, WL_CAT_ATTN, &sm);
  kern(j, WL_CAT_ATTN, false, &dv); /* dQ: the shape of dV */
  kern(j, WL_CAT_ATTN, false, &dv); /* dK: the shape of dV */
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

/*
 * The ring's merges. Each of the cp steps of ring attention gives a partial output for the
 * rank's queries with its own softmax statistics; Transformer Engine's AttnFuncWithCPAndKVP2P
 * (Megatron's cp_comm_type p2p) adds each into the output rescaled (flash_attn_fwd_out_correction,
 * one fused kernel a step: the step's output read, the output read and written), and its
 * backward adds each step's dQ into dQ and each step's dK, dV into the dK, dV travelling the
 * ring (from the second step on; the first writes them). MindSpeed's ring attention merges
 * the same way. Costed as `times` eltwise adds of n elements in the training type: cp over the
 * output forward, cp - 1 over the queries and over the keys and values backward.
 */
static void cp_merges(struct wl_program *j, const struct shape *s, bool rc, int times, int64_t n)
{
  if (j->plan.cp < 2) return;
  struct op_call c = eltwise_call(n, "acc", s->dt, s->dt);
  for (int i = 0; i < times; i++) kern(j, WL_CAT_ATTN, rc, &c);
}

static int mlp_up_cols(const struct wl_program *j, const struct shape *s)
{
  return (j->model.act == WL_ACT_SWIGLU ? 2 : 1) * s->f / s->t;
}

/* An MLP activation `act` (enum wl_act) over rows x width (the rank's inner size), forward or
 * (bwd) backward. SwiGLU's backward is the swiglu operator's rule. GeLU has no operator: an
 * elementwise pass over rows x width, costed by the SwiGLU kernel of half the width, and its
 * backward (reading x and dy, writing dx: twice the bytes) by that kernel over twice the rows. */
static void act_kernel(struct wl_program *j, const struct shape *s, int act, int64_t rows, int64_t width, bool rc,
                       bool bwd)
{
  if (act == WL_ACT_SWIGLU) {
    struct op_call c = wl__swiglu_call(rows, width, s->dt);
    if (bwd)
      kern_bwd(j, s, WL_CAT_VEC, &c);
    else
      kern(j, WL_CAT_VEC, rc, &c);
    return;
  }
  struct op_call c = wl__swiglu_call(bwd ? 2 * rows : rows, width / 2, s->dt);
  kern(j, WL_CAT_VEC, rc, &c);
}

/* The MLP's activation, forward or (bwd) backward: eager SwiGLU's recipe, or act_kernel. */
static void activation(struct wl_program *j, const struct shape *s, bool rc, bool bwd)
{
  if (j->model.act == WL_ACT_SWIGLU && eager(j)) {
    ew_emit(j, s, rc, &ew_swiglu, bwd, (int64_t)s->T * (s->f / s->t), s->T);
    return;
  }
  act_kernel(j, s, j->model.act, s->T, s->f / s->t, rc, bwd);
}

/* RoPE on the queries and keys, forward or (bwd) backward (the rope operator's rule). */
static void rope(struct wl_program *j, const struct shape *s, bool rc, bool bwd)
{
  if (j->model.pos != WL_POS_ROPE) return;
  if (eager(j)) { /* q and k apart */
    int64_t heads[2] = {s->a / s->t, s->g / s->t};
    for (int i = 0; i < 2; i++) ew_emit(j, s, rc, &ew_rope, bwd, (int64_t)s->T * heads[i] * s->d, s->T);
    return;
  }
  struct op_call c = rope_call(s->T, (s->a + s->g) / s->t, s->d, s->dt);
  if (bwd)
    kern_bwd(j, s, WL_CAT_VEC, &c);
  else
    kern(j, WL_CAT_VEC, rc, &c);
}

/*
 * MLA (DeepSeek-V2/V3): queries through a low-rank bottleneck (down projection, RMSNorm, up
 * projection to heads x (nope + rope)), keys and values from one compressed latent (down to
 * kv_lora + rope, RMSNorm, up to heads x (nope + v)); the down projections are small and kept
 * whole on every TP rank, the up projections split by heads. The core attention is MLA's
 * non-absorbed form, as training runs it: every head its own key and value (query/key dimension
 * qk = nope + rope, value dimension v: DeepSeek-V3's 192 and 128), the FlashAttention kernel
 * with dim qk and dim_v v. Dimensions the kernel does not take (not multiples of 64, or above
 * 256) are costed at head dimension 128 with the heads scaled to the same FLOPs: heads x (qk + v)
 * / 256.
 */
static struct op_call mla_flash_call(const struct wl_program *j, const struct shape *s)
{
  int qh, kvh, qk, v;
  wl_model_attn_shape(&j->model, &qh, &kvh, &qk, &v);
  int h = qh / s->t;
  struct op_call c;
  if (qk % 64 || v % 64 || qk > 256 || v > 256) {
    int fh = (int)ceil((double)h * (qk + v) / 256.0);
    c = flash_call(s->b * j->plan.cp, fh, fh, s->s, 128, s->dt);
  } else {
    c = flash_call(s->b * j->plan.cp, h, h, s->s, qk, s->dt);
    if (v != qk) op_call_dim(&c, "dim_v", v);
  }
  if (s->window) op_call_dim(&c, "window", s->window); /* sparse attention's topk (model.dsa) */
  return c;
}

/* MLA's query up projection (with its latent norm), or the direct query projection without a
 * query latent: what gives Q. */
static void mla_q_up(struct wl_program *j, const struct shape *s, bool rc)
{
  const struct wl_model *m = &j->model;
  int qh, kvh, qk, v;
  wl_model_attn_shape(m, &qh, &kvh, &qk, &v);
  if (m->mla.q_lora_rank) {
    struct op_call qn = rms_norm_call(s->T, m->mla.q_lora_rank, s->dt, false);
    kern(j, WL_CAT_VEC, rc, &qn);
    gemm_fwd(j, s, rc, m->mla.q_lora_rank, qh / s->t * qk);
  } else {
    gemm_fwd(j, s, rc, s->h, qh / s->t * qk);
  }
}

/* MLA's key-value up projection (with its latent norm) and RoPE: what gives K and V. */
static void mla_kv_up(struct wl_program *j, const struct shape *s, bool rc)
{
  const struct wl_model *m = &j->model;
  int qh, kvh, qk, v;
  wl_model_attn_shape(m, &qh, &kvh, &qk, &v);
  int h = qh / s->t;
  struct op_call kvn = rms_norm_call(s->T, m->mla.kv_lora_rank, s->dt, false);
  kern(j, WL_CAT_VEC, rc, &kvn);
  gemm_fwd(j, s, rc, m->mla.kv_lora_rank, h * (m->mla.qk_nope_head_dim + v));
  struct op_call rp = rope_call(s->T, h + 1, m->mla.qk_rope_head_dim, s->dt);
  kern(j, WL_CAT_VEC, rc, &rp);
}

static void mla_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  const struct wl_model *m = &j->model;
  int qh, kvh, qk, v, h = qh = 0;
  wl_model_attn_shape(m, &qh, &kvh, &qk, &v);
  h = qh / s->t;
  if (m->mla.q_lora_rank) gemm_fwd(j, s, rc, s->h, m->mla.q_lora_rank);
  mla_q_up(j, s, rc);
  gemm_fwd(j, s, rc, s->h, m->mla.kv_lora_rank + m->mla.qk_rope_head_dim);
  mla_kv_up(j, s, rc);
  dsa_fwd(j, s, rc);
  struct op_call fa = mla_flash_call(j, s);
  kern(j, WL_CAT_ATTN, rc, &fa);
  cp_exchange(j, s, false);
  cp_merges(j, s, rc, j->plan.cp, (int64_t)s->T * h * v);
  gemm_fwd(j, s, rc, h * v, s->h);
}

static void mla_bwd(struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  int qh, kvh, qk, v;
  wl_model_attn_shape(m, &qh, &kvh, &qk, &v);
  int h = qh / s->t;
  gemm_bwd(j, s, h * v, s->h);
  if (bi(s)) {
    struct op_call fa = mla_flash_call(j, s);
    kern_bwd(j, s, WL_CAT_ATTN, &fa);
    cp_exchange(j, s, true);
    cp_merges(j, s, false, j->plan.cp - 1, (int64_t)s->T * h * qk);
    cp_merges(j, s, false, j->plan.cp - 1, (int64_t)s->T * h * (qk + v));
    struct op_call rp = rope_call(s->T, h + 1, m->mla.qk_rope_head_dim, s->dt);
    kern_bwd(j, s, WL_CAT_VEC, &rp);
  }
  dsa_bwd(j, s);
  gemm_bwd(j, s, m->mla.kv_lora_rank, h * (m->mla.qk_nope_head_dim + v));
  if (bi(s)) {
    struct op_call kvn = rms_norm_call(s->T, m->mla.kv_lora_rank, s->dt, false);
    kern_bwd(j, s, WL_CAT_VEC, &kvn);
  }
  gemm_bwd(j, s, s->h, m->mla.kv_lora_rank + m->mla.qk_rope_head_dim);
  if (m->mla.q_lora_rank) {
    gemm_bwd(j, s, m->mla.q_lora_rank, h * qk);
    if (bi(s)) {
      struct op_call qn = rms_norm_call(s->T, m->mla.q_lora_rank, s->dt, false);
      kern_bwd(j, s, WL_CAT_VEC, &qn);
    }
    gemm_bwd(j, s, s->h, m->mla.q_lora_rank);
  } else {
    gemm_bwd(j, s, s->h, h * qk);
  }
}

/* ------------------------------------------------------------------ linear attention */

/*
 * A gated delta-rule layer (model.linear: Qwen3-Next's Qwen3NextGatedDeltaNet, as Hugging Face
 * and Megatron-LM write it over flash-linear-attention's kernels), heads split over TP: the
 * norm; in_proj_qkvz and in_proj_ba as one column-parallel GEMM (h -> q, k, v, z, b, a); the
 * depthwise causal convolution of q, k and v with SiLU (causal_conv1d); beta = sigmoid(b) and
 * g = -exp(A_log) softplus(a + dt_bias), two elementwise passes over the rank's tokens x heads
 * into fp32 (the eltwise kernel's silu pass, an exponential and a division per element, stands
 * for each); the L2 norm of each query and key head (fla's l2norm kernel: an RMSNorm's traffic
 * over rows of k_dim); the chunked gated delta rule (gated_delta); the gated RMSNorm over v_dim
 * with silu(z) (rms_norm, then swiglu's silu(z) x y); out_proj (row-parallel) and its reduce.
 * Backward: each call's own rule. No context parallelism (wl_plan_finish refuses it).
 */
static struct op_call gated_delta_call(const struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  struct op_call c;
  op_call_init(&c, "gated_delta");
  op_call_dim(&c, "batch", s->b);
  op_call_dim(&c, "seq", s->s);
  op_call_dim(&c, "heads", m->linear.heads / s->t);
  op_call_dim(&c, "k_heads", m->linear.k_heads / s->t);
  op_call_dim(&c, "dk", m->linear.k_dim);
  op_call_dim(&c, "dv", m->linear.v_dim);
  op_call_dim(&c, "chunk", m->linear.chunk);
  op_call_dtype(&c, "dtype", s->dt);
  op_call_choice(&c, "pass", "fwd");
  return c;
}

/* The vector calls of a linear-attention layer between its projections, in order: before the
 * gated delta rule (nbefore of them) and after it. */
static int linear_vec_calls(const struct wl_program *j, const struct shape *s, struct op_call *c, int *nbefore)
{
  const struct wl_model *m = &j->model;
  int64_t hv = m->linear.heads / s->t, hk = m->linear.k_heads / s->t;
  op_call_init(&c[0], "causal_conv1d");
  op_call_dim(&c[0], "batch", s->b);
  op_call_dim(&c[0], "seq", s->s);
  op_call_dim(&c[0], "channels", wl_model_linear_conv_channels(m) / s->t);
  op_call_dim(&c[0], "width", m->linear.conv);
  op_call_dtype(&c[0], "dtype", s->dt);
  c[1] = eltwise_call((int64_t)s->T * hv, "silu", s->dt, NPU_DT_FP32); /* beta */
  c[2] = c[1];                                                          /* g */
  c[3] = rms_norm_call((int64_t)s->T * 2 * hk, m->linear.k_dim, s->dt, false);
  *nbefore = 4;
  c[4] = rms_norm_call((int64_t)s->T * hv, m->linear.v_dim, s->dt, false);
  c[5] = wl__swiglu_call(s->T, hv * m->linear.v_dim, s->dt);
  return 6;
}

static void linear_attn_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  const struct wl_model *m = &j->model;
  struct op_call v[6], gd = gated_delta_call(j, s);
  int nb, n = linear_vec_calls(j, s, v, &nb);
  norm(j, s, rc, true);
  sp_gather(j, s, rc);
  gemm_fwd(j, s, rc, s->h, wl_model_linear_in_cols(m) / s->t);
  for (int i = 0; i < nb; i++) kern(j, WL_CAT_VEC, rc, &v[i]);
  kern(j, WL_CAT_ATTN, rc, &gd);
  for (int i = nb; i < n; i++) kern(j, WL_CAT_VEC, rc, &v[i]);
  gemm_fwd(j, s, rc, m->linear.heads * m->linear.v_dim / s->t, s->h);
  tp_reduce(j, s, rc);
  if (m->sandwich_norm) norm(j, s, rc, false);
  dropout(j, s, rc, s->Tn, s->h, WL_CAT_VEC);
}

static void linear_attn_bwd(struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  struct op_call v[6], gd = gated_delta_call(j, s);
  int nb, n = linear_vec_calls(j, s, v, &nb);
  if (bi(s)) {
    dropout_bwd(j, s, s->Tn, s->h, WL_CAT_VEC);
    if (m->sandwich_norm) norm_bwd(j, s, false);
    sp_gather(j, s, false);
  }
  gemm_bwd(j, s, m->linear.heads * m->linear.v_dim / s->t, s->h);
  if (bi(s)) {
    for (int i = n - 1; i >= nb; i--) kern_bwd(j, s, WL_CAT_VEC, &v[i]);
    kern_bwd(j, s, WL_CAT_ATTN, &gd);
    for (int i = nb - 1; i >= 0; i--) kern_bwd(j, s, WL_CAT_VEC, &v[i]);
  }
  gemm_bwd(j, s, s->h, wl_model_linear_in_cols(m) / s->t);
  if (bi(s)) {
    tp_reduce(j, s, false);
    norm_bwd(j, s, true);
  }
}

/* Gated attention (model.attn_gate): the query projection's second half, sigmoid(gate) x the
 * attention output, costed by swiglu's silu(gate) x output over the rank's T x a d / t. */
static struct op_call attn_gate_call(const struct shape *s)
{
  return wl__swiglu_call(s->T, (int64_t)s->a * s->d / s->t, s->dt);
}

/* Columns of the rank's query, key and value projection (the gate's too with model.attn_gate). */
static int qkv_cols(const struct wl_program *j, const struct shape *s)
{
  return ((j->model.attn_gate ? 2 : 1) * s->a + 2 * s->g) * s->d / s->t;
}

/* The attention block's forward: norm, QKV, RoPE, attention (with the CP exchange), output
 * projection; rc: as recomputation inside the backward. */
static void attn_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  if (s->linear) {
    linear_attn_fwd(j, s, rc);
    return;
  }
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
  gemm_fwd(j, s, rc, s->h, qkv_cols(j, s));
  rope(j, s, rc, false);
  attention_fwd(j, s, rc);
  cp_exchange(j, s, false);
  cp_merges(j, s, rc, j->plan.cp, (int64_t)s->T * (s->a / s->t) * s->d);
  if (j->model.attn_gate) {
    struct op_call g = attn_gate_call(s);
    kern(j, WL_CAT_VEC, rc, &g);
  }
  if (eager(j)) ew_emit(j, s, rc, &ew_copy, false, (int64_t)s->T * (s->a / s->t) * s->d, s->T); /* to [T, a d] */
  gemm_fwd(j, s, rc, s->a * s->d / s->t, s->h);
  tp_reduce(j, s, rc);
  if (j->model.sandwich_norm) norm(j, s, rc, false); /* Pangu Ultra: a norm after the sublayer too */
  dropout(j, s, rc, s->Tn, s->h, WL_CAT_VEC);
}

/* The dense MLP module (Megatron's MLP: fc1 with SP's all-gather, the activation, fc2 with its
 * reduce-scatter), what its recompute module reruns. */
static void mlp_module(struct wl_program *j, const struct shape *s, bool rc)
{
  sp_gather(j, s, rc);
  gemm_fwd(j, s, rc, s->h, mlp_up_cols(j, s));
  activation(j, s, rc, false);
  gemm_fwd(j, s, rc, s->f / s->t, s->h);
  tp_reduce(j, s, rc);
}

/* The dense MLP's forward. */
static void mlp_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  norm(j, s, rc, true);
  mlp_module(j, s, rc);
  if (j->model.sandwich_norm) norm(j, s, rc, false);
  dropout(j, s, rc, s->Tn, s->h, WL_CAT_VEC);
}

/* One dense layer's forward; rc: as recomputation inside the backward. */
static void layer_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  attn_fwd(j, s, rc);
  mlp_fwd(j, s, rc);
}

static void shared_fwd(struct wl_program *j, const struct shape *s, bool rc);

/* The recomputation a layer's backward starts with (BI only): the whole forward (fwd: layer_fwd
 * for a dense layer; for an MoE layer moe_post_fwd, what follows the combine: its front, the
 * experts and the all-to-alls rerun before, WL_SEG_MOE_RC_F), or the modules of a selective
 * recompute (the routed experts' activation is the expert cost's, cost.c; the module moe reruns
 * the MoE block as a full recompute does, without the attention and the norm before it). */
static void recompute(struct wl_program *j, const struct shape *s, void (*fwd)(struct wl_program *, const struct shape *, bool))
{
  if (!bi(s) || s->keep) return;
  const struct wl_plan *p = &j->plan;
  if (p->recompute == WL_RECOMPUTE_FULL) {
    fwd(j, s, true);
    return;
  }
  bool dense = fwd == layer_fwd;
  if (wl_plan_recomputes(p, WL_RCM_CORE_ATTN) && j->model.attention == WL_ATTN_STANDARD) attn_core_std(j, s, true);
  if (wl_plan_recomputes(p, WL_RCM_LAYERNORM)) /* the input and pre-MLP norms */
    for (int i = 0; i < 2; i++) norm(j, s, true, true);
  if (wl_plan_recomputes(p, WL_RCM_MLA_UP_PROJ) && wl_model_is_mla(&j->model)) {
    mla_q_up(j, s, true);
    mla_kv_up(j, s, true);
  }
  if (dense && wl_plan_recomputes(p, WL_RCM_MLP)) mlp_module(j, s, true);
  if (!dense && wl_plan_recomputes(p, WL_RCM_MOE)) fwd(j, s, true); /* the shared experts with it */
  else if (!dense && wl_plan_recomputes(p, WL_RCM_SHARED_EXPERTS)) shared_fwd(j, s, true);
}

/* The dense MLP's backward: dropout, the transposed collectives, down, activation, up. */
static void mlp_bwd(struct wl_program *j, const struct shape *s)
{
  if (bi(s)) {
    dropout_bwd(j, s, s->Tn, s->h, WL_CAT_VEC);
    if (j->model.sandwich_norm) norm_bwd(j, s, false);
    sp_gather(j, s, false); /* the reduce-scatter's backward */
  }
  gemm_bwd(j, s, s->f / s->t, s->h);
  if (bi(s)) activation(j, s, false, true);
  gemm_bwd(j, s, s->h, mlp_up_cols(j, s));
  if (bi(s)) {
    tp_reduce(j, s, false); /* the all-gather's backward */
    norm_bwd(j, s, true);
  }
}

/* The attention block's backward. */
static void attn_bwd(struct wl_program *j, const struct shape *s)
{
  if (s->linear) {
    linear_attn_bwd(j, s);
    return;
  }
  if (bi(s)) {
    dropout_bwd(j, s, s->Tn, s->h, WL_CAT_VEC);
    if (j->model.sandwich_norm) norm_bwd(j, s, false);
    sp_gather(j, s, false);
  }
  if (wl_model_is_mla(&j->model)) {
    mla_bwd(j, s);
    if (bi(s)) {
      tp_reduce(j, s, false);
      norm_bwd(j, s, true);
    }
    return;
  }
  gemm_bwd(j, s, s->a * s->d / s->t, s->h);
  if (bi(s)) {
    if (eager(j)) ew_emit(j, s, false, &ew_copy, true, (int64_t)s->T * (s->a / s->t) * s->d, s->T);
    if (j->model.attn_gate) {
      struct op_call g = attn_gate_call(s);
      kern_bwd(j, s, WL_CAT_VEC, &g);
    }
    attention_bwd(j, s);
    cp_exchange(j, s, true);
    cp_merges(j, s, false, j->plan.cp - 1, (int64_t)s->T * (s->a / s->t) * s->d);
    cp_merges(j, s, false, j->plan.cp - 1, (int64_t)2 * s->T * (s->g / s->t) * s->d);
    rope(j, s, false, true);
  }
  gemm_bwd(j, s, s->h, qkv_cols(j, s));
  if (bi(s)) {
    tp_reduce(j, s, false);
    norm_bwd(j, s, true);
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
 * rank's sequence-parallel share. The backward of permute, unpermute and gating is their
 * operators' rules (permute's is costed by unpermute, unpermute's by permute, gating's by gating).
 */
static int moe_tokens(const struct shape *s)
{
  return s->Tn;
}

static struct op_call gating_call(const struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  struct op_call c;
  op_call_init(&c, "moe_gating");
  op_call_dim(&c, "tokens", moe_tokens(s));
  op_call_dim(&c, "experts", m->moe.experts);
  op_call_dim(&c, "topk", m->moe.top_k);
  op_call_dtype(&c, "dtype", s->dt);
  op_call_choice(&c, "score", m->moe.score == 1 ? "sigmoid" : "softmax");
  op_call_dim(&c, "groups", m->moe.groups ? m->moe.groups : 1);
  op_call_dim(&c, "topk_groups", m->moe.top_groups);
  op_call_bool(&c, "norm", true);
  return c;
}

static void moe_route(struct wl_program *j, const struct shape *s, bool rc)
{
  linear(j, s, rc, moe_tokens(s), j->model.moe.experts, s->h, false, true); /* router */
  struct op_call c = gating_call(j, s);
  kern(j, WL_CAT_VEC, rc, &c);
}

/* The dispatch (moe_permute) or, with unpermute, the combine of the rank's tokens. */
static struct op_call permute_call(const struct wl_program *j, const struct shape *s, bool unpermute)
{
  const struct wl_model *m = &j->model;
  struct op_call c;
  op_call_init(&c, unpermute ? "moe_unpermute" : "moe_permute");
  op_call_dim(&c, "tokens", moe_tokens(s));
  op_call_dim(&c, "hidden", s->h);
  op_call_dim(&c, "experts", m->moe.experts);
  op_call_dim(&c, "topk", m->moe.top_k);
  op_call_dtype(&c, "dtype", s->dt);
  return c;
}

static void moe_permute(struct wl_program *j, const struct shape *s, bool rc, bool unpermute)
{
  struct op_call c = permute_call(j, s, unpermute);
  kern(j, WL_CAT_VEC, rc, &c);
}

/* The backward of the dispatch or (unpermute) the combine, as the operator costs it. */
static void moe_permute_bwd(struct wl_program *j, const struct shape *s, bool unpermute)
{
  struct op_call c = permute_call(j, s, unpermute);
  kern_bwd(j, s, WL_CAT_VEC, &c);
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

/*
 * The routed experts are split over their expert TP group (plan.etp, Megatron-Core's
 * expert_tensor_parallel_size, tp by default): each rank holds ffn / etp of every local expert,
 * so the all-to-all dispatcher all-gathers the token copies its ETP group received before the
 * experts and reduce-scatters their output after (gather_from / reduce_scatter_to_sequence_
 * parallel_region over the expert TP group, token_permutation / token_unpermutation), k x the
 * group's tokens x h of the training type in all: with each rank routing its own tokens (SP, or
 * tp 1), etp / tp x T. Without sequence parallelism (etp = tp, wl_plan_finish) every TP rank
 * already holds every token: no gather, an all-reduce of k T h after. Megatron does these
 * between the all-to-all and the experts; here they close the dispatch's segment and open the
 * combine's (the same stream time; the gathered count is k x the group's tokens, the routing's
 * mean). wl__expert_cost costs the experts at ffn / etp for the gathered copies. With etp = tp
 * the group is the TP group; otherwise (MoE parallel folding, plan.h) the ranks of expert grid
 * points (0..etp-1, e, g), a collective of its own (WL_GROUP_ETP). With etp 1: none.
 */
static double moe_tp_bytes(const struct wl_program *j, const struct shape *s)
{
  double b = s->act_bytes * j->model.moe.top_k;
  return wl_plan_moe_own_tokens(&j->plan) ? b * j->plan.etp / j->plan.tp : b;
}

static void etpcoll(struct wl_program *j, bool rc, enum ic_op op, double bytes)
{
  if (j->plan.etp == j->plan.tp) tpcoll(j, rc, op, bytes);
  else if (j->plan.etp > 1 && bytes > 0) push(j, WL_CAT_TP, rc, true, add_coll(j, op, bytes, WL_GROUP_ETP));
}

/* The dispatch side's ETP collective (forward), or the combine side's backward (bwd). */
static void moe_tp_gather(struct wl_program *j, const struct shape *s, bool rc)
{
  if (wl_plan_moe_own_tokens(&j->plan) && j->plan.etp > 1) etpcoll(j, rc, IC_OP_ALLGATHER, moe_tp_bytes(j, s));
}

static void moe_tp_reduce(struct wl_program *j, const struct shape *s, bool rc)
{
  if (j->plan.etp > 1) etpcoll(j, rc, wl_plan_moe_own_tokens(&j->plan) ? IC_OP_REDUCESCATTER : IC_OP_ALLREDUCE, moe_tp_bytes(j, s));
}

/* The MoE block's work before its dispatch: the router, the permutation, the TP gather. */
static void moe_block_front(struct wl_program *j, const struct shape *s, bool rc)
{
  moe_route(j, s, rc);
  moe_permute(j, s, rc, false);
  moe_tp_gather(j, s, rc);
}

static void moe_pre_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  attn_fwd(j, s, rc);
  norm(j, s, rc, true);
  moe_block_front(j, s, rc);
}

static void moe_post_fwd(struct wl_program *j, const struct shape *s, bool rc)
{
  moe_tp_reduce(j, s, rc);
  moe_permute(j, s, rc, true);
  shared_fwd(j, s, rc);
}

/* The recomputed front of an MoE layer whose backward reruns its MoE block (BI, not a kept
 * layer): a full recompute's PRE forward; the module moe's router, permute and TP gather. */
static void moe_rc_front(struct wl_program *j, const struct shape *s)
{
  if (j->plan.recompute == WL_RECOMPUTE_FULL) moe_pre_fwd(j, s, true);
  else if (wl_plan_recomputes(&j->plan, WL_RCM_MOE)) moe_block_front(j, s, true);
}

static void moe_post_bwd(struct wl_program *j, const struct shape *s)
{
  shared_bwd(j, s);
  if (bi(s)) {
    moe_permute_bwd(j, s, true); /* the combine's */
    moe_tp_gather(j, s, false);  /* the reduce-scatter's backward */
  }
}

static void moe_pre_bwd(struct wl_program *j, const struct shape *s)
{
  if (bi(s)) {
    moe_tp_reduce(j, s, false);   /* the all-gather's backward */
    moe_permute_bwd(j, s, false); /* the dispatch's */
    struct op_call c = gating_call(j, s);
    kern_bwd(j, s, WL_CAT_VEC, &c);
  }
  linear_bwd(j, s, moe_tokens(s), j->model.moe.experts, s->h); /* the router's dX and dW */
  if (bi(s)) norm_bwd(j, s, true);
  attn_bwd(j, s);
}

/* The embedding gather, and its backward (a scatter-add of the same rows): there is no
 * embedding operator; each is costed as a row copy of the same bytes (an un-fused RMSNorm pass). */
static void embed(struct wl_program *j, const struct shape *s)
{
  struct op_call c = rms_norm_call(s->T, s->h, s->dt, false);
  kern(j, WL_CAT_VEC, false, &c);
}

static void head_fwd(struct wl_program *j, const struct shape *s)
{
  norm(j, s, false, false);
  sp_gather(j, s, false);
  gemm_fwd(j, s, false, s->h, s->V / s->t);
  struct op_call ce = ce_call(s->T, s->V / s->t, s->dt);
  kern(j, WL_CAT_VEC, false, &ce);
  for (int i = 0; i < 3; i++) tpcoll(j, false, IC_OP_ALLREDUCE, (double)s->T * 4); /* max, sum, target */
}

static void head_bwd(struct wl_program *j, const struct shape *s)
{
  if (bi(s)) {
    struct op_call ce = ce_call(s->T, s->V / s->t, s->dt);
    kern_bwd(j, s, WL_CAT_VEC, &ce);
  }
  gemm_bwd(j, s, s->h, s->V / s->t);
  if (bi(s)) {
    tp_reduce(j, s, false);
    norm_bwd(j, s, false);
  }
}

/*
 * A multi-token prediction module's own work before its transformer layer (model.mtp_layers;
 * DeepSeek-V3 report Sec. 2.2, Megatron-Core's MultiTokenPredictionLayer): the next token's
 * embedding (a row gather, as the embedding's), RMSNorm of it and of the previous depth's hidden
 * state, their concatenation gathered over the sequence (SP) and projected 2 h -> h by a
 * column-parallel linear layer, whose output is all-gathered over the hidden dimension (and
 * scattered back to the sequence shards). The module's layer and its head (the main model's
 * final norm, output projection and loss segments: the head is shared) follow in the program.
 */
static void mtp_fwd(struct wl_program *j, const struct shape *s)
{
  embed(j, s);
  norm(j, s, false, false);
  norm(j, s, false, false);
  if (j->plan.sp) tpcoll(j, false, IC_OP_ALLGATHER, 2 * s->act_bytes);
  gemm_fwd(j, s, false, 2 * s->h, s->h / s->t);
  tpcoll(j, false, IC_OP_ALLGATHER, s->act_bytes);
}

static void mtp_bwd(struct wl_program *j, const struct shape *s)
{
  if (bi(s)) tpcoll(j, false, IC_OP_REDUCESCATTER, s->act_bytes);
  gemm_bwd(j, s, 2 * s->h, s->h / s->t);
  if (bi(s)) {
    if (j->plan.sp) tpcoll(j, false, IC_OP_REDUCESCATTER, 2 * s->act_bytes);
    norm_bwd(j, s, false);
    norm_bwd(j, s, false);
    embed(j, s);
  }
}

/* ------------------------------------------------------------------ ZeRO-3 copies (plan.zero3_impl) */

/*
 * PyTorch FSDP2 (plan.zero3_impl = per_param) shards each parameter apart. Its all-gather lands
 * in one buffer, which wait_for_unshard copies out into the parameters on the compute stream
 * (foreach_all_gather_copy_out: split_with_sizes_copy, one kernel reading and writing the piece's
 * parameters), before every forward and every backward of the piece; foreach_reduce copies the
 * piece's gradients into the reduce-scatter's input in the reduction's type (chunk_cat, one
 * kernel), which the compute stream waits for before it frees them. FSDP1's FlatParameter is
 * gathered into and reduced from the buffer the layer uses: no copies. n: the piece's parameters
 * on this rank, unsharded; grad: the reduction's copy-in, else the gather's copy-out.
 */
static void z3_copy(struct wl_program *j, double n, bool grad)
{
  const struct wl_plan *p = &j->plan;
  if (!wl_plan_zero3(p) || p->zero3_impl != WL_Z3_PER_PARAM || n < 1) return;
  struct op_call c = eltwise_call((int64_t)llround(n), "cast", wl_plan_wide_dtype(p),
                                  grad ? wl__grad_buffer_dtype(p) : wl_plan_wide_dtype(p));
  kern(j, WL_CAT_VEC, false, &c);
}

/* One rank's parameters of the model's first dense (moe: MoE) layer of the kind being expanded
 * (wl_model_layer_is_variant): what a layer segment of that kind gathers (every layer of a kind
 * holds the same); 0 when the model has none. */
static double kind_params(const struct wl_program *j, bool moe)
{
  const struct wl_model *m = &j->model;
  bool variant = j->seg_off != 0; /* the segments of the second layer kind (wl_expand) */
  for (int l = 0; l < m->layers; l++)
    if (wl_model_layer_is_moe(m, l) == moe && (!wl_model_has_variants(m) || wl_model_layer_is_variant(m, l) == variant)) {
      double d, e;
      wl_layer_rank_params(j, l, &d, &e);
      return d + e;
    }
  return 0;
}

/* ------------------------------------------------------------------ vision encoder */

/*
 * The vision encoder in front of the language model (model.vision), in the first model chunk's
 * embedding segments, over the micro-batch's images x patches tokens, split over the TP group
 * as Megatron's LLaVA runs it (column- and row-parallel linears, an all-reduce after each block;
 * no sequence parallelism): the patch embedding (patch_dim -> hidden, whole on every rank);
 * per layer the norm, QKV, FlashAttention over each image's tokens (bidirectional, costed at
 * the next multiple of 128 tokens: the kernel's key blocks, where a varlen kernel masks the
 * last), the output projection, the norm and the MLP; the final norm; the projector (merge x
 * hidden -> H, GeLU, H -> H). Backward in reverse; a frozen encoder runs forward only, and the
 * projector's first GEMM then has no input gradient.
 */
static struct shape vision_shape(const struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  struct shape v = *s;
  v.b = s->b * m->vision.images;
  v.s = (m->vision.patches + 127) / 128 * 128;
  v.T = v.b * m->vision.patches;
  v.Tn = v.T;
  v.h = m->vision.hidden;
  v.a = v.g = m->vision.heads;
  v.d = v.h / v.a;
  v.f = m->vision.ffn;
  v.fp8 = false;
  v.window = 0;
  v.linear = false;
  v.act_bytes = (double)v.T * v.h * 2;
  return v;
}

static struct op_call vision_norm_call(const struct wl_program *j, const struct shape *v)
{
  if (j->model.vision.norm == WL_NORM_RMS) return rms_norm_call(v->T, v->h, v->dt, false);
  return layer_norm_call(v->T, v->h, v->dt);
}

/* The encoder's MLP activation and the projector's GeLU, forward or (bwd) backward. */
static void vision_act(struct wl_program *j, const struct shape *v, bool bwd)
{
  act_kernel(j, v, j->model.vision.act, v->T, v->f / v->t, false, bwd);
}

static void projector_gelu(struct wl_program *j, const struct shape *pr, bool bwd)
{
  act_kernel(j, pr, WL_ACT_GELU, pr->T, pr->h / pr->t, false, bwd);
}

/* Columns of the encoder's first MLP GEMM on a rank (gate and up with SwiGLU). */
static int vision_up_cols(const struct wl_program *j, const struct shape *v)
{
  return (j->model.vision.act == WL_ACT_SWIGLU ? 2 : 1) * v->f / v->t;
}

static struct op_call vision_attn_call(const struct shape *v)
{
  struct op_call c = flash_call(v->b, v->a / v->t, v->a / v->t, v->s, v->d, v->dt);
  op_call_bool(&c, "causal", false);
  return c;
}

static void vision_allreduce(struct wl_program *j, const struct shape *v)
{
  tpcoll(j, false, IC_OP_ALLREDUCE, v->act_bytes);
}

/* The projector's shape: the merged tokens, merge x hidden wide in, the model's hidden out. */
static struct shape projector_shape(const struct wl_program *j, const struct shape *v)
{
  struct shape p = *v;
  p.T = v->T / j->model.vision.merge;
  p.Tn = p.T;
  p.h = j->model.hidden;
  p.act_bytes = (double)p.T * p.h * 2;
  return p;
}

static void vision_fwd(struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  if (!m->vision.layers) return;
  struct shape v = vision_shape(j, s), pr = projector_shape(j, &v);
  gemm_fwd(j, &v, false, m->vision.patch_dim, v.h);
  struct op_call nc = vision_norm_call(j, &v), at = vision_attn_call(&v);
  for (int l = 0; l < m->vision.layers; l++) {
    kern(j, WL_CAT_VEC, false, &nc);
    gemm_fwd(j, &v, false, v.h, 3 * v.h / v.t);
    kern(j, WL_CAT_ATTN, false, &at);
    gemm_fwd(j, &v, false, v.h / v.t, v.h);
    vision_allreduce(j, &v);
    kern(j, WL_CAT_VEC, false, &nc);
    gemm_fwd(j, &v, false, v.h, vision_up_cols(j, &v));
    vision_act(j, &v, false);
    gemm_fwd(j, &v, false, v.f / v.t, v.h);
    vision_allreduce(j, &v);
  }
  kern(j, WL_CAT_VEC, false, &nc);
  gemm_fwd(j, &pr, false, m->vision.merge * v.h, pr.h / pr.t);
  projector_gelu(j, &pr, false);
  gemm_fwd(j, &pr, false, pr.h / pr.t, pr.h);
  vision_allreduce(j, &pr);
}

static void vision_bwd(struct wl_program *j, const struct shape *s)
{
  const struct wl_model *m = &j->model;
  if (!m->vision.layers) return;
  struct shape v = vision_shape(j, s), pr = projector_shape(j, &v);
  gemm_bwd(j, &pr, pr.h / pr.t, pr.h);
  projector_gelu(j, &pr, true);
  struct shape w = pr;
  if (m->vision.frozen) w.mode = EM_W; /* no gradient into the frozen encoder */
  gemm_bwd(j, &w, m->vision.merge * v.h, pr.h / pr.t);
  if (m->vision.frozen) return;
  vision_allreduce(j, &pr);
  struct op_call nc = vision_norm_call(j, &v), at = vision_attn_call(&v);
  kern_bwd(j, &v, WL_CAT_VEC, &nc);
  for (int l = 0; l < m->vision.layers; l++) {
    gemm_bwd(j, &v, v.f / v.t, v.h);
    vision_act(j, &v, true);
    gemm_bwd(j, &v, v.h, vision_up_cols(j, &v));
    vision_allreduce(j, &v);
    kern_bwd(j, &v, WL_CAT_VEC, &nc);
    gemm_bwd(j, &v, v.h / v.t, v.h);
    kern_bwd(j, &v, WL_CAT_ATTN, &at);
    gemm_bwd(j, &v, v.h, 3 * v.h / v.t);
    vision_allreduce(j, &v);
    kern_bwd(j, &v, WL_CAT_VEC, &nc);
  }
  w = v;
  w.mode = EM_W; /* the pixels need no gradient */
  gemm_bwd(j, &w, m->vision.patch_dim, v.h);
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

double wl_embed_rank_params(const struct wl_program *j)
{
  const struct wl_model *m = &j->model;
  double pos = m->pos == WL_POS_LEARNED ? (double)m->seq_len * m->hidden : 0;
  /* with a vision encoder, what the step trains of it and its projector (split over TP) */
  return ((double)m->vocab * m->hidden + pos + wl_model_vision_params(m, true, false)) / j->plan.tp;
}

double wl_head_rank_params(const struct wl_program *j)
{
  return (double)j->model.vocab * j->model.hidden / j->plan.tp + j->model.hidden;
}

/* One rank's parameters of a pipeline stage: non-expert (returned) and routed experts (*eparams). */
static double stage_params(const struct wl_program *j, int stage, double *eparams)
{
  const struct wl_model *m = &j->model;
  const struct wl_plan *p = &j->plan;
  double per = 0, ex = 0;
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
    if (k == 0) per += wl_embed_rank_params(j);
    if (k == mc - 1) { /* output projection (a copy when tied) + final norm; the MTP modules */
      per += (double)m->vocab * m->hidden / p->tp + m->hidden / p->tp + m->mtp_layers * wl_model_mtp_rank_params(m, p->tp);
      for (int l = m->layers; l < wl_model_total_layers(m); l++) {
        double d, e;
        wl_layer_rank_params(j, l, &d, &e);
        per += d;
        ex += e;
      }
    }
  }
  *eparams = ex;
  return per;
}

/* The forward, input-gradient and weight-gradient segments f, f + 1 and f + 2 of a piece. */
static void fbw_segs(struct wl_program *j, struct shape *s, enum wl_seg_kind f,
                     void (*fwd)(struct wl_program *, const struct shape *),
                     void (*bwd)(struct wl_program *, const struct shape *), double params)
{
  seg_begin(j, f);
  z3_copy(j, params, false);
  fwd(j, s);
  seg_end(j, f);
  s->mode = EM_BI;
  seg_begin(j, f + 1);
  z3_copy(j, params, false);
  bwd(j, s);
  seg_end(j, f + 1);
  s->mode = EM_W;
  seg_begin(j, f + 2);
  bwd(j, s);
  z3_copy(j, params, true);
  seg_end(j, f + 2);
  s->mode = EM_ALL;
}

/* A layer's segments (dense and MoE, their backward split, the kept variants of a partial full
 * recompute), written at j->seg_off. */
static void expand_layers(struct wl_program *j, struct shape *s)
{
  double dense = kind_params(j, false), moe = kind_params(j, true);
  seg_begin(j, WL_SEG_LAYER_F);
  z3_copy(j, dense, false);
  layer_fwd(j, s, false);
  seg_end(j, WL_SEG_LAYER_F);
  s->mode = EM_BI;
  seg_begin(j, WL_SEG_LAYER_BI);
  z3_copy(j, dense, false);
  layer_bwd(j, s);
  seg_end(j, WL_SEG_LAYER_BI);
  s->mode = EM_W;
  seg_begin(j, WL_SEG_LAYER_W);
  layer_bwd(j, s);
  z3_copy(j, dense, true);
  seg_end(j, WL_SEG_LAYER_W);
  s->mode = EM_ALL;
  if (j->model.moe.experts) {
    seg_begin(j, WL_SEG_MOE_PRE_F);
    z3_copy(j, moe, false);
    moe_pre_fwd(j, s, false);
    seg_end(j, WL_SEG_MOE_PRE_F);
    seg_begin(j, WL_SEG_MOE_POST_F);
    moe_post_fwd(j, s, false);
    seg_end(j, WL_SEG_MOE_POST_F);
    s->mode = EM_BI;
    seg_begin(j, WL_SEG_MOE_RC_F);
    moe_rc_front(j, s);
    seg_end(j, WL_SEG_MOE_RC_F);
    seg_begin(j, WL_SEG_MOE_POST_BI);
    z3_copy(j, moe, false);
    recompute(j, s, moe_post_fwd);
    moe_post_bwd(j, s);
    seg_end(j, WL_SEG_MOE_POST_BI);
    seg_begin(j, WL_SEG_MOE_PRE_BI);
    moe_pre_bwd(j, s);
    seg_end(j, WL_SEG_MOE_PRE_BI);
    s->mode = EM_W;
    seg_begin(j, WL_SEG_MOE_W);
    moe_post_bwd(j, s);
    moe_pre_bwd(j, s);
    z3_copy(j, moe, true);
    seg_end(j, WL_SEG_MOE_W);
    s->mode = EM_ALL;
  }
  if (j->plan.recompute == WL_RECOMPUTE_FULL && j->plan.recompute_method == WL_RCM_BLOCK && j->plan.recompute_layers) {
    /* the layers past the first recompute_layers of a chunk keep their activations */
    s->mode = EM_BI;
    s->keep = true;
    seg_begin(j, WL_SEG_LAYER_BI_KEEP);
    z3_copy(j, dense, false);
    layer_bwd(j, s);
    seg_end(j, WL_SEG_LAYER_BI_KEEP);
    if (j->model.moe.experts) {
      seg_begin(j, WL_SEG_MOE_POST_BI_KEEP);
      z3_copy(j, moe, false);
      recompute(j, s, moe_post_fwd);
      moe_post_bwd(j, s);
      seg_end(j, WL_SEG_MOE_POST_BI_KEEP);
    }
    s->keep = false;
    s->mode = EM_ALL;
  }
}

void wl_expand(struct wl_program *j)
{
  struct shape s = shape_of(j);
  const struct wl_model *m = &j->model;
  double emb = wl_embed_rank_params(j);
  seg_begin(j, WL_SEG_EMBED_F);
  z3_copy(j, emb, false);
  vision_fwd(j, &s);
  embed(j, &s);
  tp_reduce(j, &s, false);
  dropout(j, &s, false, s.Tn, s.h, WL_CAT_VEC);
  seg_end(j, WL_SEG_EMBED_F);
  seg_begin(j, WL_SEG_EMBED_B);
  z3_copy(j, emb, false);
  dropout_bwd(j, &s, s.Tn, s.h, WL_CAT_VEC);
  sp_gather(j, &s, false);
  embed(j, &s);
  vision_bwd(j, &s);
  z3_copy(j, emb, true);
  seg_end(j, WL_SEG_EMBED_B);
  /* the layers; a model that mixes two kinds of layers (local and global, linear and softmax
   * attention) has the second kind apart */
  s.window = m->global_every ? 0 : wl_model_layer_keys(m, 0); /* all local (window) or sparse (dsa) */
  s.linear = m->linear.heads && !m->linear.full_every;        /* all linear */
  expand_layers(j, &s);
  if (wl_model_has_variants(m)) {
    j->seg_off = WL_SEG_KINDS;
    s.window = m->window;
    s.linear = m->linear.heads > 0;
    expand_layers(j, &s);
    j->seg_off = 0;
  }
  s.window = 0;
  s.linear = false;
  fbw_segs(j, &s, WL_SEG_HEAD_F, head_fwd, head_bwd, wl_head_rank_params(j));
  if (j->model.mtp_layers) fbw_segs(j, &s, WL_SEG_MTP_F, mtp_fwd, mtp_bwd, wl_model_mtp_rank_params(m, j->plan.tp));
  /* the optimizer: AdamW over the rank's shard of fp32 master weights (ZeRO >= 1: / dp) */
  int pp = j->plan.pp;
  j->optim = npu_xcalloc((size_t)pp, sizeof *j->optim);
  j->stage_params = npu_xcalloc((size_t)pp, sizeof *j->stage_params);
  j->stage_eparams = npu_xcalloc((size_t)pp, sizeof *j->stage_eparams);
  j->layer_params = wl_model_layer_params(&j->model, 0) / j->plan.tp;
  double shard = wl_plan_shard(&j->plan), edp = wl_plan_edp(&j->plan); /* the ZeRO shard groups */
  for (int st = 0; st < pp; st++) {
    j->stage_params[st] = stage_params(j, st, &j->stage_eparams[st]);
    /* ZeRO >= 1: dense master weights shard over dp x cp (or the shard group), experts over
     * their data-parallel group */
    double n = j->plan.zero >= 1 ? j->stage_params[st] / shard + j->stage_eparams[st] / edp
                                 : j->stage_params[st] + j->stage_eparams[st];
    j->optim[st].first_item = j->nitems;
    struct op_call c;
    op_call_init(&c, "adamw");
    op_call_dim(&c, "n", (int64_t)ceil(n));
    op_call_dtype(&c, "grad", NPU_DT_FP32);
    op_call_dtype(&c, "param", s.dt);
    kern(j, WL_CAT_OPTIM, false, &c);
    j->optim[st].nitems = 1;
    /* launched as multi-tensor kernels (apex/TE multi_tensor_apply: 320 blocks of 65,536 elements
     * per launch) in four passes: gradient norm, Adam, the copy to the model's dtype, zeroing */
    j->optim[st].launches = 4 * (int)fmax(1, ceil(n / (320.0 * 65536)));
  }
}

/* ------------------------------------------------------------------ for cost.c */

int wl__kernel_add(struct wl_program *p, const struct op_call *c)
{
  return add_kernel(p, c);
}

int wl__kernel_add_on(struct wl_program *p, const struct op_call *c, int sys)
{
  return add_kernel_on(p, c, sys);
}
