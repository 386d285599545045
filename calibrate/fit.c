/*
 * fit.c - the knobs, their models of the data points, and the one-dimensional fit; see
 * calibrate.h.
 *
 * GEMM points run the gemm operator on the chip model in this process (analytic fidelity needs
 * no engine; event fidelity runs each in a child). A collective point runs on the cluster
 * platform in a child process (one SimGrid engine per process). Every link whose bandwidth
 * the knob scales carries the point's data, so its time at efficiency e is a + b / e (latency
 * and reduction terms do not scale): two runs, at e = 1 and e = 1/2, give a and b, the fit
 * searches that closed form, and one more run at the fitted value gives the residual shown.
 */
#include "calibrate/calibrate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/strutil.h"
#include "common/units.h"
#include "interconnect/coll.h"
#include "interconnect/comm.h"
#include "interconnect/run.h"
#include "ops/cost_cache.h"
#include "ops/op.h"
#include "workloads/isolate.h"

static const struct cal_knob knobs[] = {
    {"chip.calib.cube", "chip.calib.cube_source", CAL_GEMM, true, 0, 0, 0.05, 1.0,
     "achievable share of the cube MAC rate, from GEMM throughput over shapes and dtypes (not 8-bit floats)", false, false},
    {"chip.calib.cube_fp8", "chip.calib.cube_fp8_source", CAL_GEMM, true, 0, 0, 0.05, 1.0,
     "achievable share of the cube MAC rate with 8-bit float inputs, from fp8 GEMM throughput over shapes (where "
     "fp8 GEMMs run further below their peak than 16-bit ones: power and clock)", false, .fp8 = true},
    {"node.link.efficiency", "node.link.efficiency_source", CAL_COLLECTIVE, false, 1, 1, 0.05, 1.0,
     "achievable share of intra-node link bandwidth, from collective bus bandwidth inside one server", false, false},
    {"node.ccl.step_overhead", "node.ccl.step_overhead_source", CAL_COLLECTIVE, false, 1, 1, 0, 50e-6,
     "the collective library's fixed cost per algorithm step, from the small sizes of the same curve (fitted "
     "jointly with node.link.efficiency)", .time = true, .fp8 = false},
    {"cluster.scaleout.efficiency", "cluster.scaleout.efficiency_source", CAL_COLLECTIVE, false, 2, 1 << 20, 0.05,
     1.0, "achievable share of NIC bandwidth, from collective bus bandwidth across servers", false, false},
    {"chip.calib.hbm", "chip.calib.hbm_source", CAL_HBM, true, 0, 0, 0.05, 1.0,
     "achievable share of HBM bandwidth, from streaming kernels (BabelStream, gpu-stream, elementwise ops)", false, false},
};

const struct cal_knob *cal_knobs(int *n)
{
  *n = (int)(sizeof knobs / sizeof knobs[0]);
  return knobs;
}

/* The entry of knobs[] named key (the partners of the joint collective fit). */
static const struct cal_knob *knob_named(const char *key)
{
  for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
    if (!strcmp(knobs[i].key, key)) return &knobs[i];
  NPU_PANIC("no calibration knob %s", key);
}

/* ------------------------------------------------------------------ the search */

static double objective(double x, int n, int (*eval)(double, void *, double *), void *ctx, double *r, int *rc)
{
  *rc = eval(x, ctx, r);
  double s = 0;
  for (int i = 0; i < n; i++) s += r[i] * r[i];
  return s;
}

