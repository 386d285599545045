/*
 * program.c - building a step program (program.h) from a scenario: expansion (expand.c), the
 * kernels' and experts' costs (cost.c), the routing draws, and per pipeline stage the
 * schedule's slots with their steps and pipeline transfers. Also the rank geometry the replay
 * shares. Nothing here runs inside the SimGrid engine.
 *
 * Steps of a slot. Pieces (embedding, layers, head) run in layer order for a forward and in
 * reverse for backward passes: F runs forwards; BI input gradients; W weight gradients; B both
 * for each piece in turn. A dense piece is one segment step; an MoE layer's forward is
 * PRE | dispatch | experts | combine | POST, its input gradients POST_BI | combine^T | experts |
 * dispatch^T | PRE_BI and its weight gradients MOE_W | experts. In the last micro-batch the pass
 * that finishes a piece's weight gradients adds them to the buckets; with ZeRO-3 each piece
 * first gathers its parameters. An F&B pair (DualPipe, plan.ep_overlap) is one list: the two
 * slots' layers side by side, their all-to-alls posted to the rank's communication stream and
 * waited for where the frameworks wait (build_pair). A slot's steps depend on its chunk, phase
 * and pairing, not on its micro-batch (the expert times and all-to-all sizes are looked up by
 * micro-batch), so slots alike share one step list.
 */
#include "workloads/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "workloads/expand.h"
#include "workloads/memory.h"
#include "workloads/workloads_int.h"

/* ------------------------------------------------------------------ geometry */

int wl__phys_rank(const struct wl_plan *plan, int stage, int tp, int cp, int dp)
{
  struct wl_coord c = {{0}};
  c.c[WL_DIM_TP] = tp;
  c.c[WL_DIM_CP] = cp;
  c.c[WL_DIM_DP] = dp;
  c.c[WL_DIM_PP] = stage;
  return wl_plan_rank(plan, &c);
}

int wl__stage_of(const struct wl_program *p, int k, int m)
{
  int st, ch;
  wl_schedule_locate((enum wl_schedule)p->plan.schedule, p->pp, p->plan.vpp, p->mb, m, k, &st, &ch);
  return st;
}

double wl__moe_tokens(const struct wl_plan *plan, const struct wl_model *model)
{
  return (double)plan->micro_batch * (model->seq_len / plan->cp) / (plan->sp ? plan->tp : 1);
}

static int model_chunk(const struct wl_program *p, int stage, const struct wl_slot *sl)
{
  return wl_schedule_model_chunk((enum wl_schedule)p->plan.schedule, p->pp, p->plan.vpp, stage, sl->chunk);
}

int wl_program_p2p_index(const struct wl_program *p, int dir, int b, int m)
{
  return (dir * (p->mchunks - 1) + b) * p->mb + m;
}

/* The transfer slot sl of `stage` waits for before it starts, and the one it sends when done. */
static void slot_p2p(const struct wl_program *p, int stage, const struct wl_slot *sl, int *recv, int *send)
{
  int k = model_chunk(p, stage, sl), m = (int)sl->mb, last = p->mchunks - 1;
  *recv = *send = -1;
  if (sl->phase == WL_PH_W) return;
  if (sl->phase == WL_PH_F) {
    if (k > 0 && wl__stage_of(p, k - 1, m) != stage) *recv = wl_program_p2p_index(p, 0, k - 1, m);
    if (k < last && wl__stage_of(p, k + 1, m) != stage) *send = wl_program_p2p_index(p, 0, k, m);
  } else {
    if (k < last && wl__stage_of(p, k + 1, m) != stage) *recv = wl_program_p2p_index(p, 1, k, m);
    if (k > 0 && wl__stage_of(p, k - 1, m) != stage) *send = wl_program_p2p_index(p, 1, k - 1, m);
  }
}

/* ------------------------------------------------------------------ steps */

