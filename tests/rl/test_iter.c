/*
 * test_iter.c - whole iterations: the phases add up (synchronous) or overlap (asynchronous),
 * the algorithms have their roles, outputs are deterministic.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rl/rl.h"
#include "tests/rl/helpers.h"
#include "tests/support/support.h"

static const char *sys2 = "preset = \"atlas-800t-a2\"; cluster = { nodes = 2; };";
static const char *plan2 = "tp = 2; zero = 1; recompute = \"full\";";
static const char *rl_disagg =
    "placement = \"disaggregated\"; rollout = { devices = 8; tp = 2; }; prompts = 16; group_size = 4; "
    "prompt_len = 256; response = { distribution = \"lognormal\"; mean = 256; sigma = 0.8; max = 1792; };";

static void run(const char *path, const char *const *sets, struct rl_job *job, struct rl_result *res)
{
  tr_load(job, path, sets);
  struct npu_diag d;
  npu_diag_clear(&d);
  int rc = rl_run(job, NULL, res, &d);
  cr_assert_eq(rc, 0, "%s", d.msg);
}

static double pool_chain(const struct rl_result *r, int pool)
{
  double t = 0;
  for (int i = 0; i < r->nphases; i++)
    if (r->phase[i].pool == pool) t += r->phase[i].time_s;
  return t;
}

static int find(const struct rl_result *r, const char *name)
{
  for (int i = 0; i < r->nphases; i++)
    if (!strcmp(r->phase[i].name, name)) return i;
  return -1;
}

Test(rl_iter, sync_phases_add_up_async_overlaps, .timeout = 120)
{
  char *path = tr_scenario(sys2, 4, plan2, rl_disagg);
  struct rl_job job;
  struct rl_result sync, async;
  run(path, NULL, &job, &sync);
  rl_job_release(&job);
  const char *sets[] = {"rl.mode=async", NULL};
  run(path, sets, &job, &async);
  rl_job_release(&job);
  double sum = 0;
  for (int i = 0; i < sync.nphases; i++) {
    tr_close(sync.phase[i].start_s, sum, 1e-12, "phases one after another");
    sum += sync.phase[i].time_s;
  }
  tr_close(sync.iteration_s, sum, 1e-12, "sync: the sum of the phases");
  /* steady state of one-step async: max(rollout, the training pool's chain with the weight sync) */
  double roll = pool_chain(&async, RL_POOL_ROLLOUT), train = pool_chain(&async, RL_POOL_TRAIN);
  tr_close(async.iteration_s, fmax(roll, train), 1e-12, "async: max(rollout, train + sync)");
  tr_close(roll, sync.rollout.time_s, 1e-12, "the same rollout");
  cr_assert_lt(async.iteration_s, sync.iteration_s);
  cr_assert_gt(sync.phase[find(&sync, "weight_sync")].time_s, 0, "pools apart: the weights cross the network");
  cr_assert_gt(sync.sync_bytes, 0);
  free(path);
}

Test(rl_iter, ppo_has_a_critic_grpo_does_not, .timeout = 120)
{
  char *path = tr_scenario(sys2, 4, plan2, rl_disagg);
  struct rl_job job;
  struct rl_result grpo, ppo;
  run(path, NULL, &job, &grpo);
  rl_job_release(&job);
  const char *sets[] = {"rl.algorithm=ppo", "rl.group_size=1", "rl.prompts=64", "rl.reward=model", NULL};
  run(path, sets, &job, &ppo);
  rl_job_release(&job);
  cr_assert_eq(find(&grpo, "critic_train"), -1);
  cr_assert_eq(find(&grpo, "critic_inference"), -1);
  int ct = find(&ppo, "critic_train"), at = find(&ppo, "actor_train");
  cr_assert(ct >= 0 && find(&ppo, "critic_inference") >= 0);
  tr_close(ppo.phase[ct].time_s, ppo.phase[at].time_s, 1e-12, "critic of the actor's architecture");
  cr_assert_gt(ppo.phase[find(&ppo, "reward")].time_s, 0, "a reward model runs on the devices");
  /* the same 64 sequences and lengths (same seed): the same rollout */
  tr_close(ppo.rollout.time_s, grpo.rollout.time_s, 1e-12, "same rollout");
  free(path);
}

