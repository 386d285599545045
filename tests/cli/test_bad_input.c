/*
 * test_bad_input.c - every kind of bad input gets one located message on stderr, exit status
 * 2, and nothing on stdout.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/support.h"

static char *dir;

static void setup(void) { dir = ts_tmpdir(); }
static void teardown(void)
{
  ts_rmtree(dir);
  free(dir);
}

TestSuite(bad_input, .init = setup, .fini = teardown, .timeout = 30);

/* Write text to bad.cfg, run `arch show bad.cfg [extra]`, expect status 2 and message. */
static void expect_file(const char *text, const char *extra, const char *want_fmt)
{
  char *path = ts_write(dir, "bad.cfg", text);
  struct run_result r = extra ? ts_npusim("arch", "show", path, "--set", extra, NULL)
                              : ts_npusim("arch", "show", path, NULL);
  char want[2048];
  snprintf(want, sizeof want, want_fmt, path);
  cr_assert_eq(r.status, 2, "status %d, stderr: %s", r.status, r.err);
  cr_assert_str_eq(r.out, "", "stdout must stay empty");
  cr_assert_str_eq(r.err, want);
  ts_run_free(&r);
  free(path);
}

static void expect_args(const char *want, const char *a1, const char *a2, const char *a3,
                        const char *a4, const char *a5)
{
  struct run_result r = ts_npusim(a1, a2, a3, a4, a5, NULL);
  cr_assert_eq(r.status, 2, "status %d, stderr: %s", r.status, r.err);
  cr_assert_str_eq(r.out, "");
  cr_assert_str_eq(r.err, want);
  ts_run_free(&r);
}

Test(bad_input, unknown_key_with_suggestion)
{
  expect_file("preset = \"ascend-910b2\";\nchip = {\n  hbm = { bandwith = \"3TBps\"; };\n};\n", NULL,
              "error: %s:3: chip.hbm.bandwith: unknown key; did you mean 'chip.hbm.bandwidth'?\n");
}

Test(bad_input, wrong_type)
{
  expect_file("preset = \"ascend-910b2\";\nchip = { aic_count = \"24\"; };\n", NULL,
              "error: %s:2: chip.aic_count: expected an integer, got a string \"24\"\n");
}

Test(bad_input, missing_unit)
{
  expect_file("preset = \"ascend-910b2\";\nchip = { hbm = { bandwidth = 1.6; }; };\n", NULL,
              "error: %s:2: chip.hbm.bandwidth: missing unit: expected a bandwidth like '1.6TBps', "
              "got 1.6\n");
}

Test(bad_input, unit_of_the_wrong_kind)
{
  expect_file("preset = \"atlas-800t-a2\";\nnode = { link = { bandwidth = \"56GHz\"; }; };\n", NULL,
              "error: %s:2: node.link.bandwidth: expected a bandwidth like '1.6TBps', got '56GHz' "
              "(a frequency)\n");
}

Test(bad_input, negative_value)
{
  expect_file("preset = \"ascend-910b2\";\nchip = { clock = \"-1.8GHz\"; };\n", NULL,
              "error: %s:2: chip.clock: must be positive, got '-1.8GHz'\n");
}

Test(bad_input, zero_cores)
{
  expect_file("preset = \"ascend-910b2\";\nchip = { aic_count = 0; };\n", NULL,
              "error: %s:2: chip.aic_count: must be positive, got '0'\n");
}

Test(bad_input, ub_smaller_than_a_fractal)
{
  expect_file("preset = \"ascend-910b2\";\nchip = { ub = { size = \"256B\"; }; };\n", NULL,
              "error: %s:2: chip.ub.size: smaller than one fractal: 256 bytes, need at least 512\n");
}

Test(bad_input, node_with_more_devices_than_its_topology_wires)
{
  expect_file("preset = \"atlas-800t-a2\";\nnode = { devices = 12; };\n", NULL,
              "error: %s:2: node.devices: a full mesh of 12 packages needs 11 links per package, "
              "but node.link.ports is 7\n");
}

Test(bad_input, missing_include)
{
  char want[2048];
  snprintf(want, sizeof want, "error: %%s:2: cannot open include file 'presets.cfg' (looked in '%s')\n", dir);
  expect_file("chip = { aic_count = 1; };\n@include \"presets.cfg\"\n", NULL, want);
}

Test(bad_input, syntax_error)
{
  expect_file("preset = \"ascend-910b2\";\nchip = {\n  clock = ;\n};\n", NULL,
              "error: %s:3: syntax error\n");
}

Test(bad_input, unknown_preset_in_a_file)
{
  expect_file("preset = \"ascend-910b9\";\n", NULL,
              "error: %s:1: preset: unknown preset 'ascend-910b9'; did you mean 'ascend-910b1'?\n");
}

Test(bad_input, missing_required_key)
{
  expect_file("preset = \"ascend-910b2\";\nnode = { devices = 8; };\n", NULL,
              "error: %s:2: node.topology: missing required key in section 'node' (full_mesh: "
              "every package wired to every other; switch: packages meet in switches)\n");
}

