/*
 * test_micro.c - kernel and collective scenarios (micro/): `npusim run` gives what `npusim
 * kernel` / `npusim collective` give for the same operator and arguments, byte for byte; they
 * sweep (kinds "kernel" and "collective"); bad input is a located error with exit status 2 and
 * no output files.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "tests/sweep/common.h"

static char *dir;

static void setup(void)
{
  dir = ts_tmpdir();
}

static void teardown(void)
{
  ts_rmtree(dir);
  free(dir);
}

TestSuite(micro, .init = setup, .fini = teardown, .timeout = 60);

/* dir/out/NAME, read (owned). */
static char *out_file(const char *sub, const char *name)
{
  char p[1200];
  snprintf(p, sizeof p, "%s/%s/%s", dir, sub, name);
  return ts_read(p);
}

static bool exists(const char *sub)
{
  char p[1200];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  struct stat st;
  return stat(p, &st) == 0;
}

/* The value of CSV column col in the row of a header+row text (owned), or NULL. */
static char *csv_cell(const char *text, const char *col)
{
  const char *nl = strchr(text, '\n');
  cr_assert(nl != NULL);
  int want = -1, i = 0;
  for (const char *p = text; p < nl; i++) {
    size_t n = strcspn(p, ",\n");
    if (strlen(col) == n && !strncmp(p, col, n)) want = i;
    p += n + (p[n] == ',');
    if (p[-1] == '\n' || p >= nl) break;
  }
  if (want < 0) return NULL;
  const char *p = nl + 1;
  for (i = 0; i < want; i++) p += strcspn(p, ",\n") + 1;
  return strndup(p, strcspn(p, ",\n"));
}

/* A kernel scenario: the same op and arguments as on npusim kernel's command line give the same
 * JSON and text, whether the arguments come as keys or in kernel.args. */
