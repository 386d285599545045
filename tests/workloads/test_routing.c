/*
 * test_routing.c - MoE token routing (workloads/routing.c): draws are reproducible and depend on
 * the layer and micro-batch as configured; totals are exact; uniform loads stay near their mean
 * and mean loads follow the distribution; Zipf skew raises the imbalance; a capacity factor caps
 * every expert and drops the rest; group-limited routing keeps each token inside top_groups
 * groups; profile files are read relative to the scenario and their errors name file, line and
 * key.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cfg.h"
#include "common/err.h"
#include "tests/support/support.h"
#include "workloads/model.h"
#include "workloads/routing.h"

static struct wl_model moe(int experts, int top_k, int groups, int top_groups, double cf)
{
  struct wl_model m;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "moe");
  m.layers = 8, m.hidden = 256, m.ffn = 1024, m.heads = 4, m.kv_heads = 4, m.vocab = 1000, m.seq_len = 128;
  m.moe.experts = experts, m.moe.top_k = top_k, m.moe.ffn = 256;
  m.moe.groups = groups, m.moe.top_groups = top_groups, m.moe.capacity_factor = cf;
  return m;
}

static struct wl_routing_cfg rcfg(enum wl_route_dist dist, double skew, bool per_layer, bool hot_shift)
{
  struct wl_routing_cfg c;
  memset(&c, 0, sizeof c);
  c.distribution = dist, c.skew = skew, c.per_layer = per_layer, c.hot_shift = hot_shift;
  return c;
}

static void draw(const struct wl_routing_cfg *c, const struct wl_model *m, int ep, double tokens, int seed, int layer,
                 int mb, struct wl_route *r)
{
  struct npu_diag d;
  char msg[1024];
  npu_diag_clear(&d);
  int rc = wl_route_draw(c, m, ep, tokens, seed, layer, mb, r, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
}

static bool same(const struct wl_route *a, const struct wl_route *b)
{
  return a->ep == b->ep && a->experts == b->experts && a->dropped == b->dropped &&
         !memcmp(a->load, b->load, (size_t)a->experts * sizeof(double)) &&
         !memcmp(a->kept, b->kept, (size_t)a->experts * sizeof(double)) &&
         !memcmp(a->matrix, b->matrix, (size_t)a->ep * a->ep * sizeof(double));
}

/* Totals are exact: every token sends top_k copies; matrix, kept and dropped account for them. */
static void check_totals(const struct wl_route *r)
{
  double all = r->ep * r->tokens_per_rank * r->top_k, load = 0, kept = 0, mat = 0;
  for (int e = 0; e < r->experts; e++) {
    load += r->load[e], kept += r->kept[e];
    cr_assert(r->kept[e] <= r->load[e] && r->kept[e] == floor(r->kept[e]) && r->load[e] == floor(r->load[e]));
    /* a token sends at most one copy to an expert */
    cr_assert(r->load[e] <= r->ep * r->tokens_per_rank, "expert %d: %g copies from %g tokens", e, r->load[e],
              r->ep * r->tokens_per_rank);
    if (r->capacity > 0) cr_assert(r->kept[e] <= r->capacity);
    else cr_assert_eq(r->kept[e], r->load[e]);
  }
  for (int i = 0; i < r->ep; i++) {
    double row = 0;
    for (int j = 0; j < r->ep; j++) row += r->matrix[i * r->ep + j];
    cr_assert(row <= r->tokens_per_rank * r->top_k);
    if (r->capacity == 0) cr_assert_eq(row, r->tokens_per_rank * r->top_k, "rank %d sends %g", i, row);
    mat += row;
  }
  for (int j = 0; j < r->ep; j++) {
    double col = 0, held = 0;
    for (int i = 0; i < r->ep; i++) col += r->matrix[i * r->ep + j];
    for (int e = j * r->per_rank; e < (j + 1) * r->per_rank; e++) held += r->kept[e];
    cr_assert_eq(col, held, "rank %d receives %g, its experts keep %g", j, col, held);
  }
  cr_assert_eq(load, all, "load %g, want %g", load, all);
  cr_assert_eq(kept, mat);
  cr_assert_eq(mat, all - r->dropped, "matrix %g, want %g - %g dropped", mat, all, r->dropped);
}

