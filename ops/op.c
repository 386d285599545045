/* op.c - operator registry, arguments, executions and running; see op.h. */
#include "ops/op.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/strutil.h"
#include "common/units.h"
#include "engine/engine.h"
#include "formats/formats.h"
#include "memory/platform.h"
#include "ops/ops_int.h"
#include "ops/vecutil.h"

/* ------------------------------------------------------------------ registry */

static const struct op_desc *const registry[] = {
#define OP__ENTRY(sym) &sym,
    OPS_LIST(OP__ENTRY)
#undef OP__ENTRY
};

const struct op_desc *const *op_builtins(size_t *n)
{
  *n = sizeof registry / sizeof registry[0];
  return registry;
}

/* The built-in operators, then the loaded ones (plugin.c keeps the combined list). */
const struct op_desc *const *op_all(size_t *n)
{
  const struct op_desc *const *all = op__plugin_all(n);
  return all ? all : op_builtins(n);
}

const struct op_desc *op_find(const char *name)
{
  size_t n;
  const struct op_desc *const *all = op_all(&n);
  for (size_t i = 0; i < n; i++)
    if (strcmp(all[i]->name, name) == 0) return all[i];
  return NULL;
}

const char *op_suggest(const char *name)
{
  size_t n;
  const struct op_desc *const *all = op_all(&n);
  const char **names = npu_xcalloc(n, sizeof *names);
  for (size_t i = 0; i < n; i++) names[i] = all[i]->name;
  const char *s = npu_suggest(name, names, n); /* points at an operator's name, not into names */
  free(names);
  return s;
}

/* ------------------------------------------------------------------ arguments */

int op_param_index(const struct op_desc *d, const char *name)
{
  for (int i = 0; i < d->nparams; i++)
    if (strcmp(d->params[i].name, name) == 0) return i;
  return -1;
}

static int must_index(const struct op_desc *d, const char *name)
{
  int i = op_param_index(d, name);
  if (i < 0) NPU_PANIC("operator %s has no parameter %s", d->name, name);
  return i;
}

uint64_t op_u(const struct op_desc *d, const struct op_args *a, const char *name)
{
  return a->u[must_index(d, name)];
}

double op_r(const struct op_desc *d, const struct op_args *a, const char *name)
{
  return a->r[must_index(d, name)];
}

enum npu_dtype op_dtype(const struct op_desc *d, const struct op_args *a, const char *name)
{
  return (enum npu_dtype)a->u[must_index(d, name)];
}

static int parse_one(const struct op_desc *d, struct op_args *a, int i, const char *v,
                     struct npu_diag *diag)
{
  const struct op_param *p = &d->params[i];
  char key[80];
  snprintf(key, sizeof key, "--%s", p->name);
  char *end;
  switch (p->type) {
  case OP_P_DIM:
  case OP_P_INT: {
    errno = 0;
    if (v[0] == '-' || !v[0]) goto bad_int;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end) goto bad_int;
    if (p->type == OP_P_DIM && x == 0)
      return npu_diag_set(diag, "command line", 0, key, "must be at least 1, got '%s'", v);
    a->u[i] = x;
    return 0;
  bad_int:
    return npu_diag_set(diag, "command line", 0, key, "expected a whole number, got '%s'", v);
  }
  case OP_P_REAL: {
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x))
      return npu_diag_set(diag, "command line", 0, key, "expected a number, got '%s'", v);
    a->r[i] = x;
    return 0;
  }
  case OP_P_BOOL:
    if (!strcmp(v, "true") || !strcmp(v, "false")) {
      a->u[i] = v[0] == 't';
      return 0;
    }
    return npu_diag_set(diag, "command line", 0, key, "expected true or false, got '%s'", v);
  case OP_P_DTYPE: {
    enum npu_dtype t;
    if (npu_dtype_parse(v, &t)) {
      a->u[i] = (uint64_t)t;
      return 0;
    }
    const char *s = npu_suggest(v, npu_dtype_names(), NPU_DT_COUNT);
    if (s) return npu_diag_set(diag, "command line", 0, key, "unknown dtype '%s'; did you mean '%s'?", v, s);
    return npu_diag_set(diag, "command line", 0, key, "unknown dtype '%s'", v);
  }
  case OP_P_CHOICE: {
    size_t n = 0;
    for (; p->choices[n]; n++)
      if (!strcmp(p->choices[n], v)) {
        a->u[i] = n;
        return 0;
      }
    struct npu_buf b = {0};
    for (size_t k = 0; k < n; k++) npu_buf_printf(&b, "%s%s", k ? ", " : "", p->choices[k]);
    npu_diag_set(diag, "command line", 0, key, "unknown value '%s' (one of: %s)", v, npu_buf_str(&b));
    npu_buf_release(&b);
    return NPU_EINVAL;
  }
  }
  return NPU_EINVAL;
}

