/*
 * routing.c - the "routing" section and the MoE routing draw (routing.h, docs/ROUTING.md).
 *
 * The sampling model, in short:
 *   1. The distribution gives each expert a share p_e of the layer's token copies (uniform,
 *      Zipf over a permutation of the experts, or a measured profile).
 *   2. Group-limited routing (model.moe.groups > 0) is approximated as sampling without
 *      replacement restricted to the chosen groups: a token first picks top_groups distinct
 *      groups by successive draws, each proportional to the remaining groups' weights (a
 *      group's weight is the sum of its experts' shares), then its k experts inside them. The
 *      probability of every set of groups is computed exactly (a dynamic programme over
 *      subsets, at most WL_ROUTE_MAX_GROUPS groups) and each rank's tokens are split over the
 *      sets by one multinomial, so no token leaves its groups. Without groups all experts form
 *      one set.
 *   3. Inside its set, a token's k picks are distinct experts, expert e included with
 *      probability pi_e = min(1, c p_e), sum pi_e = k (shares restricted to the set; the cap
 *      at 1 is what distinctness imposes on a hot expert). The copies of many tokens are
 *      drawn together (route() below), not token by token: multinomials of n k copies with
 *      probabilities pi_e / k, then an expert holding more copies than there are tokens that
 *      could pick it (one per token) gives the excess back, redrawn over the others. Counts
 *      with c_e <= n and sum n k are exactly those n tokens of k distinct experts can produce;
 *      what is not sampled is the joint law of one token's k picks (expected-load fidelity:
 *      E[c_e] = n pi_e, up to the rare redraw).
 *   4. Capacity factor cf > 0: an expert keeps at most ceil(cf T k / E) copies (T = all EP
 *      ranks' tokens; Megatron's get_capacity rounds up); the kept copies are shared among the
 *      sources in proportion to what each sent, largest remainders first (ties: lower rank).
 */
#include "workloads/routing.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "arch/arch.h"
#include "common/err.h"

#define NPU_PARAM_STRUCT struct wl_routing_cfg

static const char *const dist_names[] = {"uniform", "zipf", "profile", NULL};

static const struct npu_section sections[] = {
    {"routing", false, "where MoE tokens go: the load of each expert and the all-to-all it makes"},
};

static const struct npu_param params[] = {
    {"routing.distribution", NPU_PT_ENUM, NPU_PARAM_OFF(distribution), 0, "uniform", 0, 0, 0, dist_names,
     "experts' shares of the token copies: uniform, zipf (1/rank^skew over permuted experts) or profile (a file)"},
    {"routing.skew", NPU_PT_REAL, NPU_PARAM_OFF(skew), 0, "1.0", NPU_PF_NONNEG, 0, 0, NULL,
     "Zipf exponent: the r-th hottest expert's share is proportional to 1/r^skew (zipf)"},
    {"routing.profile", NPU_PT_STRING, NPU_PARAM_OFF(profile), NPU_PARAM_SZ(profile), "", 0, 0, 0,
     NULL, "file of relative expert loads, one per expert ('LOAD' or 'EXPERT LOAD' lines), relative to the file "
           "that sets it (profile)"},
    {"routing.per_layer", NPU_PT_BOOL, NPU_PARAM_OFF(per_layer), 0, "true", 0, 0, 0, NULL,
     "draw a new routing for every layer (false: every layer routes like the others)"},
    {"routing.hot_shift", NPU_PT_BOOL, NPU_PARAM_OFF(hot_shift), 0, "true", 0, 0, 0, NULL,
     "zipf: permute the experts' ranks per layer, so the hot experts differ from layer to layer"},
};

static const struct npu_table table = {sections, sizeof sections / sizeof sections[0], params,
                                       sizeof params / sizeof params[0]};

const struct npu_table *wl_routing_table(void)
{
  return &table;
}

