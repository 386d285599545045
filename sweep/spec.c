/*
 * spec.c - sweep files into points: axes, ranges, zips, sampling, derived values, constraints;
 * and batch runs (one point per scenario file). See sweep.h and docs/SWEEPS.md.
 *
 * Size: one job, the sweep file's grammar into points, over ~1,300 lines: axes, ranges, zips,
 * derived expressions, constraints and sampling share the point table and the located errors.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "sweep/sweep.h"

#include <dirent.h>
#include <errno.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <libconfig.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/err.h"
#include "common/units.h"
#include "sweep/expr.h"

#define MAX_CANDIDATES 10000000 /* a grid larger than this is refused */

struct key {
  char name[256];
  char col[288];         /* column: name + unit suffix */
  int unit;              /* enum npu_unit_kind, or -1 */
  const char *file;      /* where it is written */
  int line;
  int n;                 /* grid values */
  char **text;           /* as given to --set */
  double *num;           /* SI value, NAN when not a number */
  bool range, logscale, integer;
  double from, to;       /* range ends, in the unit of `unit_text` */
  char unit_text[32];    /* "TBps" for from = "1TBps"; "" for plain numbers */
};

struct axis {
  const char *file;
  int line;
  struct key *keys;
  int nkeys;
  int len;
};

struct derived {
  struct key k;          /* name, col, unit, file, line */
  char text[1024];
  struct sw_expr *expr;
};

struct constraint {
  const char *file;
  int line;
  char text[1024];
  char reason[512];
  struct sw_expr *expr;
};

struct loader {
  struct sw_spec *s;
  const struct sw_options *o;
  struct npu_diag *diag;
  config_t lc;
  char dir[PATH_MAX];    /* the sweep file's directory ("" for the current one) */
  char incfile[PATH_MAX];
  struct axis *axes;
  int naxes;
  struct derived *der;
  int nder;
  struct constraint *cons;
  int ncons;
  char base[PATH_MAX];   /* scenario to load */
  char display[PATH_MAX];
  struct scn_probe *probe; /* the base scenario with the options' sets */
  char method[16];
  int sample;
  unsigned long seed;
};

static const char *const unit_base[NPU_UNIT_KIND_COUNT] = {"Hz", "Bps", "s", "B", "FLOPS"};

/* A key's column: its name and unit suffix, unless the name already ends with the unit
 * (collective.bytes, not collective.bytes_bytes). */
static void col_name(char *col, size_t n, const char *name, const char *suffix)
{
  size_t ln = strlen(name), ls = strlen(suffix);
  if (ls > 1 && ln >= ls - 1 && !strcmp(name + ln - (ls - 1), suffix + 1)) suffix = "";
  snprintf(col, n, "%s%s", name, suffix);
}

static int suffix_unit(const char *suffix)
{
  static const char *const sfx[NPU_UNIT_KIND_COUNT] = {"_hz", "_bytes_per_s", "_s", "_bytes", "_flops_per_s"};
  for (int k = 0; k < NPU_UNIT_KIND_COUNT; k++)
    if (!strcmp(suffix, sfx[k])) return k;
  return -1;
}

/* The file a setting was written in, as a path usable in messages. */
static const char *where(struct loader *ld, const config_setting_t *st)
{
  const char *f = config_setting_source_file(st);
  if (!f || !strcmp(f, ld->s->path)) return ld->s->path;
  if (f[0] == '/' || !ld->dir[0]) return f;
  snprintf(ld->incfile, sizeof ld->incfile, "%s/%s", ld->dir, f);
  return ld->incfile;
}

/* The kind of a scenario (scenario/), or an error naming the kinds when it is of none. */
static int detect_kind(const struct scn_kind **out, const char *scenario, const char *const *sets, int nsets,
                       struct npu_diag *diag)
{
  int rc = scn_detect(out, scenario, sets, nsets, diag) ? NPU_ECONFIG : 0;
  if (!rc && !*out)
    rc = (npu_diag_set(diag, scenario, 0, NULL,
                       "the scenario is of no kind a sweep can run (kinds: %s; a training scenario has a model "
                       "section, an RL scenario an rl section, a kernel or collective scenario a kernel or "
                       "collective section)",
                       scn_kind_names()),
          NPU_ECONFIG);
  return rc;
}

