/*
 * test_plan.c - `npusim plan`: the search finds the optimum where it is known under the model
 * (less work wins when everything fits; the memory model forces recomputation when it does
 * not), its best plan is what `npusim run` gives for that plan, pruned candidates are counted
 * by reason, and a scenario that is not a training job is refused.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/support.h"

#define TINY NPUSIM_SOURCE_DIR "/tests/workloads/data/tiny.cfg"

TestSuite(plan, .timeout = 300);

/* The value of column `col` in row `row` (1-based data rows) of a CSV text. */
static double csv_value(const char *csv, const char *col, int row)
{
  char *text = strdup(csv), *save = NULL;
  char *line = strtok_r(text, "\n", &save);
  int idx = -1, k = 0;
  for (char *f = line; f; f = strchr(f, ','), f = f ? f + 1 : NULL, k++) {
    size_t n = strcspn(f, ",");
    if (n == strlen(col) && !strncmp(f, col, n)) idx = k;
  }
  cr_assert(idx >= 0, "no column %s", col);
  for (int r = 0; r < row; r++) line = strtok_r(NULL, "\n", &save);
  cr_assert(line != NULL, "no row %d", row);
  const char *f = line;
  for (int i = 0; i < idx; i++) f = strchr(f, ',') + 1;
  double v = atof(f);
  free(text);
  return v;
}

/* Recomputation is more work for the same plan: with room in HBM the optimum is none. */
Test(plan, with_room_the_least_work_wins)
{
  char *dir = ts_tmpdir(), csv[1024];
  snprintf(csv, sizeof csv, "%s/plans.csv", dir);
  struct run_result r = ts_npusim("plan", TINY, "-o", csv, "-j", "2", "--tp", "1", "--pp", "1", "--vpp", "1",
                                  "--micro-batch", "1", "--recompute", "none,full", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "2 candidate plans") && strstr(r.out, "2 to run"), "%s", r.out);
  const char *best = strstr(r.out, "     1 ");
  cr_assert(best != NULL, "%s", r.out);
  cr_expect(!strncmp(best, "     1 tp1 pp1 cp1 ep1 vpp1 mb1 none", 36), "%s", best);
  /* the best plan's figure is what `npusim run` gives for it */
  char *rows = ts_read(csv);
  cr_assert(rows != NULL);
  double t0 = csv_value(rows, "tokens_per_s", 1), t1 = csv_value(rows, "tokens_per_s", 2);
  struct run_result direct = ts_npusim("run", TINY, "--set", "plan.pp=1", "--set", "plan.recompute=\"none\"", NULL);
  cr_assert_eq(direct.status, 0, "%s", direct.err);
  char want[64];
  snprintf(want, sizeof want, "%.6g", t0 > t1 ? t0 : t1);
  char *tok = strstr(direct.out, "throughput     ");
  cr_assert(tok != NULL, "%s", direct.out);
  char got[64];
  snprintf(got, sizeof got, "%.6g", atof(tok + 15));
  cr_expect_str_eq(got, want, "plan's best %s, npusim run %s", want, got);
  free(rows);
  ts_run_free(&direct);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}

/* With 1177 MiB (1.15 GiB) of HBM the plan without recomputation (1.27 GiB) does not fit and full
 * recomputation (1.03 GiB) does: the search prunes the first unrun and picks the second. */
Test(plan, the_memory_model_prunes_and_forces_recomputation)
{
  char *dir = ts_tmpdir(), csv[1024];
  snprintf(csv, sizeof csv, "%s/plans.csv", dir);
  struct run_result r = ts_npusim("plan", TINY, "-o", csv, "-j", "2", "--tp", "1", "--pp", "1,16", "--vpp", "1",
                                  "--micro-batch", "1", "--recompute", "none,full", "--set", "chip.hbm.size=1177MiB",
                                  NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "4 candidate plans") && strstr(r.out, "refused 2 by plan.tp") &&
                strstr(r.out, "1 over the") && strstr(r.out, "1 to run"),
            "%s", r.out);
  cr_expect(strstr(r.out, "     1 tp1 pp1 cp1 ep1 vpp1 mb1 full") != NULL, "%s", r.out);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}

/* The same 1177 MiB without recomputation: offloading 6 of the 8 layers' activations to host
 * memory (--offload) makes it fit; the plan that keeps them is pruned. */
Test(plan, offload_is_an_axis_that_makes_a_plan_fit)
{
  char *dir = ts_tmpdir(), csv[1024];
  snprintf(csv, sizeof csv, "%s/plans.csv", dir);
  struct run_result r = ts_npusim("plan", TINY, "-o", csv, "-j", "2", "--tp", "1", "--pp", "1", "--vpp", "1",
                                  "--micro-batch", "1", "--recompute", "none", "--offload", "0,6", "--set",
                                  "chip.hbm.size=1177MiB", "--set", "node.host.bandwidth=1PBps", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "2 candidate plans") && strstr(r.out, "1 over the") && strstr(r.out, "1 to run"), "%s",
            r.out);
  cr_expect(strstr(r.out, "     1 tp1 pp1 cp1 ep1 vpp1 mb1 none zero1 off6") != NULL, "%s", r.out);
  char *rows = ts_read(csv);
  cr_assert(rows != NULL);
  /* the axes' columns first: point, tp, pp, cp, ep, vpp, micro_batch, recompute, zero, offload_layers, etp */
  cr_expect(strstr(rows, ",zero,offload_layers,etp,status,") && strstr(rows, "\n0,1,1,1,1,1,1,none,1,6,1,ok,"), "%s",
            rows);
  free(rows);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}

/* Expert TP is an axis: on one 8-NPU server with tp 2, EP 8 exists only folded onto the TP
 * ranks (etp 1: 1 x 8 = the 8 ranks), not with the experts split over the TP group (etp 0 = tp
 * 2: 2 x 8 > 8), which the plan checks refuse; an explicit etp equal to tp is not run twice. */
Test(plan, expert_tp_is_an_axis_and_folds_ep_onto_tp_ranks)
{
  char *dir = ts_tmpdir(), csv[1024];
  snprintf(csv, sizeof csv, "%s/plans.csv", dir);
  struct run_result r = ts_npusim("plan", NPUSIM_SOURCE_DIR "/tests/workloads/data/tiny_moe.cfg", "-o", csv, "-j",
                                  "2", "--tp", "2", "--pp", "1", "--vpp", "1", "--micro-batch", "1", "--recompute",
                                  "none", "--ep", "8", "--etp", "0,1,2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "3 candidate plans") && strstr(r.out, "refused 1 by plan.ep") &&
                strstr(r.out, "1 by plan.etp") && strstr(r.out, "1 to run"),
            "%s", r.out);
  cr_expect(strstr(r.out, "     1 tp2 pp1 cp1 ep8 vpp1 mb1 none zero1 off0 etp1") != NULL, "%s", r.out);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}

Test(plan, bad_input_is_refused)
{
  struct run_result r = ts_npusim("plan", NPUSIM_SOURCE_DIR "/scenarios/gemm_910b2.cfg", "-o", "/tmp/x.csv", NULL);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "training scenario") != NULL, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("plan", TINY, "-o", "/tmp/x.csv", "--recompute", "some", NULL);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "--recompute") != NULL, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("plan", TINY, NULL);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "-o") != NULL, "%s", r.err);
  ts_run_free(&r);
}
