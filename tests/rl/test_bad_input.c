/*
 * test_bad_input.c - RL scenarios that cannot run: exit status 2, file:line, the key and what is
 * wrong; nothing written.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rl/rl.h"
#include "tests/rl/helpers.h"
#include "tests/support/support.h"

static const char *sys4 = "preset = \"atlas-800t-a2\"; cluster = { nodes = 4; };";
static const char *plan2 = "tp = 2; zero = 1;";

/* Run the scenario with -o into a fresh directory; expect exit 2, the message, and no outputs. */
static void refused(const char *system, const char *rl, const char *set, const char *want)
{
  char *path = tr_scenario(system, 4, plan2, rl);
  char *dir = ts_tmpdir();
  char out[1024];
  snprintf(out, sizeof out, "%s/out", dir);
  struct run_result r = set ? ts_npusim("run", path, "-o", out, "--set", set, NULL) : ts_npusim("run", path, "-o", out, NULL);
  cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
  cr_assert_str_eq(r.out, "");
  char full[2048];
  if (!strncmp(want, "command line", 12)) snprintf(full, sizeof full, "error: %s\n", want);
  else snprintf(full, sizeof full, "error: %s%s\n", path, want);
  cr_assert_str_eq(r.err, full);
  struct stat st;
  cr_assert_neq(stat(out, &st), 0, "nothing written");
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
  free(path);
}

static const char *base = "prompts = 8; group_size = 4; prompt_len = 128; response = { mean = 128; max = 512; };";

Test(rl_bad_input, placement_needs_more_devices_than_the_cluster, .timeout = 30)
{
  char rl[512];
  snprintf(rl, sizeof rl, "%s placement = \"disaggregated\";\n rollout = { devices = 24; }; train = { devices = 16; };",
           base);
  refused(sys4, rl, NULL, ":5: rl.rollout.devices: the placement needs 40 devices (rollout 24 + training 16), but "
                          "the cluster has 32");
}

Test(rl_bad_input, colocated_on_more_devices_than_the_cluster, .timeout = 30)
{
  refused(sys4, base, "rl.rollout.devices=64",
          "command line: rl.rollout.devices: the placement needs 64 devices, but the cluster has 32");
}

Test(rl_bad_input, rollout_batch_that_cannot_fit_in_hbm, .timeout = 30)
{
  char rl[512];
  snprintf(rl, sizeof rl, "prompts = 8; group_size = 4; prompt_len = 128;\nresponse = { mean = 128; max = 20000000; };");
  char *path = tr_scenario(sys4, 4, plan2, rl);
  struct run_result r = ts_npusim("run", path, NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  char want[1200];
  snprintf(want, sizeof want, "error: %s:5: rl.response.max: the rollout batch cannot fit in HBM: one sequence of "
           "128 + 20000000 tokens needs ", path);
  cr_assert(!strncmp(r.err, want, strlen(want)), "%s", r.err);
  cr_assert(strstr(r.err, "GiB are left after the weights"), "%s", r.err);
  ts_run_free(&r);
  free(path);
}

Test(rl_bad_input, weights_that_do_not_fit, .timeout = 30)
{
  char *path = tr_scenario(sys4, 0, plan2, base);
  struct run_result r = ts_npusim("run", path, "--set", "rl.rollout.memory_utilization=0.2", NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  cr_assert(strstr(r.err, ": rl.rollout.tp: the rollout batch cannot fit in HBM: the policy's weights take 14.96 GiB "
                          "per device at tp 1, more than the 12.80 GiB the engine may use\n"), "%s", r.err);
  ts_run_free(&r);
  free(path);
}

Test(rl_bad_input, resharding_to_an_incompatible_layout, .timeout = 30)
{
  char rl[512];
  snprintf(rl, sizeof rl, "%s\nrollout = { tp = 3; };", base);
  refused("preset = \"atlas-800t-a2\"; cluster = { nodes = 3; };", rl, NULL,
          ":5: rl.rollout.tp: cannot reshard to the rollout layout: tp 3 does not divide the 32 attention heads");
  refused(sys4, base, "rl.rollout.expert_parallel=true",
          "command line: rl.rollout.expert_parallel: expert parallelism needs an MoE model");
}

Test(rl_bad_input, async_needs_separate_pools, .timeout = 30)
{
  refused(sys4, base, "rl.mode=async",
          "command line: rl.mode: one-step asynchronous RL overlaps rollout and training on separate devices: it "
          "needs rl.placement = \"disaggregated\"");
}

Test(rl_bad_input, grpo_needs_a_group_and_pools_whole_servers, .timeout = 30)
{
  refused(sys4, base, "rl.group_size=1",
          "command line: rl.group_size: GRPO normalises rewards within a group of responses: group_size needs at "
          "least 2, got 1");
  char rl[512];
  snprintf(rl, sizeof rl, "%s placement = \"disaggregated\";\n rollout = { devices = 12; };", base);
  refused(sys4, rl, NULL, ":5: rl.rollout.devices: a pool of 20 devices is not whole servers of 8 devices");
}

Test(rl_bad_input, unknown_key_with_a_suggestion, .timeout = 30)
{
  refused(sys4, base, "rl.promts=3",
          "command line: rl.promts: unknown key; did you mean 'rl.prompts'?");
}

Test(rl_bad_input, every_rl_key_is_in_the_scenario_reference, .timeout = 30)
{
  char *doc = ts_read(NPUSIM_SOURCE_DIR "/docs/SCENARIOS.md");
  cr_assert(doc != NULL);
  const struct npu_table *t = rl_spec_table();
  for (size_t i = 0; i < t->nparams; i++) {
    char want[256];
    snprintf(want, sizeof want, "| `%s` |", t->params[i].name);
    cr_assert(strstr(doc, want) != NULL, "docs/SCENARIOS.md does not list %s", t->params[i].name);
  }
  free(doc);
}

Test(rl_bad_input, histograms_are_checked, .timeout = 30)
{
  const char *rl = "prompts = 8; group_size = 4; prompt_len = 128;\nresponse = { distribution = \"histogram\"; max = 512; "
                   "histogram = \"100:1, 300\"; };";
  refused(sys4, rl, NULL, ":5: rl.response.histogram: expected \"LEN:WEIGHT, ...\", got '300'");
  refused(sys4, rl, "rl.response.histogram=100:1, 900:2",
          "command line: rl.response.histogram: length 900 is outside 1..rl.response.max (512)");
  refused(sys4, rl, "rl.response.histogram=100:0", "command line: rl.response.histogram: a histogram needs at least "
                                                   "one bin of positive weight");
  refused(sys4, base, "rl.response.histogram=100:1",
          "command line: rl.response.histogram: a histogram needs rl.response.distribution = \"histogram\"");
  /* a good one runs */
  char *path = tr_scenario(sys4, 2, plan2, rl);
  struct run_result r = ts_npusim("run", path, "--set", "rl.response.histogram=100:1, 400:3", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "responses a histogram of 2 bins, max 512 (seed 1): longest 400"), "%s", r.out);
  ts_run_free(&r);
  free(path);
}
