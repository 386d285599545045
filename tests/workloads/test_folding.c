/*
 * test_folding.c - MoE parallel folding (plan.h, wl_plan_expert_rank): the expert grid etp x ep
 * x edp lies on a stage's tp x cp x dp ranks in Megatron-Core's order (etp fastest); an EP group
 * that spans TP ranks, an expert TP group of its own with its gathers, memory sharded over the
 * grid, what cannot fold refused, and a folded all-to-all kept inside a server faster than one
 * across servers.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "common/err.h"
#include "workloads/isolate.h"
#include "workloads/job.h"
#include "workloads/memory.h"
#include "workloads/program.h"
#include "helpers.h"

#define SCN NPUSIM_SOURCE_DIR "/tests/workloads/data/"

/* The stage index a (tp fastest, then cp, then dp) of rank r. */
static int stage_index(const struct wl_plan *p, int r)
{
  struct wl_coord c;
  wl_plan_coord(p, r, &c);
  return c.c[WL_DIM_TP] + p->tp * (c.c[WL_DIM_CP] + p->cp * c.c[WL_DIM_DP]);
}

/* Every grid point of every stage is a distinct rank of that stage at a = et + etp (e + ep g),
 * and wl_plan_expert_index gives e back from the rank's coordinates. */
static void check_grid(const struct wl_plan *p)
{
  int n = p->tp * p->cp * p->dp, edp = wl_plan_edp(p);
  cr_assert_eq(p->etp * p->ep * edp, n, "etp %d x ep %d x edp %d = %d ranks", p->etp, p->ep, edp, n);
  for (int s = 0; s < p->pp; s++)
    for (int g = 0; g < edp; g++)
      for (int e = 0; e < p->ep; e++)
        for (int et = 0; et < p->etp; et++) {
          int r = wl_plan_expert_rank(p, s, et, e, g);
          struct wl_coord c;
          wl_plan_coord(p, r, &c);
          cr_expect_eq(c.c[WL_DIM_PP], s, "stage of (%d, %d, %d)", et, e, g);
          cr_expect_eq(stage_index(p, r), et + p->etp * (e + p->ep * g), "index of (%d, %d, %d)", et, e, g);
          cr_expect_eq(wl_plan_expert_index(p, c.c[WL_DIM_TP], c.c[WL_DIM_CP], c.c[WL_DIM_DP]), e);
        }
}

Test(folding, the_expert_grid_folds_onto_a_stage_expert_tp_fastest, .timeout = 30)
{
  /* Qwen3-30B-A3B (128 experts) on 32 ranks: tp 4 (SP), pp 2, dp 4 */
  const char *folded[] = {"plan.tp=4", "plan.sp=true", "plan.pp=2", "plan.ep=8", "plan.etp=1", "plan.global_batch=8",
                          NULL};
  struct tw w;
  tw_load(&w, "qwen3-30b-a3b", 32, folded);
  cr_assert_eq(w.p.dp, 4);
  cr_assert_eq(wl_plan_edp(&w.p), 2, "16 ranks a stage / (etp 1 x ep 8)");
  check_grid(&w.p);
  /* EP group (etp 1) 0 of stage 0: ranks 0..7, the four TP ranks of dp 0 and of dp 1 */
  for (int e = 0; e < 8; e++) cr_expect_eq(wl_plan_expert_rank(&w.p, 0, 0, e, 0), e);
  cr_expect_eq(wl_plan_expert_rank(&w.p, 1, 0, 3, 1), 16 + 8 + 3, "stage 1 follows stage 0's 16 ranks");
  tw_fini(&w);

  /* etp 2 inside tp 4: an expert TP group is half a TP group, EP steps by 2 */
  const char *half[] = {"plan.tp=4", "plan.sp=true", "plan.ep=4", "plan.etp=2", "plan.global_batch=8", NULL};
  tw_load(&w, "qwen3-30b-a3b", 16, half);
  cr_assert_eq(wl_plan_edp(&w.p), 2);
  check_grid(&w.p);
  cr_expect_eq(wl_plan_expert_rank(&w.p, 0, 1, 1, 0), 3, "expert TP rank 1 of EP index 1");
  cr_expect_eq(wl_plan_expert_rank(&w.p, 0, 0, 0, 1), 8, "the second expert data-parallel replica");
  tw_fini(&w);

  /* etp = tp (the default): each EP group lies across the data-parallel ranks of one TP rank, as
   * before folding (Megatron's tp-cp-ep-dp-pp) */
  const char *plain[] = {"plan.tp=4", "plan.sp=true", "plan.cp=2", "plan.ep=4", "plan.global_batch=8", NULL};
  tw_load(&w, "qwen3-30b-a3b", 32, plain);
  cr_assert_eq(w.p.etp, 4);
  check_grid(&w.p);
  for (int e = 0; e < 4; e++) {
    struct wl_coord c;
    wl_plan_coord(&w.p, wl_plan_expert_rank(&w.p, 0, 1, e, 0), &c);
    cr_expect_eq(c.c[WL_DIM_TP], 1, "EP rank %d keeps TP rank 1", e);
    cr_expect_eq(c.c[WL_DIM_CP] + 2 * c.c[WL_DIM_DP], e, "EP rank %d: cp fastest, then dp", e);
  }
  tw_fini(&w);
}

