/*
 * test_replay.c - the training replay against closed forms: one stage is the sum of its
 * segments (and of its operators' statistics); a 1F1B pipeline of uniform stages has (pp - 1) x (F + B) of bubble; data-parallel
 * gradient reduction is exposed when not overlapped; the same scenario gives the same numbers;
 * and bad plans are errors naming their keys. Each replay runs in its own process (one SimGrid
 * engine per process), by fork through wl_run_isolated, or by Criterion's own test processes.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "workloads/expand.h"
#include "workloads/isolate.h"
#include "workloads/job.h"
#include "workloads/memory.h"
#include "workloads/opstats.h"
#include "workloads/program.h"
#include "workloads/replay.h"
#include "helpers.h"

#define SCN NPUSIM_SOURCE_DIR "/tests/workloads/data/"
#define SETS(...) ((const char *const[]){__VA_ARGS__, NULL})

static int nsets(const char *const *s)
{
  int n = 0;
  while (s[n]) n++;
  return n;
}

/* Load and replay in this (Criterion test) process. */
static void replay(struct wl_job *job, struct wl_result *res, const char *const *sets)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  char msg[1024];
  int rc = wl_job_load(job, SCN "tiny.cfg", sets, nsets(sets), &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  rc = wl_replay(job, NULL, res, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
}

static double sum_cats(const double *c)
{
  double s = 0;
  for (int i = 0; i < WL_CAT_COUNT; i++) s += c[i];
  return s;
}

/* A multi-token prediction module (model.mtp_layers = 1) on one stage: per micro-batch its own
 * work (the next token's embedding, two norms, the 2 h -> h projection), one more layer and the
 * shared head once more, forward and backward, after the main head: the step is the sum of the
 * segments as in one_stage_is_the_sum_of_its_segments, with L + 1 layers and the head twice. */
Test(replay, an_mtp_module_adds_its_segments_a_layer_and_the_head)
{
  struct wl_job j;
  struct wl_result r;
  replay(&j, &r, SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=0s", "model.mtp_layers=1"));
  int m = j.microbatches, L = j.model.layers;
  const struct wl_program *pg = r.program;
  const struct wl_seg *sg = pg->seg;
  double mtp = sg[WL_SEG_MTP_F].time_s + sg[WL_SEG_MTP_BI].time_s + sg[WL_SEG_MTP_W].time_s;
  cr_assert(mtp > 0 && sg[WL_SEG_MTP_F].nitems >= 4, "MTP segments %g s, %d forward items", mtp, sg[WL_SEG_MTP_F].nitems);
  double layer = sg[WL_SEG_LAYER_F].time_s + sg[WL_SEG_LAYER_BI].time_s + sg[WL_SEG_LAYER_W].time_s;
  double head = sg[WL_SEG_HEAD_F].time_s + sg[WL_SEG_HEAD_BI].time_s + sg[WL_SEG_HEAD_W].time_s;
  double want = m * (sg[WL_SEG_EMBED_F].time_s + sg[WL_SEG_EMBED_B].time_s + (L + 1) * layer + 2 * head + mtp) +
                pg->optim[0].time_s;
  double dp = r.cat_s[WL_CAT_DP], in = r.cat_s[WL_CAT_INTERFERE];
  cr_expect_float_eq(r.step_s, want + dp + in, 1e-9 * want, "step %.9g s, segments %.9g s + dp %.9g s + interference %.9g s",
                     r.step_s, want, dp, in);
  /* the module's layer, projection (2 h x h) and three norms on the stage, the head shared */
  double h = j.model.hidden;
  tw_close(pg->stage_params[0], wl_model_params(&j.model) + wl_model_mtp_params(&j.model), 1e-12, "stage parameters");
  tw_close(wl_model_mtp_params(&j.model), wl_model_layer_params(&j.model, 0) + 2 * h * h + 3 * h, 1e-12, "MTP parameters");
  wl_result_release(&r);
  wl_job_release(&j);
}

/* A one-stage step of m micro-batches of L dense layers as its segments add up: per micro-batch
 * the embedding, the layers and the head forward and backward, then the optimizer. */
static double one_stage_segments_s(const struct wl_program *pg, int m, int L)
{
  const struct wl_seg *sg = pg->seg;
  return m * (sg[WL_SEG_EMBED_F].time_s + sg[WL_SEG_EMBED_B].time_s +
              L * (sg[WL_SEG_LAYER_F].time_s + sg[WL_SEG_LAYER_BI].time_s + sg[WL_SEG_LAYER_W].time_s) +
              sg[WL_SEG_HEAD_F].time_s + sg[WL_SEG_HEAD_BI].time_s + sg[WL_SEG_HEAD_W].time_s) +
         pg->optim[0].time_s;
}

/* Sliding-window layers among global ones (model.window 256 and global_every 2 on tiny.cfg's 8
 * layers of 1024 tokens): the local layers' segments apart, their FlashAttention calls with the
 * window and cheaper; the step the sum of 4 local and 4 global layers' segments per micro-batch. */
Test(replay, local_and_global_layers_run_their_own_segments)
{
  struct wl_job j;
  struct wl_result r;
  replay(&j, &r, SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=0s", "model.window=256",
                      "model.global_every=2"));
  int m = j.microbatches;
  const struct wl_program *pg = r.program;
  const struct wl_seg *g = pg->seg, *l = pg->seg + WL_SEG_KINDS;
  double glob = g[WL_SEG_LAYER_F].time_s + g[WL_SEG_LAYER_BI].time_s + g[WL_SEG_LAYER_W].time_s;
  double loc = l[WL_SEG_LAYER_F].time_s + l[WL_SEG_LAYER_BI].time_s + l[WL_SEG_LAYER_W].time_s;
  cr_expect(loc > 0 && loc < glob, "a local layer %g s, a global one %g s", loc, glob);
  cr_expect_float_eq(l[WL_SEG_LAYER_W].time_s, g[WL_SEG_LAYER_W].time_s, 1e-12, "weight gradients alike");
  int windowed = 0;
  for (int i = l[WL_SEG_LAYER_F].first_item; i < l[WL_SEG_LAYER_F].first_item + l[WL_SEG_LAYER_F].nitems; i++) {
    char label[512];
    if (pg->items[i].coll) continue;
    wl_kernel_label(&pg->kernels[pg->items[i].index], label, sizeof label);
    windowed += strstr(label, "flash_attention") && strstr(label, "window=256");
  }
  cr_expect_eq(windowed, 1, "the local layer's forward attends through the window");
  double want = m * (g[WL_SEG_EMBED_F].time_s + g[WL_SEG_EMBED_B].time_s + 4 * glob + 4 * loc + g[WL_SEG_HEAD_F].time_s +
                     g[WL_SEG_HEAD_BI].time_s + g[WL_SEG_HEAD_W].time_s) +
                pg->optim[0].time_s;
  double dp = r.cat_s[WL_CAT_DP], in = r.cat_s[WL_CAT_INTERFERE];
  cr_expect_float_eq(r.step_s, want + dp + in, 1e-9 * want, "step %.9g s, segments %.9g s + dp %.9g + interference %.9g",
                     r.step_s, want, dp, in);
  wl_result_release(&r);
  wl_job_release(&j);
}

/* Stages of 6 and 2 of tiny.cfg's 8 layers: the bottleneck line names the imbalance, the first
 * stage computing more of the step than the second. */
Test(replay, uneven_stages_are_named_in_the_bottleneck)
{
  struct wl_outcome o;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", SETS("plan.pp=2", "plan.first_stage_layers=6", "plan.global_batch=16"), 3,
                               &o, &d), 0);
  cr_assert_eq(o.status, 0, "%s", o.message);
  cr_expect(strstr(o.bottleneck, "imbalance: stage 0 computes") && strstr(o.bottleneck, ", stage 1 "), "bottleneck: %s",
            o.bottleneck);
}