static struct wl_step *add_step(struct wl_prog_stage *st, enum wl_step_kind kind, enum wl_cat cat, int half)
{
  if (st->nsteps == st->cap_steps) {
    st->cap_steps = st->cap_steps ? 2 * st->cap_steps : 64;
    st->steps = npu_xrealloc(st->steps, (size_t)st->cap_steps * sizeof *st->steps);
  }
  struct wl_step *s = &st->steps[st->nsteps++];
  memset(s, 0, sizeof *s);
  s->kind = (uint8_t)kind;
  s->cat = (uint8_t)cat;
  s->half = (uint8_t)half;
  return s;
}

static void seg_step(struct wl_prog_stage *st, const struct wl_seg *sg, int half)
{
  if (sg->nitems) add_step(st, WL_STEP_SEG, WL_CAT_GEMM, half)->u.seg.seg = sg;
}

static void experts_step(struct wl_prog_stage *st, int layer, enum wl_expert_pass pass, bool rerun, int half)
{
  struct wl_step *s = add_step(st, WL_STEP_EXPERTS, WL_CAT_GEMM, half);
  s->u.experts.layer = layer;
  s->u.experts.pass = (uint8_t)pass;
  s->u.experts.rerun = rerun;
}

static void a2a_step(const struct wl_program *p, struct wl_prog_stage *st, int layer, enum wl_a2a_which which, int half)
{
  if (p->E < 2) return; /* ep 1: every expert is local, the tokens stay */
  struct wl_step *s = add_step(st, WL_STEP_A2A, WL_CAT_EP, half);
  s->u.a2a.layer = layer;
  s->u.a2a.which = (uint8_t)which;
}

/* Activation offload (plan.offload_layers, Transformer Engine's CPU offload): after the forward
 * of each of a chunk's first N layers its activations are copied to host memory, the compute
 * waiting at the end of the next layer's forward for the copy in flight (TE's double-buffered
 * handler; N < the chunk's layers, so layer N waits for the last); in the backward, layer N
 * posts the copy back of layer N - 1, and each offloaded layer waits for its own before its
 * backward and posts the next one's. lp: the layer's position in its chunk. */
static void offload_step(const struct wl_program *p, struct wl_prog_stage *st, int layer, int lp, int half)
{
  int n = p->plan.offload_layers;
  if (!n || lp > n) return;
  add_step(st, WL_STEP_OFFLOAD, WL_CAT_OFFLOAD, half)->u.offload.bytes =
      lp < n ? wl_memory_layer_activations(&p->model, &p->plan, layer) : 0;
}

static void reload_step(const struct wl_program *p, struct wl_prog_stage *st, int layer, int lp, int half)
{
  int n = p->plan.offload_layers;
  if (!n || lp > n) return;
  struct wl_step *s = add_step(st, WL_STEP_RELOAD, WL_CAT_OFFLOAD, half);
  s->u.reload.wait = lp < n;
  s->u.reload.next = lp > 0 ? wl_memory_layer_activations(&p->model, &p->plan, layer - 1) : 0;
}

/* The segments of `layer`: the second kind's when the model mixes two kinds of layers and it
 * is of that kind (local among global, linear among softmax attention: wl_model_layer_is_variant). */
static const struct wl_seg *layer_segs(const struct wl_program *p, int layer)
{
  return wl_model_layer_is_variant(&p->model, layer) ? p->seg + WL_SEG_KINDS : p->seg;
}

/* The BI segment of `layer`: seg, or keep when a partial full recompute leaves the layer out. */
static enum wl_seg_kind layer_bi(const struct wl_program *p, int layer, enum wl_seg_kind seg, enum wl_seg_kind keep)
{
  bool partial = p->plan.recompute == WL_RECOMPUTE_FULL && layer_segs(p, layer)[keep].nitems > 0;
  return partial && !wl_plan_layer_recomputed(&p->plan, p->model.layers, p->mchunks, layer) ? keep : seg;
}

