/* test_scenario.c - the scenario layer: the table of kinds, detection from the parsed
 * configuration, every kind's columns, runs in a child process. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scenario/scenario.h"
#include "tests/support/support.h"
#include "workloads/isolate.h"

TestSuite(scenario, .timeout = 120);

#define SCN NPUSIM_SOURCE_DIR "/scenarios/"
#define TINY NPUSIM_SOURCE_DIR "/tests/workloads/data/tiny.cfg"

Test(scenario, the_table_names_five_kinds)
{
  cr_assert_str_eq(scn_kind_names(), "rl, serve, training, kernel, collective");
  int n;
  const struct scn_kind *const *k = scn_kinds(&n);
  cr_assert_eq(n, 5);
  for (int i = 0; i < n; i++) cr_assert_eq(scn_kind_find(k[i]->name), k[i]);
  cr_assert_null(scn_kind_find("inference"));
}

static const char *kind_of(const char *path, const char *const *sets, int nsets)
{
  const struct scn_kind *k;
  struct npu_diag d;
  npu_diag_clear(&d);
  int rc = scn_detect(&k, path, sets, nsets, &d);
  cr_assert_eq(rc, 0, "%s: %s", path, d.msg);
  return k ? k->name : "none";
}

Test(scenario, detection_reads_the_parsed_sections)
{
  cr_assert_str_eq(kind_of(SCN "default.cfg", NULL, 0), "training");
  cr_assert_str_eq(kind_of(SCN "rl_grpo_llama8b_910b_colocated.cfg", NULL, 0), "rl");
  cr_assert_str_eq(kind_of(SCN "serve_llama8b_h100.cfg", NULL, 0), "serve");
  cr_assert_str_eq(kind_of(SCN "gemm_910b2.cfg", NULL, 0), "kernel");
  cr_assert_str_eq(kind_of(SCN "allreduce_atlas_800t_a2.cfg", NULL, 0), "collective");
  /* an override opens a section: the kind follows */
  const char *rl[] = {"rl.prompts=4"};
  cr_assert_str_eq(kind_of(TINY, rl, 1), "rl");
  const char *sv[] = {"serve.requests=4"};
  cr_assert_str_eq(kind_of(TINY, sv, 1), "serve");
  /* text that merely looks like a section (in a string or a comment) is not one */
  char *dir = ts_tmpdir();
  char *sys = ts_write(dir, "sys.cfg", "preset = \"ascend-910b2\";\n# rl = { prompts = 4; };\n"
                                       "chip = { name = \"kernel = x\"; };\n");
  cr_assert_str_eq(kind_of(sys, NULL, 0), "none");
  /* detection reads which sections are given; a wrong key inside one is the kind's load's error,
   * located */
  char *bad = ts_write(dir, "bad.cfg", "preset = \"ascend-910b2\";\nrl = { prompt = 4; };\n");
  cr_assert_str_eq(kind_of(bad, NULL, 0), "rl");
  struct scn_scenario *sc = NULL;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_neq(scn_load(&sc, NULL, bad, NULL, 0, &d), 0);
  cr_assert_null(sc);
  char msg[512];
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert(strstr(msg, "bad.cfg:2: rl.prompt: unknown key; did you mean 'rl.prompts'?") != NULL, "%s", msg);
  /* a file whose sections cannot be told is the full loader's error, located */
  char *typo = ts_write(dir, "typo.cfg", "preset = \"ascend-910b2\";\nrll = { prompts = 4; };\n");
  const struct scn_kind *k;
  npu_diag_clear(&d);
  cr_assert_neq(scn_detect(&k, typo, NULL, 0, &d), 0);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert(strstr(msg, "typo.cfg:2: rll: unknown key; did you mean 'rl'?") != NULL, "%s", msg);
  ts_rmtree(dir);
  free(sys);
  free(bad);
  free(typo);
  free(dir);
}

/* Every kind's columns: unique names, units in the names as the conventions have them. */
Test(scenario, every_kind_declares_its_columns_once)
{
  int n;
  const struct scn_kind *const *k = scn_kinds(&n);
  for (int i = 0; i < n; i++) {
    const struct rpt_column *cols = k[i]->columns();
    int m = rpt_columns_count(cols);
    cr_assert_gt(m, 10, "%s", k[i]->name);
    cr_assert_leq(m, SCN_OUTCOME_MAX_COLUMNS);
    for (int c = 0; c < m; c++) {
      char name[128], desc[512];
      int idx;
      const struct rpt_column *col = rpt_columns_at(cols, c, &idx, name, sizeof name, desc, sizeof desc);
      cr_assert_eq(rpt_columns_find(cols, name), c, "%s: %s twice", k[i]->name, name);
      cr_assert(desc[0] && !strstr(desc, "%s"), "%s: %s", k[i]->name, name);
      size_t l = strlen(name);
      if (!strcmp(col->unit, "s")) cr_assert(l > 2 && !strcmp(name + l - 2, "_s"), "%s", name);
      if (!strcmp(col->unit, "bytes")) cr_assert(strstr(name, "bytes") != NULL, "%s", name);
      if (!strcmp(col->unit, "bytes/s")) cr_assert(l > 12 && !strcmp(name + l - 12, "_bytes_per_s"), "%s", name);
    }
    cr_assert_eq(rpt_columns_find(cols, "scenario"), 0, "%s", k[i]->name);
  }
}

/* A scenario run in a child brings back its columns' numbers; the training replay's own
 * isolated run agrees. */
Test(scenario, isolated_run_brings_back_the_columns)
{
  const char *sets[] = {"plan.pp=2", "plan.global_batch=8"};
  struct scn_outcome o;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(scn_run_isolated(NULL, TINY, sets, 2, &o, &d), 0, "%s", d.msg);
  cr_assert_eq(o.status, 0, "%s", o.message);
  cr_assert_str_eq(o.kind, "training");
  double step, dev, mem;
  cr_assert(scn_outcome_number(&o, "step_time_s", &step));
  cr_assert(scn_outcome_number(&o, "devices", &dev));
  cr_assert(scn_outcome_number(&o, "memory_activations_bytes", &mem));
  cr_assert(!scn_outcome_number(&o, "bottleneck", &mem)); /* text */
  cr_assert(!scn_outcome_number(&o, "iteration_time_s", &mem));
  struct wl_outcome w;
  cr_assert_eq(wl_run_isolated(TINY, sets, 2, &w, &d), 0);
  cr_assert_eq(step, w.step_time_s);
  cr_assert_eq(dev, w.devices);
  cr_assert_eq(mem, w.memory_activations_bytes);
  /* a failure is the child's located message */
  const char *bad[] = {"plan.tp=3"};
  cr_assert_eq(scn_run_isolated(NULL, TINY, bad, 1, &o, &d), 0);
  cr_assert_neq(o.status, 0);
  cr_assert(strstr(o.message, "plan.tp") != NULL, "%s", o.message);
}