Test(routing, section_defaults)
{
  struct npu_cfg *cfg = npu_cfg_create();
  struct wl_routing_cfg c;
  wl_routing_register(cfg, &c);
  cr_assert_eq(c.distribution, WL_ROUTE_UNIFORM);
  cr_assert_eq(c.skew, 1.0);
  cr_assert(c.per_layer && c.hot_shift);
  cr_assert_str_eq(c.profile, "");
  cr_assert_str_eq(wl_route_dist_name(WL_ROUTE_ZIPF), "zipf");
  npu_cfg_destroy(cfg);
}

Test(routing, draws_are_reproducible_and_per_layer)
{
  struct wl_model m = moe(32, 4, 0, 0, 0);
  struct wl_routing_cfg z = rcfg(WL_ROUTE_ZIPF, 1.0, true, true);
  struct wl_route a, b, c;
  draw(&z, &m, 4, 512, 7, 3, 1, &a);
  draw(&z, &m, 4, 512, 7, 5, 0, &c); /* another draw in between: no shared state */
  wl_route_release(&c);
  draw(&z, &m, 4, 512, 7, 3, 1, &b);
  cr_assert(same(&a, &b), "same seed, layer and micro-batch: same routing");
  wl_route_release(&b);
  draw(&z, &m, 4, 512, 7, 4, 1, &b);
  cr_assert(!same(&a, &b), "another layer draws anew");
  wl_route_release(&b);
  draw(&z, &m, 4, 512, 7, 3, 2, &b);
  cr_assert(!same(&a, &b), "another micro-batch draws anew");
  wl_route_release(&b);
  draw(&z, &m, 4, 512, 8, 3, 1, &b);
  cr_assert(!same(&a, &b), "another seed draws anew");
  wl_route_release(&b);
  wl_route_release(&a);

  /* per_layer = false: every layer routes alike (micro-batches still differ) */
  z.per_layer = false;
  draw(&z, &m, 4, 512, 7, 3, 1, &a);
  draw(&z, &m, 4, 512, 7, 6, 1, &b);
  cr_assert(same(&a, &b));
  wl_route_release(&b);
  draw(&z, &m, 4, 512, 7, 3, 0, &b);
  cr_assert(!same(&a, &b));
  wl_route_release(&b);
  wl_route_release(&a);

  /* NULL configuration: uniform, per layer */
  draw(NULL, &m, 4, 512, 7, 3, 1, &a);
  draw(NULL, &m, 4, 512, 7, 4, 1, &b);
  cr_assert(!same(&a, &b));
  check_totals(&a);
  wl_route_release(&b);
  wl_route_release(&a);
}

Test(routing, totals_are_exact)
{
  struct wl_routing_cfg u = rcfg(WL_ROUTE_UNIFORM, 1, true, true), z = rcfg(WL_ROUTE_ZIPF, 1.5, true, true);
  struct {
    int experts, k, groups, top_groups, ep;
    double tokens, cf;
    const struct wl_routing_cfg *c;
  } cases[] = {
      {8, 2, 0, 0, 1, 1000, 0, &u},     {8, 2, 0, 0, 8, 333, 0, &z},     {64, 8, 0, 0, 8, 4096, 0, &z},
      {64, 8, 8, 4, 8, 1024, 0, &z},    {64, 6, 8, 3, 4, 777, 1.0, &z},  {16, 4, 0, 0, 4, 100, 1.25, &z},
      {16, 16, 0, 0, 4, 50, 0, &z},     {16, 2, 0, 0, 2, 0, 1.0, &u},    {256, 8, 8, 4, 32, 512, 1.0, &z},
  };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    struct wl_model m = moe(cases[t].experts, cases[t].k, cases[t].groups, cases[t].top_groups, cases[t].cf);
    for (int layer = 0; layer < 3; layer++) {
      struct wl_route r;
      draw(cases[t].c, &m, cases[t].ep, cases[t].tokens, 1, layer, 0, &r);
      cr_assert_eq(r.per_rank, cases[t].experts / cases[t].ep);
      check_totals(&r);
      wl_route_release(&r);
    }
  }
}

