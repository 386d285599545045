/*
 * test_overlap.c - TP communication overlapped with GEMMs (plan.tp_overlap) and the TP-split
 * experts of MoE layers: the overlap's closed forms (a fully hidden collective costs only what
 * the GEMM loses to it; a longer one is exposed by the difference), which collectives pair with
 * which GEMMs for each framework, what the pairing takes from the GEMM (SMs, HBM bandwidth),
 * the segment sums, the plan checks, and the MoE layer's TP all-gather and reduce-scatter.
 * Expert all-to-alls overlapped across micro-batches (plan.ep_overlap): the order of a paired
 * MoE layer's steps, and the replay's closed forms (hidden all-to-alls cost only what they take
 * from the compute beside them; all-to-alls longer than the compute hide no more than it).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "common/err.h"
#include "tests/workloads/helpers.h"
#include "workloads/isolate.h"
#include "workloads/job.h"
#include "workloads/program.h"
#include "workloads/workloads_int.h"

#define SCN NPUSIM_SOURCE_DIR "/tests/workloads/data/"

TestSuite(overlap, .timeout = 120);

static void close_to(double got, double want, const char *what)
{
  cr_expect(fabs(got - want) <= 1e-12 * fmax(1, fabs(want)), "%s: %.15g, want %.15g", what, got, want);
}

/* A GEMM of g = 8 (gr = 10 beside communication) in 8 ring steps. */
Test(overlap, a_hidden_ring_all_gather_costs_only_what_the_gemm_loses)
{
  double lost, t = wl__overlap_time(WL_OVL_RING, 8, 8, 10, 7, 0, &lost);
  /* 7 steps of c = 1 beside GEMM chunks of 1 (1.25 slowed): each step 1 + 1 x (1 - 1 / 1.25) */
  close_to(lost, 7 * (1 - 1 / 1.25), "lost");
  close_to(t, 8 + lost, "pair = GEMM + its loss, nothing exposed");
  /* no interference: the pair is the GEMM */
  t = wl__overlap_time(WL_OVL_RING, 8, 8, 8, 7, 0, &lost);
  close_to(lost, 0, "lost without interference");
  close_to(t, 8, "pair without interference");
}

Test(overlap, a_longer_collective_is_exposed_by_the_difference)
{
  double lost, t = wl__overlap_time(WL_OVL_RING, 8, 8, 10, 70, 0, &lost);
  /* every step is the communication's (10 > 1.25): the GEMM's 7 slowed chunks run within it */
  close_to(lost, 7 * (1.25 - 1), "lost");
  close_to(t, 70 + 1, "pair = collective + the local chunk");
  close_to(t - 8 - lost, 70 - 7 * 1.25, "exposed = collective - the GEMM beside it");
  t = wl__overlap_time(WL_OVL_BULK, 1, 10, 12, 20, 0, &lost);
  close_to(t, 20, "bulk pair");
  close_to(t - 10 - lost, 20 - 12, "bulk exposed");
  t = wl__overlap_time(WL_OVL_BULK, 1, 10, 12, 6, 0, &lost);
  close_to(lost, 6 * (1 - 10.0 / 12), "bulk lost while the collective runs");
  close_to(t, 10 + lost, "bulk hidden");
}

Test(overlap, a_pipelined_reduce_scatter_exposes_its_last_chunk)
{
  double lost, t = wl__overlap_time(WL_OVL_PIPE, 4, 8, 8, 0, 1, &lost);
  close_to(t, 8 + 1, "4 chunks of 2, each chunk's collective of 1 beside the next chunk");
  t = wl__overlap_time(WL_OVL_PIPE, 4, 8, 8, 0, 3, &lost);
  close_to(t, 2 + 3 * 3 + 3, "collective-bound: first chunk, 3 steps of 3, the last collective");
}