Test(replay, one_stage_is_the_sum_of_its_segments)
{
  struct wl_job j;
  struct wl_result r;
  replay(&j, &r, SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=0s"));
  int m = j.microbatches, L = j.model.layers;
  const struct wl_program *pg = r.program;
  double want = one_stage_segments_s(pg, m, L);
  /* plus the gradient reduction still running when the backward ends (dp 8) and the compute
   * the buckets beside the backward took (HBM: interference), nothing else */
  double dp = r.cat_s[WL_CAT_DP], in = r.cat_s[WL_CAT_INTERFERE];
  cr_expect_float_eq(r.step_s, want + dp + in, 1e-9 * want, "step %.9g s, segments %.9g s + dp %.9g s + interference %.9g s",
                     r.step_s, want, dp, in);
  cr_expect(in >= 0 && in < 0.05 * want, "interference %g of %g", in, want);
  cr_expect(dp >= 0 && dp < 0.25 * want, "exposed dp %g of %g", dp, want);
  cr_expect_float_eq(sum_cats(r.stages[0].cat_s), r.step_s, 1e-9 * r.step_s);
  cr_expect_eq(r.cat_s[WL_CAT_BUBBLE], 0);
  /* the bottleneck line names the largest category, then the next two */
  int top = 0, second = -1;
  for (int c = 1; c < WL_CAT_COUNT; c++)
    if (r.cat_s[c] > r.cat_s[top]) top = c;
  for (int c = 0; c < WL_CAT_COUNT; c++)
    if (c != top && (second < 0 || r.cat_s[c] > r.cat_s[second])) second = c;
  char want2[64];
  snprintf(want2, sizeof want2, ", then %s ", wl_cat_name((enum wl_cat)second));
  cr_expect(!strncmp(r.bottleneck, wl_cat_name((enum wl_cat)top), strlen(wl_cat_name((enum wl_cat)top))) &&
                strstr(r.bottleneck, want2),
            "bottleneck: %s", r.bottleneck);
  /* the per-operator statistics (msprof's op_statistic): every kernel of the stage at its
   * costed time, so they add up to the segments too; FlashAttention once forward and once
   * backward per layer and micro-batch; heaviest first; the CSV a row per operator */
  struct wl_op_stat *st;
  int n = wl_op_stats(pg, 0, &st);
  double total = 0;
  long flash = 0, adamw = 0;
  for (int i = 0; i < n; i++) {
    total += st[i].total_s;
    if (!strcmp(st[i].op, "flash_attention")) flash = st[i].calls;
    if (!strcmp(st[i].op, "adamw")) adamw = st[i].calls;
    cr_expect(st[i].min_s <= st[i].max_s && st[i].total_s >= st[i].calls * st[i].min_s * (1 - 1e-12), "%s", st[i].op);
    if (i) cr_expect_geq(st[i - 1].total_s, st[i].total_s, "heaviest first: %s before %s", st[i - 1].op, st[i].op);
  }
  cr_expect_float_eq(total, want, 1e-9 * want, "operators %.9g s, segments %.9g s", total, want);
  cr_expect_eq(flash, 2L * m * L);
  cr_expect_eq(adamw, 1);
  struct npu_buf csv = {0};
  wl_op_stats_csv(&r, &csv);
  int lines = 0;
  for (const char *c = npu_buf_str(&csv); *c; c++) lines += *c == '\n';
  cr_expect_eq(lines, n + 1, "a header and %d rows: %d lines", n, lines);
  npu_buf_release(&csv);
  free(st);
  wl_result_release(&r);
  wl_job_release(&j);
}

/* The host dispatches every kernel and communication call in turn (node.host.dispatch each)
 * while the stream runs them. When a dispatch takes far longer than any kernel the stream waits
 * for the host, and the step is the host's: launches x d (closed form, within the last kernels'
 * run); the wait is reported as host time, and the breakdown still adds up to the step. */
Test(replay, a_slow_host_makes_the_step_its_dispatches)
{
  struct wl_job j;
  struct wl_result r;
  replay(&j, &r, SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=1ms"));
  double launches = r.stages[0].launches, d = 1e-3;
  cr_assert_gt(launches, 100, "%g launches", launches);
  cr_expect_geq(r.step_s, launches * d, "step %g s, host %g s", r.step_s, launches * d);
  cr_expect_lt(r.step_s, launches * d * 1.02, "step %g s, host %g s", r.step_s, launches * d);
  cr_expect_gt(r.cat_s[WL_CAT_HOST], 0.9 * r.step_s, "host wait %g of %g s", r.cat_s[WL_CAT_HOST], r.step_s);
  cr_expect(strstr(r.bottleneck, "host-bound: stage 0 waits") != NULL, "bottleneck: %s", r.bottleneck);
  cr_expect_float_eq(sum_cats(r.stages[0].cat_s), r.step_s, 1e-9 * r.step_s);
  wl_result_release(&r);
  wl_job_release(&j);
}

/* A host much faster than the kernels stays ahead: the step is the stream's alone (to the first
 * dispatch), and replaying from a captured graph charges graph_dispatch instead of dispatch. */
static struct wl_outcome isolated(const char *const *sets)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_outcome o;
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", sets, nsets(sets), &o, &d), 0, "%s", d.msg);
  cr_assert_eq(o.status, 0, "%s", o.message);
  return o;
}

Test(replay, a_fast_host_or_a_graph_leaves_the_step_to_the_stream)
{
  /* each in a child: one engine per process */
  struct wl_outcome r0 = isolated(SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=0s"));
  struct wl_outcome r1 = isolated(SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=1ns"));
  struct wl_outcome r2 = isolated(SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=1ms",
                                       "node.host.graph_dispatch=0s", "plan.graph=true"));
  cr_expect_float_eq(r1.step_time_s, r0.step_time_s, 1e-6 * r0.step_time_s + 2e-9, "1 ns dispatch: %.9g s, none: %.9g s",
                     r1.step_time_s, r0.step_time_s);
  cr_expect_float_eq(r2.step_time_s, r0.step_time_s, 1e-12 * r0.step_time_s, "graph: %.9g s, none: %.9g s",
                     r2.step_time_s, r0.step_time_s);
  cr_expect_eq(r0.cat_s[WL_CAT_HOST], 0);
}

Test(replay, one_f_one_b_bubble_is_pp_minus_one_slots)
{
  struct wl_job j;
  struct wl_result r;
  /* 4 stages (dp 2, 8 micro-batches), a small vocabulary so that the stages are nearly equal:
   * stage 0 waits (pp - 1) x (F + B) of one stage, plus what the last stage's head adds to
   * each of its slots (the steady state runs at the pace of the slowest stage); links so fast
   * that the transfers take only their latency */
  replay(&j, &r, SETS("plan.pp=4", "plan.global_batch=16", "model.vocab=1024", "node.link.bandwidth=100TBps"));
  int L = j.model.layers / 4, m = j.microbatches;
  const struct wl_program *pg = r.program;
  double F = L * pg->seg[WL_SEG_LAYER_F].time_s, B = L * (pg->seg[WL_SEG_LAYER_BI].time_s + pg->seg[WL_SEG_LAYER_W].time_s);
  double want = 3 * (F + B), head = pg->seg[WL_SEG_HEAD_F].time_s + pg->seg[WL_SEG_HEAD_BI].time_s + pg->seg[WL_SEG_HEAD_W].time_s;
  double got = r.stages[0].cat_s[WL_CAT_BUBBLE] + r.stages[0].cat_s[WL_CAT_PP];
  cr_expect(got >= 0.97 * want && got <= 1.05 * want + m * head, "stage 0 waits %.6g s, closed form %.6g s (+ %d x %.3g s)",
            got, want, m, head);
  for (int s = 0; s < 4; s++)
    cr_expect_float_eq(sum_cats(r.stages[s].cat_s), r.step_s, 1e-9 * r.step_s, "stage %d breakdown %.9g of %.9g", s, sum_cats(r.stages[s].cat_s), r.step_s);
  wl_result_release(&r);
  wl_job_release(&j);
}

Test(replay, unoverlapped_gradient_reduction_is_exposed)
{
  struct wl_outcome a, b;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", SETS("plan.pp=1", "plan.global_batch=8", "plan.overlap_grad_reduce=true"),
                               3, &a, &d), 0);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", SETS("plan.pp=1", "plan.global_batch=8", "plan.overlap_grad_reduce=false"),
                               3, &b, &d), 0);
  cr_assert_eq(a.status, 0, "%s", a.message);
  cr_assert_eq(b.status, 0, "%s", b.message);
  cr_expect_gt(b.cat_s[WL_CAT_DP], a.cat_s[WL_CAT_DP], "exposed dp: overlapped %g s, not %g s", a.cat_s[WL_CAT_DP],
               b.cat_s[WL_CAT_DP]);
  cr_expect_gt(b.step_time_s, a.step_time_s);
  /* hidden: none when the reduction is waited for from its post to its end; overlapped, the
   * buckets' span beside the backward, which with what is exposed covers at least the reduction
   * done at once (within 10%: the buckets' latencies, their shared links) */
  cr_expect(fabs(b.hidden_s[WL_CAT_DP]) < 1e-9 * b.step_time_s, "not overlapped: %g s hidden", b.hidden_s[WL_CAT_DP]);
  cr_expect_gt(a.hidden_s[WL_CAT_DP], 0);
  cr_expect_geq(a.hidden_s[WL_CAT_DP] + a.cat_s[WL_CAT_DP], 0.9 * b.cat_s[WL_CAT_DP], "hidden %g + exposed %g s, at once %g s",
                a.hidden_s[WL_CAT_DP], a.cat_s[WL_CAT_DP], b.cat_s[WL_CAT_DP]);
}