int cal_minimise(double lo, double hi, int n, int (*eval)(double x, void *ctx, double *r), void *ctx, double *best)
{
  const double g = (sqrt(5.0) - 1) / 2;
  double *r = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *r);
  int rc = 0;
  double a = lo, b = hi, c = b - g * (b - a), d = a + g * (b - a);
  double fc = objective(c, n, eval, ctx, r, &rc), fd = rc ? 0 : objective(d, n, eval, ctx, r, &rc);
  while (!rc && b - a > 1e-5 * (hi - lo)) {
    if (fc <= fd) {
      b = d, d = c, fd = fc;
      c = b - g * (b - a);
      fc = objective(c, n, eval, ctx, r, &rc);
    } else {
      a = c, c = d, fc = fd;
      d = a + g * (b - a);
      fd = objective(d, n, eval, ctx, r, &rc);
    }
  }
  /* the ends themselves: a monotone model whose best is a bound reaches it exactly */
  double x = (a + b) / 2, fx = rc ? 0 : objective(x, n, eval, ctx, r, &rc);
  double flo = rc ? 0 : objective(lo, n, eval, ctx, r, &rc), fhi = rc ? 0 : objective(hi, n, eval, ctx, r, &rc);
  if (!rc) *best = flo < fx && flo <= fhi ? lo : fhi < fx ? hi : x;
  free(r);
  return rc;
}

/* ------------------------------------------------------------------ GEMM points */

struct gemm_ctx {
  const struct cal_knob *k;   /* chip.calib.cube or chip.calib.cube_fp8 */
  const struct cal_set *set;
  const int *idx;
  int n;
  struct arch_system sys;
  const struct cal_opts *opts;
  struct op_cache *cache;
  double *model_s;
  struct npu_diag *diag;
};

/* The device time of one GEMM point (launch overhead excluded: throughput benchmarks time
 * back-to-back launches), through an in-memory cost cache (event fidelity runs in a child). */
static int gemm_time(const struct cal_point *p, const struct arch_system *sys, const struct cal_opts *o,
                     struct op_cache *cache, double *t, double *cube_share, struct npu_diag *diag)
{
  const struct op_desc *d = op_find("gemm");
  NPU_ASSERT(d != NULL);
  char m[32], n[32], k[32], dt[32];
  snprintf(m, sizeof m, "m=%ld", p->m);
  snprintf(n, sizeof n, "n=%ld", p->n);
  snprintf(k, sizeof k, "k=%ld", p->k);
  snprintf(dt, sizeof dt, "dtype=%s", p->dtype);
  const char *kv[] = {m, n, k, dt};
  struct op_args a;
  struct op_cost c;
  int rc = op_args_parse(d, &a, kv, 4, diag);
  if (!rc) rc = op_cost_get(cache, d, &a, sys, (enum core_fidelity)o->kernel_fidelity, &c, diag);
  if (rc) {
    char msg[512];
    npu_diag_format(diag, msg, sizeof msg);
    return npu_diag_set(diag, p->where, 0, NULL, "gemm %ldx%ldx%ld %s: %s", p->m, p->n, p->k, p->dtype, msg), rc;
  }
  *t = c.time_s - c.launch_s;
  if (cube_share) *cube_share = *t > 0 ? c.cube_busy_s / (sys->chip.aic_count * *t) : 0;
  return 0;
}

/* A GEMM point informs the cube share only where the model's time is the cube's: at the knob's
 * best (1) the cube pipes must be busy for at least this share of the kernel. Elsewhere (a
 * small GEMM bound by an idle wave or a latency, a skinny one bound by memory) the knob moves
 * the time little and the point would pull it to absorb a cost it does not describe. */
#define CUBE_BOUND_SHARE 0.9
#define SELECT_ROUNDS 8     /* fits of the fixed point at most */
#define SELECT_STEP 0.05    /* the knob's steps below the peak to a first selection */

/* The knob's value in the context's system: chip.calib.cube or chip.calib.cube_fp8. */
static void set_share(struct gemm_ctx *g, double x)
{
  *(g->k->fp8 ? &g->sys.chip.calib.cube_fp8.value : &g->sys.chip.calib.cube.value) = x;
}

static int gemm_eval(double x, void *ctx, double *r)
{
  struct gemm_ctx *g = ctx;
  set_share(g, x);
  for (int i = 0; i < g->n; i++) {
    const struct cal_point *p = &g->set->p[g->idx[i]];
    int rc = gemm_time(p, &g->sys, g->opts, g->cache, &g->model_s[i], NULL, g->diag);
    if (rc) return rc;
    r[i] = log(g->model_s[i] / p->measured_s);
  }
  return 0;
}