static int failf(struct loader *ld, const char *file, int line, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int failf(struct loader *ld, const char *file, int line, const char *key, const char *fmt, ...)
{
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  npu_diag_set(ld->diag, file, line, key, "%s", msg);
  return NPU_ECONFIG;
}

static int fail_at(struct loader *ld, const config_setting_t *st, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(struct loader *ld, const config_setting_t *st, const char *key, const char *fmt, ...)
{
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  npu_diag_set(ld->diag, where(ld, st), (int)config_setting_source_line(st), key, "%s", msg);
  return NPU_ECONFIG;
}

/* Members of a group must be among names[]; an unknown one is a located error. */
static int check_members(struct loader *ld, const config_setting_t *g, const char *gname, const char *const *names)
{
  int n = config_setting_length(g);
  for (int i = 0; i < n; i++) {
    const config_setting_t *c = config_setting_get_elem(g, (unsigned)i);
    const char *nm = config_setting_name(c);
    bool ok = false;
    size_t k = 0;
    for (; names[k]; k++) ok |= !strcmp(names[k], nm);
    if (ok) continue;
    char key[512];
    snprintf(key, sizeof key, "%s.%s", gname, nm);
    const char *sug = npu_suggest(nm, names, k);
    if (sug) return fail_at(ld, c, key, "unknown key; did you mean '%s'?", sug);
    struct npu_buf b = {0};
    for (size_t j = 0; names[j]; j++) npu_buf_printf(&b, "%s%s", j ? ", " : "", names[j]);
    int rc = fail_at(ld, c, key, "unknown key (valid keys: %s)", npu_buf_str(&b));
    npu_buf_release(&b);
    return rc;
  }
  return 0;
}

static void fmt_num(double v, char *buf, size_t n)
{
  if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, n, "%.0f", v);
  else npu_fmt_double(v, buf, n);
}

/* A value of a setting as --set text and number. */
static int scalar_text(struct loader *ld, const config_setting_t *v, const char *key, char *buf, size_t n)
{
  switch (config_setting_type(v)) {
  case CONFIG_TYPE_INT: snprintf(buf, n, "%d", config_setting_get_int(v)); return 0;
  case CONFIG_TYPE_INT64: snprintf(buf, n, "%lld", config_setting_get_int64(v)); return 0;
  case CONFIG_TYPE_FLOAT: npu_fmt_double(config_setting_get_float(v), buf, n); return 0;
  case CONFIG_TYPE_BOOL: snprintf(buf, n, "%s", config_setting_get_bool(v) ? "true" : "false"); return 0;
  case CONFIG_TYPE_STRING: snprintf(buf, n, "%s", config_setting_get_string(v)); return 0;
  default: return fail_at(ld, v, key, "a value must be a number, a string or a boolean");
  }
}

static double text_number(const char *t, int unit)
{
  double v;
  char why[256];
  if (unit >= 0 && npu_unit_parse(t, (enum npu_unit_kind)unit, &v, why, sizeof why) == 0) return v;
  if (!strcmp(t, "true")) return 1;
  if (!strcmp(t, "false")) return 0;
  char *end;
  errno = 0;
  v = strtod(t, &end);
  if (end == t || *end || errno) return NAN;
  return v;
}

static void key_push(struct key *k, const char *text)
{
  k->text = npu_xrealloc(k->text, (size_t)(k->n + 1) * sizeof *k->text);
  k->num = npu_xrealloc(k->num, (size_t)(k->n + 1) * sizeof *k->num);
  k->text[k->n] = npu_xstrdup(text);
  k->num[k->n] = text_number(text, k->unit);
  k->n++;
}

/* A range end: a number, or a string "<number><unit>"; *unit gets the unit text. */
static int range_end(struct loader *ld, const config_setting_t *r, const char *name, const char *key, double *v,
                     char *unit, size_t un, bool *integer)
{
  const config_setting_t *e = config_setting_get_member(r, name);
  if (!e) return fail_at(ld, r, key, "a range needs '%s'", name);
  switch (config_setting_type(e)) {
  case CONFIG_TYPE_INT:
  case CONFIG_TYPE_INT64: *v = (double)config_setting_get_int64(e); unit[0] = '\0'; return 0;
  case CONFIG_TYPE_FLOAT: *v = config_setting_get_float(e); unit[0] = '\0'; *integer = false; return 0;
  case CONFIG_TYPE_STRING: {
    const char *t = config_setting_get_string(e);
    char *end;
    *v = strtod(t, &end);
    if (end == t) return fail_at(ld, e, key, "range %s '%s' does not start with a number", name, t);
    snprintf(unit, un, "%s", end);
    *integer = false;
    return 0;
  }
  default: return fail_at(ld, e, key, "range %s must be a number or a string with a unit", name);
  }
}

/* Fill k's grid values from `values` or `range` of the axis group g. */
static int parse_key(struct loader *ld, const config_setting_t *g, struct key *k)
{
  static const char *const members[] = {"key", "values", "range", NULL};
  const config_setting_t *ks = config_setting_get_member(g, "key");
  if (!ks || config_setting_type(ks) != CONFIG_TYPE_STRING)
    return fail_at(ld, g, "sweep.axes", "an axis needs key = \"SECTION.KEY\" (a string)");
  snprintf(k->name, sizeof k->name, "%s", config_setting_get_string(ks));
  k->file = npu_xstrdup(where(ld, ks));
  k->line = (int)config_setting_source_line(ks);
  int rc = check_members(ld, g, k->name, members);
  if (rc) return rc;
  const char *suffix = "";
  if (!scn_probe_has_key(ld->probe, k->name, &suffix)) {
    /* let the scenario loader word it (with its "did you mean") */
    char a[600];
    snprintf(a, sizeof a, "%s=0", k->name);
    struct npu_diag d;
    npu_diag_clear(&d);
    if (scn_probe_set(ld->probe, a, &d) == 0) snprintf(d.msg, sizeof d.msg, "unknown key");
    return failf(ld, k->file, k->line, k->name, "%s", d.msg);
  }
  k->unit = suffix_unit(suffix);
  col_name(k->col, sizeof k->col, k->name, suffix);
  const config_setting_t *vals = config_setting_get_member(g, "values");
  const config_setting_t *range = config_setting_get_member(g, "range");
  if (!!vals == !!range) return fail_at(ld, g, k->name, "an axis needs either values = [...] or range = { ... }");
  if (vals) {
    if (!config_setting_is_aggregate(vals) || config_setting_is_group(vals))
      return fail_at(ld, vals, k->name, "values must be a list [a, b, ...]");
    int n = config_setting_length(vals);
    if (n == 0) return fail_at(ld, vals, k->name, "empty axis: values has no value");
    for (int i = 0; i < n; i++) {
      char t[512];
      rc = scalar_text(ld, config_setting_get_elem(vals, (unsigned)i), k->name, t, sizeof t);
      if (rc) return rc;
      key_push(k, t);
    }
    return 0;
  }
  static const char *const rmembers[] = {"from", "to", "points", "step", "factor", "scale", NULL};
  char rkey[300];
  snprintf(rkey, sizeof rkey, "%s", k->name);
  if (!config_setting_is_group(range)) return fail_at(ld, range, k->name, "range must be a group { from; to; ... }");
  rc = check_members(ld, range, "range", rmembers);
  if (rc) return rc;
  k->range = true;
  k->integer = true;
  char u1[32], u2[32];
  rc = range_end(ld, range, "from", rkey, &k->from, u1, sizeof u1, &k->integer);
  if (!rc) rc = range_end(ld, range, "to", rkey, &k->to, u2, sizeof u2, &k->integer);
  if (rc) return rc;
  if (strcmp(u1, u2)) return fail_at(ld, range, k->name, "range from and to must use the same unit ('%s' vs '%s')", u1, u2);
  snprintf(k->unit_text, sizeof k->unit_text, "%s", u1);
  const char *scale = "linear";
  const config_setting_t *sc = config_setting_get_member(range, "scale");
  if (sc) {
    if (config_setting_type(sc) != CONFIG_TYPE_STRING ||
        (strcmp(config_setting_get_string(sc), "linear") && strcmp(config_setting_get_string(sc), "log")))
      return fail_at(ld, sc, k->name, "scale must be \"linear\" or \"log\"");
    scale = config_setting_get_string(sc);
  }
  const config_setting_t *pts = config_setting_get_member(range, "points");
  const config_setting_t *step = config_setting_get_member(range, "step");
  const config_setting_t *fac = config_setting_get_member(range, "factor");
  k->logscale = !strcmp(scale, "log") || fac;
  if ((pts != NULL) + (step != NULL) + (fac != NULL) > 1)
    return fail_at(ld, range, k->name, "a range takes one of points, step, factor");
  if (step && k->logscale) return fail_at(ld, step, k->name, "step is for linear ranges (use factor for log)");
  if (k->logscale && (k->from <= 0 || k->to <= 0))
    return fail_at(ld, range, k->name, "a log range needs positive ends");
  int n;
  double stepv = 0, facv = 0;
  if (pts) {
    if (config_setting_type(pts) != CONFIG_TYPE_INT || config_setting_get_int(pts) < 1)
      return fail_at(ld, pts, k->name, "points must be a positive integer");
    n = config_setting_get_int(pts);
    if (n == 1 && k->from != k->to) return fail_at(ld, pts, k->name, "one point cannot span from..to");
  } else if (step || fac) {
    const config_setting_t *e = step ? step : fac;
    double v = config_setting_type(e) == CONFIG_TYPE_FLOAT ? config_setting_get_float(e)
                                                           : (double)config_setting_get_int64(e);
    if (config_setting_type(e) == CONFIG_TYPE_FLOAT) k->integer = false;
    if (step) {
      if (!(v > 0)) return fail_at(ld, e, k->name, "step must be positive");
      stepv = v;
      n = (int)floor(fabs(k->to - k->from) / v + 1e-9) + 1;
    } else {
      if (!(v > 1)) return fail_at(ld, e, k->name, "factor must be greater than 1");
      facv = v;
      double r = k->to > k->from ? k->to / k->from : k->from / k->to;
      n = (int)floor(log(r) / log(v) + 1e-9) + 1;
    }
  } else if (ld->sample > 0) {
    return 0; /* sampled continuously: no grid needed */
  } else {
    return fail_at(ld, range, k->name, "a range needs points, step or factor");
  }
  if (n > 100000) return fail_at(ld, range, k->name, "a range of %d points is too many", n);
  double dir = k->to >= k->from ? 1 : -1;
  for (int i = 0; i < n; i++) {
    double v;
    if (stepv) v = k->from + dir * i * stepv;
    else if (facv) v = dir > 0 ? k->from * pow(facv, i) : k->from / pow(facv, i);
    else if (n == 1) v = k->from;
    else if (k->logscale) v = exp(log(k->from) + (log(k->to) - log(k->from)) * i / (n - 1));
    else v = k->from + (k->to - k->from) * i / (n - 1);
    if (i == n - 1 && pts) v = k->to;
    char t[64], num[48];
    if (k->integer) {
      v = round(v);
      if (k->n && k->num[k->n - 1] == v)
        return fail_at(ld, range, k->name, "the range repeats the integer %.0f: use fewer points", v);
    }
    snprintf(num, sizeof num, "%.12g", v);
    snprintf(t, sizeof t, "%s%s", num, k->unit_text);
    key_push(k, t);
  }
  return 0;
}

static int parse_axes(struct loader *ld, const config_setting_t *axes)
{
  if (!config_setting_is_list(axes) && !config_setting_is_array(axes))
    return fail_at(ld, axes, "sweep.axes", "axes must be a list ( { key = ...; values = [...]; }, ... )");
  int n = config_setting_length(axes);
  for (int i = 0; i < n; i++) {
    const config_setting_t *g = config_setting_get_elem(axes, (unsigned)i);
    if (!config_setting_is_group(g)) return fail_at(ld, g, "sweep.axes", "an axis must be a group { key = ...; ... }");
    ld->axes = npu_xrealloc(ld->axes, (size_t)(ld->naxes + 1) * sizeof *ld->axes);
    struct axis *a = &ld->axes[ld->naxes++];
    memset(a, 0, sizeof *a);
    a->file = npu_xstrdup(where(ld, g));
    a->line = (int)config_setting_source_line(g);
    const config_setting_t *zip = config_setting_get_member(g, "zip");
    if (zip) {
      if (config_setting_length(g) != 1)
        return fail_at(ld, g, "sweep.axes", "a zipped axis holds only zip = ( {...}, {...} )");
      if (!config_setting_is_list(zip) || config_setting_length(zip) < 1)
        return fail_at(ld, zip, "sweep.axes", "zip must be a list of axes ( { key = ...; values = [...]; }, ... )");
      int m = config_setting_length(zip);
      for (int j = 0; j < m; j++) {
        const config_setting_t *zg = config_setting_get_elem(zip, (unsigned)j);
        if (!config_setting_is_group(zg)) return fail_at(ld, zg, "sweep.axes", "a zipped axis must be a group");
        a->keys = npu_xrealloc(a->keys, (size_t)(a->nkeys + 1) * sizeof *a->keys);
        memset(&a->keys[a->nkeys], 0, sizeof *a->keys);
        int rc = parse_key(ld, zg, &a->keys[a->nkeys++]);
        if (rc) return rc;
      }
    } else {
      a->keys = npu_xcalloc(1, sizeof *a->keys);
      a->nkeys = 1;
      int rc = parse_key(ld, g, &a->keys[0]);
      if (rc) return rc;
    }
    a->len = a->keys[0].n;
    for (int j = 1; j < a->nkeys; j++)
      if (a->keys[j].n != a->len)
        return failf(ld, a->keys[j].file, a->keys[j].line, a->keys[j].name,
                     "zipped axes must have the same length: %s has %d values, %s has %d", a->keys[0].name, a->len,
                     a->keys[j].name, a->keys[j].n);
  }
  return 0;
}

/* Every axis value must be accepted by the scenario loader (type, unit, range, choices). */
static int check_values(struct loader *ld)
{
  struct npu_diag d;
  struct scn_probe *p = scn_probe_open(ld->s->kind, ld->base, ld->o->sets, ld->o->nsets, ld->diag);
  if (!p) return NPU_ECONFIG;
  int rc = 0;
  for (int a = 0; a < ld->naxes && !rc; a++)
    for (int j = 0; j < ld->axes[a].nkeys && !rc; j++) {
      struct key *k = &ld->axes[a].keys[j];
      for (int i = 0; i < k->n && !rc; i++) {
        char set[1024];
        snprintf(set, sizeof set, "%s=%s", k->name, k->text[i]);
        npu_diag_clear(&d);
        if (scn_probe_set(p, set, &d))
          rc = failf(ld, k->file, k->line, k->name, "value '%s': %s", k->text[i], d.msg);
      }
    }
  scn_probe_close(p);
  return rc;
}

static struct key *find_axis_key(struct loader *ld, const char *name, int *axis)
{
  for (int a = 0; a < ld->naxes; a++)
    for (int j = 0; j < ld->axes[a].nkeys; j++)
      if (!strcmp(ld->axes[a].keys[j].name, name)) {
        if (axis) *axis = a;
        return &ld->axes[a].keys[j];
      }
  return NULL;
}

static int find_derived(struct loader *ld, const char *name)
{
  for (int i = 0; i < ld->nder; i++)
    if (!strcmp(ld->der[i].k.name, name)) return i;
  return -1;
}

/* Names an expression uses must be axes, derived keys, or values the scenario has. */
static int check_names(struct loader *ld, const struct sw_expr *e, const char *file, int line, const char *key)
{
  const char *const *names;
  size_t n = sw_expr_names(e, &names);
  for (size_t i = 0; i < n; i++) {
    if (find_axis_key(ld, names[i], NULL) || find_derived(ld, names[i]) >= 0) continue;
    const char *sfx;
    if (scn_probe_has_key(ld->probe, names[i], &sfx)) continue;
    double v;
    struct npu_diag d;
    npu_diag_clear(&d);
    if (scn_probe_value(ld->probe, names[i], &v, &d) == 0) continue;
    return failf(ld, file, line, key, "unknown name '%s' in the expression (not an axis, a derived key, a key of the "
                 "scenario or 'devices')", names[i]);
  }
  return 0;
}

static int parse_derived(struct loader *ld, const config_setting_t *list)
{
  if (!config_setting_is_list(list)) return fail_at(ld, list, "sweep.derived", "derived must be a list ( { key; expr; }, ... )");
  static const char *const members[] = {"key", "expr", NULL};
  int n = config_setting_length(list);
  for (int i = 0; i < n; i++) {
    const config_setting_t *g = config_setting_get_elem(list, (unsigned)i);
    if (!config_setting_is_group(g)) return fail_at(ld, g, "sweep.derived", "a derived value is a group { key; expr; }");
    const config_setting_t *ks = config_setting_get_member(g, "key");
    const config_setting_t *es = config_setting_get_member(g, "expr");
    if (!ks || config_setting_type(ks) != CONFIG_TYPE_STRING)
      return fail_at(ld, g, "sweep.derived", "a derived value needs key = \"SECTION.KEY\"");
    const char *name = config_setting_get_string(ks);
    int rc = check_members(ld, g, name, members);
    if (rc) return rc;
    if (!es || config_setting_type(es) != CONFIG_TYPE_STRING)
      return fail_at(ld, g, name, "a derived value needs expr = \"...\" (a string)");
    ld->der = npu_xrealloc(ld->der, (size_t)(ld->nder + 1) * sizeof *ld->der);
    struct derived *dv = &ld->der[ld->nder++];
    memset(dv, 0, sizeof *dv);
    snprintf(dv->k.name, sizeof dv->k.name, "%s", name);
    dv->k.file = npu_xstrdup(where(ld, es));
    dv->k.line = (int)config_setting_source_line(es);
    snprintf(dv->text, sizeof dv->text, "%s", config_setting_get_string(es));
    const char *sfx = "";
    if (!scn_probe_has_key(ld->probe, name, &sfx)) {
      char a[600];
      snprintf(a, sizeof a, "%s=0", name);
      struct npu_diag d;
      npu_diag_clear(&d);
      if (scn_probe_set(ld->probe, a, &d) == 0) snprintf(d.msg, sizeof d.msg, "unknown key");
      return failf(ld, dv->k.file, (int)config_setting_source_line(ks), name, "%s", d.msg);
    }
    if (find_axis_key(ld, name, NULL) || find_derived(ld, name) < ld->nder - 1)
      return failf(ld, dv->k.file, dv->k.line, name, "the key is already swept or derived");
    dv->k.unit = suffix_unit(sfx);
    col_name(dv->k.col, sizeof dv->k.col, name, sfx);
    char why[512];
    if (sw_expr_parse(dv->text, &dv->expr, why, sizeof why))
      return failf(ld, dv->k.file, dv->k.line, name, "bad expression '%s': %s", dv->text, why);
  }
  return 0;
}

static int parse_constraints(struct loader *ld, const config_setting_t *list)
{
  if (!config_setting_is_list(list) && !config_setting_is_array(list))
    return fail_at(ld, list, "sweep.constraints", "constraints must be a list of expressions or { expr; reason; }");
  static const char *const members[] = {"expr", "reason", NULL};
  int n = config_setting_length(list);
  for (int i = 0; i < n; i++) {
    const config_setting_t *c = config_setting_get_elem(list, (unsigned)i);
    ld->cons = npu_xrealloc(ld->cons, (size_t)(ld->ncons + 1) * sizeof *ld->cons);
    struct constraint *cn = &ld->cons[ld->ncons++];
    memset(cn, 0, sizeof *cn);
    cn->file = npu_xstrdup(where(ld, c));
    cn->line = (int)config_setting_source_line(c);
    const config_setting_t *es = c, *rs = NULL;
    if (config_setting_is_group(c)) {
      int rc = check_members(ld, c, "sweep.constraints", members);
      if (rc) return rc;
      es = config_setting_get_member(c, "expr");
      rs = config_setting_get_member(c, "reason");
      if (!es) return fail_at(ld, c, "sweep.constraints", "a constraint needs expr = \"...\"");
    }
    if (config_setting_type(es) != CONFIG_TYPE_STRING)
      return fail_at(ld, es, "sweep.constraints", "a constraint is an expression in a string");
    if (rs && config_setting_type(rs) != CONFIG_TYPE_STRING)
      return fail_at(ld, rs, "sweep.constraints", "reason must be a string");
    snprintf(cn->text, sizeof cn->text, "%s", config_setting_get_string(es));
    if (rs) snprintf(cn->reason, sizeof cn->reason, "%s", config_setting_get_string(rs));
    else snprintf(cn->reason, sizeof cn->reason, "%s", cn->text);
    char why[512];
    if (sw_expr_parse(cn->text, &cn->expr, why, sizeof why))
      return failf(ld, cn->file, cn->line, "sweep.constraints", "bad expression '%s': %s", cn->text, why);
  }
  return 0;
}

/* Derived values may use each other, but not in a cycle. */
static int check_cycles(struct loader *ld)
{
  int n = ld->nder;
  int *state = npu_xcalloc((size_t)n + 1, sizeof *state);
  int rc = 0;
  /* iterative DFS would be overkill: n is small; repeat relaxation n times */
  for (int start = 0; start < n && !rc; start++) {
    /* walk all paths from start; a path longer than n means a cycle */
    int *stack = npu_xmalloc(((size_t)n * (size_t)n + 2) * sizeof *stack);
    int *depth = npu_xmalloc(((size_t)n * (size_t)n + 2) * sizeof *depth);
    int sp = 0;
    stack[sp] = start;
    depth[sp++] = 0;
    while (sp && !rc) {
      int d = stack[--sp], dep = depth[sp];
      if (dep > n) {
        rc = failf(ld, ld->der[start].k.file, ld->der[start].k.line, ld->der[start].k.name,
                   "derived values depend on each other in a cycle");
        break;
      }
      const char *const *names;
      size_t m = sw_expr_names(ld->der[d].expr, &names);
      for (size_t i = 0; i < m; i++) {
        int t = find_derived(ld, names[i]);
        if (t >= 0 && sp < n * n + 1) {
          stack[sp] = t;
          depth[sp++] = dep + 1;
        }
      }
    }
    free(stack);
    free(depth);
  }
  free(state);
  return rc;
}

static int parse_sample(struct loader *ld, const config_setting_t *g)
{
  static const char *const members[] = {"method", "points", "seed", NULL};
  if (!config_setting_is_group(g)) return fail_at(ld, g, "sweep.sample", "sample must be a group { method; points; seed; }");
  int rc = check_members(ld, g, "sweep.sample", members);
  if (rc) return rc;
  const config_setting_t *m = config_setting_get_member(g, "method");
  const config_setting_t *p = config_setting_get_member(g, "points");
  const config_setting_t *s = config_setting_get_member(g, "seed");
  snprintf(ld->method, sizeof ld->method, "random");
  if (m) {
    if (config_setting_type(m) != CONFIG_TYPE_STRING ||
        (strcmp(config_setting_get_string(m), "random") && strcmp(config_setting_get_string(m), "lhs")))
      return fail_at(ld, m, "sweep.sample.method", "method must be \"random\" or \"lhs\" (Latin hypercube)");
    snprintf(ld->method, sizeof ld->method, "%s", config_setting_get_string(m));
  }
  if (!p || config_setting_type(p) != CONFIG_TYPE_INT || config_setting_get_int(p) < 1)
    return fail_at(ld, p ? p : g, "sweep.sample.points", "sampling needs points = N (a positive integer)");
  ld->sample = config_setting_get_int(p);
  if (s) {
    if (config_setting_type(s) != CONFIG_TYPE_INT || config_setting_get_int(s) < 0)
      return fail_at(ld, s, "sweep.sample.seed", "seed must be a non-negative integer");
    ld->seed = (unsigned long)config_setting_get_int(s);
  }
  return 0;
}

/* ------------------------------------------------------------ the base scenario */

static void write_string(struct npu_buf *b, const char *s)
{
  npu_buf_puts(b, "\"");
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') npu_buf_printf(b, "\\%c", *s);
    else if (*s == '\n') npu_buf_puts(b, "\\n");
    else npu_buf_printf(b, "%c", *s);
  }
  npu_buf_puts(b, "\"");
}