/* Whether the backward of an MoE layer whose BI segment is post reruns the MoE block
 * (its routed experts and their all-to-alls) first: a full recompute of the layer (not one a
 * partial recompute keeps), or the selective module moe (Megatron-Core checkpoints the whole
 * MoELayer forward then). */
static bool moe_rerun(const struct wl_program *p, enum wl_seg_kind post)
{
  if (p->plan.recompute == WL_RECOMPUTE_FULL) return post == WL_SEG_MOE_POST_BI;
  return wl_plan_recomputes(&p->plan, WL_RCM_MOE);
}

/* Append the steps of slot sl of `stage` (half: its place in a pair); returns its number of
 * pieces, and when first_step is not NULL the index of each piece's first step in
 * first_step[0 .. np] (first_step[np]: the end), in *lead the pieces before its layers (the
 * embedding of a forward, the head of a backward) and in *trail those after them. */
static int build_slot(const struct wl_program *p, struct wl_prog_stage *st, int stage, const struct wl_slot *sl,
                      int half, int *first_step, int *lead, int *trail)
{
  const struct wl_model *md = &p->model;
  const struct wl_plan *pl = &p->plan;
  int k = model_chunk(p, stage, sl), mb = (int)sl->mb;
  bool first = k == 0, last = k == p->mchunks - 1, fwd = sl->phase == WL_PH_F, z3 = wl_plan_zero3(pl);
  int n = wl_plan_chunk_layers(pl, md->layers, p->mchunks, k);
  int l0 = wl_plan_chunk_first_layer(pl, md->layers, p->mchunks, k);
  bool grads = (sl->phase == WL_PH_B || sl->phase == WL_PH_W) && mb == p->mb - 1 && pl->overlap_grad_reduce && !z3;
  double emb = wl_embed_rank_params(p), head = wl_head_rank_params(p), acc = 0, eacc = 0;
  /* the last chunk ends with the head and then the MTP modules (their own work, their layer and
   * the shared head again) */
  int mtp = last ? md->mtp_layers : 0;
  int np = n + (first ? 1 : 0) + (last ? 1 : 0) + mtp;
  if (lead) *lead = fwd ? (first ? 1 : 0) : (last ? 1 + mtp : 0);
  if (trail) *trail = fwd ? (last ? 1 + mtp : 0) : (first ? 1 : 0);
  for (int q = 0; q < np; q++) {
    if (first_step) first_step[q] = st->nsteps;
    int pos = fwd ? q : np - 1 - q; /* position in layer order (the embedding first) */
    int d = pos - (np - mtp);       /* >= 0: MTP module d */
    bool is_mtp = d >= 0, is_emb = first && pos == 0, is_head = last && pos == np - 1 - mtp;
    int layer = is_mtp ? md->layers + d : l0 + pos - (first ? 1 : 0);
    bool is_moe = !is_emb && !is_head && wl_model_layer_is_moe(md, layer);
    double params = is_emb ? emb : head, eparams = 0;
    if (!is_emb && !is_head) wl_layer_rank_params(p, layer, &params, &eparams); /* experts / ep on this rank */
    if (is_mtp) params += wl_model_mtp_rank_params(md, pl->tp);
    if (z3) {
      struct wl_step *g = add_step(st, WL_STEP_GATHER, WL_CAT_DP, half);
      /* the routed experts gather over their own group (e = wl_plan_edp ranks), posted as part of
       * the DP group's (dpn ranks): per rank the same bytes received, eparams (e - 1) / e */
      double dpn = (double)pl->dp * pl->cp, e = wl_plan_edp(pl);
      g->u.gather.params = params + (eparams > 0 ? eparams * (e - 1) / e * dpn / (dpn - 1) : 0);
      g->u.gather.piece = q;
      g->u.gather.next = q + 1 < np;
    }
    const struct wl_seg *sg = is_emb || is_head ? p->seg : layer_segs(p, layer), *own = p->seg;
    if (is_mtp && fwd) seg_step(st, &own[WL_SEG_MTP_F], half);
    if (is_mtp && !fwd) { /* the module's head first */
      if (sl->phase != WL_PH_W) seg_step(st, &own[WL_SEG_HEAD_BI], half);
      if (sl->phase != WL_PH_BI) seg_step(st, &own[WL_SEG_HEAD_W], half);
    }
    if (fwd) {
      if (is_emb) seg_step(st, &sg[WL_SEG_EMBED_F], half);
      else if (is_head) seg_step(st, &sg[WL_SEG_HEAD_F], half);
      else if (!is_moe) seg_step(st, &sg[WL_SEG_LAYER_F], half);
      else {
        seg_step(st, &sg[WL_SEG_MOE_PRE_F], half);
        a2a_step(p, st, layer, WL_A2A_DISPATCH, half);
        experts_step(st, layer, WL_EXPERT_F, false, half);
        a2a_step(p, st, layer, WL_A2A_COMBINE, half);
        seg_step(st, &sg[WL_SEG_MOE_POST_F], half);
      }
      if (is_mtp) seg_step(st, &own[WL_SEG_HEAD_F], half);
      if (!is_emb && !is_head && !is_mtp) offload_step(p, st, layer, layer - l0, half);
      continue;
    }
    bool do_bi = sl->phase != WL_PH_W, do_w = sl->phase != WL_PH_BI;
    if (do_bi && !is_emb && !is_head && !is_mtp) reload_step(p, st, layer, layer - l0, half);
    if (is_emb) {
      if (do_bi) seg_step(st, &sg[WL_SEG_EMBED_B], half);
    } else if (is_head) {
      if (do_bi) seg_step(st, &sg[WL_SEG_HEAD_BI], half);
      if (do_w) seg_step(st, &sg[WL_SEG_HEAD_W], half);
    } else if (!is_moe) {
      if (do_bi) seg_step(st, &sg[layer_bi(p, layer, WL_SEG_LAYER_BI, WL_SEG_LAYER_BI_KEEP)], half);
      if (do_w) seg_step(st, &sg[WL_SEG_LAYER_W], half);
    } else {
      if (do_bi) {
        enum wl_seg_kind post = layer_bi(p, layer, WL_SEG_MOE_POST_BI, WL_SEG_MOE_POST_BI_KEEP);
        if (moe_rerun(p, post)) { /* the recomputed MoE block: front, experts, all-to-alls */
          seg_step(st, &sg[WL_SEG_MOE_RC_F], half);
          a2a_step(p, st, layer, WL_A2A_RC_DISPATCH, half);
          experts_step(st, layer, WL_EXPERT_F, true, half);
          a2a_step(p, st, layer, WL_A2A_RC_COMBINE, half);
        }
        seg_step(st, &sg[post], half);
        a2a_step(p, st, layer, WL_A2A_COMBINE_T, half);
        experts_step(st, layer, WL_EXPERT_BI, false, half);
        a2a_step(p, st, layer, WL_A2A_DISPATCH_T, half);
        seg_step(st, &sg[WL_SEG_MOE_PRE_BI], half);
      }
      if (do_w) {
        seg_step(st, &sg[WL_SEG_MOE_W], half);
        experts_step(st, layer, WL_EXPERT_W, false, half);
      }
    }
    if (is_mtp) {
      if (do_bi) seg_step(st, &own[WL_SEG_MTP_BI], half);
      if (do_w) seg_step(st, &own[WL_SEG_MTP_W], half);
    }
    if (z3 && do_w) { /* ZeRO-3: this piece's gradients, reduce-scattered as soon as they exist */
      struct wl_step *b = add_step(st, WL_STEP_BUCKET, WL_CAT_DP, half);
      b->u.bucket.params = params;
      b->u.bucket.eparams = eparams;
    }
    if (grads) {
      acc += params;
      eacc += eparams;
      if (acc >= pl->bucket_params || q == np - 1) {
        struct wl_step *b = add_step(st, WL_STEP_BUCKET, WL_CAT_DP, half);
        b->u.bucket.params = acc;
        b->u.bucket.eparams = eacc;
        acc = eacc = 0;
      }
    }
  }
  if (first_step) first_step[np] = st->nsteps;
  return np;
}