void wl_routing_register(struct npu_cfg *cfg, struct wl_routing_cfg *c)
{
  memset(c, 0, sizeof *c);
  npu_cfg_add_table(cfg, &table, c);
}

const char *wl_route_dist_name(enum wl_route_dist d)
{
  NPU_ASSERT(d >= 0 && d < WL_ROUTE_DIST_COUNT);
  return dist_names[d];
}

void wl_routing_release(struct wl_routing_cfg *c)
{
  free(c->profile_load);
  c->profile_load = NULL;
  c->profile_n = 0;
  c->profile_path[0] = '\0';
}

/* ---------------------------------------------------------------- the profile file */

/* Split a line into fields separated by blanks or commas, keeping the first 2; '#' starts a
 * comment. Returns how many fields there are. */
static int split_fields(char *line, char *f[2])
{
  char *hash = strchr(line, '#');
  if (hash) *hash = '\0';
  int n = 0;
  for (char *s = line;;) {
    while (*s == ' ' || *s == '\t' || *s == ',' || *s == '\r' || *s == '\n') s++;
    if (!*s) break;
    if (n < 2) f[n] = s;
    n++;
    while (*s && *s != ' ' && *s != '\t' && *s != ',' && *s != '\r' && *s != '\n') s++;
    if (*s) *s++ = '\0';
  }
  return n;
}

static bool parse_real(const char *s, double *v)
{
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return end != s && !*end && errno == 0 && isfinite(*v);
}

static bool parse_index(const char *s, long *v)
{
  char *end;
  errno = 0;
  *v = strtol(s, &end, 10);
  return end != s && !*end && errno == 0;
}

#define PKEY "routing.profile"

/* Read and check the profile into c; 0 or NPU_ECONFIG. */
static int read_profile(struct npu_cfg *cfg, struct wl_routing_cfg *c, const struct wl_model *m,
                        struct npu_diag *diag)
{
  int E = m->moe.experts;
  char path[2048], *line = NULL;
  size_t cap = 0;
  if (!c->profile[0])
    return npu_cfg_fail(cfg, diag, PKEY, "routing.distribution \"profile\" needs routing.profile, a file of "
                        "the %d experts' relative loads", E);
  if (!npu_cfg_resolve_path(cfg, "routing.profile", c->profile, c->profile_path, sizeof c->profile_path, path, sizeof path))
    return npu_cfg_fail(cfg, diag, PKEY, "the profile's path is too long");
  FILE *f = fopen(path, "r");
  if (!f)
    return npu_cfg_fail(cfg, diag, PKEY, "cannot open profile '%s': %s", c->profile_path, strerror(errno));
  const char *shown = c->profile_path;
  double *load = npu_xcalloc((size_t)E, sizeof *load);
  int *at = npu_xcalloc((size_t)E, sizeof *at); /* line that gave each expert, 0: none yet */
  int rc = 0, lineno = 0, last = 0, n = 0, form = 0; /* form: 1 'LOAD' lines, 2 'EXPERT LOAD' */
  while (!rc && getline(&line, &cap, f) >= 0) {
    char *fld[2];
    lineno++;
    int nf = split_fields(line, fld);
    if (!nf) continue;
    last = lineno;
    if (nf > 2) {
      rc = npu_diag_set(diag, shown, lineno, PKEY, "expected 'LOAD' or 'EXPERT LOAD' on a line, got %d fields",
                        nf);
      break;
    }
    if (form && form != nf) {
      rc = npu_diag_set(diag, shown, lineno, PKEY, "mixes 'LOAD' lines and 'EXPERT LOAD' lines");
      break;
    }
    form = nf;
    long e = n;
    double v;
    if (nf == 2 && (!parse_index(fld[0], &e) || e < 0 || e >= E)) {
      rc = npu_diag_set(diag, shown, lineno, PKEY, "'%s' is not an expert index 0..%d (model.moe.experts = %d)",
                        fld[0], E - 1, E);
      break;
    }
    if (!parse_real(fld[nf - 1], &v)) {
      rc = npu_diag_set(diag, shown, lineno, PKEY, "'%s' is not a number", fld[nf - 1]);
      break;
    }
    if (v < 0) {
      rc = npu_diag_set(diag, shown, lineno, PKEY, "negative load %g for expert %ld", v, e);
      break;
    }
    if (nf == 1 && n == E) {
      rc = npu_diag_set(diag, shown, lineno, PKEY, "more loads than the %d experts of model.moe.experts", E);
      break;
    }
    if (at[e]) {
      rc = npu_diag_set(diag, shown, lineno, PKEY, "expert %ld is given twice (first on line %d)", e, at[e]);
      break;
    }
    at[e] = lineno;
    load[e] = v;
    n++;
  }
  free(line);
  if (!rc && ferror(f)) rc = npu_cfg_fail(cfg, diag, PKEY, "cannot read profile '%s'", shown);
  fclose(f);
  if (!rc && n != E) {
    int missing = 0;
    while (missing < E && at[missing]) missing++;
    if (form == 2)
      rc = npu_diag_set(diag, shown, last, PKEY, "expert %d has no load: the profile has %d of the %d experts of "
                        "model.moe.experts", missing, n, E);
    else
      rc = npu_diag_set(diag, shown, last, PKEY, "%d loads for the %d experts of model.moe.experts", n, E);
  }
  int positive = 0;
  for (int e = 0; !rc && e < E; e++) positive += load[e] > 0;
  if (!rc && !positive) rc = npu_diag_set(diag, shown, last, PKEY, "every load is zero");
  else if (!rc && positive < m->moe.top_k)
    rc = npu_diag_set(diag, shown, last, PKEY, "only %d experts have a load, but a token goes to %d distinct "
                      "experts (model.moe.top_k)", positive, m->moe.top_k);
  free(at);
  if (rc) {
    free(load);
    return NPU_ECONFIG;
  }
  c->profile_load = load;
  c->profile_n = E;
  return 0;
}

