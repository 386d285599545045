/* test_engine.c - the shared inference engine's scheduler against closed forms (serve/engine.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "serve/engine.h"
#include "serve/workload.h"
#include "../support/support.h"

/* Every step costs 1 ms, whatever it holds. */
static double fixed_step(const void *ctx, const struct sv_step *s, double parts[SV_PART_COUNT])
{
  (void)ctx;
  (void)s;
  memset(parts, 0, SV_PART_COUNT * sizeof parts[0]);
  parts[SV_PART_ENGINE] = 1e-3;
  return 1e-3;
}

static struct sv_engine_cfg cfg_of(long blocks, bool reserve)
{
  struct sv_engine_cfg c = {.max_seqs = 8, .token_budget = 512, .kv_blocks = blocks, .block_tokens = 16,
                            .chunked = true, .reserve_full = reserve, .replicas = 1, .route = SV_ROUTE_ROUND_ROBIN};
  return c;
}

Test(engine, one_request_prefills_then_decodes_one_token_per_step)
{
  struct sv_request r = {0, 100, 10, -1, 0, 0, false};
  struct sv_req_out o;
  struct sv_engine_stats st;
  struct sv_engine_cfg c = cfg_of(1000, false);
  sv_engine_run(&c, fixed_step, NULL, &r, 1, &o, false, &st);
  cr_expect_float_eq(o.first_s, 1e-3, 1e-12, "the prefill step samples the first token");
  cr_expect_float_eq(o.finish_s, 10e-3, 1e-12, "then 9 decode steps");
  cr_expect_eq(st.steps, 10);
  cr_expect_float_eq(st.gaps->n, 9, 1e-12);
  cr_expect_float_eq(sv_gaps_quantile(st.gaps, 0.5), 1e-3, 1e-5);
  cr_expect_eq(st.preemptions, 0);
  sv_engine_stats_release(&st);
}

/* A step callback that adds up what the steps read (ctx: double[4]). */
static double summing_step(const void *ctx, const struct sv_step *s, double parts[SV_PART_COUNT])
{
  double *sum = (double *)(uintptr_t)ctx;
  sum[0] += s->decode_context;
  sum[1] += s->decode_window_context;
  sum[2] += s->prefill_pairs;
  sum[3] += s->prefill_window_pairs;
  return fixed_step(NULL, s, parts);
}

/* A sliding window of 64 tokens (model.window): one request of a 100-token prompt prefilled in
 * one chunk and 10 more tokens decoded. Its 9 decode steps read contexts 101 .. 109 in a global
 * layer and 64 each in a local one; the prefill's pairs are the integral of min(x, w) over
 * [0, 100] (c (p + c / 2) = 5000 without the window, 64^2 / 2 + 36 x 64 = 4352 with it). */
Test(engine, a_window_caps_the_keys_a_local_layer_reads)
{
  struct sv_request r = {0, 100, 10, -1, 0, 0, false};
  struct sv_req_out o;
  struct sv_engine_stats st;
  struct sv_engine_cfg c = cfg_of(1000, false);
  c.window = 64;
  double sum[4] = {0};
  sv_engine_run(&c, summing_step, sum, &r, 1, &o, false, &st);
  cr_expect_float_eq(sum[0], 101 + 102 + 103 + 104 + 105 + 106 + 107 + 108 + 109, 1e-9);
  cr_expect_float_eq(sum[1], 9 * 64, 1e-9);
  cr_expect_float_eq(sum[2], 5000, 1e-9);
  cr_expect_float_eq(sum[3], 64.0 * 64 / 2 + 36 * 64, 1e-9);
  sv_engine_stats_release(&st);
}