/* ------------------------------------------------------------------ collective points */

/* A collective point run in a child: the record it sends back. */
struct coll_record {
  int rc;
  double t;
  char msg[512];
};

struct coll_call {
  const struct cal_point *p;
  const struct arch_system *sys;
  const struct cal_opts *o;
};

static void coll_child(void *ctx, void *record)
{
  const struct coll_call *c = ctx;
  struct coll_record *out = record;
  struct ic_params prm;
  ic_params_default(&prm, c->sys);
  struct ic_sim *sim = NULL;
  struct ic_comm comm = {0};
  struct npu_diag d;
  enum ic_op op;
  ic_op_parse(c->p->op, &op);
  out->rc = ic_sim_create(&sim, c->sys, c->p->ranks, &prm, &d);
  if (!out->rc) out->rc = ic_comm_init_range(&comm, 0, c->p->ranks, 1, ic_sim_topo(sim), "ranks", &d);
  if (!out->rc) {
    struct ic_run run = {.comm = &comm,
                         .coll = {.op = op, .algo = IC_ALGO_AUTO, .fidelity = (enum ic_fidelity)c->o->coll_fidelity,
                                  .bytes = c->p->bytes}};
    out->rc = ic_sim_run(sim, &run, 1, &d);
    out->t = run.result.time_s;
  }
  if (out->rc) npu_diag_format(&d, out->msg, sizeof out->msg);
}

/* Time of collective point p on sys with the knob at value x, simulated in a child process (one
 * SimGrid engine per process: workloads/isolate.h). */
static int coll_time(const struct cal_point *p, bool scaleout, const struct arch_system *sys0, double e,
                     double alpha, const struct arch_curve *curve, double p2p, const struct cal_opts *o, double *t,
                     struct npu_diag *diag)
{
  struct arch_system sys = *sys0;
  /* the preset's own curve never enters a fit: the one-number fit runs without one, and the
   * curve's residuals with the fitted curve */
  sys.node.link_curve = curve ? *curve : (struct arch_curve){0};
  sys.node.link_p2p_fraction = p2p;
  if (!scaleout) sys.node.link_efficiency.value = e;
  else sys.cluster.scaleout.efficiency.value = e;
  sys.node.ccl.step_overhead_s = alpha;
  sys.cluster.nodes = p->nodes;
  struct coll_call c = {p, &sys, o};
  struct coll_record r;
  int rc = wl_isolate(coll_child, &c, &r, sizeof r, p->where, diag);
  if (rc) return rc;
  if (r.rc)
    return npu_diag_set(diag, p->where, 0, NULL, "%s %g bytes on %d ranks: %s", p->op, p->bytes, p->ranks, r.msg),
           r.rc;
  *t = r.t;
  return 0;
}

struct coll_ctx {
  const struct cal_set *set;
  const int *idx;
  int n;
  double *a, *b, *k; /* t(e, alpha) = a + b / e + k alpha per point */
  double alpha;      /* the step overhead while e is searched */
  double elo, ehi;   /* the efficiency's range */
};

static int coll_eval(double x, void *ctx, double *r)
{
  struct coll_ctx *c = ctx;
  for (int i = 0; i < c->n; i++)
    r[i] = log((c->a[i] + c->b[i] / x + c->k[i] * c->alpha) / c->set->p[c->idx[i]].measured_s);
  return 0;
}

/* The joint fit profiles the efficiency out: at step overhead x, the residuals at the best
 * efficiency for that overhead (c->alpha keeps the last x; the efficiency is re-found). */
static int coll_eval_alpha(double x, void *ctx, double *r)
{
  struct coll_ctx *c = ctx;
  c->alpha = x;
  double e;
  int rc = cal_minimise(c->elo, c->ehi, c->n, coll_eval, c, &e);
  if (!rc) rc = coll_eval(e, c, r);
  return rc;
}

