/* test_cli.c - npusim's command line: help, version, arch list/show, determinism. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/support.h"

TestSuite(cli, .timeout = 30);

Test(cli, version_and_help)
{
  struct run_result r = ts_npusim("--version", NULL);
  cr_assert_eq(r.status, 0);
  cr_assert(strncmp(r.out, "npusim ", 7) == 0, "%s", r.out);
  ts_run_free(&r);

  r = ts_npusim("--help", NULL);
  cr_assert_eq(r.status, 0);
  cr_assert(strstr(r.out, "usage: npusim") && strstr(r.out, "  arch "), "%s", r.out);
  ts_run_free(&r);

  r = ts_npusim("help", "arch", NULL);
  cr_assert_eq(r.status, 0);
  cr_assert(strstr(r.out, "npusim arch show NAME|FILE") != NULL, "%s", r.out);
  ts_run_free(&r);

  r = ts_npusim("arch", "show", "--help", NULL);
  cr_assert_eq(r.status, 0);
  cr_assert(strstr(r.out, "--set KEY=VALUE") != NULL);
  ts_run_free(&r);

  r = ts_npusim(NULL);
  cr_assert_eq(r.status, 2);
  cr_assert_str_eq(r.out, "");
  ts_run_free(&r);
}

Test(cli, arch_list_names_every_preset)
{
  struct run_result r = ts_npusim("arch", "list", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  static const char *want[] = {"ascend-910b1", "ascend-910b2", "ascend-910b3", "ascend-910b4",
                               "ascend-910c", "ascend-950pr", "ascend-950dt", "atlas-800t-a2",
                               "atlas-a3-superpod", "nvidia-a100-80gb", "dgx-a100", "selene",
                               "nvidia-h100-sxm", "dgx-h100", "nvidia-h200", "dgx-h200"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    char line[64];
    snprintf(line, sizeof line, "\n%s ", want[i]);
    cr_assert(strstr(r.out, line) != NULL, "missing %s in:\n%s", want[i], r.out);
  }
  ts_run_free(&r);
}

Test(cli, arch_show_json_has_the_stable_peak_key)
{
  struct run_result r = ts_npusim("arch", "show", "ascend-910b2", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  const char *derived = strstr(r.out, "\"derived\": {");
  cr_assert(derived != NULL);
  const char *peak = strstr(derived, "\"peak_flops_per_s\": {");
  cr_assert(peak != NULL);
  cr_assert(strstr(peak, "\"bf16\": 353894400000000,") != NULL, "%s", peak);
  cr_assert_str_eq(r.err, "");
  ts_run_free(&r);
}

Test(cli, default_scenario_describes_the_default_system)
{
  struct run_result r = ts_npusim("arch", "show", NPUSIM_SOURCE_DIR "/scenarios/default.cfg", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "Ascend 910B2 (ascend-910b2)") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "node atlas-800t-a2: 8 devices, full mesh") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "353.9 TFLOP/s = 24 x 4096 x 2 x 1.8GHz") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "scale-out, per device            25 GB/s") != NULL, "%s", r.out);
  ts_run_free(&r);
}

Test(cli, default_scenario_trains_a_llama)
{
  struct run_result r = ts_npusim("run", NPUSIM_SOURCE_DIR "/scenarios/default.cfg", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "Llama 2 7B") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "16 x ascend-910b2") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "MFU  ") != NULL && strstr(r.out, "bottleneck") != NULL, "%s", r.out);
  cr_assert_str_eq(r.err, "");
  ts_run_free(&r);
}

Test(cli, overrides_apply_in_order)
{
  struct run_result r = ts_npusim("arch", "show", "ascend-910b2", "--set",
                                  "chip.hbm.bandwidth=3.2TBps", "--set=chip.hbm.bandwidth=2TBps",
                                  "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"hbm_bw_bytes_per_s\": 2000000000000,") != NULL);
  ts_run_free(&r);

  r = ts_npusim("arch", "show", "atlas-800t-a2", "--set", "chip.preset=ascend-910b3", "--json",
                NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"name\": \"ascend-910b3\"") != NULL);
  cr_assert(strstr(r.out, "\"devices\": 8\n") != NULL);
  ts_run_free(&r);
}

Test(cli, effective_configuration_reloads_to_the_same_description)
{
  char *dir = ts_tmpdir();
  struct run_result a = ts_npusim("arch", "show", "selene", "--set", "cluster.nodes=64", "--config", NULL);
  cr_assert_eq(a.status, 0, "%s", a.err);
  cr_assert(strstr(a.out, "nodes = 64;  # --set") != NULL, "%s", a.out);
  char *path = ts_write(dir, "eff.cfg", a.out);
  struct run_result b = ts_npusim("arch", "show", path, "--json", NULL);
  struct run_result c = ts_npusim("arch", "show", "selene", "--set", "cluster.nodes=64", "--json", NULL);
  cr_assert_eq(b.status, 0, "%s", b.err);
  cr_assert_str_eq(b.out, c.out);
  ts_run_free(&a);
  ts_run_free(&b);
  ts_run_free(&c);
  free(path);
  ts_rmtree(dir);
  free(dir);
}

Test(cli, same_inputs_give_byte_identical_output)
{
  static const char *presets[] = {"atlas-a3-superpod", "dgx-h100", "ascend-950dt"};
  for (size_t i = 0; i < 3; i++) {
    struct run_result a = ts_npusim("arch", "show", presets[i], "--json", NULL);
    struct run_result b = ts_npusim("arch", "show", presets[i], "--json", NULL);
    cr_assert_eq(a.status, 0);
    cr_assert_str_eq(a.out, b.out);
    ts_run_free(&a);
    ts_run_free(&b);
  }
}

Test(cli, scenario_reference_lists_every_key)
{
  char *doc = ts_read(NPUSIM_SOURCE_DIR "/docs/SCENARIOS.md");
  cr_assert(doc != NULL);
  struct run_result r = ts_npusim("keys", NULL);
  cr_assert_eq(r.status, 0);
  int n = 0;
  for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, "| `", 3) != 0) continue;
    char *end = strchr(line + 3, '`');
    cr_assert(end != NULL);
    *end = '\0';
    char want[256];
    snprintf(want, sizeof want, "| `%s` |", line + 3);
    cr_assert(strstr(doc, want) != NULL, "docs/SCENARIOS.md does not list %s", line + 3);
    n++;
  }
  cr_assert_gt(n, 100);
  ts_run_free(&r);
  free(doc);
}

/* Every output column `npusim columns` prints is documented in docs/OUTPUTS.md, under its
 * kind's section; `npusim columns KIND` prints that kind's only. */
