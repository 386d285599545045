/* test_compare.c - `npusim compare`: two runs, or a measurement and a run, column by column;
 * rows by PATH:N; the tolerance check; located refusals. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/support.h"

TestSuite(compare, .timeout = 120);

Test(compare, two_runs_show_what_the_plan_changed)
{
  char *dir = ts_tmpdir(), a[2048], b[2048], cfg[2048];
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  snprintf(cfg, sizeof cfg, "%s/tests/workloads/data/tiny.cfg", NPUSIM_SOURCE_DIR);
  struct run_result r = ts_npusim("run", cfg, "-o", a, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("run", cfg, "-o", b, "--set", "plan.tp=2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("compare", a, b, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "  tp                                                1                2              1     2.0000\n"),
            "%s", r.out);
  cr_assert(strstr(r.out, "  step_time_s "), "%s", r.out);
  cr_assert(strstr(r.out, "texts that differ (A | B)\n"), "the bottleneck text changes with TP: %s", r.out);
  cr_assert(strstr(r.out, " numbers shared"), "%s", r.out);
  ts_run_free(&r);
  /* the same run against itself: every ratio 1, within any tolerance */
  r = ts_npusim("compare", a, a, "--tolerance", "0", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "mean |B / A - 1| 0.00%"), "%s", r.out);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}

Test(compare, a_measurement_under_npusim_names_is_checked_against_a_run)
{
  char *dir = ts_tmpdir();
  char *meas = ts_write(dir, "measured.csv", "step_time_s,tokens_per_s,note\n2.0,1000,\"lab, rack 3\"\n");
  char *sim = ts_write(dir, "sim.csv", "scenario,step_time_s,tokens_per_s\nx,2.1,1000\nx,2.5,800\n");
  struct run_result r = ts_npusim("compare", meas, sim, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "  step_time_s                                       2              2.1            0.1     1.0500\n"),
            "%s", r.out);
  cr_assert(strstr(r.out, "only in A: note\n") && strstr(r.out, "only in B: scenario\n"), "%s", r.out);
  ts_run_free(&r);
  char row2[4200];
  snprintf(row2, sizeof row2, "%s:2", sim);
  r = ts_npusim("compare", meas, row2, "--tolerance", "10", NULL);
  cr_assert_eq(r.status, 1, "25%% off fails a 10%% tolerance: %s", r.out);
  cr_assert(strstr(r.err, "--tolerance: 2 numbers beyond 10%: step_time_s 2 -> 2.5 (+25.00%); tokens_per_s 1000 -> 800 (-20.00%)"),
            "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("compare", meas, sim, "--tolerance", "10", NULL);
  cr_assert_eq(r.status, 0, "row 1 is within 10%%: %s", r.err);
  ts_run_free(&r);
  snprintf(row2, sizeof row2, "%s:3", sim);
  r = ts_npusim("compare", meas, row2, NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "has 2 data rows, not 3"), "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("compare", meas, NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "compare needs two results: A B"), "%s", r.err);
  ts_run_free(&r);
  free(meas);
  free(sim);
  ts_rmtree(dir);
  free(dir);
}