Test(replay, same_inputs_same_numbers)
{
  struct wl_outcome a, b;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", SETS("plan.pp=2", "plan.global_batch=8"), 2, &a, &d), 0);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", SETS("plan.pp=2", "plan.global_batch=8"), 2, &b, &d), 0);
  cr_assert_eq(a.status, 0, "%s", a.message);
  cr_expect(a.step_time_s == b.step_time_s && a.mfu == b.mfu && a.memory_peak_bytes == b.memory_peak_bytes);
  cr_expect_str_eq(a.bottleneck, b.bottleneck);
}

Test(replay, more_data_parallel_ranks_keep_the_step_and_raise_throughput)
{
  /* weak scaling: two servers instead of one double dp (4 -> 8) and the global batch with it,
   * so every pipeline runs the same micro-batches: each device's compute is the same to the
   * rounding, and the throughput grows by about 2x (the step changes only by the gradient
   * reduction: dp 8 fills a server's HCCS mesh, where dp 4 used 3 of its 7 links). Without ZeRO,
   * which would also halve each rank's optimizer shard. */
  struct wl_outcome a, b;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", SETS("plan.pp=2", "plan.zero=0", "plan.global_batch=8"), 3, &a, &d), 0);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", SETS("plan.pp=2", "plan.zero=0", "plan.global_batch=16", "cluster.nodes=2"),
                               4, &b, &d),
               0);
  cr_assert_eq(a.status, 0, "%s", a.message);
  cr_assert_eq(b.status, 0, "%s", b.message);
  cr_assert_eq(b.devices, 2 * a.devices);
  for (int c = WL_CAT_GEMM; c <= WL_CAT_OPTIM; c++)
    cr_expect(fabs(b.cat_s[c] - a.cat_s[c]) <= 1e-9 * a.cat_s[c], "%s: %g s on 8, %g s on 16",
              wl_cat_name((enum wl_cat)c), a.cat_s[c], b.cat_s[c]);
  double compute = a.cat_s[WL_CAT_GEMM] + a.cat_s[WL_CAT_ATTN] + a.cat_s[WL_CAT_VEC] + a.cat_s[WL_CAT_OPTIM];
  cr_expect(fabs(b.step_time_s - a.step_time_s) <= a.step_time_s - compute, "the step differs by communication only");
  cr_expect(b.tokens_per_s > 1.5 * a.tokens_per_s, "throughput %g on 8, %g on 16", a.tokens_per_s, b.tokens_per_s);
}

static void expect_error_in(const char *file, const char *const *sets, const char *key)
{
  struct wl_job j;
  struct npu_diag d;
  npu_diag_clear(&d);
  int rc = wl_job_load(&j, file, sets, nsets(sets), &d);
  char msg[1024];
  npu_diag_format(&d, msg, sizeof msg);
  cr_expect_neq(rc, 0, "no error for %s", sets[0]);
  cr_expect(strstr(msg, key) != NULL, "'%s' does not name %s", msg, key);
  wl_job_release(&j);
}

static void expect_error(const char *const *sets, const char *key)
{
  expect_error_in(SCN "tiny.cfg", sets, key);
}

Test(replay, bad_plans_name_their_keys)
{
  expect_error(SETS("plan.tp=3"), "plan.");
  expect_error(SETS("plan.pp=3"), "plan.");
  expect_error(SETS("plan.tp=2", "plan.pp=2", "plan.dp=4"), "plan.dp");
  expect_error(SETS("plan.global_batch=3"), "plan.global_batch");
  expect_error(SETS("plan.vpp=2"), "plan.vpp");
  expect_error(SETS("plan.order=tp-dp"), "plan.order");
  expect_error(SETS("model.preset=no-such-model"), "no-such-model");
  expect_error(SETS("plan.tpp=2"), "plan.tpp");
  expect_error(SETS("plan.zero_shard=3"), "plan.zero_shard");
  expect_error(SETS("plan.zero_shard=8"), "plan.zero_shard"); /* pp 2: dp x cp is 4 */
  expect_error(SETS("plan.zero=0", "plan.pp=1", "plan.zero_shard=4"), "plan.zero_shard");
  expect_error(SETS("plan.grad_reduce_dtype=fp8"), "plan.grad_reduce_dtype");
  expect_error(SETS("model.doc_len=128", "plan.cp=2", "plan.pp=1"), "model.doc_len"); /* 64-token blocks */
  expect_error(SETS("plan.fusion=jit"), "plan.fusion");
  /* activation offload: no host link given (the 910B server preset), all of a chunk's layers */
  expect_error(SETS("plan.offload_layers=2"), "node.host.bandwidth");
  expect_error(SETS("plan.offload_layers=4", "node.host.bandwidth=50GBps"), "plan.offload_layers"); /* pp 2: 4 a chunk */
}

/* Activation offload (plan.offload_layers = N) against its closed form on one stage. Each copy
 * takes T = bytes / node.host.bandwidth, the layer's activations (every layer of tiny.cfg keeps
 * the same); with T longer than a layer's forward f and backward b, a micro-batch's forward waits
 * N T - N f (the copy of layer l runs under layer l + 1's forward, and the next copy starts when
 * it is done) and its backward N T - N b (the copy back of layer l runs under layer l + 1's
 * backward): M (2 N T - N f - N b) of offload time over M micro-batches, the rest of the copies
 * hidden beside the compute, and the step its segments and that wait (and the gradient
 * reduction's exposed end). With a link too fast to matter the
 * step is the step without offload. */