Test(rl_iter, colocated_pays_the_host_link, .timeout = 120)
{
  char *path = tr_scenario(sys2, 4, plan2, "prompts = 16; group_size = 4; prompt_len = 256; "
                           "response = { mean = 256; max = 1792; }; rollout = { tp = 2; };");
  struct rl_job job;
  struct rl_result r;
  run(path, NULL, &job, &r);
  int reload = find(&r, "reload"), off = find(&r, "offload");
  cr_assert(reload >= 0 && off >= 0);
  /* optimizer states, gradients and weights of the actor, the reference weights: per device over the host link */
  double per_dev = r.phase[reload].bytes / job.train_devices;
  tr_close(r.phase[reload].time_s, per_dev / job.spec.host_bw_bytes_per_s, 1e-12, "bytes / host bandwidth");
  cr_assert_gt(per_dev, 0);
  cr_assert_eq(r.sync_bytes, 0, "same TP, no pipeline: every device keeps its shard");
  tr_close(r.util_rollout, r.util_train, 1e-12, "one pool");
  rl_job_release(&job);
  free(path);
}

Test(rl_iter, outputs_are_byte_identical, .timeout = 120)
{
  char *path = tr_scenario(sys2, 4, plan2, rl_disagg);
  char *dir = ts_tmpdir();
  char a[1024], b[1024];
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  struct run_result r1 = ts_npusim("run", path, "-o", a, "--trace", NULL);
  cr_assert_eq(r1.status, 0, "%s", r1.err);
  struct run_result r2 = ts_npusim("run", path, "-o", b, "--trace", NULL);
  cr_assert_eq(r2.status, 0, "%s", r2.err);
  cr_assert_str_eq(r1.out, r2.out);
  const char *files[] = {"summary.json", "summary.csv", "trace.json"};
  for (int i = 0; i < 3; i++) {
    char pa[1100], pb[1100];
    snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
    snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
    char *x = ts_read(pa), *y = ts_read(pb);
    cr_assert(x && y, "%s", files[i]);
    cr_assert_str_eq(x, y, "%s differs", files[i]);
    free(x);
    free(y);
  }
  /* the contract scripts rely on */
  snprintf(a + strlen(a), sizeof a - strlen(a), "/summary.json");
  char *js = ts_read(a);
  cr_assert(strstr(js, "\"iteration_time_s\": ") && strstr(js, "\"phases\": [") && strstr(js, "\"name\": \"rollout\"") &&
            strstr(js, "\"time_s\": ") && strstr(js, "\"seed\": 1"), "%s", js);
  free(js);
  /* another seed, other lengths */
  struct run_result r3 = ts_npusim("run", path, "--set", "rl.seed=2", NULL);
  cr_assert_eq(r3.status, 0, "%s", r3.err);
  cr_assert_str_neq(r1.out, r3.out);
  ts_run_free(&r1);
  ts_run_free(&r2);
  ts_run_free(&r3);
  ts_rmtree(dir);
  free(dir);
  free(path);
}

/* --html on an RL iteration: the page with a bar per phase and the phase table. */
Test(rl_iter, an_iteration_writes_an_html_page, .timeout = 120)
{
  char *path = tr_scenario(sys2, 4, plan2, rl_disagg);
  char *dir = ts_tmpdir(), page[1100];
  snprintf(page, sizeof page, "%s/rl.html", dir);
  char *html = ts_html_page(path, page, NULL);
  cr_assert(strstr(html, "<h2>Phases</h2>") && strstr(html, ">rollout</text>") && strstr(html, "<td>rollout</td>"),
            "%s", html);
  free(html);
  ts_rmtree(dir);
  free(dir);
  free(path);
}