/* Append steps a[0 .. n-1]. */
static void copy_steps(struct wl_prog_stage *st, const struct wl_step *a, int n)
{
  for (int i = 0; i < n; i++) *add_step(st, (enum wl_step_kind)a[i].kind, (enum wl_cat)a[i].cat, a[i].half) = a[i];
}

/* The index in a[0 .. n-1] of the all-to-all `which`, or -1. */
static int find_a2a(const struct wl_step *a, int n, int which)
{
  for (int i = 0; i < n; i++)
    if (a[i].kind == WL_STEP_A2A && a[i].u.a2a.which == which) return i;
  return -1;
}

/* Post all-to-all step a without waiting; its wait comes later. */
static void defer_a2a(struct wl_prog_stage *st, const struct wl_step *a)
{
  struct wl_step *s = add_step(st, WL_STEP_A2A, WL_CAT_EP, a->half);
  *s = *a;
  s->u.a2a.defer = true;
}

static void wait_a2a(struct wl_prog_stage *st, const struct wl_step *a)
{
  add_step(st, WL_STEP_A2A_WAIT, WL_CAT_EP, a->half)->u.a2a_wait.which = a->u.a2a.which;
}

/*
 * One piece of each half of an F&B pair, f[0 .. nf-1] of the forward and b[0 .. nb-1] of the
 * backward. When both are MoE layers, in the order of Megatron-Core's combined 1F1B (docs/
 * user-guide/features/moe_a2a_overlap.md) and MindSpeed's --moe-fb-overlap (DeepSeek-V3's F&B
 * pairs): the backward's combine^T under the forward's attention, the forward's dispatch under
 * the backward's experts, the backward's dispatch^T under the forward's experts, the forward's
 * combine under the backward's attention and weight gradients:
 *   B.POST_BI, post combine^T | F.PRE, post dispatch | wait combine^T, B.experts, post
 *   dispatch^T | wait dispatch, F.experts, post combine | wait dispatch^T, B.PRE_BI (and W) |
 *   wait combine, F.POST.
 * An MoE layer beside a dense one (Megatron's dense layers have no-op dispatch and combine
 * nodes) hides its first all-to-all under the dense layer, one segment here. Anything else (two
 * dense layers, the embedding or head, ZeRO-3 gathers) runs one half after the other.
 */