/* Uniform routing: loads scatter around their mean like counts do (a chi-square bound). */
Test(routing, uniform_loads_stay_near_the_mean)
{
  struct wl_model m = moe(64, 8, 0, 0, 0);
  int bad = 0;
  for (int layer = 0; layer < 20; layer++) {
    struct wl_route r;
    draw(NULL, &m, 8, 4096, 3, layer, 0, &r);
    double mean = 8 * 4096 * 8 / 64.0, chi2 = 0;
    for (int e = 0; e < 64; e++) chi2 += (r.load[e] - mean) * (r.load[e] - mean) / mean;
    /* 63 degrees of freedom: mean 63, sd 11.2; distinct picks only narrow the spread */
    bad += chi2 > 63 + 4 * 11.2;
    cr_assert(r.max_mean_expert < 1.1, "max/mean %g", r.max_mean_expert);
    cr_assert(r.max_mean_rank < 1.05, "rank max/mean %g", r.max_mean_rank);
    check_totals(&r);
    wl_route_release(&r);
  }
  cr_assert_leq(bad, 1, "%d of 20 draws beyond the chi-square bound", bad);
}

/* Mean loads over many draws follow the profile's shares, k p_e of a token's copies each. */
Test(routing, mean_loads_follow_the_distribution)
{
  struct wl_model m = moe(8, 2, 0, 0, 0);
  struct wl_routing_cfg c = rcfg(WL_ROUTE_PROFILE, 1, true, true);
  double prof[8] = {1, 2, 3, 4, 5, 6, 7, 8}, sum[8] = {0};
  c.profile_load = prof, c.profile_n = 8;
  int draws = 200;
  for (int mb = 0; mb < draws; mb++) {
    struct wl_route r;
    draw(&c, &m, 4, 1000, 11, 0, mb, &r);
    for (int e = 0; e < 8; e++) sum[e] += r.load[e];
    wl_route_release(&r);
  }
  for (int e = 0; e < 8; e++) {
    double want = (e + 1) / 36.0, got = sum[e] / (draws * 4 * 1000 * 2.0);
    cr_assert(fabs(got - want) <= 0.03 * want, "expert %d: share %g, want %g", e, got, want);
  }

  /* a hot expert is capped by distinctness: at most one copy per token, and nearly that */
  double hot[8] = {100, 1, 1, 1, 1, 1, 1, 1};
  c.profile_load = hot;
  struct wl_route r;
  draw(&c, &m, 4, 1000, 11, 0, 0, &r);
  cr_assert(r.load[0] <= 4000 && r.load[0] >= 0.97 * 4000, "hot expert: %g copies of 4000 tokens", r.load[0]);
  check_totals(&r);
  wl_route_release(&r);

  /* Zipf with a fixed ranking: the hottest experts' shares are 1/r^s / H */
  struct wl_routing_cfg z = rcfg(WL_ROUTE_ZIPF, 1.0, false, false);
  struct wl_model m16 = moe(16, 2, 0, 0, 0);
  double zs[16] = {0}, h = 0;
  for (int i = 1; i <= 16; i++) h += 1.0 / i;
  for (int mb = 0; mb < draws; mb++) {
    draw(&z, &m16, 4, 1000, 5, mb % 3, mb, &r); /* layers differ, the ranking stays */
    for (int e = 0; e < 16; e++) zs[e] += r.load[e];
    wl_route_release(&r);
  }
  for (int rank = 1; rank <= 4; rank++) {
    int best = 0;
    for (int e = 1; e < 16; e++)
      if (zs[e] > zs[best]) best = e;
    double got = zs[best] / (draws * 4 * 1000 * 2.0), want = 1.0 / rank / h;
    cr_assert(fabs(got - want) <= 0.03 * want, "Zipf rank %d: share %g, want %g", rank, got, want);
    zs[best] = -1;
  }
}

static double mean_imbalance(double skew, double *rank)
{
  struct wl_model m = moe(64, 2, 0, 0, 0);
  struct wl_routing_cfg z = rcfg(WL_ROUTE_ZIPF, skew, true, true);
  double sum = 0;
  *rank = 0;
  for (int layer = 0; layer < 16; layer++) {
    struct wl_route r;
    draw(&z, &m, 8, 2048, 9, layer, 0, &r);
    check_totals(&r);
    sum += r.max_mean_expert, *rank += r.max_mean_rank;
    wl_route_release(&r);
  }
  *rank /= 16;
  return sum / 16;
}

Test(routing, zipf_skew_raises_the_imbalance)
{
  double prev = 0, prev_rank = 0, r0 = 0, rank;
  for (int i = 0; i <= 4; i++) {
    double s = 0.3 * i, x = mean_imbalance(s, &rank);
    cr_assert_gt(x, prev, "skew %g: max/mean %g, not above %g", s, x, prev);
    if (i == 0) {
      cr_assert_lt(x, 1.15, "skew 0 is uniform: max/mean %g", x);
      r0 = rank;
    }
    prev = x, prev_rank = rank;
  }
  cr_assert_gt(prev_rank, r0 + 0.2, "ranks' imbalance %g at skew 1.2, %g at 0", prev_rank, r0);
}