static void load_fails(const char *model, int devices, const char *const *sets, const char *key, const char *words)
{
  struct tw w;
  memset(&w, 0, sizeof w);
  w.cfg = npu_cfg_create();
  wl_model_register(w.cfg, &w.m);
  wl_plan_register(w.cfg, &w.p);
  w.sys.has_node = true;
  w.sys.node.devices = devices;
  struct npu_diag d;
  npu_diag_clear(&d);
  char buf[128];
  snprintf(buf, sizeof buf, "model.preset=%s", model);
  int rc = npu_cfg_set(w.cfg, buf, &d);
  for (int i = 0; sets[i] && !rc; i++) rc = npu_cfg_set(w.cfg, sets[i], &d);
  if (!rc) rc = npu_cfg_finish(w.cfg, &d);
  if (!rc) rc = wl_model_finish(w.cfg, &w.m, &d);
  if (!rc) rc = wl_plan_finish(w.cfg, &w.p, &w.m, &w.sys, &d);
  cr_expect_eq(rc, NPU_ECONFIG, "%s is refused", key);
  cr_expect_str_eq(d.key, key);
  cr_expect(strstr(d.msg, words) != NULL, "'%s' in: %s", words, d.msg);
  npu_cfg_destroy(w.cfg);
}

Test(folding, grids_that_do_not_fold_are_refused_naming_their_key, .timeout = 30)
{
  load_fails("qwen3-30b-a3b", 16, (const char *const[]){"plan.tp=4", "plan.sp=true", "plan.ep=8", "plan.etp=4",
                                                         "plan.global_batch=8", NULL},
             "plan.ep", "must divide a stage's");
  load_fails("qwen3-30b-a3b", 16, (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.ep=2", "plan.etp=16",
                                                         "plan.global_batch=8", NULL},
             "plan.etp", "must divide a stage's");
  load_fails("qwen3-30b-a3b", 16, (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.ep=1", "plan.etp=16",
                                                         "model.moe.ffn=776", "plan.global_batch=8", NULL},
             "plan.etp", "MLP size 776");
  load_fails("qwen3-30b-a3b", 16, (const char *const[]){"plan.tp=2", "plan.ep=2", "plan.etp=1",
                                                         "plan.global_batch=8", NULL},
             "plan.etp", "sequence parallelism");
  load_fails("qwen3-30b-a3b", 16, (const char *const[]){"plan.ep=3", "plan.global_batch=16", NULL}, "plan.ep",
             "128 experts");
}

/* Weights, gradients and optimizer states of a folded plan: routed experts 128 / ep per rank,
 * each / etp, their states sharded over the expert data-parallel group tp dp / (etp ep), the
 * dense rest over dp. Qwen3-30B-A3B, 48 MoE layers of SwiGLU experts (3 h f each). */
Test(folding, expert_states_shard_over_the_folded_expert_data_parallel_group, .timeout = 30)
{
  double h = 2048, f = 768, L = 48;
  struct {
    const char *ep, *etp;
    double ep_v, etp_v, edp;
  } rows[] = {{"plan.ep=8", "plan.etp=1", 8, 1, 2}, {"plan.ep=16", "plan.etp=1", 16, 1, 1},
              {"plan.ep=4", "plan.etp=2", 4, 2, 2}, {"plan.ep=2", "plan.etp=4", 2, 4, 2}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    double expert = L * (128 / rows[i].ep_v) * 3 * h * f / rows[i].etp_v, dense = 0;
    for (int zero = 0; zero <= 1; zero++) {
      char zs[32];
      snprintf(zs, sizeof zs, "plan.zero=%d", zero);
      const char *sets[] = {"plan.tp=4", "plan.sp=true", rows[i].ep, rows[i].etp, zs, "plan.global_batch=8", NULL};
      struct tw w;
      tw_load(&w, "qwen3-30b-a3b", 16, sets);
      cr_assert_eq(wl_plan_edp(&w.p), (int)rows[i].edp);
      struct wl_mem mem;
      wl_memory_stage(&w.m, &w.p, 0, &mem);
      if (!zero) {
        dense = mem.weights_bytes / 2 - expert;
        cr_assert_gt(dense, 0, "%s %s: weights %g bytes hold the experts' %g", rows[i].ep, rows[i].etp,
                     mem.weights_bytes, 2 * expert);
        tw_close(mem.optimizer_bytes, 12 * (dense + expert), 1e-12, "optimizer (no ZeRO)");
      } else {
        tw_close(mem.weights_bytes, 2 * (dense + expert), 1e-12, "weights (ZeRO-1)");
        tw_close(mem.optimizer_bytes, 12 * (dense / 4 + expert / rows[i].edp), 1e-12, "optimizer (ZeRO-1)");
      }
      tw_fini(&w);
    }
  }
}