/* Whether the points pin both terms down: some whose time is mostly steps (overhead and
 * latency) and some mostly bandwidth, at the preset's values. One size, or sizes all in one
 * regime, cannot tell a slower link from a costlier step: the overhead then stays the preset's. */
static bool alpha_identifiable(const struct coll_ctx *c, double e0)
{
  bool steps = false, bytes = false;
  for (int i = 0; i < c->n; i++) {
    double t = c->a[i] + c->b[i] / e0 + c->k[i] * c->alpha;
    if (t <= 0) continue;
    if (c->b[i] / e0 < 0.25 * t) steps = true;
    if (c->b[i] / e0 > 0.75 * t) bytes = true;
  }
  return steps && bytes;
}

/* ------------------------------------------------------------------ the link's curve */

/*
 * node.link.efficiency as a curve over transfer size (ic_coll_step_bytes), where one share
 * cannot follow the points. Each collective point (not send/sendrecv: NCCL runs point-to-point on
 * fewer channels: their own share, below) whose time is at least half bandwidth
 * at its own share gives that share in closed form, e = b / (t - a - k alpha); the points of one
 * size are averaged (geometric mean), and the shares are made non-decreasing in size (pool
 * adjacent violators, weighted by points): a larger transfer is never less efficient, and noise
 * must not become a knot. The send/sendrecv and all-to-all points give node.link.p2p_fraction
 * instead (the median of their shares). The largest share is the plateau, node.link.efficiency;
 * the curve and the p2p share are written as fractions of it. Runs of equal shares keep their end knots. Needs three sizes or more,
 * all measured at one rank count (points over rank counts at one size are not a curve over
 * size). Fills out->curve, out->curve_text and out->p2p, and *plateau (node.link.efficiency);
 * false when there is no curve to fit.
 */