/* Hot experts move from layer to layer with hot_shift, and stay put without. */
Test(routing, hot_shift_moves_the_hot_expert)
{
  struct wl_model m = moe(64, 2, 0, 0, 0);
  for (int shift = 0; shift < 2; shift++) {
    struct wl_routing_cfg z = rcfg(WL_ROUTE_ZIPF, 1.2, true, shift);
    int hot[8], distinct = 0;
    for (int layer = 0; layer < 8; layer++) {
      struct wl_route r;
      draw(&z, &m, 8, 2048, 4, layer, 0, &r);
      hot[layer] = 0;
      for (int e = 1; e < 64; e++)
        if (r.load[e] > r.load[hot[layer]]) hot[layer] = e;
      wl_route_release(&r);
      bool seen = false;
      for (int l = 0; l < layer; l++) seen |= hot[l] == hot[layer];
      distinct += !seen;
    }
    if (shift) cr_assert_geq(distinct, 4, "hot_shift: %d distinct hot experts over 8 layers", distinct);
    else cr_assert_eq(distinct, 1, "no hot_shift: %d distinct hot experts over 8 layers", distinct);
  }
}

Test(routing, capacity_caps_every_expert_and_drops)
{
  struct wl_model m = moe(64, 8, 0, 0, 1.0);
  struct wl_routing_cfg z = rcfg(WL_ROUTE_ZIPF, 1.2, true, true);
  struct wl_route r, free_r;
  draw(&z, &m, 8, 1000, 2, 0, 0, &r);
  cr_assert_eq(r.capacity, 8 * 1000 * 8 / 64.0);
  cr_assert_gt(r.dropped, 0);
  double full = 0;
  for (int e = 0; e < 64; e++) {
    cr_assert_eq(r.kept[e], fmin(r.load[e], r.capacity), "expert %d", e);
    full += r.kept[e] == r.capacity;
  }
  cr_assert_geq(full, 1);
  cr_assert_leq(r.max_mean_expert * (8 * 1000 * 8 - r.dropped) / 64, r.capacity + 1e-9);
  check_totals(&r);
  /* the same draw without a capacity factor routes the same copies, dropping none */
  struct wl_model md = moe(64, 8, 0, 0, 0);
  draw(&z, &md, 8, 1000, 2, 0, 0, &free_r);
  cr_assert_eq(free_r.dropped, 0);
  cr_assert_eq(free_r.capacity, 0);
  cr_assert(!memcmp(free_r.load, r.load, 64 * sizeof(double)));
  cr_assert(!memcmp(free_r.load, free_r.kept, 64 * sizeof(double)));
  cr_assert_gt(free_r.max_mean_expert, r.max_mean_expert);
  /* dropped copies come off the senders' rows, none gains */
  for (int i = 0; i < 64; i++) cr_assert_leq(r.matrix[i], free_r.matrix[i]);
  wl_route_release(&free_r);
  wl_route_release(&r);

  /* capacity rounds up (Megatron's get_capacity): 1.1 x 3 x 1 x 2 / 4 = 1.65 -> 2 */
  struct wl_model s = moe(4, 2, 0, 0, 1.1);
  draw(NULL, &s, 1, 3, 2, 0, 0, &r);
  cr_assert_eq(r.capacity, 2);
  check_totals(&r);
  wl_route_release(&r);
}