/* A run of steps: a piece (or none) of one half of a pair. */
struct span {
  const struct wl_step *s;
  int n;
};

static void merge_pieces(struct wl_prog_stage *st, struct span fp, struct span bp)
{
  const struct wl_step *f = fp.s, *b = bp.s;
  int nf = fp.n, nb = bp.n;
  int d = find_a2a(f, nf, WL_A2A_DISPATCH), c = find_a2a(f, nf, WL_A2A_COMBINE), ct = find_a2a(b, nb, WL_A2A_COMBINE_T),
      dt = find_a2a(b, nb, WL_A2A_DISPATCH_T);
  bool gathers = false, fmoe = d >= 0 && c >= 0, bmoe = ct >= 0 && dt >= 0;
  for (int i = 0; i < nf; i++) gathers |= f[i].kind == WL_STEP_GATHER;
  for (int i = 0; i < nb; i++) gathers |= b[i].kind == WL_STEP_GATHER;
  if (gathers || (!fmoe && !bmoe)) {
    copy_steps(st, f, nf);
    copy_steps(st, b, nb);
  } else if (fmoe && bmoe) {
    copy_steps(st, b, ct);
    defer_a2a(st, &b[ct]);
    copy_steps(st, f, d);
    defer_a2a(st, &f[d]);
    wait_a2a(st, &b[ct]);
    copy_steps(st, b + ct + 1, dt - ct - 1);
    defer_a2a(st, &b[dt]);
    wait_a2a(st, &f[d]);
    copy_steps(st, f + d + 1, c - d - 1);
    defer_a2a(st, &f[c]);
    wait_a2a(st, &b[dt]);
    copy_steps(st, b + dt + 1, nb - dt - 1);
    wait_a2a(st, &f[c]);
    copy_steps(st, f + c + 1, nf - c - 1);
  } else if (bmoe) { /* a dense forward layer (one segment) under the backward's combine^T */
    copy_steps(st, b, ct);
    defer_a2a(st, &b[ct]);
    copy_steps(st, f, nf);
    wait_a2a(st, &b[ct]);
    copy_steps(st, b + ct + 1, nb - ct - 1);
  } else { /* a dense backward layer under the forward's dispatch */
    copy_steps(st, f, d);
    defer_a2a(st, &f[d]);
    copy_steps(st, b, nb);
    wait_a2a(st, &f[d]);
    copy_steps(st, f + d + 1, nf - d - 1);
  }
}