static void load_fails(const char *file, const char *const *sets, int n, const char *key, const char *text)
{
  struct wl_job job;
  struct npu_diag d;
  npu_diag_clear(&d);
  char msg[1024];
  int rc = wl_job_load(&job, file, sets, n, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_expect_eq(rc, NPU_ECONFIG, "%s", msg);
  cr_expect(strstr(msg, key) && strstr(msg, text), "message names %s and '%s': %s", key, text, msg);
  if (!rc) wl_job_release(&job);
}

Test(overlap, plans_the_frameworks_cannot_run_are_refused)
{
  load_fails(SCN "tiny.cfg", (const char *const[]){"plan.tp=2", "plan.tp_overlap=\"mc2\""}, 2, "plan.tp_overlap",
             "sequence parallelism");
  load_fails(SCN "tiny.cfg", (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.tp_overlap=\"megatron\""}, 3,
             "plan.tp_overlap", "use \"mc2\"");
  load_fails(SCN "tiny_fp8.cfg", (const char *const[]){"plan.tp_overlap=\"mc2\""}, 1, "plan.tp_overlap",
             "use \"megatron\"");
}

/* Expert TP defaults to tp; other sizes (MoE parallel folding) are test_folding.c's. */
Test(overlap, expert_tp_defaults_to_tp_and_whole_experts_gather_nothing)
{
  load_fails(SCN "tiny_moe.cfg", (const char *const[]){"plan.tp=2", "plan.ep=2", "plan.etp=1"}, 3, "plan.etp",
             "sequence parallelism");
  load_fails(SCN "tiny.cfg", (const char *const[]){"plan.etp=2"}, 1, "plan.etp", "MoE model");
  struct wl_job job;
  tw_job_load(&job, SCN "tiny_moe.cfg", (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.ep=2"}, 3);
  cr_expect_eq(job.plan.etp, 2, "0 (the default) is tp");
  wl_job_release(&job);
  tw_job_load(&job, SCN "tiny_moe.cfg", (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.ep=2", "plan.etp=1"}, 4);
  struct wl_program *p = wl_program_expand(&job);
  const struct wl_seg *pre = &p->seg[WL_SEG_MOE_PRE_F];
  cr_expect(!p->items[pre->first_item + pre->nitems - 1].coll, "whole experts: no TP gather before them");
  wl_program_destroy(p);
  wl_job_release(&job);
}

/* Per layer segment: how many TP collectives pair by each method, and whether every one did. */
struct pairs {
  int ring, pipe, bulk, fused, unpaired;
};

static struct pairs count_pairs(const struct wl_program *p, enum wl_seg_kind k)
{
  struct pairs n = {0};
  const struct wl_seg *sg = &p->seg[k];
  for (int i = sg->first_item; i < sg->first_item + sg->nitems; i++) {
    const struct wl_item *it = &p->items[i];
    if (!it->coll || it->cat != WL_CAT_TP) continue;
    switch (it->ovl) {
    case WL_OVL_RING: n.ring++; break;
    case WL_OVL_PIPE: n.pipe++; break;
    case WL_OVL_BULK: n.bulk++; break;
    case WL_OVL_FUSED: n.fused++; break;
    default: n.unpaired++; break;
    }
    if (it->ovl != WL_OVL_NONE && it->ovl != WL_OVL_FUSED) {
      const struct wl_item *g = &p->items[it->hide];
      cr_expect(!g->coll && g->cat == WL_CAT_GEMM, "item %d pairs with a GEMM", i);
      cr_expect(!strcmp(p->kernels[it->slowed].op, "gemm"), "item %d: the slowed partner is a GEMM", i);
    }
  }
  return n;
}

/* MC2 on the 910B2 server: forward all-gathers feed QKV and FC1 in tp chunks, the reduce-
 * scatters leave the output projection and FC2, and in the backward the input-gradient GEMMs
 * fuse with theirs (the weight gradient is not their partner); the AI CPU drives the
 * communication, so no core is taken, but HBM bandwidth is. */
Test(overlap, mc2_pairs_every_layer_collective_with_its_gemm)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny.cfg", (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.tp_overlap=\"mc2\""}, 3);
  struct wl_program *p = wl_program_expand(&job);
  struct pairs f = count_pairs(p, WL_SEG_LAYER_F), b = count_pairs(p, WL_SEG_LAYER_BI);
  cr_expect(f.ring == 2 && f.pipe == 2 && f.bulk == 0 && f.unpaired == 0, "forward %d/%d/%d/%d", f.ring, f.pipe,
            f.bulk, f.unpaired);
  cr_expect(b.ring == 2 && b.pipe == 2 && b.bulk == 0 && b.unpaired == 0, "backward %d/%d/%d/%d", b.ring, b.pipe,
            b.bulk, b.unpaired);
  for (int i = 0; i < p->nitems; i++) {
    const struct wl_item *it = &p->items[i];
    if (it->ovl == WL_OVL_NONE) continue;
    cr_expect_eq(it->nchunks, 2, "mc2: one chunk per peer");
    cr_expect(!p->items[it->hide].wgrad, "mc2 fuses the input gradient, not the weight gradient");
    const struct wl_kernel *k = &p->kernels[it->slowed];
    cr_expect(k->sys > 0, "the partner runs with HBM bandwidth taken");
    cr_expect(op_call_u(&k->call, "cores") == 0, "no AI core taken");
    cr_expect(p->slow_sys[k->sys - 1].chip.hbm.bw_bytes_per_s < job.sys.chip.hbm.bw_bytes_per_s);
  }
  wl_program_destroy(p);
  wl_job_release(&job);
}

/* MC2 in AIV mode: the same pairs, each run as one MC2 kernel (AllGatherMatmul for the all-gather
 * feeding its GEMM, MatmulReduceScatter for the GEMM whose output is reduce-scattered) whose rows
 * per rank are the GEMM's over tp, costed by the operator on the server (its closed form at the
 * analytic fidelity); the pair takes the kernel's time, the collective what it adds to the GEMM. */
Test(overlap, mc2_in_aiv_mode_runs_each_pair_as_one_mc2_kernel)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny.cfg",
              (const char *const[]){"plan.tp=4", "plan.sp=true", "plan.tp_overlap=\"mc2\"",
                                    "plan.mc2_comm_mode=\"aiv\""},
              4);
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_program *p;
  cr_assert_eq(wl_program_create(&p, &job, &d), 0, "%s", d.msg);
  struct pairs f = count_pairs(p, WL_SEG_LAYER_F), b = count_pairs(p, WL_SEG_LAYER_BI);
  cr_expect(f.fused == 4 && f.ring + f.pipe + f.bulk + f.unpaired == 0, "forward: %d fused", f.fused);
  cr_expect(b.fused == 4 && b.ring + b.pipe + b.bulk + b.unpaired == 0, "backward: %d fused", b.fused);
  int checked = 0;
  for (int i = 0; i < p->nitems; i++) {
    const struct wl_item *it = &p->items[i];
    if (it->ovl != WL_OVL_FUSED) continue;
    const struct wl_kernel *mc2 = &p->kernels[it->slowed], *g = &p->kernels[p->items[it->hide].index];
    bool gather = p->colls[it->index].op == IC_OP_ALLGATHER;
    cr_expect_str_eq(mc2->op, gather ? "all_gather_matmul" : "matmul_reduce_scatter");
    cr_expect_eq(op_call_u(&mc2->call, "m") * 4, op_call_u(&g->call, "m"), "1 / tp of the GEMM's rows per rank");
    cr_expect_eq(op_call_u(&mc2->call, "k"), op_call_u(&g->call, "k"));
    cr_expect_eq(op_call_u(&mc2->call, "n"), op_call_u(&g->call, "n"));
    cr_expect_eq(op_call_u(&mc2->call, "ranks"), 4);
    cr_expect_eq(mc2->sys, 0, "the kernel's own cores move the data: no chip variant");
    /* its cost is the operator's on the server, run here directly */
    struct op_run_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC, .seed = 1, .node = &job.sys.node};
    struct op_result r;
    cr_assert_eq(op_run(mc2->call.desc, &mc2->call.args, &job.sys.chip, &o, &r, &d), 0, "%s", d.msg);
    /* inside a step kernels are queued ahead: the stream gap in place of the launch */
    close_to(mc2->time_s, r.total.time_s - r.total.launch_s + job.sys.chip.stream_gap_s, "the MC2 kernel's time");
    /* the pair: the GEMM, then what the kernel adds to it as exposed communication */
    double lost, exposed, hidden, t = wl__item_time_parts(p, i, &lost, &exposed, &hidden);
    close_to(lost, 0, "no interference apart from the kernel's");
    close_to(exposed, fmax(0, mc2->time_s - g->time_s), "exposed: the kernel beyond its GEMM");
    close_to(t + g->time_s, fmax(mc2->time_s, g->time_s), "the pair takes the kernel's time");
    close_to(hidden, fmax(0, p->colls[it->index].time_s - exposed), "hidden: the rest of the collective");
    checked++;
  }
  cr_expect_eq(checked, f.fused + b.fused, "the layer's forward and input-gradient segments hold the pairs");
  wl_program_destroy(p);
  wl_job_release(&job);
}