/* With etp between 1 and tp the experts' token gather and output reduce-scatter run over the
 * expert TP group (a collective of its own), k x the group's tokens x h: etp / tp of the TP
 * group's; with etp = tp over the TP group, with etp 1 none. */
Test(folding, an_expert_tp_group_of_its_own_gathers_its_share_of_the_tokens, .timeout = 30)
{
  double T = 1024, h = 1024, k = 2; /* tiny_moe: one sequence of 1024 tokens per micro-batch */
  struct {
    const char *ep, *etp;
    int dim;
    double etp_v;
  } rows[] = {{"plan.ep=2", "plan.etp=2", WL_GROUP_ETP, 2}, {"plan.ep=2", "plan.etp=4", WL_DIM_TP, 4},
              {"plan.ep=8", "plan.etp=1", -1, 1}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    struct wl_job job;
    tw_job_load(&job, SCN "tiny_moe.cfg", (const char *const[]){"plan.tp=4", "plan.sp=true", rows[i].ep, rows[i].etp},
                4);
    struct wl_program *p = wl_program_expand(&job);
    const struct wl_seg *pre = &p->seg[WL_SEG_MOE_PRE_F], *post = &p->seg[WL_SEG_MOE_POST_F];
    const struct wl_item *g = &p->items[pre->first_item + pre->nitems - 1], *r = &p->items[post->first_item];
    if (rows[i].dim < 0) {
      cr_expect(!g->coll && !r->coll, "etp 1: whole experts, no expert TP collective");
    } else {
      cr_assert(g->coll && r->coll, "%s: a gather before the experts and a reduction after", rows[i].etp);
      const struct wl_coll *gc = &p->colls[g->index], *rc = &p->colls[r->index];
      cr_expect_eq(gc->dim, rows[i].dim, "%s: the gather's group", rows[i].etp);
      cr_expect_eq(gc->op, IC_OP_ALLGATHER);
      cr_expect_eq(rc->op, IC_OP_REDUCESCATTER);
      tw_close(gc->bytes, k * T * h * 2 * rows[i].etp_v / 4, 1e-12, "gathered bytes");
      tw_close(rc->bytes, gc->bytes, 1e-12, "reduce-scattered bytes");
    }
    wl_program_destroy(p);
    wl_job_release(&job);
  }
}

/* tiny_moe on two 8-NPU servers, tp 8 (SP), dp 2: folded (etp 1, ep 8) the EP group is a server
 * and its all-to-alls stay on HCCS; with etp 8, ep 2 each EP group pairs the servers' ranks and
 * half of every dispatch crosses RoCE. The folded step exposes less all-to-all. */
Test(folding, folding_ep_into_a_server_shortens_the_exposed_all_to_all, .timeout = 120)
{
  struct wl_outcome in, across;
  struct npu_diag d;
  npu_diag_clear(&d);
  const char *base[] = {"cluster.nodes=2", "plan.tp=8", "plan.sp=true", "plan.zero=1", "plan.global_batch=4"};
  const char *a[8], *b[8];
  memcpy(a, base, sizeof base);
  memcpy(b, base, sizeof base);
  a[5] = "plan.ep=8", a[6] = "plan.etp=1";
  b[5] = "plan.ep=2", b[6] = "plan.etp=8";
  cr_assert_eq(wl_run_isolated(SCN "tiny_moe.cfg", a, 7, &in, &d), 0, "%s", d.msg);
  cr_assert_eq(wl_run_isolated(SCN "tiny_moe.cfg", b, 7, &across, &d), 0, "%s", d.msg);
  cr_assert_eq(in.status, 0, "%s", in.message);
  cr_assert_eq(across.status, 0, "%s", across.message);
  cr_expect_eq(in.devices, 16);
  cr_expect_gt(in.cat_s[WL_CAT_EP], 0, "the folded plan has all-to-alls");
  /* 0.19 against 0.41 ms */
  cr_expect_lt(in.cat_s[WL_CAT_EP], 0.75 * across.cat_s[WL_CAT_EP], "ep_comm: in a server %g s, across %g s",
               in.cat_s[WL_CAT_EP], across.cat_s[WL_CAT_EP]);
}
