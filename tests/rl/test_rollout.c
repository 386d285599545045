/*
 * test_rollout.c - the rollout on serve/'s engines against closed forms: a synchronous rollout
 * is a prefill step then the longest response's decode chain, the engine's overhead adds per
 * step, engines wait for the slowest, the KV cache bounds the batch, lengths are seeded.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "rl/rl_int.h"
#include "tests/rl/helpers.h"

static const char *sys1 = "preset = \"atlas-800t-a2\";";
static const char *plan1 = "tp = 1; zero = 1; recompute = \"full\";";

struct fix {
  struct rl_job job;
  struct sv_infer x;
  struct op_cache *cache;
  struct sv_colls colls;
};

/* One 910B2 engine of TP 1 (the job's engines set to 1) for 8 x 4 sequences of prompt_len; overrides in sets (may be NULL). */
static void fix_init(struct fix *f, int prompt_len, const char *const *sets)
{
  char rl[512];
  snprintf(rl, sizeof rl, "prompts = 8; group_size = 4; prompt_len = %d; response = { mean = 64; max = 4096; }; "
           "rollout = { tp = 1; };", prompt_len);
  char *path = tr_scenario(sys1, 2, plan1, rl);
  tr_load(&f->job, path, sets);
  free(path);
  f->job.engines = 1; /* one engine unless a test says otherwise */
  f->cache = op_cache_open(NULL, NULL);
  memset(&f->colls, 0, sizeof f->colls);
  const struct rl_spec *s = &f->job.spec;
  struct sv_target tg = {&f->job.model, &f->job.sys, f->job.run.fidelity, f->job.path, "rl.rollout.tp"};
  struct sv_infer_shape sh = {s->rollout.max_batched_tokens, 256, prompt_len + 4096, 256, 0};
  struct npu_diag d;
  cr_assert_eq(sv_infer_init(&f->x, &tg, f->cache, &f->colls, RL_GROUP_ROLLOUT_TP, 1, false, &sh, &s->rollout.engine, &d),
               0, "%s", d.msg);
}

static void fix_fini(struct fix *f)
{
  sv_colls_release(&f->colls);
  op_cache_close(f->cache);
  rl_job_release(&f->job);
}

/* The token count of a decode-only step: the next of vLLM's graph sizes. */
static int padded(int b)
{
  int g[SV_GRAPH_MAX];
  int n = sv_graph_sizes(256, g);
  for (int i = 0; i < n; i++)
    if (g[i] >= b) return g[i];
  return b;
}

/* One engine's rollout step by step when every prompt fits one step's token budget: a prefill
 * step of all n prompts (each samples its first token), then decode step k = 1, 2, ... of the
 * sequences still running, each reading P + k tokens of context. */
static double chain(const struct sv_infer *x, const int *len, int n, int P, double *prefill_s)
{
  struct sv_step pre = {n * P, n, n, 0, 0, (double)n * P * (P / 2.0), P, 0, 0, 0, 0};
  double t = sv_step_s(x, &pre, NULL);
  if (prefill_s) *prefill_s = t;
  int longest = 0;
  for (int i = 0; i < n; i++) longest = len[i] > longest ? len[i] : longest;
  for (int k = 1; k < longest; k++) {
    int b = 0;
    double ctx = 0;
    for (int i = 0; i < n; i++)
      if (len[i] > k) b++, ctx += P + k;
    struct sv_step s = {padded(b), b, b, b, ctx, 0, 0, 0, 0, 0, 0};
    t += sv_step_s(x, &s, NULL);
  }
  return t;
}

static long plenty = 1L << 30; /* KV blocks: never the limit */

Test(rl_rollout, sync_rollout_is_the_longest_responses_step_chain, .timeout = 60)
{
  struct fix f;
  fix_init(&f, 256, NULL);
  int len[16];
  for (int i = 0; i < 16; i++) len[i] = 40 + 7 * i;
  len[5] = 900; /* a straggler */
  struct rl_rollout_stats st;
  rl__rollout(&f.x, &f.job, len, 16, 256, plenty, &st);
  double pre;
  tr_close(st.time_s, chain(&f.x, len, 16, 256, &pre), 1e-9, "rollout time");
  cr_assert_eq(st.longest, 900);
  cr_assert_eq(st.decode_steps, 900, "a prefill step and 899 decode steps");
  tr_close(st.prefill_s, pre, 1e-9, "one prefill step");
  tr_close(st.tail_s, st.time_s, 1e-12, "all admitted in the first step: the drain is the whole rollout");
  /* fixed lengths: every step has the whole batch */
  int fixed[16];
  for (int i = 0; i < 16; i++) fixed[i] = 128;
  rl__rollout(&f.x, &f.job, fixed, 16, 256, plenty, &st);
  tr_close(st.time_s, chain(&f.x, fixed, 16, 256, NULL), 1e-9, "fixed lengths");
  tr_close(st.mean_batch, 16, 1e-12, "mean batch");
  fix_fini(&f);
}

/* n responses of L tokens, all admitted at once: the engine's time beyond its kernels adds
 * L x (step_overhead + n x seq_overhead) to the rollout, one step's worth to the prefill. */