/* "aiv" needs MC2, a full-mesh server holding the TP group, and 16-bit GEMMs. */
Test(overlap, mc2_aiv_mode_needs_its_server_and_16_bit_gemms)
{
  load_fails(SCN "tiny.cfg", (const char *const[]){"plan.tp=2", "plan.mc2_comm_mode=\"aiv\""}, 2,
             "plan.mc2_comm_mode", "it needs plan.tp_overlap = \"mc2\"");
  load_fails(SCN "tiny.cfg",
             (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.tp_overlap=\"mc2\"", "plan.mc2_comm_mode=\"aiv\"",
                                   "node.topology=\"switch\"", "node.switch_ports=64"},
             6, "plan.mc2_comm_mode", "joined by a full mesh of links");
  load_fails(SCN "tiny.cfg",
             (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.tp_overlap=\"mc2\"", "plan.mc2_comm_mode=\"aiv\"",
                                   "plan.dtype=\"fp8\""},
             5, "plan.mc2_comm_mode", "fp16 or bf16 GEMMs, not fp8");
}

/* Megatron (Transformer Engine's defaults) on the H100 server: ring-exchange all-gathers on the
 * copy engines (all SMs for the GEMM), forward reduce-scatters pipelined in 4 on 16 SMs, the
 * backward's in bulk beside the weight gradient. */