Test(replay, activation_offload_waits_where_the_copies_are_late)
{
  /* the step without offload in a child (one engine per process) */
  struct wl_outcome r0 = isolated(SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=0s"));
  struct wl_job j;
  struct wl_result r;
  replay(&j, &r, SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=0s", "node.host.bandwidth=1GBps",
                      "plan.offload_layers=3"));
  int m = j.microbatches, n = 3;
  const struct wl_seg *sg = r.program->seg;
  double f = sg[WL_SEG_LAYER_F].time_s, b = sg[WL_SEG_LAYER_BI].time_s + sg[WL_SEG_LAYER_W].time_s;
  double T = wl_memory_layer_activations(&j.model, &j.plan, 0) / 1e9;
  cr_assert_gt(T, b, "the copy (%g s) outlasts a layer's backward (%g s)", T, b);
  double want = m * (2 * n * T - n * f - n * b);
  cr_expect_float_eq(r.cat_s[WL_CAT_OFFLOAD], want, 1e-9 * want, "offload %.9g s, closed form %.9g s",
                     r.cat_s[WL_CAT_OFFLOAD], want);
  cr_expect_float_eq(r.hidden_s[WL_CAT_OFFLOAD], m * (n * f + n * b), 1e-9 * want, "hidden %.9g s",
                     r.hidden_s[WL_CAT_OFFLOAD]);
  /* the step: its segments, the offload waits, and what the gradient reduction adds */
  double seg = one_stage_segments_s(r.program, m, j.model.layers), dp = r.cat_s[WL_CAT_DP], in = r.cat_s[WL_CAT_INTERFERE];
  cr_expect_float_eq(r.step_s, seg + want + dp + in, 1e-9 * r.step_s, "step %.9g s, segments %.9g s + offload %.9g s",
                     r.step_s, seg, want);
  cr_expect_gt(r.step_s, r0.step_time_s + 0.9 * want, "step %.9g s, without offload %.9g s", r.step_s, r0.step_time_s);
  cr_expect_float_eq(sum_cats(r.stages[0].cat_s), r.step_s, 1e-9 * r.step_s);
  cr_expect_eq(r0.cat_s[WL_CAT_OFFLOAD], 0);
  wl_result_release(&r);
  wl_job_release(&j);
}

Test(replay, activation_offload_over_a_fast_link_costs_nothing)
{
  struct wl_outcome r0 = isolated(SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=0s"));
  struct wl_outcome r = isolated(SETS("plan.pp=1", "plan.global_batch=16", "node.host.dispatch=0s",
                                      "node.host.bandwidth=1PBps", "plan.offload_layers=7"));
  cr_expect_float_eq(r.step_time_s, r0.step_time_s, 1e-9 * r0.step_time_s, "offloaded %.9g s, not %.9g s",
                     r.step_time_s, r0.step_time_s);
  cr_expect_lt(r.cat_s[WL_CAT_OFFLOAD], 1e-9 * r.step_time_s);
  cr_expect_lt(r.memory_activations_bytes, r0.memory_activations_bytes);
}

Test(replay, zero3_gathers_parameters_layer_by_layer)
{
  struct wl_outcome z1, z3;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", SETS("plan.zero=1", "plan.pp=2"), 2, &z1, &d), 0);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", SETS("plan.zero=3", "plan.pp=2"), 2, &z3, &d), 0);
  cr_assert_eq(z1.status, 0, "%s", z1.message);
  cr_assert_eq(z3.status, 0, "%s", z3.message);
  /* per layer and micro-batch an all-gather before the forward and the backward: more exposed
   * data-parallel time and a longer step, less memory */
  cr_expect_gt(z3.cat_s[WL_CAT_DP], z1.cat_s[WL_CAT_DP]);
  cr_expect_gt(z3.step_time_s, z1.step_time_s);
  cr_expect_lt(z3.memory_peak_bytes, z1.memory_peak_bytes);
  double sum = 0;
  for (int c = 0; c < WL_CAT_COUNT; c++) sum += z3.cat_s[c];
  cr_expect_float_eq(sum, z3.step_time_s, 1e-9 * z3.step_time_s);
}

/* Hybrid sharding (plan.zero_shard): on two servers with a slow NIC, ZeRO-3's per-layer gathers
 * stay in the server with shards of 8 and cross it with full sharding over 16, so less of the
 * step waits for data-parallel communication (the shards' all-reduce between the servers
 * remains); a shard of dp x cp is full sharding, to the bit. */
Test(replay, hybrid_sharding_keeps_parameter_gathers_in_the_server)
{
  const char *base[] = {"cluster.nodes=2", "plan.pp=1", "plan.zero=3", "plan.global_batch=32",
                        "cluster.scaleout.nic_bandwidth=10Gbps"};
  const char *shard[] = {"plan.zero_shard=0", "plan.zero_shard=16", "plan.zero_shard=8"};
  struct wl_outcome o[3];
  struct npu_diag d;
  npu_diag_clear(&d);
  for (int i = 0; i < 3; i++) {
    const char *sets[] = {base[0], base[1], base[2], base[3], base[4], shard[i], NULL};
    cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", sets, 6, &o[i], &d), 0);
    cr_assert_eq(o[i].status, 0, "%s: %s", shard[i], o[i].message);
  }
  cr_expect_eq(o[1].step_time_s, o[0].step_time_s, "zero_shard = dp x cp: %.17g s, default %.17g s",
               o[1].step_time_s, o[0].step_time_s);
  cr_expect_eq(o[1].memory_peak_bytes, o[0].memory_peak_bytes);
  cr_expect_lt(o[2].cat_s[WL_CAT_DP], o[0].cat_s[WL_CAT_DP], "exposed DP: shards of 8 %g s, of 16 %g s",
               o[2].cat_s[WL_CAT_DP], o[0].cat_s[WL_CAT_DP]);
  cr_expect_lt(o[2].step_time_s, o[0].step_time_s);
  cr_expect_gt(o[2].memory_peak_bytes, o[0].memory_peak_bytes, "shards twice as large");
  double sum = 0;
  for (int c = 0; c < WL_CAT_COUNT; c++) sum += o[2].cat_s[c];
  cr_expect_float_eq(sum, o[2].step_time_s, 1e-9 * o[2].step_time_s);
}

/*
 * The replicas' all-reduce after the reduce-scatter, in closed form: ZeRO-1 with shards of 8 on
 * two servers, gradients reduced after the backward (not overlapped). The gradients (fp32, 4 P
 * bytes for P parameters) are reduce-scattered in the server, then each rank all-reduces its
 * shard, 4 P / 8 bytes, with its one counterpart in the other server: a ring of two sends
 * 4 P / 8 bytes through the NIC. Doubling the NIC's bandwidth saves half that time; bf16
 * reduction (plan.grad_reduce_dtype) halves the bytes of both phases.
 */
Test(replay, hybrid_sharding_all_reduces_the_shards_between_servers)
{
  const char *base[] = {"cluster.nodes=2", "plan.pp=1", "plan.zero=1", "plan.zero_shard=8",
                        "plan.overlap_grad_reduce=false", "plan.global_batch=16"};
  const char *var[][2] = {{"cluster.scaleout.nic_bandwidth=1Gbps", "plan.grad_reduce_dtype=fp32"},
                          {"cluster.scaleout.nic_bandwidth=2Gbps", "plan.grad_reduce_dtype=fp32"},
                          {"cluster.scaleout.nic_bandwidth=1Gbps", "plan.grad_reduce_dtype=bf16"}};
  struct wl_outcome o[3];
  struct npu_diag d;
  npu_diag_clear(&d);
  for (int i = 0; i < 3; i++) {
    const char *sets[] = {base[0], base[1], base[2], base[3], base[4], base[5], var[i][0], var[i][1], NULL};
    cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", sets, 8, &o[i], &d), 0);
    cr_assert_eq(o[i].status, 0, "%s: %s", var[i][0], o[i].message);
  }
  struct wl_job j;
  tw_job_load(&j, SCN "tiny.cfg", base, 6);
  double P = wl_model_params(&j.model), eff = j.sys.cluster.scaleout.efficiency.value;
  wl_job_release(&j);
  double ar_2g = 4 * P / 8 / (2e9 / 8 * eff); /* the all-reduce at 2 Gb/s; at 1 Gb/s twice */
  tw_close(o[0].cat_s[WL_CAT_DP] - o[1].cat_s[WL_CAT_DP], ar_2g, 0.03, "DP time saved by a NIC twice as fast");
  cr_expect_gt(o[0].cat_s[WL_CAT_DP], 2 * ar_2g, "the all-reduce after the reduce-scatter is waited for");
  tw_close(o[2].cat_s[WL_CAT_DP], 0.5 * o[0].cat_s[WL_CAT_DP], 0.05, "bf16 reduction");
}