static bool fit_curve(struct cal_fit *out, const struct coll_ctx *c, const int *idx, double lo, double *plateau)
{
  struct grp { double key, sum, w; } *g = npu_xcalloc((size_t)c->n + 1, sizeof *g);
  double *pe = npu_xcalloc((size_t)c->n + 1, sizeof *pe);
  int m = 0, ranks = -1, np = 0;
  bool one_count = true;
  for (int i = 0; i < c->n; i++) {
    const struct cal_point *p = &c->set->p[idx[i]];
    enum ic_op op;
    if (ic_op_parse(p->op, &op)) continue;
    double den = p->measured_s - c->a[i] - c->k[i] * c->alpha;
    if (!(den >= 0.5 * p->measured_s) || !(c->b[i] > 0)) continue; /* mostly steps: no share in it */
    double e = fmin(1, fmax(lo, c->b[i] / den));
    if (ic_op_p2p(op)) {
      pe[np++] = e;
      continue;
    }
    if (ranks >= 0 && p->ranks != ranks) one_count = false;
    ranks = p->ranks;
    double key = ic_coll_step_bytes(&(struct ic_coll){.op = op, .bytes = p->bytes}, p->ranks);
    int j = 0;
    while (j < m && fabs(g[j].key - key) > 1e-9 * key) j++;
    if (j == m) g[m++] = (struct grp){.key = key};
    g[j].sum += log(e);
    g[j].w += 1;
  }
  if (m < 3 || !one_count) {
    free(g), free(pe);
    return false;
  }
  /* the point-to-point share: the median of its points (robust to one odd size) */
  for (int i = 1; i < np; i++)
    for (int j = i; j > 0 && pe[j] < pe[j - 1]; j--) {
      double t = pe[j];
      pe[j] = pe[j - 1];
      pe[j - 1] = t;
    }
  out->p2p_points = np;
  if (np) out->p2p = np % 2 ? pe[np / 2] : 0.5 * (pe[np / 2 - 1] + pe[np / 2]); /* a share until the plateau is known */
  free(pe);
  for (int i = 1; i < m; i++) /* by size */
    for (int j = i; j > 0 && g[j].key < g[j - 1].key; j--) {
      struct grp t = g[j];
      g[j] = g[j - 1];
      g[j - 1] = t;
    }
  /* pool adjacent violators on the mean log shares: blocks of [first, last] with one value */
  double *val = npu_xcalloc((size_t)m, sizeof *val), *w = npu_xcalloc((size_t)m, sizeof *w);
  int *first = npu_xcalloc((size_t)m, sizeof *first), nb = 0;
  for (int i = 0; i < m; i++) {
    val[nb] = g[i].sum / g[i].w, w[nb] = g[i].w, first[nb] = i;
    nb++;
    while (nb > 1 && val[nb - 2] > val[nb - 1]) {
      val[nb - 2] = (val[nb - 2] * w[nb - 2] + val[nb - 1] * w[nb - 1]) / (w[nb - 2] + w[nb - 1]);
      w[nb - 2] += w[nb - 1];
      nb--;
    }
  }
  /* knots: each block's first and last size (one when they coincide), thinned to fit */
  double *kb = npu_xcalloc(2 * (size_t)m, sizeof *kb), *ks = npu_xcalloc(2 * (size_t)m, sizeof *ks);
  int nk = 0;
  for (int b = 0; b < nb; b++) {
    int last = b + 1 < nb ? first[b + 1] - 1 : m - 1;
    double share = exp(val[b]);
    kb[nk] = round(g[first[b]].key), ks[nk++] = share;
    if (last != first[b]) kb[nk] = round(g[last].key), ks[nk++] = share;
  }
  while (nk > ARCH_CURVE_MAX) { /* drop every other interior knot */
    int o = 1;
    for (int i = 1; i < nk; i++)
      if (i % 2 == 0 || i == nk - 1) kb[o] = kb[i], ks[o++] = ks[i];
    nk = o;
  }
  /* the plateau is node.link.efficiency; the curve and the p2p share are fractions of it, all
   * as the preset will write them (4 digits), so the residuals are those of what is written */
  char num[32];
  snprintf(num, sizeof num, "%.4g", ks[nk - 1]);
  *plateau = strtod(num, NULL);
  size_t len = 0;
  out->curve_text[0] = '\0';
  for (int i = 0; i < nk; i++) {
    char size[64];
    npu_unit_format(kb[i], NPU_UNIT_SIZE, size, sizeof size);
    len += (size_t)snprintf(out->curve_text + len, len < sizeof out->curve_text ? sizeof out->curve_text - len : 0,
                            "%s%s:%.4g", i ? " " : "", size, i == nk - 1 ? 1.0 : fmin(1, ks[i] / *plateau));
  }
  char why[256];
  bool ok = len < sizeof out->curve_text && !arch_curve_parse(out->curve_text, &out->curve, why, sizeof why);
  if (!ok) out->curve.n = 0;
  if (!ok || !np) out->p2p = 0, out->p2p_points = 0;
  if (ok && np) {
    snprintf(num, sizeof num, "%.4g", fmin(1, out->p2p / *plateau));
    out->p2p = strtod(num, NULL);
  }
  free(val), free(w), free(first), free(g), free(kb), free(ks);
  return ok;
}

/* ------------------------------------------------------------------ fitting a knob */

/* ------------------------------------------------------------------ HBM points */

/* A streaming kernel of large arrays is bound by HBM in the chip model: its traffic runs at the
 * HBM bandwidth times the knob (tests/calibrate checks that a 2 GiB dropout on each preset
 * reaches it), so one GB of traffic takes 1 / (bw x e). */
struct hbm_ctx {
  const struct cal_set *set;
  const int *idx;
  int n;
  double bw_gbps;
};

static int hbm_eval(double x, void *ctx, double *r)
{
  const struct hbm_ctx *h = ctx;
  for (int i = 0; i < h->n; i++) r[i] = log(1.0 / (h->bw_gbps * x) / h->set->p[h->idx[i]].measured_s);
  return 0;
}