Test(overlap, megatron_uses_transformer_engine_defaults)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny_fp8.cfg", (const char *const[]){"plan.dtype=\"bf16\"", "plan.tp_overlap=\"megatron\""}, 2);
  struct wl_program *p = wl_program_expand(&job);
  struct pairs f = count_pairs(p, WL_SEG_LAYER_F);
  cr_expect(f.ring == 2 && f.pipe == 2 && f.unpaired == 0, "forward %d/%d/%d", f.ring, f.pipe, f.unpaired);
  int aic = job.sys.chip.aic_count;
  for (int i = 0; i < p->nitems; i++) {
    const struct wl_item *it = &p->items[i];
    if (it->ovl == WL_OVL_NONE) continue;
    const struct wl_kernel *k = &p->kernels[it->slowed];
    if (it->ovl == WL_OVL_RING) {
      cr_expect(op_call_u(&k->call, "cores") == 0, "ring exchange on the copy engines");
      cr_expect_eq(it->nchunks, job.plan.tp);
    } else {
      cr_expect((int)op_call_u(&k->call, "cores") == aic - 16,
                "pipeline and bulk: the GEMM on the SMs the communication leaves");
      if (it->ovl == WL_OVL_PIPE) cr_expect_eq(it->nchunks, 4);
      if (it->ovl == WL_OVL_BULK) cr_expect(p->items[it->hide].wgrad, "bulk beside the weight gradient");
    }
  }
  wl_program_destroy(p);
  wl_job_release(&job);
}

/* A layer's segment with every collective free: the overlap hides them, nothing is lost; with
 * every collective much longer than the layer, the overlapped ones are exposed by the difference
 * and the segment still splits into its categories exactly. */
Test(overlap, segment_sums_follow_the_closed_forms)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny.cfg", (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.tp_overlap=\"mc2\""}, 3);
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_program *p;
  cr_assert_eq(wl_program_create(&p, &job, &d), 0);
  const struct wl_seg *sg = &p->seg[WL_SEG_LAYER_F];
  double kernels = 0;
  for (int i = sg->first_item; i < sg->first_item + sg->nitems; i++)
    if (!p->items[i].coll) kernels += p->kernels[p->items[i].index].time_s;
  for (int c = 0; c < p->ncolls; c++) wl_program_set_coll_time(p, c, 0, "test");
  wl_program_sum_segments(p);
  close_to(sg->time_s, kernels, "free collectives: the layer is its kernels");
  close_to(sg->cat_s[WL_CAT_INTERFERE], 0, "nothing lost to free collectives");
  double big = 1.0; /* seconds: far longer than any kernel of the tiny layer */
  for (int c = 0; c < p->ncolls; c++) wl_program_set_coll_time(p, c, big, "test");
  wl_program_sum_segments(p);
  double sum = 0, want = kernels;
  for (int k = 0; k < WL_CAT_COUNT; k++) sum += sg->cat_s[k];
  close_to(sum, sg->time_s, "categories add up to the segment");
  for (int i = sg->first_item; i < sg->first_item + sg->nitems; i++) {
    const struct wl_item *it = &p->items[i];
    if (!it->coll) continue;
    double g = it->ovl != WL_OVL_NONE ? p->kernels[p->items[it->hide].index].time_s : 0;
    if (it->ovl == WL_OVL_RING) /* all but the local chunk beside the collective: exposed is the rest */
      want += big + g / it->nchunks - g;
    else if (it->ovl == WL_OVL_PIPE) /* every chunk's collective, the first GEMM chunk before them */
      want += it->nchunks * big + g / it->nchunks - g;
    else
      want += big;
  }
  cr_expect(fabs(sg->time_s - want) <= 1e-9 * want, "collective-bound layer %.12g s, want %.12g", sg->time_s, want);
  cr_expect(sg->hidden_s[WL_CAT_TP] > 0, "some communication is hidden even when it dominates");
  wl_program_destroy(p);
  wl_job_release(&job);
}