Test(rl_rollout, fixed_lengths_grow_by_steps_times_the_overhead, .timeout = 60)
{
  struct fix f, g;
  fix_init(&f, 256, NULL);
  const char *sets[] = {"rl.rollout.step_overhead=0s", "rl.rollout.seq_overhead=0s", NULL};
  fix_init(&g, 256, sets);
  const int n[] = {1, 12};
  for (int i = 0; i < 2; i++) {
    int len[12];
    for (int j = 0; j < n[i]; j++) len[j] = 300;
    struct rl_rollout_stats with, without;
    rl__rollout(&f.x, &f.job, len, n[i], 256, plenty, &with);
    rl__rollout(&g.x, &g.job, len, n[i], 256, plenty, &without);
    const struct sv_engine_time *et = &f.job.spec.rollout.engine; /* the defaults, at TP 1 */
    tr_close(with.time_s - without.time_s, 300 * (et->step_s + n[i] * et->seq_s), 1e-9, "300 steps x overhead");
    tr_close(with.prefill_s - without.prefill_s, et->step_s + n[i] * et->seq_s, 1e-9, "the prefill step's overhead");
    cr_assert_eq(with.decode_steps, 300);
  }
  fix_fini(&g);
  fix_fini(&f);
}

Test(rl_rollout, engines_wait_for_the_slowest, .timeout = 60)
{
  struct fix f;
  fix_init(&f, 256, NULL);
  int len[16];
  for (int i = 0; i < 16; i++) len[i] = i < 8 ? 100 : 500; /* engine 0 gets the short half */
  struct rl_job two = f.job;
  two.engines = 2;
  struct rl_rollout_stats st;
  rl__rollout(&f.x, &two, len, 16, 256, plenty, &st);
  double t0 = chain(&f.x, len, 8, 256, NULL), t1 = chain(&f.x, len + 8, 8, 256, NULL);
  tr_close(st.time_s, t1, 1e-9, "the slow engine");
  tr_close(st.idle_s, (t1 - t0) / 2, 1e-9, "mean idle of the engines");
  fix_fini(&f);
}

Test(rl_rollout, kv_cache_bounds_the_batch, .timeout = 60)
{
  struct fix f;
  fix_init(&f, 128, NULL);
  int len[8];
  for (int i = 0; i < 8; i++) len[i] = 100;
  /* 128 + 100 tokens take 15 blocks of 16: 30 blocks hold two sequences at a time, four waves */
  struct rl_rollout_stats st;
  rl__rollout(&f.x, &f.job, len, 8, 128, 30, &st);
  int pair[2] = {100, 100};
  tr_close(st.time_s, 4 * chain(&f.x, pair, 2, 128, NULL), 1e-9, "four waves");
  tr_close(st.mean_batch, 2, 1e-12, "batch of two");
  fix_fini(&f);
}

Test(rl_rollout, lengths_are_seeded_and_clipped, .timeout = 30)
{
  struct rl_spec s;
  memset(&s, 0, sizeof s);
  s.response.distribution = RL_DIST_LOGNORMAL;
  s.response.mean = 1000;
  s.response.sigma = 0.5;
  s.response.min = 1;
  s.response.max = 1000000;
  s.seed = 7;
  enum { N = 20000 };
  int *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
  rl__draw_lengths(&s, N, a);
  rl__draw_lengths(&s, N, b);
  cr_assert(!memcmp(a, b, N * sizeof *a), "same seed, same lengths");
  double sum = 0;
  for (int i = 0; i < N; i++) sum += a[i];
  tr_close(sum / N, 1000 * exp(0.125), 0.02, "lognormal mean = median x exp(sigma^2 / 2)");
  s.seed = 8;
  rl__draw_lengths(&s, N, b);
  cr_assert(memcmp(a, b, N * sizeof *a), "another seed, other lengths");
  s.response.max = 1200;
  s.response.min = 900;
  rl__draw_lengths(&s, N, a);
  for (int i = 0; i < N; i++) cr_assert(a[i] >= 900 && a[i] <= 1200, "clipped: %d", a[i]);
  s.response.distribution = RL_DIST_UNIFORM;
  s.response.min = 10;
  s.response.mean = 20;
  rl__draw_lengths(&s, N, a);
  sum = 0;
  for (int i = 0; i < N; i++) {
    cr_assert(a[i] >= 10 && a[i] <= 30);
    sum += a[i];
  }
  tr_close(sum / N, 20, 0.01, "uniform mean");
  free(a);
  free(b);
}

Test(rl_rollout, histogram_draws_follow_the_weights, .timeout = 30)
{
  struct rl_spec s;
  memset(&s, 0, sizeof s);
  s.response.distribution = RL_DIST_HISTOGRAM;
  s.response.min = 1;
  s.response.max = 4096;
  s.response.hist_n = 3;
  s.response.hist_len[0] = 100, s.response.hist_w[0] = 1;
  s.response.hist_len[1] = 1000, s.response.hist_w[1] = 2;
  s.response.hist_len[2] = 4000, s.response.hist_w[2] = 1;
  s.seed = 3;
  enum { N = 40000 };
  int *a = malloc(N * sizeof *a);
  rl__draw_lengths(&s, N, a);
  int c[3] = {0, 0, 0};
  for (int i = 0; i < N; i++) {
    cr_assert(a[i] == 100 || a[i] == 1000 || a[i] == 4000, "%d is no bin", a[i]);
    c[a[i] == 100 ? 0 : a[i] == 1000 ? 1 : 2]++;
  }
  tr_close(c[0] / (double)N, 0.25, 0.03, "bin 100");
  tr_close(c[1] / (double)N, 0.50, 0.03, "bin 1000");
  tr_close(c[2] / (double)N, 0.25, 0.03, "bin 4000");
  free(a);
}
