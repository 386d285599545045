/* test_kernel_cli.c - `npusim kernel`: list, the JSON contract, and bad input (exit 2). */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/support/support.h"

TestSuite(kernel_cli, .timeout = 60);

Test(kernel_cli, list_names_the_operators_and_their_options)
{
  struct run_result r = ts_npusim("kernel", "list", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "gemm\n") != NULL);
  cr_assert(strstr(r.out, "--m dim") != NULL, "%s", r.out);
  /* each operator's backward rule, and the reason for a proxy */
  cr_assert(strstr(r.out, "  backward (kernel): the same call with pass=bwd") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "  backward (proxy): the forward call with 5/3 of the rows (rounded)\n    why: ") != NULL,
            "%s", r.out);
  cr_assert(strstr(r.out, "  backward (none): the optimizer step is not differentiated") != NULL, "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("kernel", "list", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"backward\": {") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "\"kind\": \"proxy\"") != NULL, "%s", r.out);
  ts_run_free(&r);
}

Test(kernel_cli, json_contract)
{
  struct run_result r = ts_npusim("kernel", "gemm", "--m", "512", "--n", "512", "--k", "512", "--dtype", "bf16",
                                  "--arch", "ascend-910b2", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  static const char *keys[] = {"\"time_s\": ", "\"achieved_flops_per_s\": ", "\"bottleneck\": \"",
                               "\"pipes\": {", "\"aic_mac_ratio\": ", "\"aiv_vec_ratio\": "};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    cr_assert(strstr(r.out, keys[i]) != NULL, "missing %s in %s", keys[i], r.out);
  ts_run_free(&r);
}

Test(kernel_cli, functional_run_reports_its_check)
{
  struct run_result r = ts_npusim("kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--functional",
                                  "--fidelity", "analytic", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "functional check  passed") != NULL, "%s", r.out);
  ts_run_free(&r);
}

static void bad(const char *want, const char *a1, const char *a2, const char *a3, const char *a4, const char *a5,
                const char *a6, const char *a7)
{
  struct run_result r = ts_npusim("kernel", a1, a2, a3, a4, a5, a6, a7, NULL);
  cr_assert_eq(r.status, 2, "status %d: %s", r.status, r.err);
  cr_assert_str_eq(r.out, "");
  cr_assert_str_eq(r.err, want);
  ts_run_free(&r);
}

Test(kernel_cli, bad_input_exits_2)
{
  bad("error: command line: unknown operator 'gem'; did you mean 'gemm'?\n", "gem", NULL, NULL, NULL, NULL, NULL, NULL);
  bad("error: command line: 'gemm' needs --m (rows of A and C)\n", "gemm", NULL, NULL, NULL, NULL, NULL, NULL);
  bad("error: command line: --m: must be at least 1, got '0'\n", "gemm", "--m", "0", "--n", "8", "--k", "8");
  bad("error: command line: --m: expected a whole number, got '-5'\n", "gemm", "--m", "-5", "--n", "8", "--k", "8");
  bad("error: command line: --dtype: unknown dtype 'bf61'; did you mean 'bf16'?\n", "gemm", "--m", "8", "--n", "8",
      "--dtype", "bf61");
  bad("error: command line: 'gemm' has no option --mm; did you mean --m?\n", "gemm", "--mm", "8", NULL, NULL, NULL, NULL);
  bad("error: command line: --dtype: ascend-910b2 has no fp8_e4m3 cube input\n", "gemm", "--m", "8", "--n", "8",
      "--dtype=fp8_e4m3", "--k=8");
  bad("error: command line: --fidelity: expected event or analytic, got 'fast'\n", "gemm", "--m", "8", "--n", "8",
      "--fidelity", "fast");
}

/* An MC2 operator runs on a server's devices: the report names them and the bytes their links
 * carried, the JSON has devices and link_bytes; without a server, or at analytic fidelity, exit 2
 * with the option to change and nothing on stdout. */
Test(kernel_cli, an_mc2_operator_runs_on_the_devices_of_a_server)
{
  struct run_result r = ts_npusim("kernel", "all_gather_matmul", "--m", "64", "--k", "256", "--n", "128", "--arch",
                                  "atlas-800t-a2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "192/192 cube, 384/384 vector on 8 devices (") != NULL, "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("kernel", "matmul_reduce_scatter", "--m", "64", "--k", "256", "--n", "128", "--ranks", "4", "--arch",
                "atlas-800t-a2", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"devices\": 4") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "\"link_bytes\": 196608") != NULL, "%s", r.out); /* 4 x 3 x 64 x 128 x 2 */
  ts_run_free(&r);
  r = ts_npusim("kernel", "all_gather_matmul", "--m", "64", "--k", "256", "--n", "128", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "--arch: all_gather_matmul runs on 8 devices: give a server") != NULL, "%s", r.err);
  cr_assert_str_eq(r.out, "");
  ts_run_free(&r);
  r = ts_npusim("kernel", "matmul_reduce_scatter", "--m", "64", "--k", "256", "--n", "128", "--arch", "atlas-800t-a2",
                "--fidelity", "analytic", "--functional", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "--fidelity: matmul_reduce_scatter's analytic fidelity is a closed form of its pipeline, "
                          "without data or instructions") != NULL,
            "%s", r.err);
  ts_run_free(&r);
  /* the closed form alone: a time, the devices and the bytes across the links (8 x 7 x 64 x 128 x 2) */
  r = ts_npusim("kernel", "matmul_reduce_scatter", "--m", "64", "--k", "256", "--n", "128", "--arch", "atlas-800t-a2",
                "--fidelity", "analytic", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"devices\": 8") != NULL && strstr(r.out, "\"link_bytes\": 917504") != NULL, "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("kernel", "all_gather_matmul", "--m", "64", "--k", "256", "--n", "128", "--arch", "atlas-800t-a2",
                "--msprof", "/tmp/npusim-mc2-msprof-never", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "--msprof: all_gather_matmul runs on several devices at once; msprof's layout is one device's") !=
                NULL,
            "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("kernel", "matmul_all_reduce", "--m", "64", "--k", "256", "--n", "128", "--arch", "atlas-800t-a2",
                "--parity", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "--parity: matmul_all_reduce runs on several devices at once") != NULL, "%s", r.err);
  ts_run_free(&r);
}