/* Pieces [a, b) of a half whose pieces start at steps first[] (indices from base), in tmp. */
static struct span pieces(const struct wl_step *tmp, int base, const int *first, int a, int b)
{
  return (struct span){tmp + (first[a] - base), first[b] - first[a]};
}

/* Append the steps of the F&B pair (fs, bs) of `stage`, as Megatron's combined 1F1B runs a
 * pair of model chunks: the pieces before the layers (the forward's embedding, the backward's
 * head), then the forward's layers in order beside the backward's in reverse, the k-th of each
 * together (merge_pieces: F.layer[k] + B.layer[n-1-k]; a half with more layers ends alone),
 * then the pieces after them. */
static void build_pair(const struct wl_program *p, struct wl_prog_stage *st, int stage, const struct wl_slot *fs,
                       const struct wl_slot *bs)
{
  int cap = wl_model_total_layers(&p->model) + 3, *pf = npu_xcalloc((size_t)cap, sizeof *pf), *pb = npu_xcalloc((size_t)cap, sizeof *pb);
  int base = st->nsteps, leadf, leadb, trailf, trailb;
  int nf = build_slot(p, st, stage, fs, 0, pf, &leadf, &trailf), nb = build_slot(p, st, stage, bs, 1, pb, &leadb, &trailb);
  int n = st->nsteps - base;
  struct wl_step *tmp = npu_xmalloc((size_t)n * sizeof *tmp);
  memcpy(tmp, st->steps + base, (size_t)n * sizeof *tmp);
  st->nsteps = base;
  int layf = nf - leadf - trailf, layb = nb - leadb - trailb;
  merge_pieces(st, pieces(tmp, base, pf, 0, leadf), pieces(tmp, base, pb, 0, leadb));
  for (int k = 0; k < layf || k < layb; k++) {
    int f0 = leadf + (k < layf ? k : layf), b0 = leadb + (k < layb ? k : layb);
    merge_pieces(st, pieces(tmp, base, pf, f0, k < layf ? f0 + 1 : f0), pieces(tmp, base, pb, b0, k < layb ? b0 + 1 : b0));
  }
  merge_pieces(st, pieces(tmp, base, pf, leadf + layf, nf), pieces(tmp, base, pb, leadb + layb, nb));
  free(tmp);
  free(pf);
  free(pb);
}

/* What a slot's steps depend on: chunk, phase and whether it adds to the gradient buckets. */
static unsigned slot_shape(const struct wl_program *p, const struct wl_slot *sl)
{
  bool grads = (sl->phase == WL_PH_B || sl->phase == WL_PH_W) && (int)sl->mb == p->mb - 1 &&
               p->plan.overlap_grad_reduce && !wl_plan_zero3(&p->plan);
  return (unsigned)sl->chunk << 3 | (unsigned)sl->phase << 1 | (grads ? 1u : 0u);
}