/* MoE with tp > 1: the experts are TP-split, so the dispatch ends with the TP group's all-gather
 * of its k x T token copies and the combine starts with the reduce-scatter; the experts run
 * ffn / tp for the gathered copies (the TP group shares the FLOPs). */
Test(overlap, tp_split_experts_gather_their_tokens)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny_moe.cfg", (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.ep=2"}, 3);
  struct wl_program *p = wl_program_expand(&job);
  const struct wl_seg *pre = &p->seg[WL_SEG_MOE_PRE_F], *post = &p->seg[WL_SEG_MOE_POST_F];
  const struct wl_item *ag = &p->items[pre->first_item + pre->nitems - 1], *rs = &p->items[post->first_item];
  double want = 2.0 * job.model.seq_len * job.model.hidden * job.model.moe.top_k * job.plan.micro_batch;
  cr_assert(ag->coll && rs->coll, "the dispatch's segment ends, and the combine's starts, with a collective");
  cr_expect_eq(p->colls[ag->index].op, IC_OP_ALLGATHER);
  cr_expect_eq(p->colls[rs->index].op, IC_OP_REDUCESCATTER);
  cr_expect_eq(p->colls[ag->index].bytes, want, "k x T x h in bf16: %g", p->colls[ag->index].bytes);
  cr_expect_eq(p->colls[rs->index].bytes, want);
  wl_program_destroy(p);
  wl_job_release(&job);

  /* the experts' FLOPs per routed copy of a rank halve with tp 2 */
  double per_copy[2];
  for (int t = 0; t < 2; t++) {
    tw_job_load(&job, SCN "tiny_moe.cfg",
         t ? (const char *const[]){"plan.tp=2", "plan.sp=true", "plan.ep=2"} : (const char *const[]){"plan.ep=2"}, 3 - 2 * !t);
    struct npu_diag d;
    npu_diag_clear(&d);
    struct wl_program *q;
    cr_assert_eq(wl_program_create(&q, &job, &d), 0);
    double f = 0, copies = 0;
    for (int i = 0; i < q->nexperts; i++) f += q->experts[i].f_flops, copies += q->experts[i].tokens;
    per_copy[t] = f / copies * (t ? job.plan.tp : 1); /* copies of the TP group, per rank's own */
    wl_program_destroy(q);
    wl_job_release(&job);
  }
  cr_expect(fabs(per_copy[1] / per_copy[0] - 1) < 0.02, "a gathered copy costs 1 / tp of a copy at tp 1: %g vs %g FLOP",
            per_copy[1], per_copy[0]);
}

/* ------------------------------------------------------------------ data-parallel interference */

Test(overlap, a_dp_collective_under_busy_compute_costs_loss_times_its_duration)
{
  struct wl__busy b[] = {{0, 10, 0.2}};
  close_to(wl__dp_lost(b, 1, 2, 6), 0.2 * 4, "hidden in one kernel");
  struct wl__busy c[] = {{0, 3, 0.1}, {3, 5, 0}, {5, 9, 0.3}};
  close_to(wl__dp_lost(c, 3, 1, 8), 2 * 0.1 + 2 * 0 + 3 * 0.3, "across three segments");
}