int op_args_parse(const struct op_desc *d, struct op_args *a, const char *const *kv, int n,
                  struct npu_diag *diag)
{
  memset(a, 0, sizeof *a);
  NPU_ASSERT(d->nparams <= OP_MAX_PARAMS);
  bool given[OP_MAX_PARAMS] = {false};
  for (int i = 0; i < d->nparams; i++)
    if (d->params[i].def && parse_one(d, a, i, d->params[i].def, diag))
      NPU_PANIC("bad default for %s.%s", d->name, d->params[i].name);
  for (int k = 0; k < n; k++) {
    const char *eq = strchr(kv[k], '=');
    char name[64];
    size_t len = eq ? (size_t)(eq - kv[k]) : strlen(kv[k]);
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, kv[k], len);
    name[len] = '\0';
    int i = op_param_index(d, name);
    if (i < 0) {
      const char *names[OP_MAX_PARAMS];
      for (int j = 0; j < d->nparams; j++) names[j] = d->params[j].name;
      const char *s = npu_suggest(name, names, (size_t)d->nparams);
      if (s)
        return npu_diag_set(diag, "command line", 0, NULL, "'%s' has no option --%s; did you mean --%s?",
                            d->name, name, s);
      return npu_diag_set(diag, "command line", 0, NULL, "'%s' has no option --%s (see 'npusim kernel list')",
                          d->name, name);
    }
    const char *v = eq ? eq + 1 : (d->params[i].type == OP_P_BOOL ? "true" : "");
    if (parse_one(d, a, i, v, diag)) return NPU_EINVAL;
    given[i] = true;
  }
  for (int i = 0; i < d->nparams; i++)
    if (!d->params[i].def && !given[i])
      return npu_diag_set(diag, "command line", 0, NULL, "'%s' needs --%s (%s)", d->name,
                          d->params[i].name, d->params[i].desc);
  return 0;
}

int op__check_params(const struct op_desc *d, struct npu_diag *diag)
{
  if (d->nparams < 0 || d->nparams > OP_MAX_PARAMS || (d->nparams && !d->params))
    return npu_diag_set(diag, NULL, 0, d->name, "%d parameters (at most %d, with a table)", d->nparams, OP_MAX_PARAMS);
  for (int i = 0; i < d->nparams; i++) {
    const struct op_param *p = &d->params[i];
    if (!p->name || !p->name[0] || strlen(p->name) >= 48 || !p->desc)
      return npu_diag_set(diag, NULL, 0, d->name, "parameter %d has no name (under 48 characters) or no description", i);
    if ((int)p->type < OP_P_DIM || p->type > OP_P_REAL || (p->type == OP_P_CHOICE && (!p->choices || !p->choices[0])))
      return npu_diag_set(diag, NULL, 0, d->name, "parameter '%s' has an unknown type or no choices", p->name);
    for (int j = 0; j < i; j++)
      if (!strcmp(d->params[j].name, p->name))
        return npu_diag_set(diag, NULL, 0, d->name, "parameter '%s' is declared twice", p->name);
    struct op_args a;
    struct npu_diag why;
    if (p->def && parse_one(d, &a, i, p->def, &why))
      return npu_diag_set(diag, NULL, 0, d->name, "the default of parameter '%s' does not parse: %s", p->name, why.msg);
  }
  return 0;
}