/* Write a libconfig setting back as text; relative preset paths become absolute. */
static void write_setting(struct loader *ld, struct npu_buf *b, const config_setting_t *st, int indent)
{
  const char *name = config_setting_name(st);
  if (name) npu_buf_printf(b, "%*s%s = ", indent, "", name);
  int n;
  switch (config_setting_type(st)) {
  case CONFIG_TYPE_GROUP:
    npu_buf_puts(b, "{\n");
    n = config_setting_length(st);
    for (int i = 0; i < n; i++) write_setting(ld, b, config_setting_get_elem(st, (unsigned)i), indent + 2);
    npu_buf_printf(b, "%*s}", indent, "");
    break;
  case CONFIG_TYPE_ARRAY:
  case CONFIG_TYPE_LIST: {
    bool arr = config_setting_type(st) == CONFIG_TYPE_ARRAY;
    npu_buf_puts(b, arr ? "[" : "(");
    n = config_setting_length(st);
    for (int i = 0; i < n; i++) {
      if (i) npu_buf_puts(b, ", ");
      write_setting(ld, b, config_setting_get_elem(st, (unsigned)i), 0);
    }
    npu_buf_puts(b, arr ? "]" : ")");
    break;
  }
  case CONFIG_TYPE_INT: npu_buf_printf(b, "%d", config_setting_get_int(st)); break;
  case CONFIG_TYPE_INT64: npu_buf_printf(b, "%lldL", config_setting_get_int64(st)); break;
  case CONFIG_TYPE_FLOAT: {
    char t[64];
    npu_fmt_double(config_setting_get_float(st), t, sizeof t);
    npu_buf_printf(b, "%s%s", t, strpbrk(t, ".eEn") ? "" : ".0");
    break;
  }
  case CONFIG_TYPE_BOOL: npu_buf_puts(b, config_setting_get_bool(st) ? "true" : "false"); break;
  case CONFIG_TYPE_STRING: {
    const char *v = config_setting_get_string(st);
    size_t l = strlen(v);
    if (name && !strcmp(name, "preset") && v[0] != '/' && (strchr(v, '/') || (l > 4 && !strcmp(v + l - 4, ".cfg")))) {
      char rel[PATH_MAX * 2], abs[PATH_MAX];
      const char *f = where(ld, st);
      const char *slash = strrchr(f, '/');
      snprintf(rel, sizeof rel, "%.*s%s%s", slash ? (int)(slash - f) : 1, slash ? f : ".", "/", v);
      write_string(b, realpath(rel, abs) ? abs : rel);
    } else {
      write_string(b, v);
    }
    break;
  }
  default: break;
  }
  if (name) npu_buf_puts(b, ";\n");
}