Test(overlap, a_dp_collective_longer_than_its_compute_costs_only_what_the_wait_does_not_absorb)
{
  /* compute 4 beside a collective of 10: the 6 idle seconds absorb the 1 second of slowed work */
  struct wl__busy b[] = {{0, 4, 0.25}};
  close_to(wl__dp_lost(b, 1, 0, 10), 0, "absorbed by the wait");
  /* compute 8 at half its rate beside 10: 4 owed, 2 absorbed */
  struct wl__busy c[] = {{0, 8, 0.5}};
  close_to(wl__dp_lost(c, 1, 0, 10), 2, "partly absorbed");
  /* compute that ended before the collective started costs nothing, nor does an empty window */
  close_to(wl__dp_lost(c, 1, 8, 12), 0, "after the compute");
  close_to(wl__dp_lost(c, 1, 5, 5), 0, "empty window");
}

/* ------------------------------------------------------------------ overlapped EP communication */

#define MOE SCN "tiny_moe.cfg"

Test(overlap, ep_overlap_plans_the_frameworks_cannot_run_are_refused)
{
  load_fails(SCN "tiny.cfg", (const char *const[]){"plan.pp=1", "plan.ep_overlap=\"mindspeed\""}, 2, "plan.ep_overlap",
             "plan.ep > 1");
  load_fails(MOE, (const char *const[]){"plan.ep_overlap=\"megatron\""}, 1, "plan.ep_overlap", "use \"mindspeed\"");
  load_fails(MOE, (const char *const[]){"preset=dgx-h100", "plan.ep_overlap=\"mindspeed\""}, 2, "plan.ep_overlap",
             "use \"megatron\"");
  load_fails(MOE, (const char *const[]){"plan.ep_overlap=\"mindspeed\""}, 1, "plan.ep_overlap",
             "plan.overlap_grad_reduce = false");
  load_fails(MOE, (const char *const[]){"plan.ep_overlap=\"mindspeed\"", "plan.overlap_grad_reduce=false", "plan.pp=2",
             "plan.ep=2"}, 4, "plan.ep_overlap", "interleaved");
  load_fails(MOE, (const char *const[]){"plan.ep_overlap=\"mindspeed\"", "plan.overlap_grad_reduce=false", "plan.zero=3"},
             3, "plan.ep_overlap", "ZeRO-3");
  load_fails(MOE, (const char *const[]){"plan.ep_overlap=\"mindspeed\"", "plan.overlap_grad_reduce=false",
             "plan.global_batch=8"}, 3, "plan.global_batch", "1 micro-batch");
}

/* One step as a token: S segment, E<pass> experts, a<which> an all-to-all waited for at once,
 * p<which> one posted to the pair's communication stream, w<which> its wait. */
static void step_token(const struct wl_step *s, char *buf, size_t n)
{
  switch ((enum wl_step_kind)s->kind) {
  case WL_STEP_SEG: snprintf(buf, n, "S"); break;
  case WL_STEP_EXPERTS: snprintf(buf, n, "E%d", s->u.experts.pass); break;
  case WL_STEP_A2A: snprintf(buf, n, "%c%d", s->u.a2a.defer ? 'p' : 'a', s->u.a2a.which); break;
  case WL_STEP_A2A_WAIT: snprintf(buf, n, "w%d", s->u.a2a_wait.which); break;
  default: snprintf(buf, n, "?"); break;
  }
}

/* A pair of two MoE layers runs as MindSpeed's --moe-fb-overlap and Megatron's combined 1F1B
 * order them: the backward's combine^T (2) under the forward's attention, the forward's
 * dispatch (0) under the backward's experts (E1), the backward's dispatch^T (3) under the
 * forward's experts (E0), the forward's combine (1) under the backward's attention and weight
 * gradients (E2); one all-to-all on the stream at a time, each waited for before its consumer. */
