/*
 * reshard.c - weight synchronisation as layout arithmetic: which bytes of the rollout layout
 * each device must receive, and from which device of the training layout.
 *
 * A parameter tensor is a rectangle of [0,1) columns (the TP split: Megatron's column and row
 * parallel layers and the vocab-parallel embedding all split one axis in tp equal parts) x
 * [0,1) experts (routed experts only: EP splits the experts). A training rank (coordinates of
 * the actor's plan on the training pool) holds, of every layer of its pipeline stage, columns
 * [t/tp, (t+1)/tp) of the dense parameters and columns [u/etp, (u+1)/etp) x experts
 * [e/ep, (e+1)/ep) of the routed experts, (u, e) its point of the expert grid (plan.h, MoE
 * parallel folding; u = t with etp = tp, Megatron's default); the embedding
 * sits on the first stage and the output projection on the last. A rollout rank r of an
 * engine holds columns [r/tpr, (r+1)/tpr) of everything, except routed experts with
 * rl.rollout.expert_parallel: experts [r/tpr, (r+1)/tpr), all columns. What a rollout rank
 * needs is its rectangle minus the part it holds already (colocated: the same device's
 * training shard); each missing piece comes from one holder of it: one on the same server if
 * any, else the holders in turn by destination rank. Bytes are bf16 (2 per parameter). What a
 * device keeps is still copied into the inference engine's buffers, in HBM (iter.c).
 */
#include "rl/rl_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

static double ov(double a0, double a1, double b0, double b1)
{
  double lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
  return hi > lo ? hi - lo : 0;
}

static double expert_params(const struct wl_model *m, int l)
{
  if (!wl_model_layer_is_moe(m, l)) return 0;
  double mlp = (m->act == WL_ACT_SWIGLU ? 3.0 : 2.0) * m->hidden * m->moe.ffn;
  return (double)m->moe.experts * mlp;
}

/* Training ranks' coordinates on the training pool. */
struct trank {
  int t, p, e, u, node; /* TP rank, stage, EP index, expert TP rank, server */
};

/* Pick the holder of a piece for destination q: one on q's server if any, else by q in turn. */
static int pick(const int *h, int nh, const struct trank *tr, int qnode, int q)
{
  int same = 0;
  for (int i = 0; i < nh; i++) same += tr[h[i]].node == qnode;
  if (same) {
    int k = q % same;
    for (int i = 0; i < nh; i++)
      if (tr[h[i]].node == qnode && k-- == 0) return h[i];
  }
  return h[q % nh];
}

double rl__reshard_matrix(const struct rl_job *job, double *matrix, double *needed, double *local_max)
{
  const struct wl_model *m = &job->model;
  const struct wl_plan *pl = &job->plan;
  int P = job->devices, T = job->train_devices, R = job->rollout_devices;
  int tp = pl->tp, pp = pl->pp, ep = pl->ep > 0 ? pl->ep : 1, etp = pl->etp, tpr = job->spec.rollout.tp;
  bool rep = job->spec.rollout.expert_parallel && m->moe.experts;
  int dpn = job->sys.has_node ? job->sys.node.devices : 1;
  memset(matrix, 0, (size_t)P * P * sizeof *matrix);
  /* parameters per stage: dense (columns only) and routed experts (columns x experts) */
  double *dense = npu_xcalloc((size_t)pp, sizeof *dense), *expert = npu_xcalloc((size_t)pp, sizeof *expert);
  int chunks = pp * (pl->vpp > 0 ? pl->vpp : 1);
  for (int ch = 0; ch < chunks; ch++) {
    int first = wl_plan_chunk_first_layer(pl, m->layers, chunks, ch), n = wl_plan_chunk_layers(pl, m->layers, chunks, ch);
    for (int l = first; l < first + n; l++) {
      double e = expert_params(m, l);
      expert[ch % pp] += e;
      dense[ch % pp] += wl_model_layer_params(m, l) - e;
    }
  }
  double emb = wl_model_embedding_params(m);
  if (m->tied_embeddings || pp == 1) {
    dense[0] += emb;
  } else { /* input embedding on the first stage, output projection (and final norm) on the last */
    dense[0] += (double)m->vocab * m->hidden;
    dense[pp - 1] += emb - (double)m->vocab * m->hidden;
  }
  struct trank *tr = npu_xcalloc((size_t)T, sizeof *tr);
  for (int g = 0; g < T; g++) {
    struct wl_coord c;
    wl_plan_coord(pl, g, &c);
    /* the expert grid folds onto tp x cp x dp in that order, etp fastest, then ep (plan.h) */
    int a = c.c[WL_DIM_TP] + tp * (c.c[WL_DIM_CP] + pl->cp * c.c[WL_DIM_DP]);
    tr[g] = (struct trank){c.c[WL_DIM_TP], c.c[WL_DIM_PP], a / etp % ep, a % etp, (job->train_first + g) / dpn};
  }
  int *h = npu_xmalloc((size_t)T * sizeof *h);
  double total = 0, need = 0, lmax = 0;
  for (int i = 0; i < R; i++) {
    double kept = 0;
    int q = job->rollout_first + i, r = i % tpr, qnode = q / dpn;
    double c0 = (double)r / tpr, c1 = (double)(r + 1) / tpr;
    double d0 = rep ? 0 : c0, d1 = rep ? 1 : c1;   /* routed experts: columns */
    double x0 = rep ? c0 : 0, x1 = rep ? c1 : 1;   /* routed experts: experts */
    for (int p = 0; p < pp; p++) {
      for (int t = 0; t < (tp > etp ? tp : etp); t++) { /* TP rank t's dense piece, expert TP rank t's */
        for (int e = t < tp ? -1 : 0; e < (t < etp ? ep : 0); e++) { /* -1: dense, whatever the EP index */
          double t0 = (double)t / (e < 0 ? tp : etp), t1 = (double)(t + 1) / (e < 0 ? tp : etp);
          double bytes = e < 0 ? 2 * dense[p] * ov(c0, c1, t0, t1)
                               : 2 * expert[p] * ov(d0, d1, t0, t1) * ov(x0, x1, (double)e / ep, (double)(e + 1) / ep);
          if (bytes <= 0) continue;
          need += bytes;
          int nh = 0;
          bool local = false;
          for (int g = 0; g < T; g++) {
            if (tr[g].p != p || (e < 0 ? tr[g].t != t : tr[g].u != t || tr[g].e != e)) continue;
            if (job->train_first + g == q) local = true;
            h[nh++] = g;
          }
          NPU_ASSERT(nh > 0);
          if (local) {
            kept += bytes;
            continue;
          }
          int src = job->train_first + pick(h, nh, tr, qnode, q);
          matrix[(size_t)src * P + q] += bytes;
          total += bytes;
        }
      }
    }
    lmax = kept > lmax ? kept : lmax;
  }
  free(h);
  free(tr);
  free(dense);
  free(expert);
  if (needed) *needed = need;
  if (local_max) *local_max = lmax;
  return total;
}