Test(micro, kernel_scenario_matches_npusim_kernel)
{
  char *s = ts_write(dir, "k.cfg",
                     "chip = { preset = \"ascend-910b2\"; };\n"
                     "kernel = {\n"
                     "  op = \"gemm\";\n"
                     "  m = 512;\n"
                     "  args = \"n=1024 k=256 dtype=fp16 m=4\";  # kernel.m wins over m=4\n"
                     "  fidelity = \"analytic\";\n"
                     "};\n");
  char o[1100];
  snprintf(o, sizeof o, "%s/out", dir);
  struct run_result r = ts_npusim("run", s, "-o", o, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  struct run_result k = ts_npusim("kernel", "gemm", "--m", "512", "--n", "1024", "--k", "256", "--dtype", "fp16",
                                  "--arch", "ascend-910b2", "--fidelity", "analytic", "--json", NULL);
  cr_assert_eq(k.status, 0, "%s", k.err);
  char *js = out_file("out", "summary.json");
  cr_assert_str_eq(js, k.out);
  ts_run_free(&k);
  k = ts_npusim("kernel", "gemm", "--m", "512", "--n", "1024", "--k", "256", "--dtype", "fp16", "--arch",
                "ascend-910b2", "--fidelity", "analytic", NULL);
  cr_assert_eq(k.status, 0, "%s", k.err);
  cr_assert_str_eq(r.out, k.out);
  /* summary.csv: a header and one row, agreeing with the JSON */
  char *csv = out_file("out", "summary.csv");
  cr_assert_eq(count_lines(csv), 2, "%s", csv);
  cr_assert(!strncmp(csv, "scenario,op,args,system,fidelity,seed,time_s,", 45), "%s", csv);
  char *t = csv_cell(csv, "time_s"), *b = csv_cell(csv, "bottleneck"), *a = csv_cell(csv, "args");
  char want[128];
  snprintf(want, sizeof want, "\"time_s\": %s,", t);
  cr_assert(strstr(js, want) != NULL, "%s not in %s", want, js);
  snprintf(want, sizeof want, "\"bottleneck\": \"%s\"", b);
  cr_assert(strstr(js, want) != NULL, "%s not in %s", want, js);
  cr_assert(!strncmp(a, "m=512 n=1024 k=256 dtype=fp16 ", 30), "%s", a);
  cr_assert_gt(strtod(t, NULL), 0);
  free(t), free(b), free(a);
  /* same inputs, same bytes */
  struct run_result r2 = ts_npusim("run", s, "-o", o, NULL);
  cr_assert_eq(r2.status, 0);
  cr_assert_str_eq(r2.out, r.out);
  char *js2 = out_file("out", "summary.json"), *csv2 = out_file("out", "summary.csv");
  cr_assert_str_eq(js2, js);
  cr_assert_str_eq(csv2, csv);
  free(js2), free(csv2), free(js), free(csv), free(s);
  ts_run_free(&r2), ts_run_free(&r), ts_run_free(&k);
}

/* Event fidelity with a functional check, on a vector operator. */
Test(micro, kernel_scenario_event_functional)
{
  char *s = ts_write(dir, "k.cfg",
                     "chip = { preset = \"ascend-910b2\"; };\n"
                     "kernel = { op = \"rms_norm\"; rows = 64; hidden = 1024; fidelity = \"event\"; functional = true; "
                     "seed = 7; };\n");
  char o[1100];
  snprintf(o, sizeof o, "%s/out", dir);
  struct run_result r = ts_npusim("run", s, "-o", o, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  struct run_result k = ts_npusim("kernel", "rms_norm", "--rows", "64", "--hidden", "1024", "--functional", "--seed",
                                  "7", "--json", NULL);
  cr_assert_eq(k.status, 0, "%s", k.err);
  char *js = out_file("out", "summary.json");
  cr_assert_str_eq(js, k.out);
  cr_assert(strstr(js, "\"passed\": true") != NULL, "%s", js);
  char *csv = out_file("out", "summary.csv");
  char *c = csv_cell(csv, "check");
  cr_assert_str_eq(c, "passed");
  free(c), free(csv), free(js), free(s);
  ts_run_free(&r), ts_run_free(&k);
}

/* A collective scenario gives what npusim collective gives for one size. */
Test(micro, collective_scenario_matches_npusim_collective)
{
  char *s = ts_write(dir, "c.cfg",
                     "preset = \"atlas-800t-a2\";\n"
                     "collective = { op = \"allgather\"; bytes = \"16MiB\"; ranks = 4; fidelity = \"step\"; };\n");
  char o[1100];
  snprintf(o, sizeof o, "%s/out", dir);
  struct run_result r = ts_npusim("run", s, "-o", o, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  struct run_result c = ts_npusim("collective", "--op", "allgather", "--bytes", "16MiB", "--ranks", "4", "--arch",
                                  "atlas-800t-a2", "--fidelity", "step", "--json", NULL);
  cr_assert_eq(c.status, 0, "%s", c.err);
  char *js = out_file("out", "summary.json");
  cr_assert_str_eq(js, c.out);
  ts_run_free(&c);
  c = ts_npusim("collective", "--op", "allgather", "--bytes", "16MiB", "--ranks", "4", "--arch", "atlas-800t-a2",
                "--fidelity", "step", NULL);
  cr_assert_str_eq(r.out, c.out);
  char *csv = out_file("out", "summary.csv");
  cr_assert_eq(count_lines(csv), 2, "%s", csv);
  char *t = csv_cell(csv, "time_s"), *bw = csv_cell(csv, "busbw_bytes_per_s"), *n = csv_cell(csv, "ranks");
  char want[128];
  snprintf(want, sizeof want, "\"time_s\": %s,", t);
  cr_assert(strstr(js, want) != NULL, "%s not in %s", want, js);
  snprintf(want, sizeof want, "\"busbw_bytes_per_s\": %s,", bw);
  cr_assert(strstr(js, want) != NULL, "%s not in %s", want, js);
  cr_assert_str_eq(n, "4");
  free(t), free(bw), free(n), free(csv), free(js), free(s);
  ts_run_free(&r), ts_run_free(&c);
}

/* A 2-axis kernel sweep: one row per point, the swept values in their columns, each row the
 * summary.csv row of `npusim run` with the same overrides. */
Test(micro, kernel_sweep_two_axes)
{
  free(ts_write(dir, "k.cfg",
                "chip = { preset = \"ascend-910b2\"; };\n"
                "kernel = { op = \"gemm\"; args = \"n=4096 k=4096 dtype=bf16\"; };\n"));
  char *sw = ts_write(dir, "k_sweep.cfg",
                      "sweep = {\n  base = \"k.cfg\";\n  axes = (\n"
                      "    { key = \"kernel.m\"; values = [32, 2048]; },\n"
                      "    { key = \"chip.hbm.bandwidth\"; values = [\"0.8TBps\", \"3.2TBps\"]; }\n  );\n};\n");
  char csvp[1100];
  snprintf(csvp, sizeof csvp, "%s/k.csv", dir);
  struct run_result r = ts_npusim("sweep", sw, "-o", csvp, "-j", "2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "4 ok") != NULL, "%s", r.out);
  char *csv = ts_read(csvp);
  cr_assert_eq(count_lines(csv), 5, "%s", csv);
  const char *head = "point,kernel.m,chip.hbm.bandwidth_bytes_per_s,status,scenario,op,args,";
  cr_assert(!strncmp(csv, head, strlen(head)), "%s", csv);
  static const char *const pre[] = {"0,32,800000000000,ok,", "1,32,3200000000000,ok,", "2,2048,800000000000,ok,",
                                     "3,2048,3200000000000,ok,"};
  const char *line = strchr(csv, '\n') + 1;
  double t[4];
  for (int i = 0; i < 4; i++) {
    cr_assert(!strncmp(line, pre[i], strlen(pre[i])), "row %d: %s", i, line);
    /* time_s is the 7th metric column: point, 2 keys, status, then scenario..seed (6), time_s */
    const char *p = line;
    for (int c = 0; c < 10; c++) p = strchr(p, ',') + 1;
    t[i] = strtod(p, NULL);
    line = strchr(line, '\n') + 1;
  }
  /* a skinny GEMM streams its weights: 4x the HBM bandwidth makes it faster; more rows take longer */
  cr_assert_lt(t[1], t[0] * 0.6, "%g %g", t[0], t[1]);
  cr_assert_gt(t[2], t[0]);
  cr_assert_leq(t[3], t[2]);
  /* the row of point 3 is npusim run's summary.csv row for the same values */
  char o[1100], kcfg[1100];
  snprintf(o, sizeof o, "%s/one", dir);
  snprintf(kcfg, sizeof kcfg, "%s/k.cfg", dir);
  struct run_result one =
      ts_npusim("run", kcfg, "-o", o, "--set", "kernel.m=2048", "--set", "chip.hbm.bandwidth=3.2TBps", NULL);
  cr_assert_eq(one.status, 0, "%s", one.err);
  char *sum = out_file("one", "summary.csv");
  const char *row = strchr(sum, '\n') + 1, *mine = strstr(csv, "\n3,2048,3200000000000,ok,") + 25;
  const char *tail = strchr(row, ',');   /* after the scenario column, which names the file run */
  const char *mtail = strchr(mine, ',');
  cr_assert(!strncmp(mtail, tail, strlen(tail) - 1), "%s\nvs\n%s", mtail, tail);
  free(sum), free(csv), free(sw);
  ts_run_free(&one), ts_run_free(&r);
}

/* A collective sweep: bytes x link bandwidth. */
Test(micro, collective_sweep_bytes_by_bandwidth)
{
  free(ts_write(dir, "c.cfg", "preset = \"atlas-800t-a2\";\ncollective = { op = \"allreduce\"; bytes = \"1MiB\"; };\n"));
  char *sw = ts_write(dir, "c_sweep.cfg",
                      "sweep = {\n  base = \"c.cfg\";\n  axes = (\n"
                      "    { key = \"collective.bytes\"; values = [\"1MiB\", \"64MiB\"]; },\n"
                      "    { key = \"node.link.bandwidth\"; values = [\"28GBps\", \"56GBps\"]; }\n  );\n};\n");
  char csvp[1100];
  snprintf(csvp, sizeof csvp, "%s/c.csv", dir);
  struct run_result r = ts_npusim("sweep", sw, "-o", csvp, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *csv = ts_read(csvp);
  cr_assert_eq(count_lines(csv), 5, "%s", csv);
  const char *head = "point,collective.bytes,node.link.bandwidth_bytes_per_s,status,scenario,op,system,ranks,"
                     "servers,fidelity,bytes,time_s,algbw_bytes_per_s,busbw_bytes_per_s,";
  cr_assert(!strncmp(csv, head, strlen(head)), "%s", csv);
  cr_assert(strstr(csv, "\n3,67108864,56000000000,ok,") != NULL, "%s", csv);
  free(csv), free(sw);
  ts_run_free(&r);
}

/* `npusim run` on a bad scenario: status 2, the exact message, nothing on stdout, no -o dir. */
static void expect_bad(const char *text, const char *const *sets, const char *want_fmt)
{
  char *s = ts_write(dir, "bad.cfg", text);
  char o[1100];
  snprintf(o, sizeof o, "%s/badout", dir);
  const char *a[8] = {"run", s, "-o", o, NULL, NULL, NULL, NULL};
  int n = 4;
  for (int i = 0; sets && sets[i]; i++) {
    a[n++] = "--set";
    a[n++] = sets[i];
  }
  struct run_result r = ts_npusim(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], NULL);
  char want[2048];
  snprintf(want, sizeof want, want_fmt, s);
  cr_assert_eq(r.status, 2, "status %d: %s", r.status, r.err);
  cr_assert_str_eq(r.out, "");
  cr_assert_str_eq(r.err, want);
  cr_assert(!exists("badout"));
  ts_run_free(&r);
  free(s);
}

#define GEMM_HEAD "chip = { preset = \"ascend-910b2\"; };\nkernel = {\n"

Test(micro, bad_kernel_input)
{
  expect_bad(GEMM_HEAD "  op = \"gemn\";\n  args = \"m=8 n=8 k=8\";\n};\n", NULL,
             "error: %s:3: kernel.op: unknown operator 'gemn'; did you mean 'gemm'?\n");
  expect_bad(GEMM_HEAD "  op = \"gemm\";\n  args = \"m=8 n=8 k=8 dtype=bf61\";\n};\n", NULL,
             "error: %s:4: kernel.args: dtype: unknown dtype 'bf61'; did you mean 'bf16'?\n");
  expect_bad(GEMM_HEAD "  op = \"gemm\";\n  args = \"m=8 n=8 k=8 rowz=4\";\n};\n", NULL,
             "error: %s:4: kernel.args: operator 'gemm' has no parameter 'rowz' (its parameters: m, n, k, dtype, out, "
             "trans_a, trans_b, tile_m, tile_n, tile_k, tile_k0, swizzle, swizzle_dir, split_k, quant, group, "
             "cores)\n");
  expect_bad(GEMM_HEAD "  op = \"gemm\";\n  n = 8;\n  k = 8;\n  m = 0;\n};\n", NULL,
             "error: %s:6: kernel.m: must be at least 1, got '0'\n");
  expect_bad(GEMM_HEAD "  op = \"gemm\";\n  n = 8;\n  k = 8;\n  rows = 4;\n};\n", NULL,
             "error: %s:6: kernel.rows: operator 'gemm' has no parameter 'rows' (its parameters: m, n, k, dtype, out, "
             "trans_a, trans_b, tile_m, tile_n, tile_k, tile_k0, swizzle, swizzle_dir, split_k, quant, group, "
             "cores)\n");
  expect_bad(GEMM_HEAD "  op = \"gemm\";\n  n = 8;\n  k = 8;\n};\n", NULL,
             "error: %s:3: kernel.op: 'gemm' needs m (rows of A and C): set kernel.m, or m=... in kernel.args\n");
  expect_bad(GEMM_HEAD "  op = \"gemm\";\n  m = \"8\";\n};\n", NULL,
             "error: %s:4: kernel.m: expected an integer, got a string \"8\"\n");
  static const char *const fp8[] = {"kernel.dtype=fp8_e4m3", NULL};
  expect_bad(GEMM_HEAD "  op = \"gemm\";\n  args = \"m=8 n=8 k=8\";\n};\n", fp8,
             "error: command line: kernel.dtype: ascend-910b2 has no fp8_e4m3 cube input\n");
}

Test(micro, bad_collective_input)
{
  expect_bad("preset = \"atlas-800t-a2\";\ncollective = {\n  op = \"allreduse\";\n  bytes = \"1GiB\";\n};\n", NULL,
             "error: %s:3: collective.op: unknown value 'allreduse'; did you mean 'allreduce'? (one of: allreduce, "
             "reducescatter, allgather, alltoall, alltoallv, broadcast, reduce, sendrecv)\n");
  expect_bad("preset = \"atlas-800t-a2\";\ncollective = {\n  op = \"allreduce\";\n  bytes = \"1GBps\";\n};\n", NULL,
             "error: %s:4: collective.bytes: expected a size like '192KiB', got '1GBps' (a bandwidth)\n");
  expect_bad("preset = \"atlas-800t-a2\";\ncollective = {\n  op = \"allreduce\";\n  bytes = 1024;\n};\n", NULL,
             "error: %s:4: collective.bytes: missing unit: expected a size like '192KiB', got 1024\n");
  expect_bad("preset = \"atlas-800t-a2\";\ncollective = {\n  op = \"allreduce\";\n  bytes = \"1MiB\";\n  ranks = 9;\n};\n",
             NULL, "error: %s:5: collective.ranks: 9 ranks, but the system has 8 devices\n");
  expect_bad("preset = \"atlas-800t-a2\";\ncollective = {\n  op = \"broadcast\";\n  bytes = \"1MiB\";\n  ranks = 2;\n"
             "  root = 2;\n};\n",
             NULL, "error: %s:6: collective.root: root 2 is outside the communicator of 2 ranks\n");
  expect_bad("preset = \"atlas-800t-a2\";\ncollective = {\n  op = \"allreduce\";\n};\n", NULL,
             "error: %s:2: collective.bytes: missing required key in section 'collective' (S per rank, nccl-tests "
             "convention (allgather: the gathered output; reducescatter: the input; alltoall: all a rank sends))\n");
}

/* sweep.kind names the kind (a kernel scenario is no collective one); expressions read an
 * operator's arguments, set by key or in kernel.args. */
Test(micro, sweep_kind_is_detected_and_named)
{
  free(ts_write(dir, "k.cfg", "chip = { preset = \"ascend-910b2\"; };\nkernel = { op = \"gemm\"; args = \"m=8 n=8 "
                              "k=8\"; };\n"));
  char *sw = ts_write(dir, "x_sweep.cfg", "sweep = {\n  base = \"k.cfg\";\n  kind = \"collective\";\n  axes = ( { key "
                                          "= \"kernel.m\"; values = [8, 16]; } );\n};\n");
  struct run_result r = ts_npusim("sweep", sw, "--list", NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  cr_assert(strstr(r.err, "kernel") != NULL, "%s", r.err);
  ts_run_free(&r);
  free(sw);
  sw = ts_write(dir, "y_sweep.cfg", "sweep = {\n  base = \"k.cfg\";\n  axes = ( { key = \"kernel.n\"; values = [8, "
                                    "16]; } );\n  constraints = ( \"kernel.m * kernel.n <= 64\" );\n};\n");
  r = ts_npusim("sweep", sw, "--list", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  /* kernel.m is read from kernel.args (the operator's value), kernel.n from the axis */
  cr_assert(strstr(r.out, "\n0,8\n") != NULL && !strstr(r.out, "16"), "%s", r.out);
  cr_assert(strstr(r.err, "1 points (of 2; 1 skipped by constraints)") != NULL, "%s", r.err);
  ts_run_free(&r);
  free(sw);
}
