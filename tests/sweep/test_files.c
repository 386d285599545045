/*
 * test_files.c - sweep files: malformed ones are located errors (exit 2), derived values and
 * constraints, sampling, a changed sweep under existing results, and the example sweeps.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdbool.h>

#include "tests/support/golden.h"
#include "tests/sweep/common.h"

static char *dir;

static void setup(void)
{
  dir = ts_tmpdir();
  sweep_base(dir);
}

static void teardown(void)
{
  ts_rmtree(dir);
  free(dir);
}

TestSuite(sweep_files, .init = setup, .fini = teardown, .timeout = 240);

/* `npusim sweep FILE --list` of a sweep with body: status 2, nothing on stdout, stderr as want
 * (%s: the file's path). */
static void expect_error(const char *body, const char *want_fmt)
{
  char *sw = sweep_file(dir, "bad_sweep.cfg", body);
  struct run_result r = ts_npusim("sweep", sw, "--list", NULL);
  char want[2048];
  snprintf(want, sizeof want, want_fmt, sw);
  cr_assert_eq(r.status, 2, "status %d: %s", r.status, r.err);
  cr_assert_str_eq(r.out, "");
  cr_assert_str_eq(r.err, want);
  ts_run_free(&r);
  free(sw);
}

Test(sweep_files, unknown_scenario_key_is_located)
{
  expect_error("  axes = (\n    { key = \"plan.tpp\"; values = [1, 2]; }\n  );\n",
               "error: %s:4: plan.tpp: unknown key; did you mean 'plan.tp'?\n");
}

Test(sweep_files, unknown_sweep_key_is_located)
{
  expect_error("  axis = ( { key = \"plan.tp\"; values = [1]; } );\n",
               "error: %s:3: sweep.axis: unknown key; did you mean 'axes'?\n");
  expect_error("  axes = (\n    { key = \"plan.tp\"; valeus = [1]; }\n  );\n",
               "error: %s:4: plan.tp.valeus: unknown key; did you mean 'values'?\n");
}

Test(sweep_files, empty_axis_is_located)
{
  expect_error("  axes = (\n    { key = \"plan.tp\"; values = []; }\n  );\n",
               "error: %s:4: plan.tp: empty axis: values has no value\n");
}

Test(sweep_files, zip_of_different_lengths_is_located)
{
  expect_error("  axes = (\n    { zip = ( { key = \"chip.aic_count\"; values = [20, 24]; },\n"
               "              { key = \"chip.aiv_count\"; values = [40, 48, 60]; } ); }\n  );\n",
               "error: %s:5: chip.aiv_count: zipped axes must have the same length: chip.aic_count has 2 values, "
               "chip.aiv_count has 3\n");
}

Test(sweep_files, bad_expression_is_located)
{
  expect_error("  axes = ( { key = \"plan.tp\"; values = [1, 2]; } );\n"
               "  derived = (\n    { key = \"plan.dp\"; expr = \"devices / (plan.tp * 2\"; }\n  );\n",
               "error: %s:5: plan.dp: bad expression 'devices / (plan.tp * 2': at column 23: expected ')'\n");
  expect_error("  axes = ( { key = \"plan.tp\"; values = [1, 2]; } );\n"
               "  constraints = ( \"plan.tp = 2\" );\n",
               "error: %s:4: sweep.constraints: bad expression 'plan.tp = 2': at column 9: '=' is not an operator "
               "(compare with '==')\n");
  expect_error("  axes = ( { key = \"plan.tp\"; values = [1, 2]; } );\n"
               "  constraints = ( \"plan.tp < devicez\" );\n",
               "error: %s:4: sweep.constraints: unknown name 'devicez' in the expression (not an axis, a derived key, "
               "a key of the scenario or 'devices')\n");
}

Test(sweep_files, bad_value_is_located)
{
  expect_error("  axes = (\n    { key = \"chip.hbm.bandwidth\"; values = [\"1.6TBps\", \"2GHz\"]; }\n  );\n",
               "error: %s:4: chip.hbm.bandwidth: value '2GHz': expected a bandwidth like '1.6TBps', got '2GHz' "
               "(a frequency)\n");
}

Test(sweep_files, no_axes_and_no_scenario)
{
  expect_error("", "error: %s:1: sweep.axes: a sweep needs axes = ( { key = \"...\"; values = [...]; }, ... )\n");
  char *sw = ts_write(dir, "nobase_sweep.cfg", "sweep = { axes = ( { key = \"plan.tp\"; values = [1]; } ); };\n");
  struct run_result r = ts_npusim("sweep", sw, "--list", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "sweep.base: the sweep names no scenario") != NULL, "%s", r.err);
  ts_run_free(&r);
  free(sw);
}