/* Group-limited routing: with one token per rank, a row reaches at most top_groups groups. */
Test(routing, group_limited_routing_stays_in_top_groups)
{
  struct wl_routing_cfg z = rcfg(WL_ROUTE_ZIPF, 0.5, true, true);
  for (int tg = 1; tg <= 3; tg++) {
    /* 4 groups of 4 experts, EP rank j holds group j */
    struct wl_model m = moe(16, tg == 1 ? 3 : 4, 4, tg, 0);
    int used_max = 0;
    for (int mb = 0; mb < 50; mb++) {
      for (int tokens = 1; tokens <= 2; tokens++) {
        struct wl_route r;
        draw(&z, &m, 4, tokens, 6, mb, mb, &r);
        check_totals(&r);
        for (int i = 0; i < 4; i++) {
          int used = 0;
          for (int j = 0; j < 4; j++) used += r.matrix[i * 4 + j] > 0;
          cr_assert_leq(used, tokens * tg, "top_groups %d, %d tokens: rank %d reaches %d groups", tg, tokens, i, used);
          if (tokens == 1 && used > used_max) used_max = used;
        }
        wl_route_release(&r);
      }
    }
    /* and the token does spread over its groups when its k picks need it */
    if (tg > 1) cr_assert_eq(used_max, tg);
  }
  /* top_k more than the experts of top_groups groups is refused */
  struct wl_model bad = moe(16, 5, 4, 1, 0);
  struct wl_route r;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_route_draw(&z, &bad, 4, 10, 1, 0, 0, &r, &d), NPU_EINVAL);
  cr_assert_str_eq(d.key, "model.moe.groups");
}

/* The tokens each rank sends to each group (node-limited dispatch's network crossings): with
 * top_groups 1 every token sends its k copies to one group, so the groups' tokens add up to the
 * rank's tokens exactly; with two groups of four and k = 4, a token leaves one of its groups out
 * with chance C(4, 4) / C(8, 4) = 1/70, so the groups' tokens are 2 x 69/70 of the rank's, each
 * between its copies / k and its copies. */
Test(routing, group_tokens_count_the_tokens_with_a_copy_in_each_group)
{
  struct wl_routing_cfg u = rcfg(WL_ROUTE_UNIFORM, 0, true, true);
  struct wl_model one = moe(16, 3, 4, 1, 0), two = moe(16, 4, 4, 2, 0);
  struct wl_route r;
  draw(&u, &one, 4, 1000, 3, 0, 0, &r);
  cr_assert_eq(r.groups, 4);
  for (int i = 0; i < 4; i++) {
    double sum = 0;
    for (int g = 0; g < 4; g++) sum += r.group_tokens[i * 4 + g];
    cr_expect(fabs(sum - 1000) < 1e-9, "rank %d: %g tokens over the groups, 1000 tokens", i, sum);
  }
  wl_route_release(&r);
  draw(&u, &two, 4, 1000, 3, 0, 0, &r);
  for (int i = 0; i < 4; i++) {
    double sum = 0;
    for (int g = 0; g < 4; g++) sum += r.group_tokens[i * 4 + g];
    cr_expect(fabs(sum - 2000.0 * 69 / 70) < 1e-6, "rank %d: %g tokens over the groups", i, sum);
  }
  for (int i = 0; i < 4; i++)
    for (int g = 0; g < 4; g++) {
      double t = r.group_tokens[i * 4 + g], copies = r.matrix[i * 4 + g]; /* rank g holds group g */
      cr_expect(t >= copies / 4 - 1e-9 && t <= copies + 1e-9, "rank %d group %d: %g tokens, %g copies", i, g, t, copies);
    }
  wl_route_release(&r);
}

Test(routing, bad_draw_arguments)
{
  struct npu_diag d;
  struct wl_route r;
  struct wl_model m = moe(16, 2, 0, 0, 0), dense = moe(0, 0, 0, 0, 0);
  npu_diag_clear(&d);
  cr_assert_eq(wl_route_draw(NULL, &m, 3, 10, 1, 0, 0, &r, &d), NPU_EINVAL);
  cr_assert_str_eq(d.key, "plan.ep");
  cr_assert_eq(wl_route_draw(NULL, &m, 4, 10.5, 1, 0, 0, &r, &d), NPU_EINVAL);
  cr_assert_eq(wl_route_draw(NULL, &m, 4, -1, 1, 0, 0, &r, &d), NPU_EINVAL);
  cr_assert_eq(wl_route_draw(NULL, &dense, 1, 10, 1, 0, 0, &r, &d), NPU_EINVAL);
}

/* ---------------------------------------------------------------- the section and profiles */

/* A scenario with an 8-expert model and a routing section; routing.profile is on line 13. */
#define PROFILE_LINE 13
static char *scenario(const char *dir, const char *routing)
{
  char text[2048];
  snprintf(text, sizeof text,
           "model = {\n"
           "  name = \"tiny-moe\";\n"
           "  layers = 4;\n"
           "  hidden = 256;\n"
           "  ffn = 1024;\n"
           "  heads = 4;\n"
           "  vocab = 1000;\n"
           "  seq_len = 128;\n"
           "  moe = { experts = 8; top_k = 2; ffn = 256; };\n"
           "};\n"
           "routing = {\n"
           "  distribution = \"profile\";\n"
           "%s"
           "};\n",
           routing);
  return ts_write(dir, "scn.cfg", text);
}