static void rm_tree(const char *dir);

/* The private directories of sweeps killed before they could remove their own (kill -9): the
 * process their owner.pid names is gone. Removed when the next sweep file with @include loads. */
static void remove_stale(const char *tmp)
{
  DIR *d = opendir(tmp);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "npusim-sweep-", 13)) continue;
    char dir[1536], pidf[1600];
    snprintf(dir, sizeof dir, "%s/%s", tmp, e->d_name);
    snprintf(pidf, sizeof pidf, "%s/owner.pid", dir);
    FILE *f = fopen(pidf, "r");
    if (!f) continue; /* being created, or not ours */
    long pid = 0;
    bool ok = fscanf(f, "%ld", &pid) == 1;
    fclose(f);
    struct stat st;
    if (ok && pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH && stat(dir, &st) == 0 && st.st_uid == getuid())
      rm_tree(dir);
  }
  closedir(d);
}

/* The scenario part of a sweep file with @include: written to a private file (in a directory
 * that names its owner, so that a killed sweep's is removed by the next one). */
static int generate_base(struct loader *ld, const config_setting_t *root)
{
  struct npu_buf b = {0};
  npu_buf_printf(&b, "# the scenario of %s, without its sweep group (generated)\n", ld->s->path);
  int n = config_setting_length(root);
  for (int i = 0; i < n; i++) {
    const config_setting_t *c = config_setting_get_elem(root, (unsigned)i);
    if (!strcmp(config_setting_name(c), "sweep")) continue;
    write_setting(ld, &b, c, 0);
  }
  const char *tmp = getenv("TMPDIR");
  tmp = tmp && *tmp ? tmp : "/tmp";
  remove_stale(tmp);
  snprintf(ld->s->tmpdir, sizeof ld->s->tmpdir, "%s/npusim-sweep-XXXXXX", tmp);
  if (!mkdtemp(ld->s->tmpdir)) {
    ld->s->tmpdir[0] = '\0';
    npu_buf_release(&b);
    return npu_diag_set(ld->diag, ld->s->path, 0, NULL, "cannot create a temporary directory: %s", strerror(errno)),
           NPU_EIO;
  }
  char owner[1100];
  snprintf(owner, sizeof owner, "%s/owner.pid", ld->s->tmpdir);
  FILE *of = fopen(owner, "w");
  if (of) {
    fprintf(of, "%ld\n", (long)getpid());
    fclose(of);
  }
  const char *slash = strrchr(ld->s->path, '/');
  snprintf(ld->base, sizeof ld->base, "%s/%s", ld->s->tmpdir, slash ? slash + 1 : ld->s->path);
  FILE *f = fopen(ld->base, "w");
  bool ok = f && fwrite(npu_buf_str(&b), 1, b.len, f) == b.len;
  if (f) ok &= fclose(f) == 0;
  npu_buf_release(&b);
  if (!ok) return npu_diag_set(ld->diag, ld->base, 0, NULL, "cannot write the scenario"), NPU_EIO;
  snprintf(ld->display, sizeof ld->display, "%s", ld->s->path);
  return 0;
}