Test(bad_input, unknown_preset_on_the_command_line)
{
  expect_args("error: unknown preset 'ascend-910x'; did you mean 'ascend-910c'?\n", "arch", "show",
              "ascend-910x", NULL, NULL);
  expect_args("error: unknown preset 'tpu-v5' (see 'npusim arch list' for the presets)\n", "arch",
              "show", "tpu-v5", NULL, NULL);
}

Test(bad_input, missing_file)
{
  expect_args("error: /nonexistent/x.cfg: cannot open: No such file or directory\n", "arch",
              "show", "/nonexistent/x.cfg", NULL, NULL);
}

Test(bad_input, malformed_set)
{
  expect_args("error: command line: --set 'chip.clock': expected KEY=VALUE\n", "arch", "show",
              "ascend-910b2", "--set", "chip.clock");
  expect_args("error: command line: --set needs KEY=VALUE\n", "arch", "show", "ascend-910b2",
              "--set", NULL);
  expect_args("error: command line: chip.clok: unknown key; did you mean 'chip.clock'?\n", "arch",
              "show", "ascend-910b2", "--set", "chip.clok=2GHz");
  expect_args("error: command line: chip.clock: expected a frequency like '1.85GHz', got '2GBps' "
              "(a bandwidth)\n", "arch", "show", "ascend-910b2", "--set", "chip.clock=2GBps");
  expect_args("error: command line: chip.preset: unknown preset 'ascend-91'; did you mean "
              "'ascend-910c'?\n", "arch", "show", "atlas-800t-a2", "--set", "chip.preset=ascend-91");
}

Test(bad_input, contradiction_from_the_command_line)
{
  expect_args("error: command line: chip.aiv_count: a split chip needs a whole number of vector "
              "cores per cube core (25 AIV for 24 AIC)\n", "arch", "show", "ascend-910b2", "--set",
              "chip.aiv_count=25");
}

Test(bad_input, unknown_commands_and_options)
{
  expect_args("error: unknown command 'acrh'; did you mean 'arch'?\n", "acrh", NULL, NULL, NULL, NULL);
  expect_args("error: command line: unknown option '--jsn' for 'arch show' (see 'npusim help arch "
              "show')\n", "arch", "show", "ascend-910b2", "--jsn", NULL);
  expect_args("error: command line: 'arch' has no subcommand 'lst'; did you mean 'list'? (expected "
              "'list', 'show' or 'keys')\n",
              "arch", "lst", NULL, NULL, NULL);
}

/* An @include of no file (`@include ""` names the including file's directory) once ended the
 * process inside libconfig's scanner with no file or line; a directory as the scenario too. */
Test(bad_input, include_of_a_directory)
{
  expect_file("chip = { preset = \"ascend-910b2\"; };\n@include \"\"\n", NULL,
              "error: %s:2: @include '' does not name a file\n");
  expect_file("@include \"/\"\n", NULL, "error: %s:1: @include '/' does not name a file\n");
  expect_args("error: /: not a file\n", "arch", "show", "/", NULL, NULL);
}

/* The model presets state head_dim only where it differs from hidden / heads, so a hidden size
 * that heads do not divide is refused instead of keeping the preset's head_dim silently. */
Test(bad_input, hidden_not_divisible_by_heads)
{
  struct run_result r = ts_npusim("run", NPUSIM_SOURCE_DIR "/scenarios/default.cfg", "--set", "model.hidden=4097", NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  cr_assert_str_eq(r.out, "");
  cr_assert(strstr(r.err, ": model.heads: hidden 4097 is not a multiple of 32 heads (set model.head_dim)\n") != NULL,
            "%s", r.err);
  ts_run_free(&r);
}

/* A unit typo in a range (from = "122TBps" for 1.22) made a 36,411-point sweep run silently:
 * past 10,000 points a sweep needs --yes, and nothing is written without it; --list still
 * shows the points. 10,001 points here (tens of seconds under the sanitizers). */
Test(bad_input, a_sweep_of_thousands_of_points_needs_yes, .timeout = 180)
{
  char *scn = ts_write(dir, "base.cfg", "preset = \"atlas-800t-a2\";\nmodel = { preset = \"llama2-7b\"; };\n"
                                        "plan = { global_batch = 8; };\n");
  char *sw = ts_write(dir, "big.cfg",
                      "@include \"base.cfg\"\n"
                      "sweep = { axes = ( { key = \"chip.hbm.bandwidth\"; range = { from = \"1.2TBps\"; "
                      "to = \"3.2TBps\"; points = 10001; }; } ); };\n");
  char out[1024];
  snprintf(out, sizeof out, "%s/big.csv", dir);
  struct run_result r = ts_npusim("sweep", sw, "-o", out, NULL);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "big.cfg: sweep.axes: 10001 points to run") && strstr(r.err, "--yes"), "%s", r.err);
  cr_expect_str_eq(r.out, "");
  char *csv = ts_read(out);
  cr_expect(csv == NULL, "nothing written");
  free(csv);
  ts_run_free(&r);
  r = ts_npusim("sweep", sw, "--list", NULL);
  cr_expect_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  free(scn);
  free(sw);
}