Test(cli, outputs_reference_lists_every_column)
{
  char *doc = ts_read(NPUSIM_SOURCE_DIR "/docs/OUTPUTS.md");
  cr_assert(doc != NULL);
  struct run_result r = ts_npusim("columns", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  int n = 0, kinds = 0;
  const char *section = doc;
  for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strncmp(line, "## ", 3)) {
      char want[128];
      snprintf(want, sizeof want, "\n%s\n", line);
      section = strstr(doc, want);
      cr_assert(section != NULL, "docs/OUTPUTS.md has no section %s", line);
      kinds++;
      continue;
    }
    if (strncmp(line, "| `", 3) != 0) continue;
    char *end = strchr(line + 3, '`');
    cr_assert(end != NULL);
    *end = '\0';
    char want[256];
    snprintf(want, sizeof want, "| `%s` |", line + 3);
    const char *next = strstr(section + 1, "\n## ");
    const char *at = strstr(section, want);
    cr_assert(at != NULL && (!next || at < next), "docs/OUTPUTS.md does not list %s in its kind's section", line + 3);
    n++;
  }
  cr_assert_eq(kinds, 5);
  cr_assert_gt(n, 140);
  ts_run_free(&r);
  free(doc);
  r = ts_npusim("columns", "collective", NULL);
  cr_assert_eq(r.status, 0);
  cr_assert(strstr(r.out, "## collective\n") && strstr(r.out, "| `busbw_bytes_per_s` | real | bytes/s |") &&
                !strstr(r.out, "## training"),
            "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("columns", "trainig", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert_str_eq(r.err, "error: command line: unknown kind 'trainig'; did you mean 'training'?\n");
  ts_run_free(&r);
  r = ts_npusim("columns", "xyzzy", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert_str_eq(r.err, "error: command line: unknown kind 'xyzzy' (kinds: rl, serve, training, kernel, collective)\n");
  ts_run_free(&r);
}

/* Every operator on a chip with more cores (300) than the largest preset: per-unit state lives in
 * the launch's unit contexts (no fixed per-core tables, which once overflowed on the 132-SM
 * H100), so every operator uses every core (the sanitizer build checks the contexts). A kernel
 * with a real core limit (quantize: 32 bytes of UB per vector core) is refused above it, exit 2. */
Test(cli, every_operator_runs_on_a_chip_with_many_cores, .timeout = 600)
{
  static const char *const ops[][9] = {
      {"gemm", "--m", "4096", "--n", "8192", "--k", "4096", NULL},
      {"grouped_gemm", "--groups", "64", "--m", "65536", "--n", "2048", "--k", "1024"},
      {"flash_attention", "--heads", "64", "--seq", "4096", NULL},
      {"flash_attention", "--heads", "64", "--seq", "4096", "--pass", "bwd", NULL},
      {"rms_norm", "--rows", "65536", "--hidden", "4096", NULL},
      {"layer_norm", "--rows", "65536", "--hidden", "4096", NULL},
      {"softmax", "--rows", "65536", "--cols", "4096", NULL},
      {"swiglu", "--rows", "65536", "--ffn", "4096", NULL},
      {"rope", "--tokens", "65536", "--heads", "32", NULL},
      {"cross_entropy", "--rows", "16384", "--vocab", "32000", NULL},
      {"adamw", "--n", "268435456", NULL},
      {"quantize", "--rows", "65536", "--cols", "4096", NULL},
      {"dequantize", "--rows", "65536", "--cols", "4096", NULL},
      {"dropout", "--rows", "65536", "--cols", "4096", NULL},
      {"moe_gating", "--tokens", "65536", NULL},
      {"moe_permute", "--tokens", "65536", "--hidden", "4096", NULL},
      {"moe_unpermute", "--tokens", "65536", "--hidden", "4096", NULL},
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    char *argv[24];
    int n = 0;
    argv[n++] = (char *)NPUSIM_BINARY;
    argv[n++] = "kernel";
    for (int k = 0; k < 9 && ops[i][k]; k++) argv[n++] = (char *)ops[i][k];
    const char *tail[] = {"--arch", "nvidia-h100-sxm", "--set", "chip.aic_count=300", "--set", "chip.aiv_count=300",
                          "--fidelity", "analytic", NULL};
    for (int k = 0; tail[k]; k++) argv[n++] = (char *)tail[k];
    argv[n] = NULL;
    struct run_result r = ts_run(argv, NULL);
    cr_assert_eq(r.status, 0, "%s: %s", ops[i][0], r.err);
    cr_assert(strstr(r.out, "achieved") != NULL, "%s: %s", ops[i][0], r.out);
    cr_assert(strstr(r.out, "300/300 cube, 300/300 vector") != NULL, "%s uses fewer cores: %s", ops[i][0], r.out);
    ts_run_free(&r);
  }
  struct run_result r = ts_npusim("kernel", "quantize", "--rows", "65536", "--cols", "4096", "--arch", "nvidia-h100-sxm",
                                  "--set", "chip.aic_count=8192", "--set", "chip.aiv_count=8192", "--fidelity",
                                  "analytic", NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  cr_assert_str_eq(r.err, "error: quantize: the chip has 8192 vector cores; this kernel supports at most 7004 (a "
                          "32-byte partial maximum per core in UB)\n");
  cr_assert_str_eq(r.out, "");
  ts_run_free(&r);
}

/* validate --markdown into a document that exists: the text between its markers is replaced and
 * the rest kept (docs/VALIDATION.md regenerates in place); a document without markers is
 * refused with exit 2 and left as it was. One reproduction row keeps it fast. */
Test(cli, validate_markdown_writes_between_the_markers_or_refuses)
{
  char *dir = ts_tmpdir();
  char *doc = ts_write(dir, "doc.md",
                       "intro\n<!-- BEGIN npusim validate --markdown -->\nold tables\n"
                       "<!-- END npusim validate --markdown -->\noutro\n");
  struct run_result r = ts_npusim("validate", "--only", "gpt3-22b a100 params", "--markdown", doc, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  char *text = ts_read(doc);
  cr_assert(!strncmp(text, "intro\n<!-- BEGIN npusim validate --markdown -->\n<!-- generated by", 64), "%s", text);
  cr_assert(strstr(text, "gpt3-22b a100 params+optimizer") && !strstr(text, "old tables"), "%s", text);
  const char *end = strstr(text, "<!-- END npusim validate --markdown -->\noutro\n");
  cr_assert(end && end[strlen("<!-- END npusim validate --markdown -->\noutro\n")] == '\0', "%s", text);
  free(text);
  char *plain = ts_write(dir, "plain.md", "no markers here\n");
  r = ts_npusim("validate", "--only", "gpt3-22b a100 params", "--markdown", plain, NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  cr_assert(strstr(r.err, "plain.md") && strstr(r.err, "--markdown") && strstr(r.err, "not overwritten"), "%s", r.err);
  ts_run_free(&r);
  text = ts_read(plain);
  cr_assert_str_eq(text, "no markers here\n");
  free(text);
  /* --outputs names a directory that must exist, refused before anything runs */
  r = ts_npusim("validate", "--only", "gpt3-22b a100 params", "--outputs", plain, NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  cr_assert(strstr(r.err, "--outputs") && strstr(r.err, "not a directory"), "%s", r.err);
  ts_run_free(&r);
  free(plain);
  free(doc);
  ts_rmtree(dir);
  free(dir);
}

/* --set SECTION=VALUE names the section's keys (it suggested the section's own name before) */
Test(cli, a_value_for_a_section_names_its_keys)
{
  struct run_result r = ts_npusim("run", NPUSIM_SOURCE_DIR "/scenarios/default.cfg", "--set", "plan=4", NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  cr_assert(strstr(r.err, "plan: a section, not a value") && strstr(r.err, "plan.KEY=VALUE: tp, "), "%s", r.err);
  cr_assert(!strstr(r.err, "did you mean"), "%s", r.err);
  ts_run_free(&r);
}

/* A named input that does not exist is bad input (exit 2) for every command that reads one,
 * with the file in the message (report exited 1, as for an I/O failure). */
static void missing_input(struct run_result r, const char *file)
{
  cr_assert_eq(r.status, 2, "%s", r.err);
  cr_assert(strstr(r.err, file) != NULL, "%s", r.err);
  ts_run_free(&r);
}

Test(cli, a_missing_input_file_exits_2_naming_it)
{
  missing_input(ts_npusim("run", "/nonexistent/x.cfg", NULL), "/nonexistent/x.cfg");
  missing_input(ts_npusim("report", "/nonexistent/x.csv", NULL), "/nonexistent/x.csv");
  missing_input(ts_npusim("sweep", "/nonexistent/x.cfg", "-o", "/nonexistent/out.csv", NULL), "/nonexistent/x.cfg");
  missing_input(ts_npusim("merge", "/nonexistent/out.csv", "/nonexistent/x.csv", NULL), "/nonexistent/x.csv");
}

/* The times of a --json sweep of `collective`, in order (up to max). */
static int coll_times(const char *algo, double *t, int max)
{
  struct run_result r = ts_npusim("collective", "--op", "allreduce", "--arch", "atlas-800t-a2", "--bytes", "4KiB:256KiB",
                                  "--algo", algo, "--json", NULL);
  cr_assert_eq(r.status, 0, "--algo %s: %s", algo, r.err);
  int n = 0;
  for (const char *p = r.out; n < max && (p = strstr(p, "\"time_s\": ")); p += 10) t[n++] = atof(p + 10);
  ts_run_free(&r);
  return n;
}

/* On the 8-NPU server, auto picked the one-shot AllReduce up to 256 KiB, 18.1 us there against the
 * two-shot's 7.6 us: auto now takes the cheaper of the two by their alpha-beta costs, and the
 * name the table prints for one-shot is accepted by --algo. */
Test(cli, auto_allreduce_is_never_slower_than_one_or_two_shot)
{
  double a[16], one[16], two[16];
  int n = coll_times("auto", a, 16);
  cr_assert_eq(n, 7, "4 KiB .. 256 KiB");
  cr_assert_eq(coll_times("mesh(one-shot)", one, 16), n);
  cr_assert_eq(coll_times("mesh", two, 16), n);
  int ones = 0;
  for (int i = 0; i < n; i++) {
    double best = one[i] < two[i] ? one[i] : two[i];
    cr_expect(a[i] <= best * 1.001, "%d KiB: auto %g s, one-shot %g s, two-shot %g s", 4 << i, a[i], one[i], two[i]);
    ones += one[i] < two[i];
  }
  cr_expect(ones > 0 && ones < n, "the crossover lies inside the range (%d of %d sizes one-shot)", ones, n);
}

/* The algorithm and time of `collective` with args (NULL-terminated, up to 12), as --json gives them. */
static double coll_one(const char *const *args, char *algo, size_t n)
{
  const char *argv[20] = {"collective", "--json"};
  int k = 2;
  for (int i = 0; args[i]; i++) argv[k++] = args[i];
  argv[k] = NULL;
  struct run_result r = ts_npusim_argv(argv);
  cr_assert_eq(r.status, 0, "%s", r.err);
  const char *a = strstr(r.out, "\"algorithm\": \""), *t = strstr(r.out, "\"time_s\": ");
  cr_assert(a && t, "%s", r.out);
  a += strlen("\"algorithm\": \"");
  size_t len = strcspn(a, "\"");
  snprintf(algo, n, "%.*s", (int)len, a);
  double v = atof(t + 10);
  ts_run_free(&r);
  return v;
}

/* Every name the algorithm column prints is accepted by --algo and runs the same plan: NVLS, the
 * one-shot mesh, hierarchical and pipeline plans with their levels (which --algo refused). */
Test(cli, every_printed_algorithm_name_is_accepted_by_algo, .timeout = 120)
{
  static const char *const cases[][12] = {
      {"--op", "allreduce", "--arch", "dgx-h100", "--bytes", "8KiB", "--ranks", "8", NULL},
      {"--op", "allreduce", "--arch", "atlas-800t-a2", "--bytes", "64KiB", "--ranks", "8", NULL},
      {"--op", "allreduce", "--arch", "atlas-800t-a2", "--bytes", "1GiB", "--ranks", "16", "--set", "cluster.nodes=2", NULL},
      {"--op", "allgather", "--arch", "atlas-800t-a2", "--bytes", "64KiB", "--ranks", "16", "--set", "cluster.nodes=2", NULL},
      {"--op", "allgather", "--arch", "dgx-a100", "--bytes", "64MiB", "--ranks", "16", "--set", "cluster.nodes=2", NULL},
      {"--op", "alltoall", "--arch", "atlas-800t-a2", "--bytes", "1MiB", "--ranks", "16", "--set", "cluster.nodes=2", NULL},
  };
  int levels = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char algo[64], again[64];
    double t = coll_one(cases[c], algo, sizeof algo);
    levels += strchr(algo, '(') != NULL;
    const char *forced[14];
    int k = 0;
    for (int i = 0; cases[c][i]; i++) forced[k++] = cases[c][i];
    forced[k++] = "--algo";
    forced[k++] = algo;
    forced[k] = NULL;
    double u = coll_one(forced, again, sizeof again);
    cr_assert_str_eq(again, algo);
    cr_assert(fabs(u - t) <= 1e-9 * t, "%s: auto %.9g s, --algo %.9g s", algo, t, u);
  }
  cr_assert_geq(levels, 3, "plans with levels or one-shot among the cases");
  struct run_result r = ts_npusim("collective", "--op", "allreduce", "--arch", "atlas-800t-a2", "--bytes", "1GiB", "--ranks",
                                  "16", "--set", "cluster.nodes=2", "--algo", "pipeline(ring+ring)", NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  cr_assert(strstr(r.err, "--algo: 'pipeline' runs mesh inside servers and ring across them"), "%s", r.err);
  ts_run_free(&r);
}

/* A collective scenario's collective.algorithm takes the same names (it took the bare ones only):
 * a plan with levels runs as named; a misspelt one is refused with the file, line and key. */
Test(cli, a_collective_scenario_takes_every_printed_algorithm_name, .timeout = 60)
{
  char *dir = ts_tmpdir();
  char *ok = ts_write(dir, "h.cfg", "preset = \"atlas-800t-a2\";\ncluster = { nodes = 2; };\n"
                                    "collective = { op = \"allreduce\"; bytes = \"64MiB\"; algorithm = \"hierarchical(mesh+nhr)\"; };\n");
  struct run_result r = ts_npusim("run", ok, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "hierarchical(mesh+nhr)"), "%s", r.out);
  ts_run_free(&r);
  char *bad = ts_write(dir, "b.cfg", "preset = \"atlas-800t-a2\";\n"
                                     "collective = { op = \"allreduce\"; bytes = \"64MiB\";\n  algorithm = \"rign\"; };\n");
  r = ts_npusim("run", bad, NULL);
  cr_assert_eq(r.status, 2, "%s", r.out);
  cr_assert(strstr(r.err, "b.cfg:3: collective.algorithm: unknown algorithm 'rign'; did you mean 'ring'?"), "%s", r.err);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(ok);
  free(bad);
  free(dir);
}

/* Count the non-overlapping occurrences of needle in hay. */
static int count(const char *hay, const char *needle)
{
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + strlen(needle), needle)) n++;
  return n;
}

/* --html: one self-contained page (no script, no request to a network, closed tags) with the
 * key figures, a bar per stage in the breakdown and memory charts, the operators table; refused
 * for a kind without one and for a directory that cannot take it, before anything runs. */
Test(cli, run_html_writes_one_self_contained_page, .timeout = 120)
{
  char *dir = ts_tmpdir(), page[2048], cfg[2048];
  snprintf(page, sizeof page, "%s/step.html", dir);
  snprintf(cfg, sizeof cfg, "%s/tests/workloads/data/tiny.cfg", NPUSIM_SOURCE_DIR);
  char *html = ts_html_page(cfg, page, "plan.pp=2");
  cr_assert(strstr(html, "<h2>Step breakdown per stage</h2>") && strstr(html, "<h2>Memory per stage</h2>"), "%s", html);
  cr_assert(strstr(html, ">stage 0</text>") && strstr(html, ">stage 1</text>"), "a bar per stage: %s", html);
  cr_assert(strstr(html, "<title>gemm: "), "the categories' segments: %s", html);
  cr_assert(strstr(html, ">HBM "), "the HBM capacity marked: %s", html);
  cr_assert(strstr(html, "<th>operator</th>"), "%s", html);
  cr_assert_eq(count(html, "<svg"), count(html, "</svg>"));
  cr_assert_eq(count(html, "<svg"), 2);
  cr_assert_eq(count(html, "<table"), count(html, "</table>"));
  cr_assert_eq(count(html, "<tr>"), count(html, "</tr>"));
  free(html);
  /* a kernel scenario's page: its facts, a bar per busy pipe, the text report */
  snprintf(cfg, sizeof cfg, "%s/scenarios/gemm_910b2.cfg", NPUSIM_SOURCE_DIR);
  char other[2100];
  snprintf(other, sizeof other, "%s/kernel.html", dir);
  html = ts_html_page(cfg, other, NULL);
  cr_assert(strstr(html, "<title>gemm on ascend-910b2</title>") && strstr(html, "<h2>Pipes</h2>"), "%s", html);
  cr_assert(strstr(html, ">aic_mac_ratio</text>") && strstr(html, "<td>bottleneck</td><td>cube_bound</td>") && strstr(html, "<pre>gemm m="),
            "%s", html);
  cr_assert_eq(count(html, "<svg"), 1);
  free(html);
  /* a collective scenario's: algbw and busbw against what a device's links carry */
  snprintf(cfg, sizeof cfg, "%s/scenarios/allreduce_atlas_800t_a2.cfg", NPUSIM_SOURCE_DIR);
  snprintf(other, sizeof other, "%s/collective.html", dir);
  html = ts_html_page(cfg, other, NULL);
  cr_assert(strstr(html, "<h2>Bus bandwidth</h2>") && strstr(html, ">busbw</text>"), "%s", html);
  cr_assert(strstr(html, ">a device&#39;s links") || strstr(html, ">a device's links"), "the mark: %s", html);
  cr_assert(strstr(html, "# Avg bus bandwidth"), "the nccl-tests table: %s", html);
  free(html);
  /* a directory that does not exist: refused before the run */
  snprintf(cfg, sizeof cfg, "%s/tests/workloads/data/tiny.cfg", NPUSIM_SOURCE_DIR);
  snprintf(other, sizeof other, "%s/no/such/dir/step.html", dir);
  struct run_result r = ts_npusim("run", cfg, "--html", other, NULL);
  cr_assert_neq(r.status, 0);
  cr_assert(strstr(r.err, "--html: cannot write into"), "%s", r.err);
  cr_assert(strstr(r.out, "step time") == NULL, "the run did not happen: %s", r.out);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}

/* npusim kernel --parity from the command line: the cases run (batch sizes, tilings, cores), the
 * one that changes the output's bits named with its first differing element, the JSON count. */
Test(cli, kernel_parity_reports_which_changes_alter_the_bits, .timeout = 120)
{
  struct run_result r = ts_npusim("kernel", "rms_norm", "--rows", "64", "--hidden", "256", "--parity", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "  batch   rows=1 ") && strstr(r.out, "  cores   cores halved"), "%s", r.out);
  cr_assert(strstr(r.out, "  tiling  tile_cols=64 ") && strstr(r.out, "y[2]: "), "%s", r.out);
  cr_assert(strstr(r.out, "  result            1 of 9 compared cases change the output bits"), "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("kernel", "rms_norm", "--rows", "64", "--hidden", "256", "--parity", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"cases_differing\": 1,") && strstr(r.out, "\"kind\": \"tiling\""), "%s", r.out);
  ts_run_free(&r);
}

/* The run's HTML page rendered by a headless Chromium, where this machine has one (install-deps
 * does not add it: the test reports itself skipped without it): the browser parses the page and
 * its DOM holds the charts and the tables. */
Test(cli, run_html_renders_in_a_headless_browser, .timeout = 120)
{
  const char *browsers[] = {"chromium", "chromium-browser", "google-chrome", NULL};
  const char *browser = NULL;
  for (int i = 0; browsers[i] && !browser; i++) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", browsers[i]);
    if (system(cmd) == 0) browser = browsers[i];
  }
  if (!browser) cr_skip_test("no headless Chromium on this machine");
  char *dir = ts_tmpdir(), page[2048], cfg[2048], url[2100];
  snprintf(page, sizeof page, "%s/step.html", dir);
  snprintf(cfg, sizeof cfg, "%s/tests/workloads/data/tiny.cfg", NPUSIM_SOURCE_DIR);
  struct run_result r = ts_npusim("run", cfg, "--html", page, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  snprintf(url, sizeof url, "file://%s", page);
  char *argv[] = {(char *)browser, "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom", url, NULL};
  r = ts_run(argv, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "<svg") && strstr(r.out, "<rect") && strstr(r.out, "Step breakdown per stage"), "%s", r.out);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}