/* Load path (plus one optional KEY=VALUE) through wl_routing_finish; returns its status. */
static int load(const char *path, const char *set, struct wl_model *m, struct wl_routing_cfg *c, struct npu_diag *d)
{
  struct npu_cfg *cfg = npu_cfg_create();
  wl_model_register(cfg, m);
  wl_routing_register(cfg, c);
  npu_diag_clear(d);
  int rc = npu_cfg_load_file(cfg, path, d);
  if (!rc && set) rc = npu_cfg_set(cfg, set, d);
  if (!rc) rc = npu_cfg_finish(cfg, d);
  if (!rc) rc = wl_model_finish(cfg, m, d);
  if (!rc) rc = wl_routing_finish(cfg, c, m, d);
  npu_cfg_destroy(cfg);
  return rc;
}

static void expect_error(const char *path, const char *set, const char *file_suffix, int line, const char *words)
{
  struct wl_model m;
  struct wl_routing_cfg c;
  struct npu_diag d;
  char msg[2048];
  int rc = load(path, set, &m, &c, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, NPU_ECONFIG, "expected an error, got %d: %s", rc, msg);
  size_t n = strlen(d.file), s = strlen(file_suffix);
  cr_assert(n >= s && !strcmp(d.file + n - s, file_suffix), "file: %s (want ...%s)", msg, file_suffix);
  cr_assert_eq(d.line, line, "line: %s", msg);
  cr_assert_str_eq(d.key, "routing.profile", "%s", msg);
  cr_assert(strstr(d.msg, words) != NULL, "message: %s (want '%s')", msg, words);
  wl_routing_release(&c);
}

