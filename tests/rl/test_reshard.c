/*
 * test_reshard.c - weight synchronisation bytes against the layout arithmetic.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "rl/rl_int.h"
#include "tests/rl/helpers.h"

static const char *sys2 = "preset = \"atlas-800t-a2\"; cluster = { nodes = 2; };";

static double *matrix_of(const struct rl_job *job, double *sent, double *needed)
{
  double *m = calloc((size_t)job->devices * job->devices, sizeof *m);
  *sent = rl__reshard_matrix(job, m, needed, NULL);
  return m;
}

Test(rl_reshard, same_layout_colocated_moves_nothing, .timeout = 30)
{
  char *path = tr_scenario(sys2, 0, "tp = 2; zero = 1;", "prompts = 4; group_size = 2; prompt_len = 128; "
                           "response = { mean = 128; max = 128; }; rollout = { tp = 2; };");
  struct rl_job job;
  tr_load(&job, path, NULL);
  double sent, needed, *m = matrix_of(&job, &sent, &needed);
  cr_assert_eq(sent, 0);
  tr_close(needed, 16 * 2.0 * wl_model_params(&job.model) / 2, 1e-12, "every device's rollout shard");
  free(m);
  rl_job_release(&job);
  free(path);
}

Test(rl_reshard, tp2_to_tp4_moves_the_non_overlapping_quarters, .timeout = 30)
{
  char *path = tr_scenario(sys2, 0, "tp = 2; zero = 1;", "prompts = 4; group_size = 2; prompt_len = 128; "
                           "response = { mean = 128; max = 128; }; rollout = { tp = 4; };");
  struct rl_job job;
  tr_load(&job, path, NULL);
  double sent, needed, *m = matrix_of(&job, &sent, &needed);
  /* device g holds columns [t/2, (t+1)/2) with t = g % 2 and needs [r/4, (r+1)/4) with r = g % 4: ranks with
   * r = 0, 3 hold their quarter already, r = 1, 2 need all of it */
  double P = wl_model_params(&job.model);
  tr_close(sent, 8 * 2.0 * P / 4, 1e-12, "half the devices receive a quarter");
  for (int q = 0; q < 16; q++) {
    double in = 0;
    for (int s = 0; s < 16; s++) in += m[s * 16 + q];
    int r = q % 4;
    tr_close(in, r == 1 || r == 2 ? 2.0 * P / 4 : 0, 1e-12, "received");
    /* sources sit on the same server */
    for (int s = 0; s < 16; s++)
      if (m[s * 16 + q] > 0) cr_assert_eq(s / 8, q / 8, "piece for %d from %d on another server", q, s);
  }
  free(m);
  rl_job_release(&job);
  free(path);
}

Test(rl_reshard, pipeline_stages_send_the_other_layers, .timeout = 30)
{
  char *path = tr_scenario(sys2, 0, "tp = 1; pp = 2; zero = 1;", "prompts = 4; group_size = 2; prompt_len = 128; "
                           "response = { mean = 128; max = 128; }; rollout = { tp = 1; };");
  struct rl_job job;
  tr_load(&job, path, NULL);
  double sent, needed, *m = matrix_of(&job, &sent, &needed);
  const struct wl_model *md = &job.model;
  /* stage 0: layers 0-15 and the embedding; stage 1: layers 16-31, the final norm and the output projection */
  double s0 = 16 * wl_model_layer_params(md, 0) + (double)md->vocab * md->hidden;
  double s1 = wl_model_params(md) - s0;
  tr_close(sent, 8 * 2.0 * s1 + 8 * 2.0 * s0, 1e-12, "each device receives the other stage's layers");
  free(m);
  rl_job_release(&job);
  free(path);
}

Test(rl_reshard, disaggregated_pools_move_every_shard, .timeout = 30)
{
  char *path = tr_scenario("preset = \"atlas-800t-a2\"; cluster = { nodes = 4; };", 0, "tp = 2; zero = 1;",
                           "placement = \"disaggregated\"; rollout = { devices = 8; tp = 1; }; prompts = 4; "
                           "group_size = 2; prompt_len = 128; response = { mean = 128; max = 128; };");
  struct rl_job job;
  tr_load(&job, path, NULL);
  cr_assert_eq(job.train_devices, 24);
  cr_assert_eq(job.rollout_first, 24);
  double sent, needed, *m = matrix_of(&job, &sent, &needed);
  double P = wl_model_params(&job.model);
  tr_close(sent, 8 * 2.0 * P, 1e-12, "eight full copies");
  tr_close(needed, sent, 1e-12, "nothing kept");
  for (int s = 0; s < 32; s++)
    for (int q = 0; q < 32; q++)
      if (m[s * 32 + q] > 0) cr_assert(s < 24 && q >= 24, "from training ranks to rollout ranks only: %d -> %d", s, q);
  free(m);
  rl_job_release(&job);
  free(path);
}