/* Build stage s's slots and step lists. */
static int build_stage(struct wl_program *p, int s, struct npu_diag *diag)
{
  struct wl_prog_stage *st = &p->stages[s];
  struct wl_slot *sched;
  size_t n;
  int rc = wl_schedule_build((enum wl_schedule)p->plan.schedule, p->pp, p->plan.vpp, p->mb, s, &sched, &n, diag);
  if (rc) return rc;
  if (p->plan.ep_overlap != WL_EPO_NONE) wl_schedule_pair_fb(sched, n);
  st->slots = npu_xcalloc(n ? n : 1, sizeof *st->slots);
  st->nslots = n;
  for (size_t i = 0; i < n; i++) {
    st->slots[i].slot = sched[i];
    st->slots[i].list = -1;
    slot_p2p(p, s, &sched[i], &st->slots[i].recv, &st->slots[i].send);
  }
  /* the keys of the lists built so far: (shape of the slot) << 16 | (shape of its partner + 1) */
  unsigned *keys = NULL;
  for (size_t pc = 0; pc < n;) {
    bool pair = sched[pc].overlap && pc + 1 < n;
    unsigned key = slot_shape(p, &sched[pc]) << 16 | (pair ? slot_shape(p, &sched[pc + 1]) + 1 : 0);
    int l = 0;
    while (l < st->nlists && keys[l] != key) l++;
    if (l == st->nlists) {
      if (st->nlists == st->cap_lists) {
        st->cap_lists = st->cap_lists ? 2 * st->cap_lists : 8;
        st->lists = npu_xrealloc(st->lists, (size_t)st->cap_lists * sizeof *st->lists);
        keys = npu_xrealloc(keys, (size_t)st->cap_lists * sizeof *keys);
      }
      keys[l] = key;
      st->lists[l].first = st->nsteps;
      if (pair)
        build_pair(p, st, s, &sched[pc], &sched[pc + 1]);
      else
        build_slot(p, st, s, &sched[pc], 0, NULL, NULL, NULL);
      st->lists[l].n = st->nsteps - st->lists[l].first;
      st->nlists++;
    }
    st->slots[pc].list = l;
    pc += pair ? 2 : 1;
  }
  free(keys);
  free(sched);
  return 0;
}

/* ------------------------------------------------------------------ MoE */

const struct wl_route *wl_program_route(const struct wl_program *p, int layer, int m)
{
  if (!p->routes || !wl_model_layer_is_moe(&p->model, layer)) return NULL;
  return &p->routes[(size_t)layer * (size_t)p->mb + (size_t)m];
}

/* The index of (layer, m, e) in the per-rank expert arrays, before their inner dimension. */
static size_t expert_index(const struct wl_program *p, int layer, int m, int e)
{
  return ((size_t)layer * (size_t)p->mb + (size_t)m) * (size_t)p->E + (size_t)e;
}

double wl_program_expert_s(const struct wl_program *p, int layer, int m, int e, enum wl_expert_pass pass)
{
  return p->expert_s[expert_index(p, layer, m, e) * WL_EXPERT_PASSES + pass];
}

double wl_program_expert_rc_flops(const struct wl_program *p, int layer, int m, int e, enum wl_expert_rc k)
{
  return p->expert_rc_flops[expert_index(p, layer, m, e) * WL_EXPERT_RC_KINDS + k];
}

/* Draw every MoE layer's routing for every micro-batch, and cost each EP rank's experts for
 * the token copies it receives (seeded draws: the buckets are known before the step). */
