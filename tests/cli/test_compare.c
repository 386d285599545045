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

/* nccl-tests' table (tests/cli/data: its layout, made-up numbers) against one whose times are
 * twice A's at two sizes, with a size of its own: B / A 2 at each shared size, the mean +100%. */
Test(compare, collective_tables_are_compared_size_by_size)
{
  char *dir = ts_tmpdir(), meas[2048];
  snprintf(meas, sizeof meas, "%s/tests/cli/data/nccl_tests_all_reduce.txt", NPUSIM_SOURCE_DIR);
  char *twice = ts_write(dir, "twice.txt",
                         "#       size  count  type  redop  root  time  algbw  busbw\n"
                         "     1048576 262144 float    sum    -1 40.00  26.21  45.88      1  dummy\n"
                         "     2097152 524288 float    sum    -1 50.00  41.94  73.40      1  dummy\n"
                         "    16777216 4194304 float   sum    -1 90.00 186.41 326.22      1  dummy\n");
  struct run_result r = ts_npusim("compare", meas, twice, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "         1048576        20.00        40.00     2.0000          91.75          45.88\n"),
            "%s", r.out);
  cr_assert(strstr(r.out, "sizes only in A, bytes: 4194304, 8388608\n"), "%s", r.out);
  cr_assert(strstr(r.out, "sizes only in B, bytes: 16777216\n"), "%s", r.out);
  cr_assert(strstr(r.out, "2 sizes shared: time B / A - 1 mean +100.00%, mean |B / A - 1| 100.00%"), "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("compare", meas, twice, "--tolerance", "50", NULL);
  cr_assert_eq(r.status, 1, "twice the time fails a 50%% tolerance: %s", r.out);
  cr_assert(strstr(r.err, "--tolerance: 2 sizes beyond 50%: 1048576 B 20 -> 40 us; 2097152 B 25 -> 50 us"), "%s", r.err);
  ts_run_free(&r);
  /* what npusim collective prints is such a table: a measured curve against the simulated one */
  r = ts_npusim("collective", "--op", "allreduce", "--bytes", "1MiB:8MiB", "--arch", "dgx-h100", "--ranks", "8", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *sim = ts_write(dir, "sim.txt", r.out);
  ts_run_free(&r);
  r = ts_npusim("compare", meas, sim, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "4 sizes shared: "), "%s", r.out);
  cr_assert(strstr(r.out, "types or reductions that differ") == NULL, "both float sum: %s", r.out);
  ts_run_free(&r);
  free(sim);
  free(twice);
  ts_rmtree(dir);
  free(dir);
}

Test(compare, a_malformed_collective_row_is_refused_with_its_line)
{
  char *dir = ts_tmpdir(), meas[2048];
  snprintf(meas, sizeof meas, "%s/tests/cli/data/nccl_tests_all_reduce.txt", NPUSIM_SOURCE_DIR);
  char *bad = ts_write(dir, "bad.txt",
                       "# size count type redop root time algbw busbw\n"
                       "node01:1001:1001 [0] NCCL INFO a log line, not a row\n"
                       "     1048576 262144 float sum -1 20.00 fast 91.75 0\n");
  struct run_result r = ts_npusim("compare", meas, bad, NULL);
  cr_assert_eq(r.status, 2, "%s", r.out);
  char want[4200];
  snprintf(want, sizeof want, "%s:3: not a row of a collective's table", bad);
  cr_assert(strstr(r.err, want) && strstr(r.err, "time, algbw and busbw must be numbers >= 0"), "%s", r.err);
  ts_run_free(&r);
  char *csv = ts_write(dir, "m.csv", "step_time_s\n2.0\n");
  r = ts_npusim("compare", meas, csv, NULL);
  cr_assert_eq(r.status, 2, "%s", r.out);
  cr_assert(strstr(r.err, "is not a collective's table"), "%s", r.err);
  ts_run_free(&r);
  char *dup = ts_write(dir, "dup.txt",
                       "# size count type redop root time algbw busbw\n"
                       " 8 2 float sum -1 1.0 0.01 0.01\n 8 2 float sum -1 1.0 0.01 0.01\n");
  r = ts_npusim("compare", meas, dup, NULL);
  cr_assert_eq(r.status, 2, "%s", r.out);
  cr_assert(strstr(r.err, "size 8 B again (first at line 2)"), "%s", r.err);
  ts_run_free(&r);
  free(dup);
  free(csv);
  free(bad);
  ts_rmtree(dir);
  free(dir);
}