/* ------------------------------------------------------------ points */

struct point_ctx {
  struct loader *ld;
  const int *idx;          /* grid index per axis, or -1 when sampled continuously */
  const double *u;         /* continuous sample per axis (idx -1) */
  char **axis_text;        /* per axis key (flattened), text of this point */
  double *axis_num;
  double *der_val;
  int *der_state;          /* 0 not computed, 1 computing, 2 done, 3 failed */
  char der_why[512];
  struct scn_probe *probe;  /* the scenario with this point's axis values, opened on demand */
  bool probe_failed;
};

static int flat_index(struct loader *ld, int axis, int key)
{
  int f = 0;
  for (int a = 0; a < axis; a++) f += ld->axes[a].nkeys;
  return f + key;
}

static int resolve(void *vctx, const char *name, double *out, char *why, size_t whylen);

static int eval_derived(struct point_ctx *c, int d, char *why, size_t whylen)
{
  if (c->der_state[d] == 2) return 0;
  if (c->der_state[d] == 3) return snprintf(why, whylen, "%s", c->der_why), -1;
  if (c->der_state[d] == 1) return snprintf(why, whylen, "cycle through %s", c->ld->der[d].k.name), -1;
  c->der_state[d] = 1;
  char w[512];
  if (sw_expr_eval(c->ld->der[d].expr, resolve, c, &c->der_val[d], w, sizeof w)) {
    snprintf(c->der_why, sizeof c->der_why, "%s:%d: %s: %s", c->ld->der[d].k.file, c->ld->der[d].k.line,
             c->ld->der[d].k.name, w);
    c->der_state[d] = 3;
    return snprintf(why, whylen, "%s", c->der_why), -1;
  }
  c->der_state[d] = 2;
  return 0;
}

static int resolve(void *vctx, const char *name, double *out, char *why, size_t whylen)
{
  struct point_ctx *c = vctx;
  struct loader *ld = c->ld;
  int a;
  struct key *k = find_axis_key(ld, name, &a);
  if (k) {
    int f = flat_index(ld, a, (int)(k - ld->axes[a].keys));
    *out = c->axis_num[f];
    if (isnan(*out)) return snprintf(why, whylen, "%s = %s is not a number", name, c->axis_text[f]), -1;
    return 0;
  }
  int d = find_derived(ld, name);
  if (d >= 0) {
    if (eval_derived(c, d, why, whylen)) return -1;
    *out = c->der_val[d];
    return 0;
  }
  if (!c->probe && !c->probe_failed) {
    int nf = 0;
    for (int i = 0; i < ld->naxes; i++) nf += ld->axes[i].nkeys;
    int nsets = ld->o->nsets + nf;
    const char **sets = npu_xmalloc((size_t)(nsets + 1) * sizeof *sets);
    char **own = npu_xmalloc((size_t)(nf + 1) * sizeof *own);
    for (int i = 0; i < ld->o->nsets; i++) sets[i] = ld->o->sets[i];
    int f = 0;
    for (int i = 0; i < ld->naxes; i++)
      for (int j = 0; j < ld->axes[i].nkeys; j++, f++) {
        size_t len = strlen(ld->axes[i].keys[j].name) + strlen(c->axis_text[f]) + 2;
        own[f] = npu_xmalloc(len);
        snprintf(own[f], len, "%s=%s", ld->axes[i].keys[j].name, c->axis_text[f]);
        sets[ld->o->nsets + f] = own[f];
      }
    struct npu_diag dg;
    npu_diag_clear(&dg);
    c->probe = scn_probe_open(ld->s->kind, ld->base, sets, nsets, &dg);
    c->probe_failed = !c->probe;
    if (!c->probe) snprintf(c->der_why, sizeof c->der_why, "%s", dg.msg);
    for (int i = 0; i < nf; i++) free(own[i]);
    free(own);
    free(sets);
  }
  if (!c->probe) return snprintf(why, whylen, "%s", c->der_why), -1;
  struct npu_diag dg;
  npu_diag_clear(&dg);
  if (scn_probe_value(c->probe, name, out, &dg))
    return snprintf(why, whylen, "%s%s%s", dg.key[0] ? dg.key : "", dg.key[0] ? ": " : "", dg.msg), -1;
  return 0;
}