/* "name=value" of the parameters i with only[i] (all when only is NULL), space-separated. */
static void format_some(const struct op_desc *d, const struct op_args *a, const bool *only, char *buf, size_t n)
{
  size_t off = 0;
  buf[0] = '\0';
  for (int i = 0; i < d->nparams && off < n; i++) {
    if (only && !only[i]) continue;
    const struct op_param *p = &d->params[i];
    const char *sep = off ? " " : "";
    int w;
    switch (p->type) {
    case OP_P_REAL: {
      char num[64];
      npu_fmt_double(a->r[i], num, sizeof num);
      w = snprintf(buf + off, n - off, "%s%s=%s", sep, p->name, num);
      break;
    }
    case OP_P_DTYPE:
      w = snprintf(buf + off, n - off, "%s%s=%s", sep, p->name, npu_dtype_name((enum npu_dtype)a->u[i]));
      break;
    case OP_P_CHOICE:
      w = snprintf(buf + off, n - off, "%s%s=%s", sep, p->name, p->choices[a->u[i]]);
      break;
    case OP_P_BOOL:
      w = snprintf(buf + off, n - off, "%s%s=%s", sep, p->name, a->u[i] ? "true" : "false");
      break;
    default:
      w = snprintf(buf + off, n - off, "%s%s=%" PRIu64, sep, p->name, a->u[i]);
    }
    if (w > 0) off += (size_t)w;
  }
}

void op_args_format(const struct op_desc *d, const struct op_args *a, char *buf, size_t n)
{
  format_some(d, a, NULL, buf, n);
}

void op_args_diff(const struct op_desc *d, const struct op_args *a, const struct op_args *b, char *buf, size_t n)
{
  bool differ[OP_MAX_PARAMS] = {0};
  for (int i = 0; i < d->nparams; i++) differ[i] = a->u[i] != b->u[i] || a->r[i] != b->r[i];
  format_some(d, b, differ, buf, n);
}

/* ------------------------------------------------------------------ executions */

struct op_exec {
  const struct arch_chip *chip;
  struct mem_gm *gm;
  bool functional;
  uint64_t seed;                /* the run's seed: each tensor's values are a stream of (seed, name) */
  uint64_t rng;
  struct op_tensor tensors[OP_MAX_TENSORS];
  int ntensors;
  struct core_kernel kernels[OP_MAX_KERNELS];
  int nkernels;
  void *allocs[32];
  int nallocs;
};

void *op_alloc(struct op_exec *x, size_t bytes)
{
  NPU_ASSERT(x->nallocs < 32);
  return x->allocs[x->nallocs++] = npu_xcalloc(1, bytes);
}

/* The generator's start for tensor `name` of a run seeded `seed` (splitmix64 of the two): each
 * tensor's values depend on its name and its elements' order only, so the first rows of a tensor
 * are the same whatever the other tensors' sizes or the batch (what `--parity` compares on). */
static uint64_t tensor_stream(uint64_t seed, const char *name)
{
  uint64_t h = 14695981039346656037ull;
  for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  uint64_t z = seed ^ h;
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z ? z : 1;
}