Test(overlap, a_paired_moe_layer_runs_in_the_frameworks_order)
{
  struct wl_job job;
  tw_job_load(&job, MOE, (const char *const[]){"plan.ep_overlap=\"mindspeed\"", "plan.overlap_grad_reduce=false",
                                              "model.moe.dense_layers=0", "plan.global_batch=64"}, 4);
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_program *p;
  cr_assert_eq(wl_program_create(&p, &job, &d), 0, "%s", d.msg);
  const struct wl_prog_stage *st = &p->stages[0];
  int pairs = 0;
  for (size_t i = 0; i < st->nslots; i++) {
    if (!st->slots[i].slot.overlap) continue;
    pairs++;
    const struct wl_step_list *l = &st->lists[st->slots[i].list];
    char seq[4096] = "";
    size_t off = 0;
    for (int k = l->first; k < l->first + l->n; k++) {
      char t[8];
      step_token(&st->steps[k], t, sizeof t);
      off += (size_t)snprintf(seq + off, sizeof seq - off, "%s%s", off ? " " : "", t);
    }
    const char *layer = "S p2 S p0 w2 E1 p3 w0 E0 p1 w3 S S E2 w1 S";
    int n = 0;
    for (const char *q = strstr(seq, layer); q; q = strstr(q + 1, layer)) n++;
    cr_expect_eq(n, job.model.layers, "every layer of the pair in the frameworks' order: %s", seq);
    cr_expect(!strstr(seq, " a"), "no all-to-all waited for at once inside a pair: %s", seq);
  }
  cr_expect_eq(pairs, p->mb - 1, "combined 1F1B without pipeline stages: %d micro-batches, %d pairs", p->mb, pairs);
  wl_program_destroy(p);
  wl_job_release(&job);
}

static struct wl_outcome run_moe(const char *const *sets)
{
  int n = 0;
  while (sets[n]) n++;
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_outcome o;
  cr_assert_eq(wl_run_isolated(MOE, sets, n, &o, &d), 0, "%s", d.msg);
  cr_assert_eq(o.status, 0, "%s", o.message);
  return o;
}

#define MOE_SETS(ovl, bw) \
  (const char *const[]){"plan.ep_overlap=\"" ovl "\"", "plan.overlap_grad_reduce=false", "model.moe.dense_layers=0", \
                        "plan.global_batch=64", "node.link.bandwidth=" bw, NULL}

/* Fast links (the all-to-alls far shorter than the compute beside them): only the unpaired first
 * forward and last backward of the 8 micro-batches expose theirs, about 1/8 of the exposed time
 * without the overlap (skew between EP ranks aside), and the step is the same compute plus what
 * stays exposed plus what the hidden ones took from the compute beside them (HBM bandwidth). */
Test(overlap, hidden_all_to_alls_cost_only_their_interference, .timeout = 240)
{
  struct wl_outcome a = run_moe(MOE_SETS("none", "100TBps")), b = run_moe(MOE_SETS("mindspeed", "100TBps"));
  double ea = a.cat_s[WL_CAT_EP], eb = b.cat_s[WL_CAT_EP], lost = b.cat_s[WL_CAT_INTERFERE];
  cr_expect(eb > 0.75 * ea / 8 && eb < 1.25 * ea / 8, "exposed all-to-all %g s paired, %g s unpaired (1/8: %g s)", eb, ea,
            ea / 8);
  cr_expect_gt(lost, 0, "the hidden all-to-alls take HBM bandwidth from the compute beside them");
  cr_expect_eq(a.cat_s[WL_CAT_INTERFERE], 0, "nothing runs beside the unpaired all-to-alls");
  cr_expect_eq(a.hidden_s[WL_CAT_EP], 0);
  /* the pairs' all-to-alls ran beside compute (from the rank's post, waiting for the other EP
   * ranks included, to their end) */
  cr_expect_gt(b.hidden_s[WL_CAT_EP], 0, "hidden %g s, exposed %g -> %g s", b.hidden_s[WL_CAT_EP], ea, eb);
  close_to(b.step_time_s - eb - lost, a.step_time_s - ea, "the same compute either way");
}

/* Slow links (the all-to-alls far longer than the compute): the pairs hide compute under the
 * communication, never more than all of it; the exposed all-to-all time falls by at most the
 * compute. */
Test(overlap, all_to_alls_longer_than_their_compute_hide_it_at_most, .timeout = 240)
{
  struct wl_outcome a = run_moe(MOE_SETS("none", "2GBps")), b = run_moe(MOE_SETS("mindspeed", "2GBps"));
  double compute = b.cat_s[WL_CAT_GEMM] + b.cat_s[WL_CAT_ATTN] + b.cat_s[WL_CAT_VEC];
  cr_expect_lt(b.step_time_s, a.step_time_s);
  cr_expect_leq(a.step_time_s - b.step_time_s, compute, "saved %g s of %g s of compute", a.step_time_s - b.step_time_s,
                compute);
  cr_expect_geq(b.cat_s[WL_CAT_EP], a.cat_s[WL_CAT_EP] - compute);
  cr_expect_gt(a.cat_s[WL_CAT_EP], 5 * compute, "the case is communication-bound");
}