static int build_moe(struct wl_program *p, struct op_cache *cache, struct npu_diag *diag)
{
  const struct wl_job *j = p->job;
  size_t nlm = (size_t)wl_model_total_layers(&p->model) * (size_t)p->mb;
  p->tokens_per_rank = wl__moe_tokens(&p->plan, &p->model);
  p->routes = npu_xcalloc(nlm, sizeof *p->routes);
  p->expert_s = npu_xcalloc(nlm * (size_t)p->E * WL_EXPERT_PASSES, sizeof *p->expert_s);
  p->expert_rc_flops = npu_xcalloc(nlm * (size_t)p->E * WL_EXPERT_RC_KINDS, sizeof *p->expert_rc_flops);
  for (int l = 0; l < wl_model_total_layers(&p->model); l++) {
    if (!wl_model_layer_is_moe(&p->model, l)) continue;
    for (int m = 0; m < p->mb; m++) {
      struct wl_route *rt = &p->routes[(size_t)l * (size_t)p->mb + (size_t)m];
      int rc = wl_route_draw(&j->routing, &p->model, p->E, p->tokens_per_rank, j->run.seed, l, m, rt, diag);
      if (rc) return rc;
      for (int e = 0; e < p->E; e++) {
        double in = 0;
        for (int i = 0; i < p->E; i++) in += rt->matrix[(size_t)i * p->E + e];
        size_t x = expert_index(p, l, m, e);
        rc = wl__expert_cost(p, cache, in, &p->expert_s[x * WL_EXPERT_PASSES],
                             &p->expert_rc_flops[x * WL_EXPERT_RC_KINDS], diag);
        if (rc) return rc;
      }
    }
  }
  return 0;
}

/* ------------------------------------------------------------------ the program */

struct wl_program *wl_program_expand(const struct wl_job *job)
{
  struct wl_program *p = npu_xcalloc(1, sizeof *p);
  p->job = job;
  p->model = job->model;
  p->plan = job->plan;
  p->pp = job->plan.pp;
  p->mb = job->microbatches;
  p->E = job->model.moe.experts ? job->plan.ep : 1;
  p->edp = wl_plan_edp(&job->plan); /* a dense plan's: dp x cp (etp = tp, ep 1) */
  p->nranks = p->pp * p->E;
  p->mchunks = p->pp * job->plan.vpp;
  wl_expand(p);
  return p;
}

int wl_program_create(struct wl_program **out, const struct wl_job *job, struct npu_diag *diag)
{
  *out = NULL;
  struct wl_program *p = wl_program_expand(job);
  struct op_cache *cache = op_cache_open(job->run.cost_cache[0] ? job->run.cost_cache : NULL, stderr);
  int rc = wl__cost_kernels(p, cache, diag);
  if (!rc) rc = wl__dp_twins(p, cache, diag);
  if (!rc && job->model.moe.experts) rc = build_moe(p, cache, diag);
  size_t entries;
  uint64_t hits, misses;
  op_cache_stats(cache, &entries, &hits, &misses);
  p->kernels_costed = (size_t)misses;
  p->kernel_cache_hits = (size_t)hits;
  if (!rc && job->run.cost_cache[0]) op_cache_save(cache);
  op_cache_close(cache);
  if (!rc) {
    p->stages = npu_xcalloc((size_t)p->pp, sizeof *p->stages);
    for (int s = 0; s < p->pp && !rc; s++) rc = build_stage(p, s, diag);
  }
  if (rc) {
    wl_program_destroy(p);
    return rc;
  }
  *out = p;
  return 0;
}

void wl_program_set_coll_time(struct wl_program *p, int c, double time_s, const char *algo)
{
  NPU_ASSERT(c >= 0 && c < p->ncolls);
  p->colls[c].time_s = time_s;
  snprintf(p->colls[c].algo, sizeof p->colls[c].algo, "%s", algo);
}

void wl_program_destroy(struct wl_program *p)
{
  if (!p) return;
  for (int s = 0; p->stages && s < p->pp; s++) {
    free(p->stages[s].slots);
    free(p->stages[s].steps);
    free(p->stages[s].lists);
  }
  free(p->stages);
  for (size_t i = 0; p->routes && i < (size_t)wl_model_total_layers(&p->model) * (size_t)p->mb; i++) wl_route_release(&p->routes[i]);
  free(p->routes);
  free(p->expert_s);
  free(p->expert_rc_flops);
  free(p->items);
  free(p->kernels);
  free(p->colls);
  free(p->slow_sys);
  free(p->optim);
  free(p->stage_params);
  free(p->stage_eparams);
  free(p->experts);
  free(p);
}