/* plan.ep_dispatch = node_limited (DeepEP's internode kernels): on two DGX H100 nodes with EP 16
 * and each token routed to one node (two groups, top_groups 1) with its 2 copies, a token bound
 * for the other node crosses the NICs once instead of twice, and the NIC-bound all-to-alls take
 * about half the time (0.42 to 0.58: their scale-up forwarding and fixed costs). Refused without
 * group-limited routing and with flows. */
Test(replay, node_limited_dispatch_crosses_the_network_once_per_token_and_node)
{
  const char *base[] = {"preset=dgx-h100", "cluster.nodes=2", "model.moe.experts=16", "model.moe.top_k=2",
                        "model.moe.ffn=704", "model.moe.dense_layers=1", "model.moe.groups=2", "model.moe.top_groups=1",
                        "plan.ep=16", "plan.pp=1", "run.network=\"formula\"", "plan.global_batch=32"};
  const char *mode[] = {"plan.ep_dispatch=\"direct\"", "plan.ep_dispatch=\"node_limited\""};
  struct wl_outcome o[2];
  struct npu_diag d;
  npu_diag_clear(&d);
  for (int i = 0; i < 2; i++) {
    const char *sets[14];
    for (int k = 0; k < 12; k++) sets[k] = base[k];
    sets[12] = mode[i], sets[13] = NULL;
    cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", sets, 13, &o[i], &d), 0);
    cr_assert_eq(o[i].status, 0, "%s: %s", mode[i], o[i].message);
  }
  double r = o[1].cat_s[WL_CAT_EP] / o[0].cat_s[WL_CAT_EP];
  cr_expect(r > 0.42 && r < 0.58, "node-limited / direct all-to-all time %.3f (%g / %g s)", r, o[1].cat_s[WL_CAT_EP],
            o[0].cat_s[WL_CAT_EP]);
  const char *nogroups[] = {"model.moe.experts=16", "model.moe.top_k=2", "model.moe.ffn=704", "plan.ep=8",
                            "plan.pp=1", "run.network=\"formula\"", "plan.ep_dispatch=\"node_limited\""};
  struct wl_job job;
  cr_expect_eq(wl_job_load(&job, SCN "tiny.cfg", nogroups, 7, &d), NPU_ECONFIG);
  cr_expect_str_eq(d.key, "plan.ep_dispatch", "%s", d.msg);
  wl_job_release(&job);
  npu_diag_clear(&d);
  const char *flows[] = {"model.moe.experts=16", "model.moe.top_k=2", "model.moe.ffn=704", "model.moe.groups=2",
                         "model.moe.top_groups=1", "plan.ep=8", "plan.pp=1", "plan.ep_dispatch=\"node_limited\""};
  cr_expect_eq(wl_job_load(&job, SCN "tiny.cfg", flows, 8, &d), NPU_ECONFIG);
  cr_expect_str_eq(d.key, "plan.ep_dispatch", "%s", d.msg);
  wl_job_release(&job);
}

/* plan.fp8_dispatch (DeepSeek-V3's low-precision communication): the dispatch and the combine's
 * gradient carry 1 + 4/128 bytes per element instead of 2, the combine and the dispatch's
 * gradient 2. With the all-to-alls in closed form and waited for, an MoE step on a DGX H100
 * waits for them (1.0156 + 2) / 4 = 0.754 of the time less their fixed latencies: between 0.70
 * and 0.80 of bf16's. Refused without fp8 training. */
Test(replay, fp8_dispatch_sends_the_dispatch_in_fp8)
{
  const char *base[] = {"model.moe.experts=16", "model.moe.top_k=2", "model.moe.ffn=704", "model.moe.dense_layers=1",
                        "plan.ep=8", "plan.tp=1", "plan.sp=false", "plan.global_batch=16", "run.network=formula"};
  const char *var[] = {"plan.fp8_dispatch=false", "plan.fp8_dispatch=true"};
  struct wl_outcome o[2];
  struct npu_diag d;
  npu_diag_clear(&d);
  for (int i = 0; i < 2; i++) {
    const char *sets[] = {base[0], base[1], base[2], base[3], base[4], base[5], base[6], base[7], base[8], var[i], NULL};
    cr_assert_eq(wl_run_isolated(SCN "tiny_fp8.cfg", sets, 10, &o[i], &d), 0);
    cr_assert_eq(o[i].status, 0, "%s: %s", var[i], o[i].message);
  }
  double ratio = o[1].cat_s[WL_CAT_EP] / o[0].cat_s[WL_CAT_EP];
  cr_expect(o[0].cat_s[WL_CAT_EP] > 0 && ratio > 0.70 && ratio < 0.80, "EP time fp8 %g s, bf16 %g s (ratio %g)",
            o[1].cat_s[WL_CAT_EP], o[0].cat_s[WL_CAT_EP], ratio);
  expect_error_in(SCN "tiny_moe.cfg", SETS("plan.fp8_dispatch=true"), "plan.fp8_dispatch");
}

#define SCN_MOE NPUSIM_SOURCE_DIR "/tests/workloads/data/tiny_moe.cfg"

Test(replay, skewed_routing_makes_hot_experts_and_stragglers)
{
  struct wl_outcome u, z, c;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_run_isolated(SCN_MOE, SETS("routing.distribution=uniform"), 1, &u, &d), 0);
  cr_assert_eq(wl_run_isolated(SCN_MOE, SETS("routing.distribution=zipf", "routing.skew=1.5"), 2, &z, &d), 0);
  cr_assert_eq(wl_run_isolated(SCN_MOE, SETS("routing.distribution=zipf", "routing.skew=1.5",
                                             "model.moe.capacity_factor=1.0"), 3, &c, &d), 0);
  cr_assert_eq(u.status, 0, "%s", u.message);
  cr_assert_eq(z.status, 0, "%s", z.message);
  cr_assert_eq(c.status, 0, "%s", c.message);
  cr_expect_gt(z.cat_s[WL_CAT_EP], u.cat_s[WL_CAT_EP], "exposed all-to-all: uniform %g s, skewed %g s",
               u.cat_s[WL_CAT_EP], z.cat_s[WL_CAT_EP]);
  cr_expect_gt(z.step_time_s, u.step_time_s);
  /* a capacity of 1.0 drops the hot experts' excess and brings the step back down */
  cr_expect_lt(c.step_time_s, z.step_time_s);
  double sum = 0;
  for (int i = 0; i < WL_CAT_COUNT; i++) sum += z.cat_s[i];
  cr_expect_float_eq(sum, z.step_time_s, 1e-9 * z.step_time_s);
}

Test(replay, zero_bubble_and_dualpipe_shrink_the_bubble)
{
  const char *base[] = {"plan.pp=4", "plan.global_batch=16", "model.vocab=1024", "node.link.bandwidth=100TBps"};
  struct wl_outcome o[3];
  const char *sched[] = {"plan.schedule=1f1b", "plan.schedule=zb_h1", "plan.schedule=dualpipe"};
  struct npu_diag d;
  npu_diag_clear(&d);
  for (int i = 0; i < 3; i++) {
    const char *sets[] = {base[0], base[1], base[2], base[3], sched[i], NULL};
    cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", sets, 5, &o[i], &d), 0);
    cr_assert_eq(o[i].status, 0, "%s: %s", sched[i], o[i].message);
  }
  cr_expect_lt(o[1].bubble_fraction, o[0].bubble_fraction, "zb_h1 %g, 1f1b %g", o[1].bubble_fraction,
               o[0].bubble_fraction);
  cr_expect_lt(o[1].step_time_s, o[0].step_time_s);
  cr_expect_lt(o[2].step_time_s, o[0].step_time_s, "dualpipe %g s, 1f1b %g s", o[2].step_time_s, o[0].step_time_s);
}