Test(sweep_files, ranges_derived_values_and_counted_constraints)
{
  char *sw = sweep_file(dir, "plan_sweep.cfg",
                        "  axes = (\n"
                        "    { key = \"plan.tp\"; range = { from = 1; to = 8; factor = 2; }; },\n"
                        "    { key = \"plan.pp\"; values = [1, 2, 3]; },\n"
                        "    { key = \"chip.hbm.bandwidth\"; range = { from = \"1.2TBps\"; to = \"1.6TBps\"; points = 2; }; }\n"
                        "  );\n"
                        "  derived = ( { key = \"plan.dp\"; expr = \"devices / (plan.tp * plan.pp)\"; } );\n"
                        "  constraints = (\n"
                        "    { expr = \"devices % (plan.tp * plan.pp) == 0\"; reason = \"tp x pp must divide the devices\"; },\n"
                        "    \"plan.global_batch % plan.dp == 0 && plan.dp >= 1\"\n"
                        "  );\n");
  char *csv = ts_write(dir, "x", "");
  struct run_result r = ts_npusim("sweep", sw, "--list", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  /* tp 1 2 4 8 x pp 1 2 3 x 2 bandwidths: pp 3 never divides 8 devices; tp 8 x pp 2 does not */
  cr_assert(!strncmp(r.out, "point,plan.tp,plan.pp,chip.hbm.bandwidth_bytes_per_s,plan.dp,status,", 68), "%s", r.out);
  cr_assert_eq(count_lines(r.out), 1 + 14, "%s", r.out);
  cr_assert(strstr(r.out, "\n0,1,1,1200000000000,8\n1,1,1,1600000000000,8\n2,1,2,1200000000000,4\n") != NULL, "%s",
            r.out);
  cr_assert(strstr(r.out, "\n13,8,1,1600000000000,1\n") != NULL, "%s", r.out);
  cr_assert(strstr(r.err, "14 points (of 24; 10 skipped by constraints)") != NULL, "%s", r.err);
  cr_assert(strstr(r.err, "skipped 10: tp x pp must divide the devices") != NULL, "%s", r.err);
  ts_run_free(&r);
  free(csv);
  free(sw);
}

Test(sweep_files, sampling_is_seeded_and_latin)
{
  char *sw = sweep_file(dir, "lhs_sweep.cfg",
                        "  sample = { method = \"lhs\"; points = 8; seed = 42; };\n"
                        "  axes = (\n"
                        "    { key = \"model.dropout\"; range = { from = 0.0; to = 0.8; }; },\n"
                        "    { key = \"chip.hbm.bandwidth\"; range = { from = \"1TBps\"; to = \"3TBps\"; scale = \"log\"; }; },\n"
                        "    { key = \"plan.tp\"; values = [1, 2, 4, 8]; }\n"
                        "  );\n");
  struct run_result a = ts_npusim("sweep", sw, "--list", NULL);
  struct run_result b = ts_npusim("sweep", sw, "--list", NULL);
  struct run_result c = ts_npusim("sweep", sw, "--list", "--seed", "7", NULL);
  cr_assert_eq(a.status, 0, "%s", a.err);
  cr_assert_str_eq(a.out, b.out);
  cr_assert_str_neq(a.out, c.out);
  cr_assert(strstr(a.err, "sampling: lhs, seed 42 (gsl_rng_mt19937)") != NULL, "%s", a.err);
  cr_assert(strstr(c.err, "seed 7") != NULL, "%s", c.err);
  /* Latin hypercube: each tenth-wide stratum of [0, 0.8) holds one dropout value; tp: each twice */
  int strata[8] = {0}, tps[9] = {0};
  const char *line = strchr(a.out, '\n') + 1;
  for (int i = 0; i < 8; i++) {
    double d, bw;
    int p, tp;
    cr_assert_eq(sscanf(line, "%d,%lf,%lf,%d", &p, &d, &bw, &tp), 4, "%s", line);
    cr_assert(d >= 0 && d < 0.8 && bw >= 1e12 && bw <= 3e12, "%s", line);
    strata[(int)(d / 0.1)]++;
    tps[tp]++;
    line = strchr(line, '\n') + 1;
  }
  for (int i = 0; i < 8; i++) cr_assert_eq(strata[i], 1, "stratum %d", i);
  cr_assert(tps[1] == 2 && tps[2] == 2 && tps[4] == 2 && tps[8] == 2);
  ts_run_free(&a);
  ts_run_free(&b);
  ts_run_free(&c);
  free(sw);
}

Test(sweep_files, changed_sweep_under_existing_results_is_refused)
{
  char *sw = sweep_file(dir, "ch_sweep.cfg", "  axes = ( { key = \"plan.global_batch\"; values = [16, 32]; } );\n");
  char csv[1024];
  snprintf(csv, sizeof csv, "%s/ch.csv", dir);
  struct run_result r = ts_npusim("sweep", sw, "-o", csv, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  free(sweep_file(dir, "ch_sweep.cfg", "  axes = ( { key = \"plan.global_batch\"; values = [16, 48]; } );\n"));
  r = ts_npusim("sweep", sw, "-o", csv, NULL);
  cr_assert_eq(r.status, 2);
  char want[4096];
  snprintf(want, sizeof want, "error: %s: the sweep changed since this results file was started (%s differs from its "
           "journal %s.journal): use --force to start over, or another -o\n", csv, sw, csv);
  cr_assert_str_eq(r.err, want);
  ts_run_free(&r);
  r = ts_npusim("sweep", sw, "-o", csv, "--force", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *t = ts_read(csv);
  cr_assert(strstr(t, "\n1,48,ok,") != NULL, "%s", t);
  free(t);
  ts_run_free(&r);
  /* a results file that has no journal is not overwritten */
  char other[1100];
  snprintf(other, sizeof other, "%s/other.csv", dir);
  free(ts_write(dir, "other.csv", "mine\n"));
  r = ts_npusim("sweep", sw, "-o", other, NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "the results file exists without its journal") != NULL, "%s", r.err);
  ts_run_free(&r);
  free(sw);
}

/* The example sweeps of scenarios/ run, on a small sample and a model cut to 8 layers (kernel and
 * collective sweeps as they are). A guard against hangs, not a speed target: under the sanitizer
 * build the nine sweeps took 240 s once the training steps costed their kernels' data-parallel
 * interference twins (docs/PERFORMANCE.md, "The test suite"). */
Test(sweep_files, example_sweeps_run_on_a_sample, .timeout = 600)
{
  DIR *d = opendir(NPUSIM_SOURCE_DIR "/scenarios");
  cr_assert(d != NULL);
  struct dirent *e;
  int n = 0;
  char cache[1100];
  snprintf(cache, sizeof cache, "run.cost_cache=%s/examples.cache", dir);
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 10 || strcmp(e->d_name + len - 10, "_sweep.cfg") != 0) continue;
    char path[1024], csv[1200];
    snprintf(path, sizeof path, NPUSIM_SOURCE_DIR "/scenarios/%s", e->d_name);
    snprintf(csv, sizeof csv, "%s/%s.csv", dir, e->d_name);
    /* kernel and collective sweeps have no model to cut, and no kernel cost cache */
    char *text = ts_read(path);
    bool micro = strstr(text, "kind = \"kernel\"") || strstr(text, "kind = \"collective\"");
    free(text);
    struct run_result r = micro ? ts_npusim("sweep", path, "-o", csv, "--sample", "2", "--seed", "3", NULL)
                                : ts_npusim("sweep", path, "-o", csv, "--sample", "2", "--seed", "3", "--set",
                                            "model.layers=8", "--set", "model.seq_len=1024", "--set", cache, NULL);
    cr_assert_eq(r.status, 0, "%s: %s", e->d_name, r.err);
    int ran = 0, ok = 0;
    const char *p = strstr(r.out, "\nran ");
    cr_assert(p && sscanf(p, "\nran %d points", &ran) == 1, "%s: %s", e->d_name, r.out);
    p = strstr(p, ": ");
    cr_assert(p && sscanf(p, ": %d ok", &ok) == 1, "%s: %s", e->d_name, r.out);
    cr_assert(ran >= 1 && ok == ran && !strstr(r.out, "error") && !strstr(r.out, "crash"), "%s: %s", e->d_name, r.out);
    ts_run_free(&r);
    /* the sample's rows against the golden file beside the sweep */
    char expect[1100], header[1400];
    snprintf(expect, sizeof expect, "%.*s.expect", (int)(strlen(path) - 4), path);
    snprintf(header, sizeof header,
             "# Golden figures of %s run on a sample: `npusim sweep %s -o OUT.csv --sample 2 --seed 3`\n"
             "# (training sweeps with --set model.layers=8 --set model.seq_len=1024), key COLUMN[ROW] of OUT.csv;\n"
             "# checked by tests/sweep/test_files.c. Relative tolerance 0.1%% unless a line says otherwise.\n"
             "# A changed figure is a deliberate edit (`make golden`), with its reason in the commit message.\n",
             e->d_name, e->d_name);
    char *rows = ts_read(csv);
    cr_assert(rows != NULL, "%s", csv);
    struct ts_figures f = {0};
    ts_figures_from_csv(&f, rows);
    char *msg = ts_golden_check(expect, &f, header, ts_golden_pin_default);
    cr_assert(msg == NULL, "%s", msg);
    ts_figures_free(&f);
    free(rows);
    n++;
  }
  closedir(d);
  cr_assert_geq(n, 5);
}