static void add_skip(struct sw_spec *s, const char *reason)
{
  for (int i = 0; i < s->nskips; i++)
    if (!strcmp(s->skips[i].reason, reason)) {
      s->skips[i].count++;
      return;
    }
  s->skips = npu_xrealloc(s->skips, (size_t)(s->nskips + 1) * sizeof *s->skips);
  snprintf(s->skips[s->nskips].reason, sizeof s->skips[s->nskips].reason, "%s", reason);
  s->skips[s->nskips++].count = 1;
}

/* The text and number of axis a's key j at this point. */
static void axis_value(struct loader *ld, int a, int j, int idx, double u, char *text, size_t n, double *num)
{
  struct key *k = &ld->axes[a].keys[j];
  if (idx >= 0) {
    snprintf(text, n, "%s", k->text[idx]);
    *num = k->num[idx];
    return;
  }
  double v = k->logscale ? exp(log(k->from) + (log(k->to) - log(k->from)) * u) : k->from + (k->to - k->from) * u;
  if (k->integer) v = round(v);
  char t[48];
  snprintf(t, sizeof t, "%.6g", v);
  snprintf(text, n, "%s%s", t, k->unit_text);
  *num = text_number(text, k->unit);
}

static void make_point(struct loader *ld, const int *idx, const double *u)
{
  struct sw_spec *s = ld->s;
  int nf = 0;
  for (int a = 0; a < ld->naxes; a++) nf += ld->axes[a].nkeys;
  struct point_ctx c = {.ld = ld, .idx = idx, .u = u};
  c.axis_text = npu_xcalloc((size_t)nf + 1, sizeof *c.axis_text);
  c.axis_num = npu_xcalloc((size_t)nf + 1, sizeof *c.axis_num);
  c.der_val = npu_xcalloc((size_t)ld->nder + 1, sizeof *c.der_val);
  c.der_state = npu_xcalloc((size_t)ld->nder + 1, sizeof *c.der_state);
  int f = 0;
  for (int a = 0; a < ld->naxes; a++)
    for (int j = 0; j < ld->axes[a].nkeys; j++, f++) {
      char t[512];
      axis_value(ld, a, j, idx[a], u ? u[a] : 0, t, sizeof t, &c.axis_num[f]);
      c.axis_text[f] = npu_xstrdup(t);
    }
  char why[1024];
  bool keep = true;
  for (int i = 0; i < ld->ncons && keep; i++) {
    double v;
    if (sw_expr_eval(ld->cons[i].expr, resolve, &c, &v, why, sizeof why)) {
      char r[1100];
      snprintf(r, sizeof r, "%s:%d: constraint '%s': %s", ld->cons[i].file, ld->cons[i].line, ld->cons[i].text, why);
      add_skip(s, r);
      keep = false;
    } else if (v == 0) {
      add_skip(s, ld->cons[i].reason);
      keep = false;
    }
  }
  for (int d = 0; d < ld->nder && keep; d++)
    if (eval_derived(&c, d, why, sizeof why)) {
      add_skip(s, why);
      keep = false;
    }
  if (keep) {
    s->points = npu_xrealloc(s->points, (size_t)(s->npoints + 1) * sizeof *s->points);
    struct sw_point *p = &s->points[s->npoints++];
    memset(p, 0, sizeof *p);
    p->scenario = npu_xstrdup(ld->base);
    p->display = npu_xstrdup(ld->display);
    p->nsets = ld->o->nsets + nf + ld->nder;
    p->sets = npu_xcalloc((size_t)p->nsets + 1, sizeof *p->sets);
    p->cells = npu_xcalloc((size_t)s->ncolumns + 1, sizeof *p->cells);
    int k = 0;
    for (int i = 0; i < ld->o->nsets; i++) p->sets[k++] = npu_xstrdup(ld->o->sets[i]);
    f = 0;
    char buf[1200], num[64];
    for (int a = 0; a < ld->naxes; a++)
      for (int j = 0; j < ld->axes[a].nkeys; j++, f++) {
        struct key *ky = &ld->axes[a].keys[j];
        snprintf(buf, sizeof buf, "%s=%s", ky->name, c.axis_text[f]);
        p->sets[k++] = npu_xstrdup(buf);
        if (ky->unit >= 0 && !isnan(c.axis_num[f])) {
          npu_fmt_double(c.axis_num[f], num, sizeof num);
          p->cells[f] = npu_xstrdup(num);
        } else {
          p->cells[f] = npu_xstrdup(c.axis_text[f]);
        }
      }
    for (int d = 0; d < ld->nder; d++) {
      struct key *ky = &ld->der[d].k;
      fmt_num(c.der_val[d], num, sizeof num);
      snprintf(buf, sizeof buf, "%s=%s%s", ky->name, num, ky->unit >= 0 ? unit_base[ky->unit] : "");
      p->sets[k++] = npu_xstrdup(buf);
      p->cells[nf + d] = npu_xstrdup(num);
    }
  }
  for (int i = 0; i < nf; i++) free(c.axis_text[i]);
  free(c.axis_text);
  free(c.axis_num);
  free(c.der_val);
  free(c.der_state);
  if (c.probe) scn_probe_close(c.probe);
}