/* Why routing cannot take these groups (a static message), or NULL. */
static const char *groups_problem(const struct wl_model *m)
{
  int G = m->moe.groups;
  if (!G) return NULL;
  if (G > WL_ROUTE_MAX_GROUPS) return "group-limited routing is drawn for at most 16 groups";
  if (m->moe.experts % G || m->moe.top_groups < 1 || m->moe.top_groups > G)
    return "groups must divide the experts and top_groups be 1..groups";
  if (m->moe.top_k > m->moe.top_groups * (m->moe.experts / G))
    return "top_k is more than the experts of top_groups groups";
  return NULL;
}

int wl_routing_finish(struct npu_cfg *cfg, struct wl_routing_cfg *c, const struct wl_model *m,
                      struct npu_diag *diag)
{
  wl_routing_release(c);
  if (!m->moe.experts) {
    if (npu_cfg_section_present(cfg, "routing"))
      return npu_cfg_fail(cfg, diag, "routing.distribution", "token routing needs an MoE model (model.moe.experts)");
    return 0;
  }
  const char *why = groups_problem(m);
  if (why)
    return npu_cfg_fail(cfg, diag, "model.moe.groups", "%s (groups %d, top_groups %d, top_k %d, %d experts)", why,
                        m->moe.groups, m->moe.top_groups, m->moe.top_k, m->moe.experts);
  if (c->distribution == WL_ROUTE_PROFILE) return read_profile(cfg, c, m, diag);
  return 0;
}

/* ---------------------------------------------------------------- seeding */