Test(engine, a_full_cache_preempts_by_recompute_and_every_request_finishes)
{
  struct sv_request r[2] = {{0, 16, 40, -1, 0, 0, false}, {0, 16, 40, -1, 0, 0, false}};
  struct sv_req_out o[2];
  struct sv_engine_stats st;
  struct sv_engine_cfg c = cfg_of(4, false); /* each needs 4 blocks of 16 at its end: both cannot stay */
  sv_engine_run(&c, fixed_step, NULL, r, 2, o, false, &st);
  cr_expect_gt(st.preemptions, 0);
  cr_expect_gt(st.recomputed_tokens, 0);
  cr_expect_gt(o[0].finish_s, 0);
  cr_expect_gt(o[1].finish_s, 0);
  sv_engine_stats_release(&st);
  c.reserve_full = true;
  sv_engine_run(&c, fixed_step, NULL, r, 2, o, false, &st);
  cr_expect_eq(st.preemptions, 0, "reserving whole sequences never preempts");
  cr_expect_float_eq(o[1].first_s, o[0].finish_s + 1e-3, 1e-12, "the second waits for the first's blocks");
  sv_engine_stats_release(&st);
}

Test(engine, round_robin_alternates_replicas_and_late_arrivals_wait_for_the_step)
{
  struct sv_request r[3] = {{0, 16, 2, -1, 0, 0, false}, {0.0005, 16, 2, -1, 0, 0, false}, {0.0005, 16, 2, -1, 0, 0, false}};
  struct sv_req_out o[3];
  struct sv_engine_stats st;
  struct sv_engine_cfg c = cfg_of(100, false);
  c.replicas = 2;
  sv_engine_run(&c, fixed_step, NULL, r, 3, o, false, &st);
  cr_expect_eq(r[0].replica, 0);
  cr_expect_eq(r[1].replica, 1);
  cr_expect_eq(r[2].replica, 0);
  cr_expect_float_eq(o[1].first_s, 1.5e-3, 1e-12, "an idle replica starts at the arrival");
  cr_expect_float_eq(o[2].first_s, 2e-3, 1e-12, "a busy one after its running step");
  sv_engine_stats_release(&st);
}

Test(engine, a_malformed_trace_names_its_line)
{
  char *dir = ts_tmpdir();
  char *path = ts_write(dir, "t.csv", "arrival_s,prompt_tokens,output_tokens\n0.5,100,20\n0.25,10,x\n");
  struct sv_request *v;
  int n;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_expect_eq(sv_trace_load(path, &v, &n, &d), NPU_ECONFIG);
  cr_expect_eq(d.line, 3);
  cr_expect(strstr(d.msg, "must not decrease") != NULL, "%s", d.msg);
  free(path);
  path = ts_write(dir, "t.csv", "arrival_s,prompt_tokens,output_tokens\n0.5,100,20\n0.75,10,3,-1\n");
  cr_expect_eq(sv_trace_load(path, &v, &n, &d), 0);
  cr_expect_eq(n, 2);
  cr_expect_eq(v[1].output, 3);
  free(v);
  free(path);
  ts_rmtree(dir);
  free(dir);
}

Test(engine, a_request_whose_kv_arrives_decodes_at_once_and_is_recomputed_after_a_preemption)
{
  /* a decode engine of a disaggregated deployment: 100 prompt tokens already cached, 5 to generate */
  struct sv_request r = {0.010, 100, 5, -1, 0, 0, true};
  struct sv_req_out o;
  struct sv_engine_stats st;
  struct sv_engine_cfg c = cfg_of(1000, false);
  sv_engine_run(&c, fixed_step, NULL, &r, 1, &o, false, &st);
  cr_expect_float_eq(o.first_s, 0.011, 1e-12, "its first step decodes");
  cr_expect_float_eq(o.finish_s, 0.015, 1e-12, "five decode steps");
  cr_expect_eq(st.prefill_tokens, 0, "no prefill");
  cr_expect_eq(st.decode_tokens, 5);
  sv_engine_stats_release(&st);
  /* two such requests in a cache of 8 blocks of 16: the newest is preempted and recomputes its context */
  struct sv_request two[2] = {{0, 60, 40, -1, 0, 0, true}, {0, 60, 40, -1, 0, 0, true}};
  struct sv_req_out o2[2];
  c = cfg_of(8, false);
  sv_engine_run(&c, fixed_step, NULL, two, 2, o2, false, &st);
  cr_expect_gt(st.preemptions, 0);
  cr_expect_gt(st.prefill_tokens, 60, "the preempted one prefills its prompt and its tokens again");
  cr_expect_gt(o2[1].finish_s, 0);
  sv_engine_stats_release(&st);
}