Test(replay, context_parallelism_exchanges_keys_and_values)
{
  /* cp 2: each layer's forward all-gathers K and V of the whole sequence (2 x b x s x kv_heads x
   * head_dim x 2 bytes, the ring's bytes per rank) under its attention kernel, the backward
   * reduce-scatters dK and dV alike; the step splits into its categories exactly */
  const char *const sets[] = {"plan.cp=2", "plan.pp=1", "model.seq_len=4096"};
  struct wl_job job;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_job_load(&job, SCN "tiny.cfg", sets, 3, &d), 0);
  struct wl_program *p = wl_program_expand(&job);
  double want = 2.0 * 4096 * job.model.kv_heads * (job.model.hidden / job.model.heads) * 2;
  int found[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    const struct wl_seg *sg = &p->seg[k ? WL_SEG_LAYER_BI : WL_SEG_LAYER_F];
    for (int i = sg->first_item; i < sg->first_item + sg->nitems; i++) {
      const struct wl_item *it = &p->items[i];
      if (!it->coll || it->cat != WL_CAT_CP) continue;
      found[k]++;
      cr_expect_eq(p->colls[it->index].op, k ? IC_OP_REDUCESCATTER : IC_OP_ALLGATHER);
      cr_expect_eq(p->colls[it->index].bytes, want, "%g bytes, want %g", p->colls[it->index].bytes, want);
      cr_expect(it->hide >= 0 && p->items[it->hide].cat == WL_CAT_ATTN, "under the attention kernel");
    }
  }
  cr_expect(found[0] == 1 && found[1] == 1, "one exchange per pass: %d forward, %d backward", found[0], found[1]);
  wl_program_destroy(p);
  wl_job_release(&job);
  struct wl_outcome a;
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", sets, 3, &a, &d), 0);
  cr_assert_eq(a.status, 0, "%s", a.message);
  double sum = 0;
  for (int i = 0; i < WL_CAT_COUNT; i++) sum += a.cat_s[i];
  cr_expect_float_eq(sum, a.step_time_s, 1e-9 * a.step_time_s);
  cr_expect_gt(a.hidden_s[WL_CAT_CP], 0, "the ring under the attention: %g s hidden, %g s exposed", a.hidden_s[WL_CAT_CP],
               a.cat_s[WL_CAT_CP]);
}

/* The MoE and long-context plan errors: EP that does not divide the experts or the devices, CP
 * that does not divide the sequence, DualPipe without an even number of stages or of
 * micro-batches. */
Test(replay, bad_moe_and_long_context_plans_name_their_keys)
{
  expect_error_in(SCN "tiny_moe.cfg", SETS("plan.ep=3"), "plan.ep");          /* 16 experts */
  expect_error_in(SCN "tiny_moe.cfg", SETS("plan.ep=16"), "plan.ep");         /* dp x cp = 8 */
  expect_error_in(SCN "tiny_moe.cfg", SETS("model.moe.experts=12", "plan.ep=8"), "plan.ep");
  expect_error_in(SCN "tiny_moe.cfg", SETS("plan.cp=2", "model.seq_len=1023"), "plan.cp");
  expect_error_in(SCN "tiny.cfg", SETS("plan.ep=2"), "plan.ep");              /* a dense model */
  /* 4 stages, 3 micro-batches per pipeline (global batch 6 over dp 2): odd */
  expect_error_in(SCN "tiny_moe.cfg", SETS("plan.pp=4", "plan.ep=2", "plan.schedule=\"dualpipe\"", "plan.global_batch=6"),
                  "even number");
  expect_error_in(SCN "tiny_moe.cfg", SETS("plan.pp=1", "plan.schedule=\"dualpipe\""), "must be even");
  /* the located form: file and line of the key at fault */
  expect_error_in(SCN "tiny_moe.cfg", SETS("plan.pp=4", "plan.ep=2", "plan.micro_batch=2", "plan.schedule=\"dualpipe\""),
                  "tiny_moe.cfg:17: plan.global_batch");
}

/* Thousands of shared collectives in one step (flows): waiting ranks keep their handles while
 * the table of collectives grows. The timeout is a hang guard: the sanitizer build takes 76 s
 * alone (since the Hopper FlashAttention backward's 64 x 128 tile, whose causal GQA costing is
 * 1.6x longer) and ran past 120 s beside the other suites. */
Test(replay, many_collectives_keep_their_handles, .timeout = 300)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_outcome o;
  cr_assert_eq(wl_run_isolated(SCN "moe_many_collectives.cfg", SETS(NULL), 0, &o, &d), 0);
  cr_assert_eq(o.status, 0, "%s", o.message);
  cr_expect_gt(o.step_time_s, 0);
}