static uint64_t splitmix64(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

enum { STREAM_PERM = 1, STREAM_DRAW = 2 };

/* A generator of its own for (seed, stream, layer, micro-batch): no dependence on call order. */
static gsl_rng *stream(int seed, int kind, int layer, int microbatch)
{
  uint64_t h = splitmix64((uint64_t)(uint32_t)seed);
  h = splitmix64(h ^ (uint64_t)(uint32_t)kind);
  h = splitmix64(h ^ (uint64_t)(uint32_t)layer);
  h = splitmix64(h ^ (uint64_t)(uint32_t)microbatch);
  gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
  NPU_ASSERT(r != NULL);
  gsl_rng_set(r, (unsigned long)(h >> 32) ^ (unsigned long)(h & 0xffffffffu));
  return r;
}

/* ---------------------------------------------------------------- the draw */

/* The experts' shares for this layer (sum 1). */
static void shares(const struct wl_routing_cfg *c, int E, int seed, int layer, double *p)
{
  int dist = c ? c->distribution : WL_ROUTE_UNIFORM;
  double sum = 0;
  if (dist == WL_ROUTE_ZIPF) {
    /* the hot experts: a permutation of their ranks per layer (hot_shift), or one for all */
    bool shift = c->per_layer && c->hot_shift;
    gsl_rng *r = stream(seed, STREAM_PERM, shift ? layer : -1, 0);
    int *perm = npu_xmalloc((size_t)E * sizeof *perm);
    for (int e = 0; e < E; e++) perm[e] = e;
    gsl_ran_shuffle(r, perm, (size_t)E, sizeof *perm);
    for (int i = 0; i < E; i++) p[perm[i]] = pow(i + 1.0, -c->skew);
    free(perm);
    gsl_rng_free(r);
  } else if (dist == WL_ROUTE_PROFILE) {
    NPU_ASSERT(c->profile_load && c->profile_n == E); /* wl_routing_finish read it */
    for (int e = 0; e < E; e++) p[e] = c->profile_load[e];
  } else {
    for (int e = 0; e < E; e++) p[e] = 1;
  }
  for (int e = 0; e < E; e++) sum += p[e];
  NPU_ASSERT(sum > 0); /* Zipf's first rank weighs 1; a profile has a positive load */
  for (int e = 0; e < E; e++) p[e] /= sum;
}

/*
 * Inclusion probabilities of k distinct picks among n items of weights w: pi = min(1, c w),
 * sum pi = k. When fewer than k items have weight, those get 1 and the rest share what is left.
 */
static void inclusion(const double *w, int n, int k, double *pi, char *sat)
{
  int npos = 0;
  for (int i = 0; i < n; i++) npos += w[i] > 0;
  if (npos <= k) {
    for (int i = 0; i < n; i++) pi[i] = w[i] > 0 ? 1.0 : (double)(k - npos) / (n - npos);
    return;
  }
  memset(sat, 0, (size_t)n);
  int nsat = 0;
  double scale;
  for (;;) {
    double free_w = 0;
    for (int i = 0; i < n; i++)
      if (!sat[i]) free_w += w[i];
    scale = (k - nsat) / free_w;
    int more = 0;
    for (int i = 0; i < n; i++)
      if (!sat[i] && scale * w[i] >= 1) sat[i] = 1, more++;
    if (!more) break;
    nsat += more;
  }
  for (int i = 0; i < n; i++) pi[i] = sat[i] ? 1.0 : scale * w[i];
}

/*
 * Probabilities of the sets of TG groups a token picks: successive draws without replacement,
 * each proportional to the remaining groups' weights (uniform among the rest when they weigh
 * nothing). f over subsets, filled in increasing mask order (a superset is always larger).
 * Returns how many sets; masks[] and prob[] receive them.
 */
static int group_sets(const double *gw, int G, int TG, unsigned *masks, double *prob)
{
  size_t nm = (size_t)1 << G;
  double *f = npu_xcalloc(nm, sizeof *f);
  int nsets = 0;
  f[0] = 1;
  for (size_t mask = 0; mask < nm; mask++) {
    if (f[mask] == 0) continue;
    int pc = __builtin_popcount((unsigned)mask);
    if (pc == TG) {
      masks[nsets] = (unsigned)mask;
      prob[nsets++] = f[mask];
      continue;
    }
    double rest = 0;
    for (int g = 0; g < G; g++)
      if (!(mask >> g & 1)) rest += gw[g];
    for (int g = 0; g < G; g++)
      if (!(mask >> g & 1)) f[mask | (size_t)1 << g] += f[mask] * (rest > 0 ? gw[g] / rest : 1.0 / (G - pc));
  }
  free(f);
  return nsets;
}

/* n choose k: how many sets of TG groups there can be. */
static size_t choose(int n, int k)
{
  double c = 1;
  for (int i = 1; i <= k; i++) c = c * (n - k + i) / i;
  return (size_t)llround(c);
}

/*
 * Spread N copies over ne items of weights w (not all zero), none taking more than cap (ne x cap
 * >= N): one multinomial, then the excess of full items redrawn over the others until none is
 * left. out[] receives the counts; tw[] and tc[] are scratch for ne weights and counts.
 */
static void spread(gsl_rng *r, unsigned N, const double *w, int ne, unsigned cap, unsigned *out, double *tw,
                   unsigned *tc)
{
  gsl_ran_multinomial(r, (size_t)ne, N, w, out);
  for (int round = 0;; round++) {
    unsigned over = 0;
    for (int i = 0; i < ne; i++)
      if (out[i] > cap) over += out[i] - cap, out[i] = cap;
    if (!over) return;
    if (round < 64) {
      double any = 0;
      for (int i = 0; i < ne; i++) any += tw[i] = out[i] < cap ? w[i] : 0;
      if (!(any > 0))
        for (int i = 0; i < ne; i++) tw[i] = out[i] < cap;
      gsl_ran_multinomial(r, (size_t)ne, over, tw, tc);
      for (int i = 0; i < ne; i++) out[i] += tc[i];
    } else { /* never seen in practice: fill the slack in order */
      for (int i = 0; i < ne && over; i++) {
        unsigned take = cap - out[i] < over ? cap - out[i] : over;
        out[i] += take, over -= take;
      }
    }
  }
}

/* One draw's sets of groups, buffers and generator. */
struct draw {
  gsl_rng *r;
  int E, k, G, EG;
  const double *p;       /* [E] shares */
  int nsets;
  unsigned *masks;       /* [nsets] sets of groups */
  double *set_p;         /* [nsets] their probabilities */
  double *set_w;         /* [nsets] their weights (sum of shares) */
  char *simple;          /* [nsets] no inclusion capped at 1: pi_e = k p_e / set_w */
  double *pi, *w, *tw;   /* [E] */
  char *sat;             /* [E] */
  unsigned *c, *tc;      /* [E] */
  double gw[WL_ROUTE_MAX_GROUPS]; /* group weights */
};

/* Which sets are simple: more than k experts with a share and none whose k p_e / w(S) reaches 1. */
static void classify_sets(struct draw *d)
{
  double gmax[WL_ROUTE_MAX_GROUPS] = {0};
  int gpos[WL_ROUTE_MAX_GROUPS] = {0};
  for (int e = 0; e < d->E; e++) {
    int g = e / d->EG;
    gpos[g] += d->p[e] > 0;
    gmax[g] = d->p[e] > gmax[g] ? d->p[e] : gmax[g];
  }
  for (int s = 0; s < d->nsets; s++) {
    double w = 0, max = 0;
    int pos = 0;
    for (int g = 0; g < d->G; g++)
      if (d->masks[s] >> g & 1) w += d->gw[g], pos += gpos[g], max = gmax[g] > max ? gmax[g] : max;
    d->set_w[s] = w;
    d->simple[s] = pos > d->k && d->k * max < w * (1 - 1e-12);
  }
}

/* The chance that a token's k distinct experts among the ng groups of EG experts of its set
 * (taken uniformly: the exact law for uniform shares) leave a given group out. */
static double none_in_group(int EG, int ng, int k)
{
  double p = 1, out = (double)EG * (ng - 1), all = (double)EG * ng;
  for (int q = 0; q < k && p > 0; q++) p *= out - q > 0 ? (out - q) / (all - q) : 0;
  return p;
}

/*
 * Route the n tokens of each of the ep ranks: cnt[i E + e] receives the copies rank i sends to
 * expert e. A rank's tokens are split over the sets of groups by one multinomial (exact per
 * token). The copies of a (rank, set) block go to the set's groups by a multinomial with the
 * groups' inclusion sums (at most min(k, group size) per token in a group); then a rank's
 * copies to a group, from all its blocks, go to the group's experts by one multinomial weighted
 * by the copies the blocks expect there, at most one per token that chose the group. Without
 * groups this is one multinomial per rank over the experts with pi_e / k, capped at n per
 * expert. With groups the two levels have the law of one multinomial per block as long as no
 * inclusion is capped at 1 (a group's proportions are then p_e / w_g in every set); with
 * capping, a group's proportions are averaged over the rank's blocks.
 */
static void route(struct draw *d, int ep, unsigned n, uint64_t *cnt, double *gtok)
{
  int E = d->E, G = d->G, EG = d->EG, k = d->k, nsets = d->nsets;
  unsigned *per_set = npu_xmalloc((size_t)ep * nsets * sizeof *per_set);    /* [rank][set] tokens */
  double *expect = npu_xcalloc((size_t)ep * E, sizeof *expect);             /* [rank][expert] */
  double *coef = npu_xcalloc((size_t)ep * G, sizeof *coef);                 /* [rank][group] */
  uint64_t *xg = npu_xcalloc((size_t)ep * G, sizeof *xg), *mg = npu_xcalloc((size_t)ep * G, sizeof *mg);
  for (int i = 0; i < ep; i++) gsl_ran_multinomial(d->r, (size_t)nsets, n, d->set_p, per_set + (size_t)i * nsets);
  for (int s = 0; s < nsets; s++) {
    int g_of[WL_ROUTE_MAX_GROUPS], ng = 0;
    double gsum[WL_ROUTE_MAX_GROUPS];
    bool used = false;
    for (int i = 0; i < ep; i++) used |= per_set[(size_t)i * nsets + s] > 0;
    if (!used) continue;
    for (int g = 0; g < G; g++)
      if (d->masks[s] >> g & 1) g_of[ng++] = g;
    if (d->simple[s]) {
      for (int t = 0; t < ng; t++) gsum[t] = d->gw[g_of[t]];
    } else {
      /* the set's experts, group after group: inclusion probabilities of k distinct picks */
      for (int t = 0; t < ng; t++) memcpy(d->w + t * EG, d->p + g_of[t] * EG, (size_t)EG * sizeof *d->w);
      inclusion(d->w, ng * EG, k, d->pi, d->sat);
      for (int t = 0; t < ng; t++) {
        gsum[t] = 0;
        for (int j = 0; j < EG; j++) gsum[t] += d->pi[t * EG + j];
      }
    }
    for (int i = 0; i < ep; i++) {
      unsigned ns = per_set[(size_t)i * nsets + s];
      if (!ns) continue;
      for (int t = 0; t < ng; t++) {
        int g = g_of[t];
        mg[i * G + g] += ns;
        gtok[i * G + g] += ns * (1 - none_in_group(EG, ng, k)); /* tokens with a copy in g (routing.h) */
        if (d->simple[s]) {
          coef[i * G + g] += ns * k / d->set_w[s];
        } else {
          double *x = expect + (size_t)i * E + g * EG;
          for (int j = 0; j < EG; j++) x[j] += ns * d->pi[t * EG + j];
        }
      }
      if (ng == 1) {
        xg[i * G + g_of[0]] += (uint64_t)ns * k;
      } else {
        spread(d->r, ns * (unsigned)k, gsum, ng, ns * (unsigned)(k < EG ? k : EG), d->c, d->tw, d->tc);
        for (int t = 0; t < ng; t++) xg[i * G + g_of[t]] += d->c[t];
      }
    }
  }
  for (int i = 0; i < ep; i++)
    for (int g = 0; g < G; g++) {
      if (!xg[i * G + g]) continue;
      double *x = expect + (size_t)i * E + g * EG;
      if (coef[i * G + g] > 0)
        for (int j = 0; j < EG; j++) x[j] += d->p[g * EG + j] * coef[i * G + g];
      spread(d->r, (unsigned)xg[i * G + g], x, EG, (unsigned)mg[i * G + g], d->c, d->tw, d->tc);
      for (int j = 0; j < EG; j++) cnt[(size_t)i * E + g * EG + j] += d->c[j];
    }
  free(per_set), free(expect), free(coef), free(xg), free(mg);
}

struct share { uint64_t rem; int src; };

static int by_remainder(const void *a, const void *b)
{
  const struct share *x = a, *y = b;
  if (x->rem != y->rem) return x->rem > y->rem ? -1 : 1;
  return x->src - y->src;
}

static double max_over_mean(const double *v, int n)
{
  double sum = 0, max = 0;
  for (int i = 0; i < n; i++) sum += v[i], max = v[i] > max ? v[i] : max;
  return sum > 0 ? max / (sum / n) : 1.0;
}

int wl_route_draw(const struct wl_routing_cfg *c, const struct wl_model *m, int ep, double tokens_per_rank,
                  int seed, int layer, int microbatch, struct wl_route *out, struct npu_diag *diag)
{
  memset(out, 0, sizeof *out);
  int E = m->moe.experts, k = m->moe.top_k;
  if (E <= 0 || k <= 0 || k > E)
    return npu_diag_set(diag, NULL, 0, "model.moe.experts", "routing needs an MoE model (%d experts, top_k %d)", E, k),
           NPU_EINVAL;
  if (ep <= 0 || E % ep)
    return npu_diag_set(diag, NULL, 0, "plan.ep", "ep %d must divide the %d experts", ep, E), NPU_EINVAL;
  const char *why = groups_problem(m);
  if (why) return npu_diag_set(diag, NULL, 0, "model.moe.groups", "%s", why), NPU_EINVAL;
  if (!(tokens_per_rank >= 0) || tokens_per_rank != floor(tokens_per_rank) ||
      tokens_per_rank * k > (double)UINT_MAX)
    return npu_diag_set(diag, NULL, 0, NULL, "%g tokens per rank: routing takes a whole number up to %u / top_k",
                        tokens_per_rank, UINT_MAX),
           NPU_EINVAL;
  unsigned n = (unsigned)tokens_per_rank;
  int G = m->moe.groups ? m->moe.groups : 1, TG = m->moe.groups ? m->moe.top_groups : 1, EG = E / G;

  out->ep = ep, out->experts = E, out->per_rank = E / ep, out->top_k = k, out->tokens_per_rank = tokens_per_rank;
  out->load = npu_xcalloc((size_t)E, sizeof *out->load);
  out->kept = npu_xcalloc((size_t)E, sizeof *out->kept);
  out->matrix = npu_xcalloc((size_t)ep * ep, sizeof *out->matrix);
  out->groups = G;
  out->group_tokens = npu_xcalloc((size_t)ep * G, sizeof *out->group_tokens);

  double *p = npu_xmalloc((size_t)E * sizeof *p);
  shares(c, E, seed, layer, p);

  /* sets of groups and their probabilities (one set of everything without groups) */
  double gw[WL_ROUTE_MAX_GROUPS] = {0};
  for (int e = 0; e < E; e++) gw[e / EG] += p[e];
  size_t maxsets = choose(G, TG);
  unsigned *masks = npu_xmalloc(maxsets * sizeof *masks);
  double *set_p = npu_xmalloc(maxsets * sizeof *set_p);
  int nsets = group_sets(gw, G, TG, masks, set_p);
  NPU_ASSERT(nsets > 0 && (size_t)nsets <= maxsets);

  bool per_layer = c ? c->per_layer : true;
  struct draw d = {.r = stream(seed, STREAM_DRAW, per_layer ? layer : -1, microbatch),
                   .E = E, .k = k, .G = G, .EG = EG, .p = p, .nsets = nsets, .masks = masks, .set_p = set_p};
  memcpy(d.gw, gw, sizeof d.gw);
  d.set_w = npu_xmalloc((size_t)nsets * sizeof *d.set_w);
  d.simple = npu_xmalloc((size_t)nsets);
  classify_sets(&d);
  d.pi = npu_xmalloc((size_t)E * sizeof *d.pi);
  d.w = npu_xmalloc((size_t)E * sizeof *d.w);
  d.tw = npu_xmalloc((size_t)E * sizeof *d.tw);
  d.sat = npu_xmalloc((size_t)E);
  d.c = npu_xmalloc((size_t)E * sizeof *d.c);
  d.tc = npu_xmalloc((size_t)E * sizeof *d.tc);
  uint64_t *cnt = npu_xcalloc((size_t)ep * E, sizeof *cnt); /* [source rank][expert] */
  route(&d, ep, n, cnt, out->group_tokens);
  gsl_rng_free(d.r);
  free(d.pi), free(d.w), free(d.tw), free(d.sat), free(d.c), free(d.tc);
  free(d.set_w), free(d.simple);

  /* capacity: ceil(cf T k / E) copies per expert, shared among the sources by largest remainder */
  uint64_t cap = 0;
  double cf = m->moe.capacity_factor;
  if (cf > 0) {
    double x = cf * (double)ep * n * k / E;
    cap = (uint64_t)ceil(x - 1e-9 * (x > 1 ? x : 1));
    out->capacity = (double)cap;
  }
  struct share *sh = npu_xmalloc((size_t)ep * sizeof *sh);
  int R = E / ep;
  for (int e = 0; e < E; e++) {
    uint64_t load = 0;
    for (int i = 0; i < ep; i++) load += cnt[(size_t)i * E + e];
    out->load[e] = (double)load;
    if (cf > 0 && load > cap) {
      uint64_t given = 0;
      for (int i = 0; i < ep; i++) {
        uint64_t *c_ie = &cnt[(size_t)i * E + e], num = cap * *c_ie;
        sh[i].src = i, sh[i].rem = num % load;
        *c_ie = num / load;
        given += *c_ie;
      }
      qsort(sh, (size_t)ep, sizeof *sh, by_remainder);
      for (int j = 0; given < cap; j++, given++) cnt[(size_t)sh[j].src * E + e]++;
      load = cap;
    }
    out->kept[e] = (double)load;
    out->dropped += out->load[e] - out->kept[e];
    for (int i = 0; i < ep; i++) out->matrix[(size_t)i * ep + e / R] += (double)cnt[(size_t)i * E + e];
  }
  double *recv = npu_xcalloc((size_t)ep, sizeof *recv);
  for (int i = 0; i < ep; i++)
    for (int j = 0; j < ep; j++) recv[j] += out->matrix[(size_t)i * ep + j];
  out->max_mean_expert = max_over_mean(out->kept, E);
  out->max_mean_rank = max_over_mean(recv, ep);

  free(recv);
  free(sh);
  free(cnt);
  free(masks), free(set_p);
  free(p);
  return 0;
}

void wl_route_release(struct wl_route *r)
{
  free(r->load);
  free(r->kept);
  free(r->matrix);
  free(r->group_tokens);
  memset(r, 0, sizeof *r);
}