static int generate(struct loader *ld)
{
  struct sw_spec *s = ld->s;
  int na = ld->naxes;
  int *idx = npu_xcalloc((size_t)na + 1, sizeof *idx);
  double *u = npu_xcalloc((size_t)na + 1, sizeof *u);
  double total = 1;
  for (int a = 0; a < na; a++) total *= ld->axes[a].len ? ld->axes[a].len : 1;
  int rc = 0;
  if (!ld->sample && total > MAX_CANDIDATES) {
    rc = npu_diag_set(ld->diag, s->path, 0, "sweep.axes", "the grid has %.0f points (at most %d): sample it", total,
                      MAX_CANDIDATES);
    goto out;
  }
  if (!ld->sample) {
    s->candidates = (int)total;
    for (int i = 0; i < s->candidates; i++) {
      long r = i;
      for (int a = na - 1; a >= 0; a--) {
        idx[a] = (int)(r % ld->axes[a].len);
        r /= ld->axes[a].len;
      }
      make_point(ld, idx, NULL);
    }
    goto out;
  }
  gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
  gsl_rng_set(rng, ld->seed);
  int n = ld->sample;
  if (!strcmp(ld->method, "grid")) {
    /* --sample N on a grid: N distinct grid points, in grid order */
    int m = total < n ? (int)total : n;
    if (total > MAX_CANDIDATES) m = 0;
    int *all = npu_xmalloc(((size_t)total + 1) * sizeof *all), *pick = npu_xmalloc(((size_t)m + 1) * sizeof *pick);
    for (int i = 0; i < (int)total; i++) all[i] = i;
    if (m) gsl_ran_choose(rng, pick, (size_t)m, all, (size_t)total, sizeof *all);
    s->candidates = m;
    for (int i = 0; i < m; i++) {
      long r = pick[i];
      for (int a = na - 1; a >= 0; a--) {
        idx[a] = (int)(r % ld->axes[a].len);
        r /= ld->axes[a].len;
      }
      make_point(ld, idx, NULL);
    }
    free(all);
    free(pick);
    gsl_rng_free(rng);
    goto out;
  }
  /* continuous per axis when every key of the axis is a range, else by index */
  bool *cont = npu_xcalloc((size_t)na + 1, sizeof *cont);
  for (int a = 0; a < na; a++) {
    cont[a] = true;
    for (int j = 0; j < ld->axes[a].nkeys; j++) cont[a] &= ld->axes[a].keys[j].range;
  }
  bool lhs = !strcmp(ld->method, "lhs");
  int *perm = NULL;
  if (lhs) {
    perm = npu_xmalloc((size_t)na * (size_t)n * sizeof *perm + 1);
    for (int a = 0; a < na; a++) {
      for (int i = 0; i < n; i++) perm[a * n + i] = i;
      gsl_ran_shuffle(rng, perm + a * n, (size_t)n, sizeof *perm);
    }
  }
  s->candidates = n;
  for (int i = 0; i < n; i++) {
    for (int a = 0; a < na; a++) {
      double v = lhs ? (perm[a * n + i] + gsl_rng_uniform(rng)) / n : gsl_rng_uniform(rng);
      if (cont[a]) {
        idx[a] = -1;
        u[a] = v;
      } else {
        int len = ld->axes[a].len;
        idx[a] = (int)(v * len);
        if (idx[a] >= len) idx[a] = len - 1;
      }
    }
    make_point(ld, idx, u);
  }
  free(perm);
  free(cont);
  gsl_rng_free(rng);
out:
  free(idx);
  free(u);
  return rc;
}

/* ------------------------------------------------------------ fingerprint */

static void fnv(uint64_t *h, const void *data, size_t n)
{
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    *h ^= p[i];
    *h *= 1099511628211ull;
  }
}

static void fnv_str(uint64_t *h, const char *s)
{
  fnv(h, s, strlen(s) + 1);
}

static void fnv_file(uint64_t *h, const char *path)
{
  FILE *f = fopen(path, "rb");
  if (!f) return;
  char buf[8192];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, f)) > 0) fnv(h, buf, k);
  fclose(f);
}

static void fingerprint(struct sw_spec *s, const char *base)
{
  uint64_t h = 1469598103934665603ull;
  fnv_str(&h, "npusim-sweep-1");
  if (s->path[0]) fnv_file(&h, s->path);
  if (base) fnv_file(&h, base);
  fnv_str(&h, s->metric_header);
  for (int c = 0; c < s->ncolumns; c++) fnv_str(&h, s->columns[c]);
  for (int i = 0; i < s->npoints; i++) {
    fnv_str(&h, s->points[i].display);
    for (int k = 0; k < s->points[i].nsets; k++) fnv_str(&h, s->points[i].sets[k]);
  }
  s->fingerprint = h;
}

/* ------------------------------------------------------------ load */

static void loader_release(struct loader *ld)
{
  for (int a = 0; a < ld->naxes; a++) {
    for (int j = 0; j < ld->axes[a].nkeys; j++) {
      struct key *k = &ld->axes[a].keys[j];
      for (int i = 0; i < k->n; i++) free(k->text[i]);
      free(k->text);
      free(k->num);
      free((char *)k->file);
    }
    free(ld->axes[a].keys);
    free((char *)ld->axes[a].file);
  }
  free(ld->axes);
  for (int d = 0; d < ld->nder; d++) {
    sw_expr_free(ld->der[d].expr);
    free((char *)ld->der[d].k.file);
  }
  free(ld->der);
  for (int i = 0; i < ld->ncons; i++) {
    sw_expr_free(ld->cons[i].expr);
    free((char *)ld->cons[i].file);
  }
  free(ld->cons);
  if (ld->probe) scn_probe_close(ld->probe);
  config_destroy(&ld->lc);
}