Test(routing, profile_is_read_relative_to_the_scenario)
{
  char *dir = ts_tmpdir(), sub[512];
  snprintf(sub, sizeof sub, "%s/profiles", dir);
  cr_assert_eq(mkdir(sub, 0755), 0);
  free(ts_write(sub, "loads.txt", "# measured loads\n0 4\n1 0\n2 1\n3 1\n\n4 1\n5 1\n6 1\n7, 1.0  # last\n"));
  char *path = scenario(dir, "  profile = \"profiles/loads.txt\";\n");
  struct wl_model m;
  struct wl_routing_cfg c;
  struct npu_diag d;
  char msg[2048];
  int rc = load(path, NULL, &m, &c, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  cr_assert_eq(c.profile_n, 8);
  cr_assert_eq(c.profile_load[0], 4);
  cr_assert_eq(c.profile_load[1], 0);
  cr_assert_eq(c.profile_load[7], 1);
  struct wl_route r;
  draw(&c, &m, 2, 1000, 1, 1, 0, &r);
  cr_assert_eq(r.load[1], 0, "an expert without load gets no tokens");
  cr_assert_gt(r.load[0], r.load[2]);
  check_totals(&r);
  wl_route_release(&r);
  wl_routing_release(&c);

  /* plain 'LOAD' lines, and a path given on the command line (relative to the working
   * directory; absolute here) */
  char *plain = ts_write(dir, "plain.txt", "1\n1\n1\n1\n1\n1\n1\n1\n");
  char set[1024];
  snprintf(set, sizeof set, "routing.profile=%s", plain);
  rc = load(path, set, &m, &c, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  cr_assert_str_eq(c.profile_path, plain);
  wl_routing_release(&c);
  free(plain);
  free(path);
  ts_rmtree(dir);
  free(dir);
}

Test(routing, profile_errors_name_file_line_and_key)
{
  char *dir = ts_tmpdir();
  char *path;

  /* missing file: the scenario's line that names it */
  path = scenario(dir, "  profile = \"nowhere.txt\";\n");
  expect_error(path, NULL, "scn.cfg", PROFILE_LINE, "nowhere.txt");
  free(path);

  /* no profile at all: the section */
  path = scenario(dir, "");
  expect_error(path, NULL, "scn.cfg", 11, "needs routing.profile");
  free(path);

  /* wrong count: the profile's last line */
  free(ts_write(dir, "seven.txt", "1\n1\n1\n1\n1\n1\n1\n"));
  path = scenario(dir, "  profile = \"seven.txt\";\n");
  expect_error(path, NULL, "seven.txt", 7, "7 loads for the 8 experts");
  free(path);
  free(ts_write(dir, "nine.txt", "1\n1\n1\n1\n1\n1\n1\n1\n1\n"));
  path = scenario(dir, "  profile = \"nine.txt\";\n");
  expect_error(path, NULL, "nine.txt", 9, "more loads than the 8 experts");
  free(path);
  free(ts_write(dir, "gap.txt", "0 1\n1 1\n2 1\n3 1\n4 1\n6 1\n7 1\n"));
  path = scenario(dir, "  profile = \"gap.txt\";\n");
  expect_error(path, NULL, "gap.txt", 7, "expert 5 has no load");
  free(path);

  /* a negative number, on its line */
  free(ts_write(dir, "neg.txt", "1\n2\n-1\n1\n1\n1\n1\n1\n"));
  path = scenario(dir, "  profile = \"neg.txt\";\n");
  expect_error(path, NULL, "neg.txt", 3, "negative load");
  free(path);

  /* not a number, a bad index, a repeated expert, mixed forms, too many fields, all zero, too
   * few loaded experts for top_k */
  free(ts_write(dir, "nan.txt", "1\n1\n1x\n"));
  path = scenario(dir, "  profile = \"nan.txt\";\n");
  expect_error(path, NULL, "nan.txt", 3, "'1x' is not a number");
  free(path);
  free(ts_write(dir, "idx.txt", "0 1\n8 1\n"));
  path = scenario(dir, "  profile = \"idx.txt\";\n");
  expect_error(path, NULL, "idx.txt", 2, "not an expert index");
  free(path);
  free(ts_write(dir, "twice.txt", "0 1\n1 1\n0 2\n"));
  path = scenario(dir, "  profile = \"twice.txt\";\n");
  expect_error(path, NULL, "twice.txt", 3, "expert 0 is given twice (first on line 1)");
  free(path);
  free(ts_write(dir, "mixed.txt", "0 1\n1\n"));
  path = scenario(dir, "  profile = \"mixed.txt\";\n");
  expect_error(path, NULL, "mixed.txt", 2, "mixes");
  free(path);
  free(ts_write(dir, "wide.txt", "0 1 2\n"));
  path = scenario(dir, "  profile = \"wide.txt\";\n");
  expect_error(path, NULL, "wide.txt", 1, "got 3 fields");
  free(path);
  free(ts_write(dir, "zero.txt", "0\n0\n0\n0\n0\n0\n0\n0\n"));
  path = scenario(dir, "  profile = \"zero.txt\";\n");
  expect_error(path, NULL, "zero.txt", 8, "every load is zero");
  free(path);
  free(ts_write(dir, "one.txt", "0\n0\n0\n5\n0\n0\n0\n0\n"));
  path = scenario(dir, "  profile = \"one.txt\";\n");
  expect_error(path, NULL, "one.txt", 8, "only 1 experts have a load");
  free(path);

  /* from the command line: relative to the working directory, named as "command line" */
  path = scenario(dir, "");
  {
    struct wl_model m;
    struct wl_routing_cfg c;
    struct npu_diag d;
    cr_assert_eq(load(path, "routing.profile=surely-not-here.txt", &m, &c, &d), NPU_ECONFIG);
    cr_assert_str_eq(d.file, "command line");
    cr_assert_str_eq(d.key, "routing.profile");
    cr_assert(strstr(d.msg, "surely-not-here.txt") != NULL);
  }
  free(path);
  ts_rmtree(dir);
  free(dir);
}

Test(routing, a_routing_section_needs_an_moe_model)
{
  char *dir = ts_tmpdir();
  char *path = ts_write(dir, "dense.cfg",
                        "model = { name = \"d\"; layers = 2; hidden = 256; ffn = 1024; heads = 4; vocab = 1000;\n"
                        "          seq_len = 128; };\n"
                        "routing = { distribution = \"zipf\"; };\n");
  struct wl_model m;
  struct wl_routing_cfg c;
  struct npu_diag d;
  cr_assert_eq(load(path, NULL, &m, &c, &d), NPU_ECONFIG);
  cr_assert_str_eq(d.key, "routing.distribution");
  cr_assert_eq(d.line, 3);
  free(path);
  ts_rmtree(dir);
  free(dir);
}