static double knob_value(const struct arch_system *sys, const struct cal_knob *k)
{
  if (!strcmp(k->key, "node.ccl.step_overhead")) return sys->node.ccl.step_overhead_s;
  if (!strcmp(k->key, "chip.calib.cube")) return sys->chip.calib.cube.value;
  if (!strcmp(k->key, "chip.calib.cube_fp8")) return sys->chip.calib.cube_fp8.value;
  if (!strcmp(k->key, "chip.calib.hbm")) return sys->chip.calib.hbm.value;
  if (!strcmp(k->key, "node.link.efficiency")) return sys->node.link_efficiency.value;
  return sys->cluster.scaleout.efficiency.value;
}

static bool explains(const struct cal_knob *k, const struct cal_point *p, const struct arch_system *sys)
{
  if (p->kind != k->kind) return false;
  if (k->kind == CAL_GEMM) {
    enum npu_dtype t;
    if (!npu_dtype_parse(p->dtype, &t) || arch_dtype_f8(t) != k->fp8) return false;
  }
  bool chip_arch = !strcmp(p->arch, sys->chip.name);
  if (k->chip_level != chip_arch) return false;
  return k->kind != CAL_COLLECTIVE || (p->nodes >= k->min_nodes && p->nodes <= k->max_nodes);
}

/* Residuals that change sign between the smallest and the largest sizes of a collective knob's
 * points: one number cannot explain them. */
static void find_trend(struct cal_fit *f, const struct cal_set *set)
{
  if (f->knob->kind != CAL_COLLECTIVE || f->npoints < 3) return;
  int lo = 0, hi = 0;
  for (int i = 1; i < f->npoints; i++) {
    if (set->p[f->res[i].point].bytes < set->p[f->res[lo].point].bytes) lo = i;
    if (set->p[f->res[i].point].bytes > set->p[f->res[hi].point].bytes) hi = i;
  }
  double rl = f->res[lo].residual, rh = f->res[hi].residual;
  if (fabs(rl - rh) > 0.1)
    snprintf(f->trend, sizeof f->trend,
             "residuals move with size (%+.0f%% at %g bytes, %+.0f%% at %g bytes): a link share and a per-step "
             "cost cannot follow the curve; the fit is a compromise",
             100 * rl, set->p[f->res[lo].point].bytes, 100 * rh, set->p[f->res[hi].point].bytes);
}

/* The points of all[0..nall) whose cube is busy for CUBE_BOUND_SHARE of the kernel with the knob
 * at x, into sel; with out, the others are recorded there as left out. */
static int gemm_select(struct gemm_ctx *g, const int *all, int nall, double x, int *sel, int *nsel,
                       struct cal_fit *out)
{
  set_share(g, x);
  int kept = 0;
  for (int i = 0; i < nall; i++) {
    double t, share;
    int rc = gemm_time(&g->set->p[all[i]], &g->sys, g->opts, g->cache, &t, &share, g->diag);
    if (rc) return rc;
    if (share >= CUBE_BOUND_SHARE) {
      sel[kept++] = all[i];
      continue;
    }
    if (!out) continue;
    out->unbound++;
    npu_appendf(out->unbound_at, sizeof out->unbound_at, "%s%s (cube %.0f%%)", *out->unbound_at ? ", " : "",
                g->set->p[all[i]].where, 100 * share);
  }
  *nsel = kept;
  return 0;
}