double op_rand(struct op_exec *x)
{
  /* xorshift64*: deterministic across machines */
  x->rng ^= x->rng >> 12;
  x->rng ^= x->rng << 25;
  x->rng ^= x->rng >> 27;
  return (double)((x->rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

bool op_functional(const struct op_exec *x)
{
  return x->functional;
}

const struct arch_chip *op_chip(const struct op_exec *x)
{
  return x->chip;
}

struct op_tensor *op_tensor(struct op_exec *x, const char *name, enum npu_dtype dtype,
                            uint64_t count, enum op_init init)
{
  NPU_ASSERT(x->ntensors < OP_MAX_TENSORS);
  struct op_tensor *t = &x->tensors[x->ntensors++];
  uint64_t bytes = fmt_bytes(dtype, count);
  x->rng = tensor_stream(x->seed, name);
  *t = (struct op_tensor){.name = name, .dtype = dtype, .count = count, .scratch = init == OP_INIT_SCRATCH};
  if (x->functional) {
    t->host = npu_xcalloc(1, bytes ? bytes : 1);
    /* integers span their range; floating types [-1, 1) (or (0, 1)) */
    bool integer = dtype == NPU_DT_INT4 || dtype == NPU_DT_INT8 || dtype == NPU_DT_INT16 ||
                   dtype == NPU_DT_INT32 || dtype == NPU_DT_UINT8;
    double span = integer ? (dtype == NPU_DT_INT4 ? 8 : dtype == NPU_DT_UINT8 ? 128 : 128) : 1;
    if (init == OP_INIT_UNIFORM || init == OP_INIT_POSITIVE)
      for (uint64_t i = 0; i < count; i++) {
        double v = op_rand(x);
        double y = init == OP_INIT_UNIFORM ? (2 * v - 1) * span : (v * 0.999 + 0.001) * span;
        fmt_encode(dtype, t->host, i, integer ? floor(y) : y);
      }
  }
  t->addr = mem_gm_add(x->gm, name, bytes, t->host);
  return t;
}

struct op_tensor *op_tensor_bytes(struct op_exec *x, const char *name, uint64_t bytes, const void *data)
{
  NPU_ASSERT(x->ntensors < OP_MAX_TENSORS);
  struct op_tensor *t = &x->tensors[x->ntensors++];
  *t = (struct op_tensor){.name = name, .dtype = NPU_DT_UINT8, .count = bytes};
  if (x->functional) {
    t->host = npu_xcalloc(1, bytes ? bytes : 1);
    if (data) memcpy(t->host, data, bytes);
  }
  t->addr = mem_gm_add(x->gm, name, bytes, t->host);
  return t;
}

void op_tensor_place(struct op_exec *x, const struct op_tensor *t, int device)
{
  mem_gm_set_device(x->gm, t->addr, device);
}

void op_kernel(struct op_exec *x, const struct core_kernel *k)
{
  NPU_ASSERT(x->nkernels < OP_MAX_KERNELS);
  x->kernels[x->nkernels++] = *k;
}

struct op_tensor *op_find_tensor(struct op_exec *x, const char *name)
{
  for (int i = 0; i < x->ntensors; i++)
    if (!strcmp(x->tensors[i].name, name)) return &x->tensors[i];
  return NULL;
}

double *op_decode(const struct op_tensor *t)
{
  double *v = npu_xmalloc((size_t)t->count * sizeof *v);
  for (uint64_t i = 0; i < t->count; i++) v[i] = fmt_decode(t->dtype, t->host, i);
  return v;
}

double op_compare(const double *got, const double *ref, size_t n, double atol, double rtol)
{
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e;
    if (isnan(ref[i]) || isnan(got[i]))
      e = isnan(ref[i]) && isnan(got[i]) ? 0 : INFINITY;
    else
      e = fabs(got[i] - ref[i]) / (atol + rtol * fabs(ref[i]));
    if (e > worst) worst = e;
  }
  return worst;
}

/* ------------------------------------------------------------------ running */

void op_capture_release(struct op_capture *c)
{
  for (int i = 0; i < c->n; i++) {
    free(c->t[i].before);
    free(c->t[i].after);
  }
  memset(c, 0, sizeof *c);
}

struct seq {
  struct op_exec *x;
  const struct core_launch_opts *opts;
  struct op_result *res;
  struct npu_diag *diag;
  int rc;
};

static int launch_all(struct seq *s)
{
  for (int i = 0; i < s->x->nkernels; i++) {
    int rc = core_launch(s->x->chip, s->x->gm, &s->x->kernels[i], s->opts, &s->res->kernel[i], s->diag);
    if (rc) return rc;
    s->res->nkernels = i + 1;
  }
  return 0;
}

static void seq_actor(void *arg)
{
  struct seq *s = arg;
  s->rc = launch_all(s);
}

/* Sum the kernels: times and counts add; ratios are time-weighted; bottleneck of the longest. */
static void combine(struct op_result *r)
{
  struct core_result *t = &r->total;
  memset(t, 0, sizeof *t);
  double longest = -1;
  for (int i = 0; i < r->nkernels; i++) {
    const struct core_result *k = &r->kernel[i];
    t->time_s += k->time_s;
    t->launch_s += k->launch_s;
    for (int p = 0; p < CORE_PIPE_COUNT; p++) {
      t->aic[p].busy_s += k->aic[p].busy_s;
      t->aic[p].gm_busy_s += k->aic[p].gm_busy_s;
      t->aiv[p].gm_busy_s += k->aiv[p].gm_busy_s;
      t->aic[p].instructions += k->aic[p].instructions;
      t->aiv[p].busy_s += k->aiv[p].busy_s;
      t->aiv[p].instructions += k->aiv[p].instructions;
    }
    for (int p = 0; p < ARCH_PATH_COUNT; p++) t->path_bytes[p] += k->path_bytes[p];
    t->gm_read_bytes += k->gm_read_bytes;
    t->gm_write_bytes += k->gm_write_bytes;
    t->l2_hit_bytes += k->l2_hit_bytes;
    t->hbm_bytes += k->hbm_bytes;
    t->link_bytes += k->link_bytes;
    if (k->ranks > t->ranks) t->ranks = k->ranks;
    t->flops += k->flops;
    t->cube_macs += k->cube_macs;
    t->bank_conflict_cycles += k->bank_conflict_cycles;
    t->instructions += k->instructions;
    if (k->aic_used > t->aic_used) t->aic_used = k->aic_used;
    if (k->aiv_used > t->aiv_used) t->aiv_used = k->aiv_used;
    t->aic_total = k->aic_total;
    t->aiv_total = k->aiv_total;
#define W(f) t->f += k->f * k->time_s
    W(aic_mac_ratio); W(aic_mte1_ratio); W(aic_mte2_ratio); W(aic_fixpipe_ratio); W(aic_scalar_ratio);
    W(aiv_vec_ratio); W(aiv_mte2_ratio); W(aiv_mte3_ratio); W(aiv_scalar_ratio);
#undef W
    if (k->time_s > longest) {
      longest = k->time_s;
      t->bottleneck = k->bottleneck;
    }
  }
  if (t->time_s > 0) {
#define N(f) t->f /= t->time_s
    N(aic_mac_ratio); N(aic_mte1_ratio); N(aic_mte2_ratio); N(aic_fixpipe_ratio); N(aic_scalar_ratio);
    N(aiv_vec_ratio); N(aiv_mte2_ratio); N(aiv_mte3_ratio); N(aiv_scalar_ratio);
#undef N
    t->hbm_bw_bytes_per_s = (double)t->hbm_bytes / t->time_s;
    t->l2_bw_bytes_per_s = (double)(t->gm_read_bytes + t->gm_write_bytes) / t->time_s;
  }
}

/* The totals of a run's kernels and the operator's FLOPs and rates. */
static void finish(const struct op_desc *d, const void *plan, struct op_result *res)
{
  combine(res);
  res->flops = d->flops(plan);
  double t = res->total.time_s;
  res->achieved_flops_per_s = t > 0 ? res->flops / t : 0;
  res->gm_bytes_per_s = t > 0 ? (double)(res->total.gm_read_bytes + res->total.gm_write_bytes) / t : 0;
}

/* An operator over `ranks` devices needs a server whose devices are joined by a full mesh of links
 * (the one kind of server mem_platform_group_xml builds), and the event fidelity, or the analytic
 * one of its closed form (timing only: no data, trace or observer). */
static int server_of(const struct op_desc *d, int ranks, const struct op_run_opts *opts, struct npu_diag *diag)
{
  const struct arch_node *n = opts->node;
  if (opts->fidelity != CORE_FIDELITY_EVENT && !d->closed_form)
    return npu_diag_set(diag, "command line", 0, "--fidelity",
                        "%s runs on %d devices at once, at event fidelity only (--fidelity event)", d->name, ranks),
           NPU_EUNSUPPORTED;
  if (opts->fidelity != CORE_FIDELITY_EVENT && (opts->functional || opts->trace || opts->observe))
    return npu_diag_set(diag, "command line", 0, "--fidelity",
                        "%s's analytic fidelity is a closed form of its pipeline, without data or instructions: "
                        "--functional, --trace and --msprof need --fidelity event",
                        d->name),
           NPU_EUNSUPPORTED;
  if (!n || n->devices < 1)
    return npu_diag_set(diag, "command line", 0, "--arch",
                        "%s runs on %d devices: give a server (a preset with a node section, e.g. atlas-800t-a2)",
                        d->name, ranks),
           NPU_EINVAL;
  if (n->devices < ranks)
    return npu_diag_set(diag, "command line", 0, "--ranks", "%d ranks, but a %s server has %d devices", ranks, n->name,
                        n->devices),
           NPU_EINVAL;
  if (n->topology != ARCH_NODE_FULL_MESH || n->dies_per_package > 1)
    return npu_diag_set(diag, "command line", 0, "--arch",
                        "%s needs a server whose devices are joined by a full mesh of links, one die per package; "
                        "%s is not one", d->name, n->name),
           NPU_EUNSUPPORTED;
  return 0;
}

static int run_one(const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                   const struct op_run_opts *opts, struct op_result *res, struct npu_diag *diag)
{
  memset(res, 0, sizeof *res);
  res->args = *a;
  void *plan = npu_xcalloc(1, d->plan_size);
  int rc = d->plan(plan, d, a, chip, diag);
  int ranks = rc ? 1 : d->ranks ? d->ranks(plan) : 1;
  if (!rc && ranks > 1) rc = server_of(d, ranks, opts, diag); /* before any tensor is made */
  if (!rc && ranks > 1 && opts->fidelity != CORE_FIDELITY_EVENT) { /* the closed form */
    rc = d->closed_form(plan, chip, opts->node, &res->kernel[0], diag);
    if (!rc) {
      res->nkernels = 1;
      finish(d, plan, res);
    }
  }
  if (rc || (ranks > 1 && opts->fidelity != CORE_FIDELITY_EVENT)) {
    if (d->release) d->release(plan);
    free(plan);
    return rc;
  }
  uint64_t seed = opts->seed ? opts->seed : 0x9E3779B97F4A7C15ull;
  struct op_exec x = {.chip = chip, .gm = mem_gm_create(), .functional = opts->functional, .seed = seed, .rng = seed};
  d->setup(plan, &x);
  struct op_capture *cap = opts->functional ? opts->capture : NULL;
  if (cap) {
    memset(cap, 0, sizeof *cap);
    for (int i = 0; i < x.ntensors; i++) {
      const struct op_tensor *t = &x.tensors[i];
      size_t bytes = fmt_bytes(t->dtype, t->count);
      cap->t[i] = (struct op_captured){.name = t->name, .scratch = t->scratch, .dtype = t->dtype, .count = t->count,
                                       .before = npu_xmalloc(bytes ? bytes : 1)};
      memcpy(cap->t[i].before, t->host, bytes);
    }
    cap->n = x.ntensors;
  }
  struct core_launch_opts lo = {.fidelity = opts->fidelity, .functional = opts->functional,
                                .trace = opts->trace, .observe = opts->observe, .progress = opts->progress};
  if (ranks > 1) {
    lo.ranks = ranks;
    lo.link_latency_s = opts->node->link.latency_s;
  }
  struct seq s = {&x, &lo, res, diag, 0};
  if (opts->fidelity == CORE_FIDELITY_EVENT) {
    struct npu_buf xml = {0};
    if (ranks > 1)
      mem_platform_group_xml(chip, ranks, opts->node->link.bw_bytes_per_s * opts->node->link_efficiency.value,
                             &xml);
    else
      mem_platform_chip_xml(chip, "", &xml);
    rc = npu_engine_init(npu_buf_str(&xml), diag);
    npu_buf_release(&xml);
    if (!rc) {
      npu_engine_spawn("op", npu_engine_host(ranks > 1 ? "d0.l2" : "l2"), seq_actor, &s);
      npu_engine_run();
      rc = s.rc;
    }
  } else {
    rc = launch_all(&s);
  }
  if (!rc) {
    finish(d, plan, res);
    if (cap) /* before the check, which may not leave the tensors as the kernels did */
      for (int i = 0; i < x.ntensors; i++) {
        size_t bytes = fmt_bytes(x.tensors[i].dtype, x.tensors[i].count);
        cap->t[i].after = npu_xmalloc(bytes ? bytes : 1);
        memcpy(cap->t[i].after, x.tensors[i].host, bytes);
      }
    if (opts->functional && d->check) {
      res->checked = true;
      res->passed = d->check(plan, &x, &res->max_err, res->check_summary, sizeof res->check_summary);
    }
  }
  for (int i = 0; i < x.ntensors; i++) free(x.tensors[i].host);
  for (int i = 0; i < x.nallocs; i++) free(x.allocs[i]);
  mem_gm_destroy(x.gm);
  if (d->release) d->release(plan);
  free(plan);
  return rc;
}

/* A candidate replaces the current choice when it is faster by more than this share: the
 * model's rounding (ties of 1e-8) is no reason to change a tiling. */
#define OP_SEARCH_MARGIN 1e-3

/* The tiling search: every candidate the operator offers, planned and run at analytic fidelity
 * without data (with the caller's seed); *best is the fastest, and its result is copied to keep
 * when keep is not NULL. Returns how many candidates ran (0: no search, or none could run). */
static int search(const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip, uint64_t seed,
                  struct op_args *best, struct op_result *keep)
{
  *best = *a;
  if (!d->variants) return 0;
  struct op_args cand[OP_MAX_VARIANTS];
  int n = d->variants(d, a, chip, cand, OP_MAX_VARIANTS);
  if (n <= 1) return 0;
  NPU_ASSERT(n <= OP_MAX_VARIANTS);
  struct op_result *r = npu_xmalloc(sizeof *r);
  struct op_run_opts ao = {.fidelity = CORE_FIDELITY_ANALYTIC, .seed = seed};
  double fastest = INFINITY;
  int ran = 0;
  for (int i = 0; i < n; i++) {
    struct npu_diag quiet = {0};
    if (run_one(d, &cand[i], chip, &ao, r, &quiet)) continue; /* does not fit: not a choice */
    ran++;
    if (r->total.time_s < fastest * (1 - OP_SEARCH_MARGIN)) {
      fastest = r->total.time_s;
      *best = cand[i];
      if (keep) memcpy(keep, r, sizeof *r);
    }
  }
  free(r);
  return ran;
}

int op_run(const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
           const struct op_run_opts *opts, struct op_result *res, struct npu_diag *diag)
{
  /* an analytic run without data, trace or observers is what the search ran: its result is kept */
  bool same = opts->fidelity == CORE_FIDELITY_ANALYTIC && !opts->functional && !opts->trace && !opts->observe &&
              !opts->progress && !opts->capture;
  struct op_args chosen;
  int searched = search(d, a, chip, opts->seed, &chosen, same ? res : NULL);
  int rc = searched && same ? 0 : run_one(d, &chosen, chip, opts, res, diag);
  res->searched = searched;
  if (searched) op_args_diff(d, a, &chosen, res->chosen, sizeof res->chosen);
  return rc;
}
