/*
 * test_cli.c - `npusim collective`: the JSON contract scripts rely on, the nccl-tests style
 * sweep table, and every bad input (exit status 2, one located message naming the option,
 * nothing on stdout).
 */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/support/support.h"

TestSuite(cli, .timeout = 30);

static void expect_bad(const char *want, const char *a1, const char *a2, const char *a3,
                       const char *a4, const char *a5, const char *a6, const char *a7,
                       const char *a8, const char *a9, const char *a10, const char *a11,
                       const char *a12)
{
  struct run_result r =
      ts_npusim("collective", a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, NULL);
  cr_assert_eq(r.status, 2, "status %d, stderr: %s", r.status, r.err);
  cr_assert_str_eq(r.out, "", "stdout must stay empty");
  cr_assert_str_eq(r.err, want);
  ts_run_free(&r);
}

Test(cli, ranks_beyond_the_cluster)
{
  expect_bad("error: command line: --ranks: 9 ranks exceed the 8 devices of the system (1 node x 8)\n",
             "--op", "allreduce", "--bytes", "1MiB", "--ranks", "9", "--arch", "atlas-800t-a2",
             NULL, NULL, NULL, NULL);
  expect_bad("error: command line: --comm: rank 15 is beyond the 8 devices of the system\n",
             "--op", "allreduce", "--bytes", "1MiB", "--comm", "0,15", "--arch", "atlas-800t-a2",
             NULL, NULL, NULL, NULL);
}

Test(cli, duplicate_ranks)
{
  expect_bad("error: command line: --comm: rank 2 appears twice in the communicator\n", "--op",
             "allreduce", "--bytes", "1MiB", "--comm", "0-3,2", "--arch", "atlas-800t-a2", NULL,
             NULL, NULL, NULL);
}

Test(cli, zero_or_negative_sizes)
{
  expect_bad("error: command line: --bytes: expected a positive size, got '0'\n", "--op",
             "allreduce", "--bytes", "0", "--ranks", "8", "--arch", "atlas-800t-a2", NULL, NULL, NULL, NULL);
  expect_bad("error: command line: --bytes: expected a positive size, got '-1MiB'\n", "--op",
             "allreduce", "--bytes=-1MiB", "--ranks", "8", "--arch", "atlas-800t-a2", NULL, NULL,
             NULL, NULL, NULL);
  expect_bad("error: command line: --bytes: expected a positive size, got '0B'\n", "--op",
             "allgather", "--bytes", "0B:1MiB", "--ranks", "8", "--arch", "atlas-800t-a2", NULL,
             NULL, NULL, NULL);
  expect_bad("error: command line: --ranks: expected an integer >= 1, got '-4'\n", "--op",
             "allreduce", "--bytes", "1MiB", "--ranks", "-4", "--arch", "atlas-800t-a2", NULL, NULL, NULL, NULL);
}

Test(cli, algorithm_that_cannot_run_on_the_topology)
{
  expect_bad("error: command line: --algo: 'mesh' needs every rank in one server, but the "
             "communicator spans 2 servers\n",
             "--op", "allreduce", "--bytes", "1MiB", "--ranks", "16", "--arch", "atlas-800t-a2",
             "--algo", "mesh", "--set", "cluster.nodes=2");
}

Test(cli, other_bad_input)
{
  expect_bad("error: command line: --op: unknown operation 'allreduse'; did you mean 'allreduce'?\n",
             "--op", "allreduse", "--bytes", "1MiB", "--arch", "atlas-800t-a2", NULL, NULL, NULL,
             NULL, NULL, NULL);
  expect_bad("error: command line: --algo: 'pairwise' cannot run allreduce (it runs alltoall, "
             "alltoallv)\n",
             "--op", "allreduce", "--bytes", "1MiB", "--algo", "pairwise", "--arch",
             "atlas-800t-a2", NULL, NULL, NULL, NULL);
  expect_bad("error: command line: --arch: required (a preset, see 'npusim arch list')\n", "--op",
             "allreduce", "--bytes", "1MiB", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
  expect_bad("error: command line: --root: root 8 is outside the communicator of 8 ranks\n",
             "--op", "broadcast", "--bytes", "1MiB", "--root", "8", "--arch", "atlas-800t-a2", NULL,
             NULL, NULL, NULL);
  expect_bad("error: command line: unknown option '--byte' for 'collective'; did you mean "
             "'--bytes'?\n",
             "--op", "allreduce", "--byte", "1MiB", "--arch", "atlas-800t-a2", NULL, NULL, NULL,
             NULL, NULL, NULL);
}

Test(cli, json_contract)
{
  struct run_result r = ts_npusim("collective", "--op", "allreduce", "--bytes", "64MiB", "--ranks",
                                  "8", "--arch", "atlas-800t-a2", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  static const char *const keys[] = {"\"time_s\": ", "\"algbw_bytes_per_s\": ",
                                     "\"busbw_bytes_per_s\": ", "\"algorithm\": \"mesh\"",
                                     "\"ranks\": 8", "\"fidelity\": \"step\"", "\"busbw_factor\": 1.75"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    cr_assert(strstr(r.out, keys[i]), "missing %s in %s", keys[i], r.out);
  ts_run_free(&r);
  r = ts_npusim("collective", "--op", "allgather", "--bytes", "1MiB:4MiB", "--ranks", "8",
                "--arch", "atlas-800t-a2", "--json", "--fidelity", "bulk", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"results\": ["), "%s", r.out);
  const char *p = r.out;
  int n = 0;
  while ((p = strstr(p, "\"busbw_bytes_per_s\"")) != NULL) n++, p++;
  cr_assert_eq(n, 3, "three sizes: 1, 2, 4 MiB");
  ts_run_free(&r);
}

Test(cli, sweep_table_like_nccl_tests)
{
  struct run_result r = ts_npusim("collective", "--op", "alltoallv", "--bytes", "1KiB:16KiB",
                                  "--ranks", "16", "--arch", "atlas-800t-a2", "--set",
                                  "cluster.nodes=2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "#       size(B)         count      type   redop    root       time(us)  algbw(GB/s)  "
                          "busbw(GB/s)  loops  algorithm\n"),
            "%s", r.out);
  cr_assert(strstr(r.out, " 256     float    none      -1 ") != NULL, "1 KiB = 256 floats: %s", r.out);
  cr_assert(strstr(r.out, "# Avg bus bandwidth    : ") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "           1024 "), "%s", r.out);
  cr_assert(strstr(r.out, "          16384 "), "%s", r.out);
  cr_assert(strstr(r.out, "hierarchical(mesh+pairwise)\n"), "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("--help", NULL);
  cr_assert(strstr(r.out, "collective"));
  ts_run_free(&r);
}

/* A size no device could hold is refused before anything is built (1e18 bytes once failed an
 * assertion, 1e17 exhausted memory on 500 million steps, 1e15 ran without end). */
Test(cli, sizes_beyond_a_device_memory)
{
  expect_bad("error: command line: --bytes: 1e+18 bytes per rank is more than a device's memory (64GiB HBM on "
             "ascend-910b2)\n",
             "--op", "allreduce", "--bytes", "1e18", "--arch", "atlas-800t-a2", NULL, NULL, NULL, NULL, NULL, NULL);
  expect_bad("error: command line: --bytes: 1e+15 bytes per rank is more than a device's memory (64GiB HBM on "
             "ascend-910b2)\n",
             "--op", "allgather", "--bytes", "1e15", "--arch", "atlas-800t-a2", NULL, NULL, NULL, NULL, NULL, NULL);
}