Test(engine, merged_timelines_keep_every_count_at_the_coarser_width)
{
  struct sv_engine_stats x = {0}, y = {0};
  x.gaps = calloc(1, sizeof *x.gaps);
  y.gaps = calloc(1, sizeof *y.gaps);
  struct sv_tl *a = &x.tl, *b = &y.tl;
  a->width_s = 1e-3;
  a->n = 4;
  for (int i = 0; i < 4; i++) a->tokens[i] = 1;
  b->width_s = 4e-3;
  b->n = 2;
  b->tokens[0] = 10;
  b->tokens[1] = 20;
  sv_engine_stats_add(&x, &y);
  cr_expect_float_eq(a->width_s, 4e-3, 1e-15);
  cr_expect_float_eq(a->tokens[0], 14, 1e-12, "a's four 1 ms bins fall in the first 4 ms bin");
  cr_expect_float_eq(a->tokens[1], 20, 1e-12);
  cr_expect_eq(a->n, 2);
  sv_engine_stats_release(&x);
  sv_engine_stats_release(&y);
}

Test(engine, speculative_decoding_emits_the_accepted_drafts_and_one_more_token_per_step)
{
  /* 9 output tokens: the prefill step gives the first; 3 drafts always accepted give 4 per step: 2 steps */
  struct sv_request r = {0, 32, 9, -1, 0, 0, false};
  struct sv_req_out o;
  struct sv_engine_stats st;
  struct sv_engine_cfg c = cfg_of(1000, false);
  c.spec_tokens = 3;
  c.spec_acceptance = 1.0;
  sv_engine_run(&c, fixed_step, NULL, &r, 1, &o, false, &st);
  cr_expect_float_eq(o.finish_s, 3e-3, 1e-12, "prefill, then two steps of four tokens");
  cr_expect_eq(st.accepted_tokens, 6);
  sv_engine_stats_release(&st);
  /* never accepted: one token per step, as without drafts, and no draft past the last token */
  c.spec_acceptance = 0.0;
  sv_engine_run(&c, fixed_step, NULL, &r, 1, &o, false, &st);
  cr_expect_float_eq(o.finish_s, 9e-3, 1e-12);
  cr_expect_eq(st.accepted_tokens, 0);
  cr_expect_eq(st.draft_tokens, 3 * 5 + 2 + 1, "3 drafts while 3 tokens after the next are left, then 2, 1, 0");
  sv_engine_stats_release(&st);
}

Test(engine, accepted_drafts_per_step_follow_the_geometric_closed_form)
{
  /* E[accepted] of k drafts at acceptance a: a + a^2 + ... + a^k (the first rejection ends the run) */
  enum { N = 400 };
  struct sv_request *r = calloc(N, sizeof *r);
  for (int i = 0; i < N; i++) r[i] = (struct sv_request){0, 16, 1000, -1, 0, 0, false};
  struct sv_req_out *o = calloc(N, sizeof *o);
  struct sv_engine_stats st;
  struct sv_engine_cfg c = cfg_of(1 << 20, false);
  c.max_seqs = N;
  c.token_budget = 16 * N;
  c.spec_tokens = 4;
  c.spec_acceptance = 0.7;
  c.spec_seed = 9;
  sv_engine_run(&c, fixed_step, NULL, r, N, o, false, &st);
  double want = 0.7 + 0.49 + 0.343 + 0.2401;
  double got = st.accepted_tokens / st.verify_steps;
  cr_expect(fabs(got - want) < 0.02 * want, "accepted per step %g, closed form %g", got, want);
  sv_engine_stats_release(&st);
  free(r);
  free(o);
}