/* msprof's op_statistic (tests/cli/data: its columns, made-up numbers) over 2 steps against an
 * operators.csv of two stages: CANN types summed per npusim operator (MatMulV2 + BatchMatMulV2
 * as gemm: 4.4 s over 2 steps, 2200 ms a step), halved by --steps, B / A per operator, types
 * npusim has no operator for listed with their time. */
Test(compare, a_measured_operator_profile_is_compared_per_operator_and_step)
{
  char *dir = ts_tmpdir(), meas[2048];
  snprintf(meas, sizeof meas, "%s/tests/cli/data/msprof_op_statistic.csv", NPUSIM_SOURCE_DIR);
  char *ops = ts_write(dir, "operators.csv",
                       "stage,ep,op,category,calls,total_s,mean_s,min_s,max_s,step_share\n"
                       "0,0,gemm,gemm,3136,4.4,0.0014,0.0014,0.0014,0.6\n"
                       "0,0,flash_attention,attention,512,1.1,0.002,0.002,0.002,0.2\n"
                       "0,0,swiglu,vector,512,0.1,0.0002,0.0002,0.0002,0.02\n"
                       "1,0,gemm,gemm,3136,2.2,0.0007,0.0007,0.0007,0.6\n");
  struct run_result r = ts_npusim("compare", meas, ops, "--steps", "2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "  gemm                       3136.0       3136     2200.000     4400.000     2.0000\n"), "%s", r.out);
  cr_assert(strstr(r.out, "  flash_attention             512.0        512     1100.000     1100.000     1.0000\n"), "%s", r.out);
  cr_assert(strstr(r.out, "  rms_norm                   1056.0          0      100.000        0.000          -\n"), "%s", r.out);
  cr_assert(strstr(r.out, "  swiglu                        0.0        512        0.000      100.000          -\n"), "%s", r.out);
  cr_assert(strstr(r.out, "types npusim has no operator for (A, per step): Cast 100.000 ms, TransData 500.000 ms\n"),
            "%s", r.out);
  cr_assert(strstr(r.out, "2 operators on both sides: mean |B / A - 1| 50.00%\n"), "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("compare", meas, ops, "--steps", "2", "--stage", "1", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "  gemm                       3136.0       3136     2200.000     2200.000     1.0000\n"), "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("compare", meas, ops, "--steps", "2", "--tolerance", "10", NULL);
  cr_assert_eq(r.status, 1, "gemm twice the profile's fails 10%%: %s", r.out);
  cr_assert(strstr(r.err, "--tolerance: 1 operator beyond 10%: gemm 2200 -> 4400 ms"), "%s", r.err);
  ts_run_free(&r);
  /* refusals: --steps without a profile, a profile second, a malformed count */
  r = ts_npusim("compare", ops, ops, "--steps", "2", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "--steps: applies to a measured profile"), "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("compare", ops, meas, NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "is msprof's op_statistic: the measured profile goes first (A)"), "%s", r.err);
  ts_run_free(&r);
  char *bad = ts_write(dir, "bad.csv", "OP Type,Count,Total Time(us)\nMatMulV2,many,10.0\n");
  r = ts_npusim("compare", bad, ops, NULL);
  cr_assert_eq(r.status, 2);
  char want[4200];
  snprintf(want, sizeof want, "%s:2: Count and Total Time(us) must be numbers >= 0", bad);
  cr_assert(strstr(r.err, want), "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("compare", meas, ops, "--stage", "5", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "has no operator of stage 5"), "%s", r.err);
  ts_run_free(&r);
  free(bad);
  free(ops);
  ts_rmtree(dir);
  free(dir);
}

/* A PyTorch profiler trace (tests/cli/data: Kineto's layout, made-up times) over 2 steps against
 * an operators.csv: GPU kernels classed by name and summed per category (the cuBLAS and nvjet
 * GEMMs 4 ms: 2 ms a step; the flash kernel, whose name also says cutlass, is attention; NCCL is
 * communication, beside the run's TP and DP collectives summed), host events left out. */
Test(compare, a_pytorch_profiler_trace_is_compared_per_category_and_step)
{
  char *dir = ts_tmpdir(), meas[2048];
  snprintf(meas, sizeof meas, "%s/tests/cli/data/kineto_trace.json", NPUSIM_SOURCE_DIR);
  char *ops = ts_write(dir, "operators.csv",
                       "stage,ep,op,category,calls,total_s,mean_s,min_s,max_s,step_share\n"
                       "0,0,gemm,gemm,4,0.002,0,0,0,0\n"
                       "0,0,flash_attention,attention,2,0.0009,0,0,0,0\n"
                       "0,0,tp allreduce,tp_comm,2,0.0002,0,0,0,0\n"
                       "0,0,dp reducescatter,dp_comm,1,0.0001,0,0,0,0\n"
                       "0,0,rms_norm,vector,3,0.0002,0,0,0,0\n");
  struct run_result r = ts_npusim("compare", meas, ops, "--steps", "2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "  gemm                          1.0          4        2.000        2.000     1.0000\n"), "%s", r.out);
  cr_assert(strstr(r.out, "  attention                     0.5          2        0.600        0.900     1.5000\n"), "%s", r.out);
  cr_assert(strstr(r.out, "  communication                 0.5          3        0.300        0.300     1.0000\n"), "%s", r.out);
  cr_assert(strstr(r.out, "  vector                        0.5          3        0.100        0.200     2.0000\n"), "%s", r.out);
  cr_assert(strstr(r.out, "  optimizer                     0.5          0        0.200        0.000          -\n"), "%s", r.out);
  cr_assert(strstr(r.out, "  memcpy                        0.5          0        0.020        0.000          -\n"), "%s", r.out);
  cr_assert(strstr(r.out, "4 categories on both sides: mean |B / A - 1| 37.50%\n"), "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("compare", meas, ops, "--steps", "2", "--tolerance", "60", NULL);
  cr_assert_eq(r.status, 1, "vector twice the trace's: %s", r.out);
  cr_assert(strstr(r.err, "--tolerance: 1 category beyond 60%: vector 0.1 -> 0.2 ms"), "%s", r.err);
  ts_run_free(&r);
  /* malformed JSON: refused with its line */
  char *bad = ts_write(dir, "bad.json", "{\n  \"traceEvents\": [\n    {\"ph\": \"X\", \"name\": \"k\", \"dur\": 1,}\n  ]\n}\n");
  r = ts_npusim("compare", bad, ops, NULL);
  cr_assert_eq(r.status, 2, "%s", r.out);
  char want[4200];
  snprintf(want, sizeof want, "%s:3: not a trace's JSON: expected a string", bad);
  cr_assert(strstr(r.err, want), "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("compare", ops, meas, NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "is a PyTorch profiler trace: the measured profile goes first (A)"), "%s", r.err);
  ts_run_free(&r);
  free(bad);
  free(ops);
  ts_rmtree(dir);
  free(dir);
}

/* hccl_test's table (the fields its documentation names: data_size, aveg_time, alg_bandwidth,
 * check_result; made-up numbers) against npusim collective's: compared size by size, with no
 * bus bandwidth on the measured side. */
Test(compare, an_hccl_test_table_is_compared_with_a_simulated_one)
{
  char *dir = ts_tmpdir(), meas[2048];
  snprintf(meas, sizeof meas, "%s/tests/cli/data/hccl_test_all_reduce.txt", NPUSIM_SOURCE_DIR);
  struct run_result r =
      ts_npusim("collective", "--op", "allreduce", "--bytes", "1MiB:4MiB", "--arch", "atlas-800t-a2", "--ranks", "8", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *sim = ts_write(dir, "sim.txt", r.out);
  ts_run_free(&r);
  r = ts_npusim("compare", meas, sim, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "         1048576        30.00 "), "%s", r.out);
  cr_assert(strstr(r.out, "3 sizes shared: "), "%s", r.out);
  cr_assert(strstr(r.out, "types or reductions that differ") == NULL, "hccl_test names none: %s", r.out);
  ts_run_free(&r);
  char *bad = ts_write(dir, "bad.txt", "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:\n"
                                      "1048576 slow 34.95 success\n");
  r = ts_npusim("compare", bad, sim, NULL);
  cr_assert_eq(r.status, 2, "%s", r.out);
  char want[4200];
  snprintf(want, sizeof want, "%s:2: not a row of a collective's table", bad);
  cr_assert(strstr(r.err, want) && strstr(r.err, "hccl_test's rows are data_size aveg_time alg_bandwidth"), "%s", r.err);
  ts_run_free(&r);
  free(bad);
  free(sim);
  ts_rmtree(dir);
  free(dir);
}