int cal_fit_knob(struct cal_fit *out, const struct cal_knob *k, const struct cal_set *set,
                 const struct arch_system *sys, const struct cal_opts *opts, struct npu_diag *diag)
{
  memset(out, 0, sizeof *out);
  out->knob = k;
  out->before = out->value = knob_value(sys, k);
  int *idx = npu_xcalloc((size_t)(set->n ? set->n : 1), sizeof *idx), n = 0;
  for (int i = 0; i < set->n; i++) {
    if (!explains(k, &set->p[i], sys)) continue;
    /* the best of a search is biased upward (the most favourable shape, the luckiest of many
     * short trials), not what a kernel sustains: shown apart, never fitted */
    if (set->p[i].maximum) {
      npu_appendf(out->maxima_at, sizeof out->maxima_at, "%s%s (%g TF/s)", *out->maxima_at ? ", " : "",
                  set->p[i].where, set->p[i].measured);
      out->maxima++;
      continue;
    }
    idx[n++] = i;
  }
  out->npoints = n;
  if (!n) {
    free(idx);
    return 0;
  }
  out->res = npu_xcalloc((size_t)n, sizeof *out->res);
  double *model_s = npu_xcalloc((size_t)n, sizeof *model_s);
  int rc = 0;
  double best = 0;
  if (k->kind == CAL_GEMM) {
    struct gemm_ctx g = {.k = k, .set = set, .idx = idx, .n = n, .sys = *sys, .opts = opts,
                         .cache = op_cache_open(NULL, NULL), .model_s = model_s, .diag = diag};
    /* the points the cube bounds in the model at the fitted value, the others shown apart: a
     * fixed point. Selected where the knob is highest with some point the cube's (the peak, or
     * below it in steps of 0.05 where no GEMM is bound at the peak), fitted, selected again at
     * the fitted value (a lower share makes more points the cube's), until the set is stable. */
    int nall = n, *all = npu_xcalloc((size_t)nall, sizeof *all), *prev = npu_xcalloc((size_t)nall, sizeof *prev);
    memcpy(all, idx, (size_t)nall * sizeof *all);
    double at = k->hi;
    int kept = 0, nprev = 0;
    while (!(rc = gemm_select(&g, all, nall, at, idx, &kept, NULL)) && !kept && at - SELECT_STEP >= k->lo)
      at -= SELECT_STEP; /* nothing bound yet: look lower */
    for (int round = 0; !rc && kept && round < SELECT_ROUNDS; round++) {
      if (kept == nprev && !memcmp(idx, prev, (size_t)kept * sizeof *idx)) break; /* stable: fitted on it */
      memcpy(prev, idx, (size_t)kept * sizeof *idx);
      nprev = g.n = kept;
      rc = cal_minimise(k->lo, k->hi, kept, gemm_eval, &g, &best);
      if (!rc) rc = gemm_select(&g, all, nall, best, idx, &kept, NULL);
    }
    bool fitted = !rc && kept && kept == nprev && !memcmp(idx, prev, (size_t)kept * sizeof *idx);
    free(prev);
    if (!rc) rc = gemm_select(&g, all, nall, kept ? best : k->hi, idx, &n, out); /* the left-out list */
    free(all);
    g.n = out->npoints = n;
    if (!rc && !n) {
      op_cache_close(g.cache);
      free(model_s);
      free(idx);
      return 0;
    }
    if (!rc && !fitted) rc = cal_minimise(k->lo, k->hi, n, gemm_eval, &g, &best); /* not converged */
    double *r = npu_xcalloc((size_t)n, sizeof *r);
    if (!rc) rc = gemm_eval(best, &g, r); /* model_s at the fitted value */
    free(r);
    op_cache_close(g.cache);
  } else if (k->kind == CAL_HBM) {
    struct hbm_ctx h = {.set = set, .idx = idx, .n = n, .bw_gbps = sys->chip.hbm.bw_bytes_per_s / 1e9};
    rc = cal_minimise(k->lo, k->hi, n, hbm_eval, &h, &best);
    for (int i = 0; !rc && i < n; i++) model_s[i] = 1.0 / (h.bw_gbps * best);
  } else {
    /* t(e, alpha) = a + b / e + k alpha from three runs: (1, alpha0), (1/2, alpha0), (1, alpha0 + d) */
    bool scaleout = !strcmp(k->key, "cluster.scaleout.efficiency"), is_alpha = k->time;
    double e0 = scaleout ? sys->cluster.scaleout.efficiency.value : sys->node.link_efficiency.value;
    double alpha0 = sys->node.ccl.step_overhead_s, d = 5e-6;
    double *a = npu_xcalloc((size_t)n, sizeof *a), *b = npu_xcalloc((size_t)n, sizeof *b),
           *ks = npu_xcalloc((size_t)n, sizeof *ks);
    int kept = 0;
    for (int i = 0; !rc && i < n; i++) {
      double t1 = 0, t2 = 0, t3 = 0;
      rc = coll_time(&set->p[idx[i]], scaleout, sys, 1.0, alpha0, NULL, 0, opts, &t1, diag);
      if (!rc) rc = coll_time(&set->p[idx[i]], scaleout, sys, 0.5, alpha0, NULL, 0, opts, &t2, diag);
      if (!rc) rc = coll_time(&set->p[idx[i]], scaleout, sys, 1.0, alpha0 + d, NULL, 0, opts, &t3, diag);
      if (!rc && !(t1 > 0 && t2 >= t1 && t3 >= t1)) {
        /* a point the collective model cannot time: shown apart, never fitted */
        out->unmodelled++;
        npu_appendf(out->unmodelled_at, sizeof out->unmodelled_at, "%s%s", *out->unmodelled_at ? " " : "",
                    set->p[idx[i]].where);
        continue;
      }
      b[kept] = t2 - t1;
      ks[kept] = (t3 - t1) / d;
      a[kept] = t1 - b[kept] - ks[kept] * alpha0;
      idx[kept++] = idx[i];
    }
    n = out->npoints = kept;
    /* the knob of the efficiency and of the overhead of the same points */
    const struct cal_knob *ek = is_alpha ? knob_named("node.link.efficiency") : k,
                          *ak = knob_named("node.ccl.step_overhead");
    struct coll_ctx c = {.set = set, .idx = idx, .n = n, .a = a, .b = b, .k = ks, .alpha = alpha0,
                         .elo = ek->lo, .ehi = ek->hi};
    bool joint = !scaleout && n > 0 && alpha_identifiable(&c, e0);
    if (!rc && (!n || (is_alpha && !joint))) { /* nothing to fit: left as it is */
      out->not_identifiable = n > 0;
      out->npoints = 0;
      free(a), free(b), free(ks), free(model_s), free(idx);
      return 0;
    }
    double e = e0, alpha = alpha0;
    if (!rc && joint) rc = cal_minimise(ak->lo, ak->hi, n, coll_eval_alpha, &c, &alpha);
    c.alpha = alpha;
    if (!rc) rc = cal_minimise(ek->lo, ek->hi, n, coll_eval, &c, &e);
    best = is_alpha ? alpha : e;
    double plateau;
    if (!rc && !scaleout && !is_alpha && fit_curve(out, &c, idx, ek->lo, &plateau)) {
      /* the one number, for comparison: its residuals by the closed form */
      double ss = 0;
      for (int i = 0; i < n; i++) {
        double res = set->p[idx[i]].measured_s / (a[i] + b[i] / e + ks[i] * alpha) - 1;
        ss += res * res;
      }
      out->scalar_value = e;
      out->scalar_rms = sqrt(ss / n);
      best = e = plateau; /* node.link.efficiency: the curve is in fractions of it */
    }
    const struct arch_curve *curve = out->curve.n ? &out->curve : NULL;
    for (int i = 0; !rc && i < n; i++)
      rc = coll_time(&set->p[idx[i]], scaleout, sys, e, alpha, curve, out->p2p, opts, &model_s[i], diag);
    free(a);
    free(b);
    free(ks);
  }
  if (!rc) {
    out->value = best;
    out->at_bound = best >= k->hi - 1e-9 * (k->hi - k->lo) || best <= k->lo + 1e-9 * (k->hi - k->lo);
    double ss = 0;
    for (int i = 0; i < n; i++) {
      double res = set->p[idx[i]].measured_s / model_s[i] - 1;
      out->res[i] = (struct cal_residual){.point = idx[i], .model_s = model_s[i], .residual = res};
      ss += res * res;
      if (fabs(res) > out->max_abs) out->max_abs = fabs(res);
    }
    out->rms = sqrt(ss / n);
    find_trend(out, set);
  }
  free(model_s);
  free(idx);
  if (rc) cal_fit_release(out);
  return rc;
}

void cal_fit_release(struct cal_fit *f)
{
  free(f->res);
  f->res = NULL;
}