/* Scenario scn with sets, replayed with a trace kept in memory. */
static void traced(const char *scn, const char *const *sets, struct wl_job *job, struct npu_trace *tr,
                   struct wl_result *res)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  char msg[1024];
  int rc = wl_job_load(job, scn, sets, nsets(sets), &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  memset(tr, 0, sizeof *tr);
  rc = wl_replay(job, tr, res, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
}

/* tiny.cfg at TP4 PP2, 4 micro-batches, traced. */
static void traced_tp4_pp2(struct wl_job *job, struct npu_trace *tr, struct wl_result *res)
{
  traced(SCN "tiny.cfg", SETS("plan.tp=4", "plan.pp=2", "plan.dp=1", "plan.global_batch=4"), job, tr, res);
}

/* The trace shows what the compute stream ran: each segment's kernels and TP collectives in
 * order (not one opaque block), every slot as a slice named by phase and micro-batch, and the
 * compute track's busy time is the time the step's categories put on it. */
Test(replay, trace_shows_kernels_tp_collectives_and_micro_batches)
{
  struct wl_job job;
  struct wl_result res;
  struct npu_trace tr;
  traced_tp4_pp2(&job, &tr, &res);
  int tp = 0, gemm = 0, slots = 0, compute_named = 0;
  double tp0 = 0;
  for (size_t i = 0; i < tr.n; i++) {
    const struct npu_trace_event *e = &tr.ev[i];
    if (!strncmp(e->name, "TP ", 3) && e->tid == 0) {
      tp++;
      if (e->pid == 0) tp0 += e->dur_s;
    }
    if (!strcmp(e->name, "gemm")) {
      gemm++;
      cr_assert(e->args && strstr(e->args, "{\"args\":\"m=") && strstr(e->args, ",\"flops\":") &&
                    strstr(e->args, ",\"bound\":"),
                "a kernel's slice carries its shape, FLOPs and bound: %s", e->args ? e->args : "(none)");
    }
    if (!strcmp(e->name, "compute")) compute_named++;
    if (e->tid == 3 && (e->ph == 0 || e->ph == 'X')) { /* the slot slices (flows end there too) */
      slots++;
      cr_assert(!strncmp(e->name, "F mb ", 5) || !strncmp(e->name, "B mb ", 5), "%s", e->name);
      cr_assert_gt(e->dur_s, 0, "a slot is a slice, not a marker");
    }
  }
  cr_assert_gt(tp, 0, "TP collectives are on the compute track");
  cr_assert_gt(gemm, 0);
  cr_assert_eq(compute_named, 0, "no opaque compute blocks");
  cr_assert_eq(slots, 2 * 2 * 4, "F and B of 4 micro-batches on 2 stages: %d", slots);
  /* stage 0's TP events add up to the TP time its step breakdown reports */
  double want = res.stages[0].cat_s[WL_CAT_TP];
  cr_assert(want > 0 && fabs(tp0 - want) <= 1e-9 * want, "TP on stage 0's track %.9g s, in its breakdown %.9g s", tp0, want);
  npu_trace_release(&tr);
  wl_result_release(&res);
  wl_job_release(&job);
}

/* Whether the slices of track (pid, tid) nest: none starts inside another and ends after it. */
static bool nests(const struct npu_trace *tr, int pid, int tid)
{
  for (size_t i = 0; i < tr->n; i++)
    for (size_t k = 0; k < tr->n; k++) {
      const struct npu_trace_event *a = &tr->ev[i], *b = &tr->ev[k];
      if (i == k || a->pid != pid || b->pid != pid || a->tid != tid || b->tid != tid || (a->ph && a->ph != 'X') ||
          (b->ph && b->ph != 'X'))
        continue;
      double ae = a->start_s + a->dur_s, be = b->start_s + b->dur_s;
      if (b->start_s > a->start_s + 1e-12 && b->start_s < ae - 1e-12 && be > ae + 1e-12) return false;
    }
  return true;
}

/* The tid of rank pid's track named track, or -1. */
static int track_tid(const struct npu_trace *tr, int pid, const char *track)
{
  for (size_t i = 0; i < tr->ntracks; i++)
    if (tr->tracks[i].pid == pid && !strcmp(tr->tracks[i].name, track)) return tr->tracks[i].tid;
  return -1;
}

/* Sum of the slices named name* of rank pid on the track named track and its second lane
 * ("track 2"), and their count in *n. */
static double track_sum(const struct npu_trace *tr, int pid, const char *track, const char *name, int *n)
{
  char second[64];
  snprintf(second, sizeof second, "%s 2", track);
  int tid[2] = {track_tid(tr, pid, track), track_tid(tr, pid, second)};
  double sum = 0;
  *n = 0;
  for (size_t i = 0; i < tr->n; i++) {
    const struct npu_trace_event *e = &tr->ev[i];
    if (e->pid != pid || (e->tid != tid[0] && e->tid != tid[1]) || e->tid < 0 || (e->ph && e->ph != 'X') ||
        strncmp(e->name, name, strlen(name)))
      continue;
    sum += e->dur_s;
    ++*n;
  }
  return sum;
}

/* Each parallel dimension's communication has a track of its own per stage with the real
 * durations: exposed TP collectives there add up to the step's TP time; the pipeline's receives
 * (4 micro-batches into each stage) are slices from the send to the arrival; slices nest. */
Test(replay, trace_has_a_communication_track_per_dimension)
{
  struct wl_job job;
  struct wl_result res;
  struct npu_trace tr;
  traced_tp4_pp2(&job, &tr, &res);
  for (int s = 0; s < 2; s++) {
    int n, npp;
    double tp = track_sum(&tr, s, "TP communication", "TP ", &n), want = res.stages[s].cat_s[WL_CAT_TP];
    cr_assert_gt(n, 0, "stage %d has TP collectives on its TP track", s);
    cr_assert(fabs(tp - want) <= 1e-9 * want, "stage %d: TP track %.9g s, breakdown %.9g s (none overlapped)", s, tp, want);
    double pp = track_sum(&tr, s, "PP communication", "PP receive", &npp);
    cr_assert_eq(npp, 4, "stage %d receives 4 micro-batches' activations or gradients: %d", s, npp);
    cr_assert_gt(pp, 0);
    for (size_t i = 0; i < tr.ntracks; i++)
      if (tr.tracks[i].pid == s) cr_assert(nests(&tr, s, tr.tracks[i].tid), "stage %d's %s nests", s, tr.tracks[i].name);
  }
  npu_trace_release(&tr);
  wl_result_release(&res);
  wl_job_release(&job);
}

/* An overlapped TP collective shows only what it adds on the compute track, its whole time on the
 * TP track (so that track holds more than the step's exposed TP time). */
Test(replay, an_overlapped_collective_keeps_its_whole_time_on_its_track)
{
  struct wl_job job;
  struct wl_result res;
  struct npu_trace tr;
  traced(SCN "tiny.cfg", SETS("plan.tp=4", "plan.pp=2", "plan.dp=1", "plan.global_batch=4", "plan.sp=true",
                              "plan.tp_overlap=\"mc2\""), &job, &tr, &res);
  int n, ne;
  double whole = track_sum(&tr, 0, "TP communication", "TP ", &n);
  double exposed = track_sum(&tr, 0, "compute", "TP ", &ne);
  cr_assert_gt(n, 0);
  cr_assert(whole > exposed && exposed >= 0, "TP track %.9g s, exposed on the compute track %.9g s", whole, exposed);
  double adds = res.stages[0].cat_s[WL_CAT_TP] + res.stages[0].cat_s[WL_CAT_INTERFERE]; /* dp 1: all TP's */
  cr_assert(fabs(exposed - adds) <= 1e-9 * whole, "the compute track's TP %.9g s is the breakdown's exposed TP and "
            "interference %.9g s", exposed, adds);
  npu_trace_release(&tr);
  wl_result_release(&res);
  wl_job_release(&job);
}

/* A slice of a trace: its track and its span. */
struct slice_ref {
  int pid, tid;
  double a, b;
};

static int by_track_start(const void *x, const void *y)
{
  const struct slice_ref *p = x, *q = y;
  if (p->pid != q->pid) return p->pid < q->pid ? -1 : 1;
  if (p->tid != q->tid) return p->tid < q->tid ? -1 : 1;
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  return p->b > q->b ? -1 : p->b < q->b;
}

/* Every track of a real step nests: the default scenario at TP 4 with MC2 has 5 gradient buckets
 * in flight on a stage at once, which 4 data-parallel lanes laid over each other on the first. */
Test(replay, every_track_of_the_default_step_nests, .timeout = 120)
{
  struct wl_job job;
  struct wl_result res;
  struct npu_trace tr;
  traced(NPUSIM_SOURCE_DIR "/scenarios/default.cfg", SETS("plan.tp=4", "plan.sp=true", "plan.tp_overlap=\"mc2\""),
         &job, &tr, &res);
  int lanes = 0;
  for (size_t i = 0; i < tr.ntracks; i++) lanes += !strcmp(tr.tracks[i].name, "data parallel 5");
  cr_assert_gt(lanes, 0, "a fifth data-parallel lane was needed");
  /* every slice, by track and start (longest first): none starts inside another and ends after it */
  struct slice_ref *v = malloc((tr.n ? tr.n : 1) * sizeof *v);
  size_t n = 0;
  for (size_t i = 0; i < tr.n; i++)
    if (!tr.ev[i].ph || tr.ev[i].ph == 'X')
      v[n++] = (struct slice_ref){tr.ev[i].pid, tr.ev[i].tid, tr.ev[i].start_s, tr.ev[i].start_s + tr.ev[i].dur_s};
  qsort(v, n, sizeof *v, by_track_start);
  double stack[64];
  int depth = 0;
  for (size_t i = 0; i < n; i++) {
    if (i && (v[i].pid != v[i - 1].pid || v[i].tid != v[i - 1].tid)) depth = 0;
    while (depth && stack[depth - 1] <= v[i].a + 1e-12) depth--;
    cr_assert(!depth || v[i].b <= stack[depth - 1] + 1e-12, "stage %d, thread %d: a slice at %.9g s crosses its parent's end",
              v[i].pid, v[i].tid, v[i].a);
    if (depth < 64) stack[depth++] = v[i].b;
  }
  free(v);
  npu_trace_release(&tr);
  wl_result_release(&res);
  wl_job_release(&job);
}

/* MoE all-to-alls have an EP track (their flows, from the join to the end). */
Test(replay, expert_all_to_alls_have_their_own_track)
{
  struct wl_job job;
  struct wl_result res;
  struct npu_trace tr;
  int n;
  traced(SCN_MOE, SETS("plan.ep=4"), &job, &tr, &res);
  double ep = track_sum(&tr, 0, "EP communication", "EP all-to-all", &n);
  cr_assert(n > 0 && ep > 0, "%d all-to-alls on rank 0's EP track, %.9g s", n, ep);
  cr_assert(nests(&tr, 0, track_tid(&tr, 0, "EP communication")));
  npu_trace_release(&tr);
  wl_result_release(&res);
  wl_job_release(&job);
}

/* The trace's memory counter per stage rises with each forward and falls with each backward,
 * its peak the stage's peak memory; every pipeline transfer is an arrow from the slot that sent
 * it to the slot it feeds (a start and a finish with the same id, on another stage). */
Test(replay, trace_counts_memory_and_draws_pipeline_sends)
{
  struct wl_job job;
  struct wl_result res;
  struct npu_trace tr;
  traced_tp4_pp2(&job, &tr, &res);
  double peak[2] = {0, 0}, low[2] = {1e300, 1e300};
  int starts = 0, finishes = 0, counters = 0;
  for (size_t i = 0; i < tr.n; i++) {
    const struct npu_trace_event *e = &tr.ev[i];
    if (e->ph == 'C') {
      counters++;
      cr_assert(e->pid >= 0 && e->pid < 2);
      peak[e->pid] = fmax(peak[e->pid], e->value);
      low[e->pid] = fmin(low[e->pid], e->value);
    } else if (e->ph == 's') {
      starts++;
      bool found = false;
      for (size_t k = 0; k < tr.n && !found; k++)
        found = tr.ev[k].ph == 'f' && tr.ev[k].id == e->id && tr.ev[k].pid != e->pid &&
                tr.ev[k].start_s >= e->start_s;
      cr_assert(found, "the arrow %llu ends on another stage, later", e->id);
    } else if (e->ph == 'f') {
      finishes++;
    }
  }
  cr_assert_eq(starts, 2 * 4, "activations forward and gradients back, 4 micro-batches: %d", starts);
  cr_assert_eq(finishes, starts);
  cr_assert_eq(counters, 2 * (1 + 2 * 4), "a value at the start and after every slot: %d", counters);
  for (int s = 0; s < 2; s++) {
    double want = res.stages[s].mem.total_bytes / (1024.0 * 1024.0 * 1024.0);
    cr_assert(fabs(peak[s] - want) <= 1e-9 * want, "stage %d: peak %.9g GiB, memory model %.9g", s, peak[s], want);
    double rest = (res.stages[s].mem.total_bytes - res.stages[s].mem.activations_bytes) / (1024.0 * 1024.0 * 1024.0);
    cr_assert(fabs(low[s] - rest) <= 1e-9 * rest, "stage %d starts and ends without activations", s);
  }
  npu_trace_release(&tr);
  wl_result_release(&res);
  wl_job_release(&job);
}

/* Gradient buckets are slices from when they were posted to when their reduction finished, on
 * data-parallel lanes where slices never partly overlap (concurrent buckets take another lane). */
Test(replay, trace_shows_gradient_buckets_from_post_to_finish)
{
  struct wl_job job;
  struct wl_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  char msg[1024];
  int rc = wl_job_load(&job, SCN "tiny.cfg", NULL, 0, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  struct npu_trace tr = {0};
  rc = wl_replay(&job, &tr, &res, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  int buckets = 0;
  for (size_t i = 0; i < tr.n; i++) {
    const struct npu_trace_event *e = &tr.ev[i];
    if (strcmp(e->name, "grad bucket")) continue;
    buckets++;
    cr_assert_gt(e->dur_s, 0, "a bucket takes time");
    cr_assert(e->tid == 2 || e->tid >= 4, "on a data-parallel lane: tid %d", e->tid);
    for (size_t k = 0; k < tr.n; k++) { /* no partial overlap with another slice of its lane */
      const struct npu_trace_event *f = &tr.ev[k];
      if (k == i || f->pid != e->pid || f->tid != e->tid) continue;
      bool starts_inside = f->start_s > e->start_s + 1e-12 && f->start_s < e->start_s + e->dur_s - 1e-12;
      cr_assert(!starts_inside || f->start_s + f->dur_s <= e->start_s + e->dur_s + 1e-12, "buckets %zu and %zu partly overlap", i, k);
    }
  }
  cr_assert_gt(buckets, 0, "DP 4 with ZeRO-1 reduce-scatters its gradients in buckets");
  npu_trace_release(&tr);
  wl_result_release(&res);
  wl_job_release(&job);
}

/* ZeRO-3 over 8 NPUs of one server: every layer's gathers and gradient reduce-scatters run
 * beside the compute and take HBM from it; cores taken as well (node.ccl.cores) slow it more.
 * The step's breakdown still adds up to the step, and a core count that leaves the chip no core
 * is refused with its key. */
Test(replay, data_parallel_collectives_slow_the_compute_beside_them)
{
  struct wl_outcome r0 = isolated(SETS("plan.pp=1", "plan.zero=3", "plan.global_batch=16", "node.ccl.cores=0"));
  struct wl_outcome r1 = isolated(SETS("plan.pp=1", "plan.zero=3", "plan.global_batch=16", "node.ccl.cores=12"));
  cr_expect_gt(r0.cat_s[WL_CAT_INTERFERE], 0, "HBM taken: %g s", r0.cat_s[WL_CAT_INTERFERE]);
  cr_expect_gt(r1.cat_s[WL_CAT_INTERFERE], 2 * r0.cat_s[WL_CAT_INTERFERE], "half the cores taken: %g s, HBM only %g s",
               r1.cat_s[WL_CAT_INTERFERE], r0.cat_s[WL_CAT_INTERFERE]);
  cr_expect_gt(r1.step_time_s, r0.step_time_s);
  cr_expect_float_eq(sum_cats(r0.cat_s), r0.step_time_s, 1e-9 * r0.step_time_s);
  cr_expect_float_eq(sum_cats(r1.cat_s), r1.step_time_s, 1e-9 * r1.step_time_s);
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_outcome bad;
  const char *const *sets = SETS("plan.pp=1", "plan.zero=3", "node.ccl.cores=24");
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", sets, nsets(sets), &bad, &d), 0, "%s", d.msg);
  cr_expect_neq(bad.status, 0);
  cr_expect(strstr(bad.message, "node.ccl.cores") != NULL, "%s", bad.message);
}

/* A trace of more than 64 replay ranks keeps the kernels of each stage's first EP rank only
 * (run.trace_detail = auto): the others show their slots and memory; "all" keeps every rank's. */
static void ep72_kernels(const char *detail, int *gemm0, int *gemm5, int *slots5)
{
  struct wl_job job;
  struct wl_result res;
  struct npu_trace tr;
  char det[64];
  snprintf(det, sizeof det, "run.trace_detail=\"%s\"", detail);
  traced(SCN "tiny_moe.cfg", SETS("cluster.nodes=9", "model.moe.experts=72", "plan.ep=72", "plan.global_batch=72", det),
         &job, &tr, &res);
  *gemm0 = *gemm5 = *slots5 = 0;
  for (size_t i = 0; i < tr.n; i++) {
    const struct npu_trace_event *e = &tr.ev[i];
    bool gemm = !strcmp(e->name, "gemm");
    if (gemm && e->pid == 0) (*gemm0)++;
    if (gemm && e->pid == 5) (*gemm5)++;
    if (e->pid == 5 && e->tid == 3 && e->ph == 'X') (*slots5)++;
  }
  npu_trace_release(&tr);
  wl_result_release(&res);
  wl_job_release(&job);
}

Test(replay, a_large_step_traces_the_kernels_of_one_ep_rank_per_stage, .timeout = 120)
{
  int g0, g5, s5;
  ep72_kernels("auto", &g0, &g5, &s5);
  cr_assert_gt(g0, 0, "EP rank 0 in full");
  cr_assert_eq(g5, 0, "EP rank 5's kernels left out");
  cr_assert_eq(s5, 2, "its forward and backward slots kept");
}

/* (one SimGrid engine per process: the other detail in a test of its own) */
Test(replay, trace_detail_all_traces_the_kernels_of_every_rank, .timeout = 120)
{
  int g0, g5, s5;
  ep72_kernels("all", &g0, &g5, &s5);
  cr_assert(g0 > 0 && g5 == g0, "every rank in full: %d and %d", g0, g5);
  cr_assert_eq(s5, 2);
}