int sw_spec_load(struct sw_spec *s, const char *path, const struct sw_options *o, struct npu_diag *diag)
{
  memset(s, 0, sizeof *s);
  snprintf(s->path, sizeof s->path, "%s", path);
  struct loader ld = {.s = s, .o = o, .diag = diag, .seed = 1};
  config_init(&ld.lc);
  const char *slash = strrchr(path, '/');
  if (slash) snprintf(ld.dir, sizeof ld.dir, "%.*s", (int)(slash - path), path);
  if (slash && slash == path) snprintf(ld.dir, sizeof ld.dir, "/");
  if (ld.dir[0]) config_set_include_dir(&ld.lc, ld.dir);
  int rc = 0;
  struct stat st;
  if (stat(path, &st) != 0) {
    rc = (npu_diag_set(diag, path, 0, NULL, "cannot read the sweep file: %s", strerror(errno)), NPU_EINVAL);
    goto out;
  }
  if (!config_read_file(&ld.lc, path)) {
    const char *f = config_error_file(&ld.lc);
    rc = npu_diag_set(diag, f ? f : path, config_error_line(&ld.lc), NULL, "%s",
                      config_error_text(&ld.lc) ? config_error_text(&ld.lc) : "cannot read the file");
    rc = NPU_ECONFIG;
    goto out;
  }
  const config_setting_t *root = config_root_setting(&ld.lc);
  const config_setting_t *sw = config_setting_get_member(root, "sweep");
  if (!sw || !config_setting_is_group(sw)) {
    rc = npu_diag_set(diag, path, sw ? (int)config_setting_source_line(sw) : 0, "sweep",
                      "a sweep file needs a group sweep = { base = \"SCENARIO.cfg\"; axes = (...); }");
    rc = NPU_ECONFIG;
    goto out;
  }
  static const char *const members[] = {"base", "kind", "axes", "derived", "constraints", "sample", NULL};
  rc = check_members(&ld, sw, "sweep", members);
  if (rc) goto out;
  /* the base scenario */
  const config_setting_t *base = config_setting_get_member(sw, "base");
  bool others = config_setting_length(root) > 1;
  if (base) {
    if (config_setting_type(base) != CONFIG_TYPE_STRING) {
      rc = fail_at(&ld, base, "sweep.base", "base must be a scenario file name (a string)");
      goto out;
    }
    if (others) {
      rc = fail_at(&ld, base, "sweep.base", "the file has scenario settings and a base: use one or the other");
      goto out;
    }
    const char *b = config_setting_get_string(base);
    if (b[0] == '/' || !ld.dir[0]) snprintf(ld.base, sizeof ld.base, "%s", b);
    else snprintf(ld.base, sizeof ld.base, "%s/%s", ld.dir, b);
    snprintf(ld.display, sizeof ld.display, "%s", ld.base);
    if (access(ld.base, R_OK) != 0) {
      rc = fail_at(&ld, base, "sweep.base", "cannot read the base scenario '%s': %s", ld.base, strerror(errno));
      goto out;
    }
  } else if (others) {
    rc = generate_base(&ld, root);
    if (rc) goto out;
  } else {
    rc = fail_at(&ld, sw, "sweep.base", "the sweep names no scenario: base = \"SCENARIO.cfg\" (relative to this file), "
                 "or @include a scenario next to the sweep group");
    goto out;
  }
  /* the kind, and a probe of the base scenario */
  const config_setting_t *kind = config_setting_get_member(sw, "kind");
  if (kind) {
    if (config_setting_type(kind) != CONFIG_TYPE_STRING || !scn_kind_find(config_setting_get_string(kind))) {
      rc = fail_at(&ld, kind, "sweep.kind", "unknown kind (kinds: %s)", scn_kind_names());
      goto out;
    }
    s->kind = scn_kind_find(config_setting_get_string(kind));
  } else {
    rc = detect_kind(&s->kind, ld.base, o->sets, o->nsets, diag);
    if (rc) goto out;
  }
  ld.probe = scn_probe_open(s->kind, ld.base, o->sets, o->nsets, diag);
  if (!ld.probe) {
    rc = NPU_ECONFIG;
    goto out;
  }
  const config_setting_t *sample = config_setting_get_member(sw, "sample");
  if (sample && (rc = parse_sample(&ld, sample))) goto out;
  if (o->sample > 0) {
    if (!sample) snprintf(ld.method, sizeof ld.method, "grid");
    ld.sample = o->sample;
  }
  if (o->has_seed) ld.seed = (unsigned long)o->seed;
  const config_setting_t *axes = config_setting_get_member(sw, "axes");
  if (!axes) {
    rc = fail_at(&ld, sw, "sweep.axes", "a sweep needs axes = ( { key = \"...\"; values = [...]; }, ... )");
    goto out;
  }
  if ((rc = parse_axes(&ld, axes))) goto out;
  if (!ld.naxes) {
    rc = fail_at(&ld, axes, "sweep.axes", "no axis: add { key = \"...\"; values = [...]; }");
    goto out;
  }
  for (int a = 0; a < ld.naxes; a++)
    for (int j = 0; j < ld.axes[a].nkeys; j++) {
      struct key *k = &ld.axes[a].keys[j];
      for (int b = 0; b <= a; b++)
        for (int i = 0; i < (b == a ? j : ld.axes[b].nkeys); i++)
          if (!strcmp(ld.axes[b].keys[i].name, k->name)) {
            rc = failf(&ld, k->file, k->line, k->name, "the key is swept twice");
            goto out;
          }
    }
  if ((rc = check_values(&ld))) goto out;
  const config_setting_t *der = config_setting_get_member(sw, "derived");
  if (der && (rc = parse_derived(&ld, der))) goto out;
  const config_setting_t *cons = config_setting_get_member(sw, "constraints");
  if (cons && (rc = parse_constraints(&ld, cons))) goto out;
  for (int d = 0; d < ld.nder && !rc; d++) rc = check_names(&ld, ld.der[d].expr, ld.der[d].k.file, ld.der[d].k.line, ld.der[d].k.name);
  for (int i = 0; i < ld.ncons && !rc; i++)
    rc = check_names(&ld, ld.cons[i].expr, ld.cons[i].file, ld.cons[i].line, "sweep.constraints");
  if (!rc) rc = check_cycles(&ld);
  if (rc) goto out;
  /* columns: axis keys in order, then derived keys */
  for (int a = 0; a < ld.naxes; a++)
    for (int j = 0; j < ld.axes[a].nkeys; j++) {
      s->columns = npu_xrealloc(s->columns, (size_t)(s->ncolumns + 1) * sizeof *s->columns);
      s->columns[s->ncolumns++] = npu_xstrdup(ld.axes[a].keys[j].col);
    }
  for (int d = 0; d < ld.nder; d++) {
    s->columns = npu_xrealloc(s->columns, (size_t)(s->ncolumns + 1) * sizeof *s->columns);
    s->columns[s->ncolumns++] = npu_xstrdup(ld.der[d].k.col);
  }
  struct npu_buf mh = {0};
  scn_kind_header(s->kind, &mh);
  snprintf(s->metric_header, sizeof s->metric_header, "%s", npu_buf_str(&mh));
  npu_buf_release(&mh);
  if (ld.sample) {
    snprintf(s->sampling, sizeof s->sampling, "%s", !strcmp(ld.method, "grid") ? "random subset of the grid" : ld.method);
    s->seed = ld.seed;
  }
  rc = generate(&ld);
  if (!rc && s->npoints == 0)
    rc = (npu_diag_set(diag, path, 0, "sweep.constraints", "the constraints leave no point of %d", s->candidates), NPU_ECONFIG);
  if (!rc) fingerprint(s, ld.base);
out:
  loader_release(&ld);
  if (rc) sw_spec_release(s);
  return rc;
}

int sw_spec_batch(struct sw_spec *s, const char *const *files, int nfiles, const char *const *sets, int nsets,
                  struct npu_diag *diag)
{
  memset(s, 0, sizeof *s);
  for (int i = 0; i < nfiles; i++) {
    if (access(files[i], R_OK) != 0) {
      npu_diag_set(diag, files[i], 0, NULL, "cannot read the scenario: %s", strerror(errno));
      sw_spec_release(s);
      return NPU_EINVAL; /* a named input that cannot be read: exit 2, as for `run` */
    }
    const struct scn_kind *k;
    if (detect_kind(&k, files[i], sets, nsets, diag)) {
      sw_spec_release(s);
      return NPU_ECONFIG;
    }
    if (s->kind && s->kind != k) {
      npu_diag_set(diag, files[i], 0, NULL, "a batch runs scenarios of one kind: %s, then %s", s->kind->name, k->name);
      sw_spec_release(s);
      return NPU_ECONFIG;
    }
    s->kind = k;
  }
  s->columns = npu_xcalloc(1, sizeof *s->columns);
  s->columns[0] = npu_xstrdup("file");
  s->ncolumns = 1;
  struct npu_buf mh = {0};
  scn_kind_header(s->kind, &mh);
  snprintf(s->metric_header, sizeof s->metric_header, "%s", npu_buf_str(&mh));
  npu_buf_release(&mh);
  s->points = npu_xcalloc((size_t)nfiles + 1, sizeof *s->points);
  s->npoints = s->candidates = nfiles;
  for (int i = 0; i < nfiles; i++) {
    struct sw_point *p = &s->points[i];
    p->scenario = npu_xstrdup(files[i]);
    p->display = npu_xstrdup(files[i]);
    p->nsets = nsets;
    p->sets = npu_xcalloc((size_t)nsets + 1, sizeof *p->sets);
    for (int k = 0; k < nsets; k++) p->sets[k] = npu_xstrdup(sets[k]);
    p->cells = npu_xcalloc(2, sizeof *p->cells);
    p->cells[0] = npu_xstrdup(files[i]);
  }
  fingerprint(s, NULL);
  return 0;
}

/* Remove the private directory of a generated base scenario (files only, no subdirectories). */
static void rm_tree(const char *dir)
{
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char path[2048];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

void sw_spec_release(struct sw_spec *s)
{
  for (int i = 0; i < s->npoints; i++) {
    struct sw_point *p = &s->points[i];
    free(p->scenario);
    free(p->display);
    for (int k = 0; k < p->nsets; k++) free(p->sets[k]);
    free(p->sets);
    for (int c = 0; c < s->ncolumns; c++) free(p->cells[c]);
    free(p->cells);
  }
  free(s->points);
  for (int c = 0; c < s->ncolumns; c++) free(s->columns[c]);
  free(s->columns);
  free(s->skips);
  if (s->tmpdir[0]) rm_tree(s->tmpdir);
  memset(s, 0, sizeof *s);
}

void sw_csv_header(const struct sw_spec *s, struct npu_buf *out)
{
  npu_buf_puts(out, "point");
  for (int c = 0; c < s->ncolumns; c++) {
    npu_buf_puts(out, ",");
    npu_csv_field(out, s->columns[c]);
  }
  npu_buf_printf(out, ",status,%s,message", s->metric_header);
}
