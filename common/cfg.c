/*
 * cfg.c - the generic parameter loader; see cfg.h.
 *
 * Size: one job, the loader, over ~1,200 lines: tables, libconfig files, presets, @include
 * checks, --set overrides, origins and the effective configuration all work on the same entry
 * and section records.
 */
#include "common/cfg.h"

#include <dirent.h>
#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/units.h"

#define MAX_PRESET_DEPTH 16

struct entry {
  const struct npu_param *p;
  void *field;              /* address of the value */
  int section;              /* index into cfg->sections */
  struct npu_origin origin; /* where the value came from */
};

struct section {
  const struct npu_section *s;
  bool present;
  struct npu_origin origin; /* the group that last opened the section */
};

struct npu_cfg {
  struct entry *entries;
  size_t nentries;
  size_t *ix;         /* key -> entry index + 1 (0: empty), open addressing, at most half full */
  size_t ix_cap;
  struct section *sections;
  size_t nsections;
  char **dirs; /* preset directories */
  size_t ndirs;
  char *display_root; /* with trailing '/' */
  char **pool;        /* interned strings (file names) */
  size_t npool;
  const char *stack[MAX_PRESET_DEPTH]; /* files being loaded, for cycle detection */
  int depth;
  bool presence_only; /* npu_cfg_set_presence_only */
};

static const char *const CMDLINE = "command line";

/* out = dir + "/" + name, truncated to n bytes (paths that long fail to open anyway). */
static void join_path(char *out, size_t n, const char *dir, const char *name)
{
  size_t a = strlen(dir), b = strlen(name);
  if (a >= n) a = n - 1;
  memcpy(out, dir, a);
  size_t k = a;
  if (k + 1 < n) out[k++] = '/';
  if (b > n - 1 - k) b = n - 1 - k;
  memcpy(out + k, name, b);
  out[k + b] = '\0';
}

/* ---------------------------------------------------------------- setup */

struct npu_cfg *npu_cfg_create(void)
{
  return npu_xcalloc(1, sizeof(struct npu_cfg));
}

void npu_cfg_destroy(struct npu_cfg *cfg)
{
  if (!cfg) return;
  for (size_t i = 0; i < cfg->ndirs; i++) free(cfg->dirs[i]);
  for (size_t i = 0; i < cfg->npool; i++) free(cfg->pool[i]);
  free(cfg->dirs);
  free(cfg->pool);
  free(cfg->display_root);
  free(cfg->entries);
  free(cfg->ix);
  free(cfg->sections);
  free(cfg);
}

static const char *intern(struct npu_cfg *cfg, const char *s)
{
  for (size_t i = 0; i < cfg->npool; i++)
    if (strcmp(cfg->pool[i], s) == 0) return cfg->pool[i];
  cfg->pool = npu_xrealloc(cfg->pool, (cfg->npool + 1) * sizeof *cfg->pool);
  return cfg->pool[cfg->npool++] = npu_xstrdup(s);
}

static int find_section(const struct npu_cfg *cfg, const char *name, size_t len)
{
  for (size_t i = 0; i < cfg->nsections; i++)
    if (strlen(cfg->sections[i].s->name) == len && strncmp(cfg->sections[i].s->name, name, len) == 0)
      return (int)i;
  return -1;
}

static size_t key_hash(const char *s)
{
  uint64_t h = 14695981039346656037ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (size_t)h;
}

/* The key index: a scenario loader registers several hundred keys (every kind's tables when
 * the kind is detected) and looks each setting up; a scan per lookup made loading quadratic. */
static void index_put(struct npu_cfg *cfg, size_t i)
{
  size_t k = key_hash(cfg->entries[i].p->name) & (cfg->ix_cap - 1);
  while (cfg->ix[k]) k = (k + 1) & (cfg->ix_cap - 1);
  cfg->ix[k] = i + 1;
}

static void index_reserve(struct npu_cfg *cfg, size_t n)
{
  if (2 * n <= cfg->ix_cap) return;
  size_t cap = cfg->ix_cap ? cfg->ix_cap : 64;
  while (2 * n > cap) cap *= 2;
  free(cfg->ix);
  cfg->ix = npu_xcalloc(cap, sizeof *cfg->ix);
  cfg->ix_cap = cap;
  for (size_t i = 0; i < cfg->nentries; i++) index_put(cfg, i);
}

static struct entry *find_entry(const struct npu_cfg *cfg, const char *key)
{
  if (!cfg->ix_cap) return NULL;
  for (size_t k = key_hash(key) & (cfg->ix_cap - 1); cfg->ix[k]; k = (k + 1) & (cfg->ix_cap - 1))
    if (strcmp(cfg->entries[cfg->ix[k] - 1].p->name, key) == 0) return &cfg->entries[cfg->ix[k] - 1];
  return NULL;
}

/* Parse text into the entry's field; on failure write a reason into why. */
static int parse_value(const struct entry *e, const char *text, char *why, size_t whylen);

static void reset_entry(struct entry *e)
{
  const struct npu_param *p = e->p;
  switch (p->type) {
  case NPU_PT_INT:
  case NPU_PT_ENUM:
    *(int *)e->field = 0;
    break;
  case NPU_PT_BOOL:
    *(bool *)e->field = false;
    break;
  case NPU_PT_STRING:
    memset(e->field, 0, p->size);
    break;
  case NPU_PT_SIZE:
    *(uint64_t *)e->field = 0;
    break;
  default:
    *(double *)e->field = 0;
  }
  e->origin = (struct npu_origin){.kind = NPU_ORIGIN_UNSET};
  if (p->def) {
    char why[256];
    if (parse_value(e, p->def, why, sizeof why) != 0)
      NPU_PANIC("bad default for %s: %s", p->name, why);
    e->origin.kind = NPU_ORIGIN_DEFAULT;
  }
}

/* Every group must be one contiguous run of the table, or the writers would open it twice. */
static void check_contiguous(const struct npu_table *t)
{
  /* a check of the program, not of input: once per table (by its parameter array), as it was
   * most of registering the system's keys, run for every scenario loaded (bench_load) */
  static const struct npu_param *checked[64];
  static size_t nchecked, checked_n[64];
  for (size_t i = 0; i < nchecked; i++)
    if (checked[i] == t->params && checked_n[i] == t->nparams) return;
  if (nchecked < sizeof checked / sizeof checked[0]) {
    checked[nchecked] = t->params;
    checked_n[nchecked++] = t->nparams;
  }
  for (size_t i = 0; i < t->nparams; i++) {
    const char *name = t->params[i].name;
    for (const char *d = strchr(name, '.'); d; d = strchr(d + 1, '.')) {
      size_t len = (size_t)(d - name) + 1; /* prefix with its dot */
      bool left = false;
      for (size_t j = i + 1; j < t->nparams; j++) {
        bool in = strncmp(t->params[j].name, name, len) == 0;
        if (!in) left = true;
        if (in && left)
          NPU_PANIC("parameter %s is apart from the rest of group %.*s", t->params[j].name,
                    (int)len - 1, name);
      }
    }
  }
}

void npu_cfg_add_table(struct npu_cfg *cfg, const struct npu_table *t, void *target)
{
  check_contiguous(t);
  for (size_t i = 0; i < t->nsections; i++) {
    NPU_ASSERT(find_section(cfg, t->sections[i].name, strlen(t->sections[i].name)) < 0);
    cfg->sections = npu_xrealloc(cfg->sections, (cfg->nsections + 1) * sizeof *cfg->sections);
    cfg->sections[cfg->nsections++] = (struct section){.s = &t->sections[i]};
  }
  cfg->entries = npu_xrealloc(cfg->entries, (cfg->nentries + t->nparams) * sizeof *cfg->entries);
  for (size_t i = 0; i < t->nparams; i++) {
    const struct npu_param *p = &t->params[i];
    const char *dot = strchr(p->name, '.');
    NPU_ASSERT(dot != NULL);
    int sec = find_section(cfg, p->name, (size_t)(dot - p->name));
    if (sec < 0) NPU_PANIC("parameter %s outside its table's sections", p->name);
    if (find_entry(cfg, p->name)) NPU_PANIC("parameter %s declared twice", p->name);
    NPU_ASSERT(p->type != NPU_PT_STRING || p->size > 0);
    index_reserve(cfg, cfg->nentries + 1); /* rebuilt over the entries so far */
    struct entry *e = &cfg->entries[cfg->nentries++];
    *e = (struct entry){.p = p, .field = (char *)target + p->offset, .section = sec};
    index_put(cfg, cfg->nentries - 1);
    reset_entry(e);
  }
}

void npu_cfg_add_preset_dir(struct npu_cfg *cfg, const char *dir)
{
  cfg->dirs = npu_xrealloc(cfg->dirs, (cfg->ndirs + 1) * sizeof *cfg->dirs);
  cfg->dirs[cfg->ndirs++] = npu_xstrdup(dir);
}

void npu_cfg_set_presence_only(struct npu_cfg *cfg)
{
  cfg->presence_only = true;
}

void npu_cfg_set_display_root(struct npu_cfg *cfg, const char *root)
{
  free(cfg->display_root);
  size_t n = strlen(root);
  cfg->display_root = npu_xmalloc(n + 2);
  memcpy(cfg->display_root, root, n + 1);
  if (n == 0 || root[n - 1] != '/') strcat(cfg->display_root, "/");
}

static const char *display_path(struct npu_cfg *cfg, const char *path)
{
  if (cfg->display_root) {
    size_t n = strlen(cfg->display_root);
    if (strncmp(path, cfg->display_root, n) == 0) return intern(cfg, path + n);
  }
  return intern(cfg, path);
}

/* ---------------------------------------------------------------- values */

static const char *type_noun(enum npu_ptype t)
{
  switch (t) {
  case NPU_PT_INT: return "an integer";
  case NPU_PT_REAL: return "a number";
  case NPU_PT_BOOL: return "a boolean (true or false)";
  case NPU_PT_STRING: return "a string";
  case NPU_PT_ENUM: return "a string";
  case NPU_PT_FREQUENCY: return "a frequency like '1.85GHz'";
  case NPU_PT_BANDWIDTH: return "a bandwidth like '1.6TBps'";
  case NPU_PT_TIME: return "a time like '2us'";
  case NPU_PT_SIZE: return "a size like '192KiB'";
  case NPU_PT_FLOP_RATE: return "a FLOP rate like '312TFLOPS'";
  }
  return "a value";
}

static bool is_physical(enum npu_ptype t)
{
  return t == NPU_PT_FREQUENCY || t == NPU_PT_BANDWIDTH || t == NPU_PT_TIME ||
         t == NPU_PT_SIZE || t == NPU_PT_FLOP_RATE;
}

static enum npu_unit_kind unit_kind(enum npu_ptype t)
{
  switch (t) {
  case NPU_PT_FREQUENCY: return NPU_UNIT_FREQUENCY;
  case NPU_PT_BANDWIDTH: return NPU_UNIT_BANDWIDTH;
  case NPU_PT_TIME: return NPU_UNIT_TIME;
  case NPU_PT_SIZE: return NPU_UNIT_SIZE;
  case NPU_PT_FLOP_RATE: return NPU_UNIT_FLOP_RATE;
  default: NPU_PANIC("not a physical type");
  }
}

static int check_range(const struct npu_param *p, double v, const char *text, char *why,
                       size_t whylen)
{
  if ((p->flags & NPU_PF_POSITIVE) && !(v > 0)) {
    snprintf(why, whylen, "must be positive, got '%s'", text);
    return NPU_EINVAL;
  }
  if ((p->flags & NPU_PF_NONNEG) && !(v >= 0)) {
    snprintf(why, whylen, "must not be negative, got '%s'", text);
    return NPU_EINVAL;
  }
  if ((p->flags & NPU_PF_FRACTION) && !(v > 0 && v <= 1)) {
    snprintf(why, whylen, "must be a fraction in (0, 1], got '%s'", text);
    return NPU_EINVAL;
  }
  if (p->min < p->max && !(v >= p->min && v <= p->max)) {
    char lo[64], hi[64];
    npu_fmt_double(p->min, lo, sizeof lo);
    npu_fmt_double(p->max, hi, sizeof hi);
    snprintf(why, whylen, "must be between %s and %s, got '%s'", lo, hi, text);
    return NPU_EINVAL;
  }
  return 0;
}

static int parse_value(const struct entry *e, const char *text, char *why, size_t whylen)
{
  const struct npu_param *p = e->p;
  char *end;
  switch (p->type) {
  case NPU_PT_INT: {
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end || errno) {
      snprintf(why, whylen, "expected an integer, got '%s'", text);
      return NPU_EINVAL;
    }
    if (v < INT_MIN || v > INT_MAX) {
      snprintf(why, whylen, "integer out of range: '%s'", text);
      return NPU_EINVAL;
    }
    if (check_range(p, (double)v, text, why, whylen)) return NPU_EINVAL;
    *(int *)e->field = (int)v;
    return 0;
  }
  case NPU_PT_REAL: {
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || strpbrk(text, "xXnN")) {
      snprintf(why, whylen, "expected a number, got '%s'", text);
      return NPU_EINVAL;
    }
    if (check_range(p, v, text, why, whylen)) return NPU_EINVAL;
    *(double *)e->field = v;
    return 0;
  }
  case NPU_PT_BOOL:
    if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0) {
      *(bool *)e->field = text[0] == 't';
      return 0;
    }
    snprintf(why, whylen, "expected true or false, got '%s'", text);
    return NPU_EINVAL;
  case NPU_PT_STRING:
    if (strlen(text) >= p->size) {
      snprintf(why, whylen, "string too long (at most %zu characters)", p->size - 1);
      return NPU_EINVAL;
    }
    memcpy(e->field, text, strlen(text) + 1);
    return 0;
  case NPU_PT_ENUM: {
    size_t n = 0;
    for (; p->enums[n]; n++)
      if (strcmp(p->enums[n], text) == 0) {
        *(int *)e->field = (int)n;
        return 0;
      }
    struct npu_buf b = {0};
    for (size_t i = 0; i < n; i++) npu_buf_printf(&b, "%s%s", i ? ", " : "", p->enums[i]);
    const char *s = npu_suggest(text, (const char *const *)p->enums, n);
    if (s)
      snprintf(why, whylen, "unknown value '%s'; did you mean '%s'? (one of: %s)", text, s,
               npu_buf_str(&b));
    else
      snprintf(why, whylen, "unknown value '%s'; expected one of: %s", text, npu_buf_str(&b));
    npu_buf_release(&b);
    return NPU_EINVAL;
  }
  default: {
    double v;
    if (npu_unit_parse(text, unit_kind(p->type), &v, why, whylen)) return NPU_EINVAL;
    if (check_range(p, v, text, why, whylen)) return NPU_EINVAL;
    if (p->type == NPU_PT_SIZE) {
      if (v < 0 || v != floor(v) || v >= 18446744073709551616.0) {
        snprintf(why, whylen, "expected a whole number of bytes, got '%s'", text);
        return NPU_EINVAL;
      }
      *(uint64_t *)e->field = (uint64_t)v;
    } else {
      *(double *)e->field = v;
    }
    return 0;
  }
  }
}

static void format_entry(const struct entry *e, char *buf, size_t n, bool quote)
{
  const struct npu_param *p = e->p;
  const char *q = quote ? "\"" : "";
  switch (p->type) {
  case NPU_PT_INT:
    snprintf(buf, n, "%d", *(const int *)e->field);
    break;
  case NPU_PT_REAL: {
    char num[64];
    npu_fmt_double(*(const double *)e->field, num, sizeof num);
    /* keep it a float for libconfig readers */
    snprintf(buf, n, "%s%s", num, strpbrk(num, ".en") ? "" : ".0");
    break;
  }
  case NPU_PT_BOOL:
    snprintf(buf, n, "%s", *(const bool *)e->field ? "true" : "false");
    break;
  case NPU_PT_STRING:
    snprintf(buf, n, "%s%s%s", q, (const char *)e->field, q);
    break;
  case NPU_PT_ENUM:
    snprintf(buf, n, "%s%s%s", q, p->enums[*(const int *)e->field], q);
    break;
  case NPU_PT_SIZE: {
    char t[96];
    npu_unit_format((double)*(const uint64_t *)e->field, NPU_UNIT_SIZE, t, sizeof t);
    snprintf(buf, n, "%s%s%s", q, t, q);
    break;
  }
  default: {
    char t[96];
    npu_unit_format(*(const double *)e->field, unit_kind(p->type), t, sizeof t);
    snprintf(buf, n, "%s%s%s", q, t, q);
  }
  }
}

/* ---------------------------------------------------------------- loading */

struct load {
  struct npu_cfg *cfg;
  const char *path;      /* file being read, as opened */
  const char *incdir;    /* its directory, where @include and relative presets resolve */
  const char *only;      /* load only this section (section preset), or NULL */
  struct npu_diag *diag;
};

static const char *setting_file(struct load *ld, const config_setting_t *s)
{
  const char *f = config_setting_source_file(s);
  char buf[PATH_MAX];
  if (!f) f = ld->path;
  if (f[0] != '/' && strcmp(f, ld->path) != 0) {
    join_path(buf, sizeof buf, ld->incdir, f);
    f = buf;
  }
  return display_path(ld->cfg, f);
}

static int fail_at(struct load *ld, const config_setting_t *s, const char *key, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));
static int fail_at(struct load *ld, const config_setting_t *s, const char *key, const char *fmt,
                   ...)
{
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return npu_diag_set(ld->diag, setting_file(ld, s), config_setting_source_line(s), key, "%s",
                      msg);
}

static int load_path(struct npu_cfg *cfg, const char *path, const char *only,
                     struct npu_diag *diag);

static bool has_slash_or_cfg(const char *name)
{
  size_t n = strlen(name);
  return strchr(name, '/') || (n > 4 && strcmp(name + n - 4, ".cfg") == 0);
}

static bool readable_file(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

const char *npu_cfg_find_preset(struct npu_cfg *cfg, const char *name)
{
  char buf[PATH_MAX];
  if (!name[0] || strchr(name, '/')) return NULL;
  for (size_t i = 0; i < cfg->ndirs; i++) {
    snprintf(buf, sizeof buf, "%s/%s.cfg", cfg->dirs[i], name);
    if (readable_file(buf)) return intern(cfg, buf);
  }
  return NULL;
}

/* Resolve a preset reference; fill diag and return NULL when it does not exist. */
static const char *resolve_preset(struct npu_cfg *cfg, const char *name, const char *incdir,
                                  const char *file, int line, const char *key,
                                  struct npu_diag *diag)
{
  if (has_slash_or_cfg(name)) {
    char buf[PATH_MAX];
    if (name[0] == '/' || !incdir)
      snprintf(buf, sizeof buf, "%s", name);
    else
      join_path(buf, sizeof buf, incdir, name);
    if (readable_file(buf)) return intern(cfg, buf);
    npu_diag_set(diag, file, line, key, "preset file '%s' not found", buf);
    return NULL;
  }
  const char *found = npu_cfg_find_preset(cfg, name);
  if (found) return found;
  char **names;
  size_t n;
  npu_cfg_list_presets(cfg, &names, &n);
  const char *s = npu_suggest(name, (const char *const *)names, n);
  if (s)
    npu_diag_set(diag, file, line, key, "unknown preset '%s'; did you mean '%s'?", name, s);
  else
    npu_diag_set(diag, file, line, key,
                 "unknown preset '%s' (see 'npusim arch list' for the presets)", name);
  npu_cfg_free_names(names, n);
  return NULL;
}

/*
 * The section is given here. Its origin is the latest group that opened it (the one a user
 * edits, after the presets it builds on); a single key only gives an origin to a section that
 * had none.
 */
static void mark_section(struct npu_cfg *cfg, int sec, const struct npu_origin *o, bool group)
{
  struct section *s = &cfg->sections[sec];
  if (group || !s->present) s->origin = *o;
  s->present = true;
}

static void reset_section(struct npu_cfg *cfg, int sec)
{
  for (size_t i = 0; i < cfg->nentries; i++)
    if (cfg->entries[i].section == sec) reset_entry(&cfg->entries[i]);
}

/* All keys known under prefix "a.b." (their next component), for "valid keys" hints. */
static void list_children(const struct npu_cfg *cfg, const char *prefix, struct npu_buf *out)
{
  size_t plen = strlen(prefix);
  int shown = 0;
  char last[256] = "";
  for (size_t i = 0; i < cfg->nentries; i++) {
    const char *name = cfg->entries[i].p->name;
    if (strncmp(name, prefix, plen) != 0 || name[plen] != '.') continue;
    const char *rest = name + plen + 1;
    size_t len = strcspn(rest, ".");
    if (len >= sizeof last) continue;
    if (strlen(last) == len && strncmp(last, rest, len) == 0) continue;
    memcpy(last, rest, len);
    last[len] = '\0';
    if (shown == 16) {
      npu_buf_puts(out, ", ...");
      break;
    }
    npu_buf_printf(out, "%s%s", shown++ ? ", " : "", last);
  }
}

/* Candidate names for suggestions: every key and every group prefix. */
static const char **candidates(const struct npu_cfg *cfg, size_t *n, char ***owned, size_t *nowned)
{
  size_t cap = cfg->nentries * 4 + cfg->nsections + 2, k = 0, no = 0;
  const char **c = npu_xmalloc(cap * sizeof *c);
  char **own = npu_xmalloc(cap * sizeof *own);
  for (size_t i = 0; i < cfg->nentries; i++) {
    const char *name = cfg->entries[i].p->name;
    c[k++] = name;
    for (const char *d = strchr(name, '.'); d; d = strchr(d + 1, '.')) {
      char *pre = npu_xmalloc((size_t)(d - name) + 1);
      memcpy(pre, name, (size_t)(d - name));
      pre[d - name] = '\0';
      bool dup = false;
      for (size_t j = 0; j < no && !dup; j++) dup = strcmp(own[j], pre) == 0;
      if (dup || k >= cap) {
        free(pre);
        continue;
      }
      own[no++] = pre;
      c[k++] = pre;
    }
  }
  *n = k;
  *owned = own;
  *nowned = no;
  return c;
}

static int unknown_key(struct load *ld, const config_setting_t *s, const char *key)
{
  size_t n, no;
  char **own;
  const char **c = candidates(ld->cfg, &n, &own, &no);
  const char *sug = npu_suggest(key, c, n);
  int rc;
  if (sug) {
    rc = fail_at(ld, s, key, "unknown key; did you mean '%s'?", sug);
  } else {
    char parent[256];
    npu_strlcpy(parent, key, sizeof parent);
    char *dot = strrchr(parent, '.');
    struct npu_buf b = {0};
    if (dot) {
      *dot = '\0';
      list_children(ld->cfg, parent, &b);
    }
    if (b.len)
      rc = fail_at(ld, s, key, "unknown key (valid keys in '%s': %s)", parent, npu_buf_str(&b));
    else
      rc = fail_at(ld, s, key, "unknown key");
    npu_buf_release(&b);
  }
  for (size_t i = 0; i < no; i++) free(own[i]);
  free(own);
  free(c);
  return rc;
}

static bool is_group_prefix(const struct npu_cfg *cfg, const char *prefix)
{
  size_t n = strlen(prefix);
  for (size_t i = 0; i < cfg->nentries; i++) {
    const char *name = cfg->entries[i].p->name;
    if (strncmp(name, prefix, n) == 0 && name[n] == '.') return true;
  }
  return false;
}

static const char *libconfig_type_noun(const config_setting_t *s)
{
  switch (config_setting_type(s)) {
  case CONFIG_TYPE_INT:
  case CONFIG_TYPE_INT64: return "an integer";
  case CONFIG_TYPE_FLOAT: return "a number";
  case CONFIG_TYPE_STRING: return "a string";
  case CONFIG_TYPE_BOOL: return "a boolean";
  case CONFIG_TYPE_GROUP: return "a group";
  case CONFIG_TYPE_ARRAY: return "an array";
  case CONFIG_TYPE_LIST: return "a list";
  }
  return "something else";
}

/* Render a scalar libconfig setting as text for parse_value, checking its type class. */
static int scalar_text(struct load *ld, const config_setting_t *s, const struct entry *e,
                       char *text, size_t n)
{
  const struct npu_param *p = e->p;
  int t = config_setting_type(s);
  bool ok;
  switch (p->type) {
  case NPU_PT_INT: ok = t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64; break;
  case NPU_PT_REAL: ok = t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64 || t == CONFIG_TYPE_FLOAT; break;
  case NPU_PT_BOOL: ok = t == CONFIG_TYPE_BOOL; break;
  default: ok = t == CONFIG_TYPE_STRING;
  }
  if (t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64)
    snprintf(text, n, "%lld", config_setting_get_int64(s));
  else if (t == CONFIG_TYPE_FLOAT)
    npu_fmt_double(config_setting_get_float(s), text, n);
  else if (t == CONFIG_TYPE_BOOL)
    snprintf(text, n, "%s", config_setting_get_bool(s) ? "true" : "false");
  else if (t == CONFIG_TYPE_STRING)
    snprintf(text, n, "%s", config_setting_get_string(s));
  else
    text[0] = '\0';
  if (ok) return 0;
  if (is_physical(p->type) && (t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64 || t == CONFIG_TYPE_FLOAT))
    return fail_at(ld, s, p->name, "missing unit: expected %s, got %s", type_noun(p->type), text);
  if (t == CONFIG_TYPE_STRING)
    return fail_at(ld, s, p->name, "expected %s, got a string \"%s\"", type_noun(p->type), text);
  if (t == CONFIG_TYPE_GROUP || t == CONFIG_TYPE_ARRAY || t == CONFIG_TYPE_LIST)
    return fail_at(ld, s, p->name, "expected %s, got %s", type_noun(p->type), libconfig_type_noun(s));
  return fail_at(ld, s, p->name, "expected %s, got %s %s", type_noun(p->type), libconfig_type_noun(s), text);
}

static int apply_setting(struct load *ld, const config_setting_t *s, const char *key)
{
  struct entry *e = find_entry(ld->cfg, key);
  if (!e) return unknown_key(ld, s, key);
  char text[1024], why[1024];
  if (scalar_text(ld, s, e, text, sizeof text)) return NPU_ECONFIG;
  if (parse_value(e, text, why, sizeof why)) return fail_at(ld, s, key, "%s", why);
  e->origin = (struct npu_origin){
      .kind = NPU_ORIGIN_FILE, .file = setting_file(ld, s), .line = config_setting_source_line(s)};
  mark_section(ld->cfg, e->section, &e->origin, false);
  return 0;
}

/* out = prefix + "." + name, truncated to n bytes as snprintf would (walk_group's snprintf was a
 * tenth of loading a scenario). */
static void join_key(char *out, size_t n, const char *prefix, const char *name)
{
  size_t a = strlen(prefix), b = strlen(name), k = a < n - 1 ? a : n - 1;
  memcpy(out, prefix, k);
  if (k < n - 1) out[k++] = '.';
  size_t m = b < n - 1 - k ? b : n - 1 - k;
  memcpy(out + k, name, m);
  out[k + m] = '\0';
}

static int walk_group(struct load *ld, const config_setting_t *g, const char *prefix)
{
  int n = config_setting_length(g);
  for (int i = 0; i < n; i++) {
    const config_setting_t *c = config_setting_get_elem(g, (unsigned)i);
    char key[512];
    join_key(key, sizeof key, prefix, config_setting_name(c));
    if (config_setting_is_group(c)) {
      if (!is_group_prefix(ld->cfg, key)) return unknown_key(ld, c, key);
      if (walk_group(ld, c, key)) return NPU_ECONFIG;
    } else if (strchr(prefix, '.') == NULL && strcmp(config_setting_name(c), "preset") == 0) {
      continue; /* handled by load_section */
    } else if (apply_setting(ld, c, key)) {
      return NPU_ECONFIG;
    }
  }
  return 0;
}

static int load_section(struct load *ld, const config_setting_t *g, int sec)
{
  const char *name = config_setting_name(g);
  if (!config_setting_is_group(g))
    return fail_at(ld, g, name, "expected a group '%s = { ... };', got %s", name,
                   libconfig_type_noun(g));
  struct npu_origin o = {.kind = NPU_ORIGIN_FILE, .file = setting_file(ld, g),
                         .line = config_setting_source_line(g)};
  const config_setting_t *pre = config_setting_get_member(g, "preset");
  if (pre) {
    char key[256];
    snprintf(key, sizeof key, "%s.preset", name);
    if (config_setting_type(pre) != CONFIG_TYPE_STRING)
      return fail_at(ld, pre, key, "expected a preset name (a string), got %s",
                     libconfig_type_noun(pre));
    const char *path =
        resolve_preset(ld->cfg, config_setting_get_string(pre), ld->incdir,
                       setting_file(ld, pre), config_setting_source_line(pre), key, ld->diag);
    if (!path) return NPU_ECONFIG;
    reset_section(ld->cfg, sec);
    if (load_path(ld->cfg, path, name, ld->diag)) return NPU_ECONFIG;
  }
  mark_section(ld->cfg, sec, &o, true);
  return walk_group(ld, g, name);
}

/* libconfig does not name the include file it could not open: read it off the line. */
static void include_name(const char *file, int line, char *out, size_t n)
{
  out[0] = '\0';
  FILE *f = fopen(file, "r");
  if (!f) return;
  char buf[1024];
  for (int i = 1; fgets(buf, sizeof buf, f); i++) {
    if (i != line) continue;
    char *q = strchr(buf, '"');
    char *r = q ? strchr(q + 1, '"') : NULL;
    if (q && r) snprintf(out, n, "%.*s", (int)(r - q - 1), q + 1);
    break;
  }
  fclose(f);
}

/*
 * Check the @include lines of file (and of what they include, to libconfig's depth) before
 * libconfig reads it: libconfig hands an include that names a directory (`@include ""` is the
 * including file's directory) to its scanner, which then exits the process ("input in flex
 * scanner failed") with no file or line. 0, or NPU_ECONFIG with diag at the @include line.
 */
static int check_includes(struct npu_cfg *cfg, const char *file, const char *incdir, int depth,
                          struct npu_diag *diag)
{
  FILE *f = fopen(file, "r");
  if (!f) return 0; /* libconfig reports it */
  char buf[1024];
  int rc = 0;
  for (int line = 1; !rc && fgets(buf, sizeof buf, f); line++) {
    const char *s = buf;
    while (*s == ' ' || *s == '\t') s++;
    if (strncmp(s, "@include", 8) != 0) continue;
    const char *q = strchr(s + 8, '"');
    const char *r = q ? strchr(q + 1, '"') : NULL;
    if (!q || !r) continue; /* libconfig's own syntax error */
    char name[512], full[PATH_MAX];
    snprintf(name, sizeof name, "%.*s", (int)(r - q - 1), q + 1);
    if (name[0] == '/') snprintf(full, sizeof full, "%s", name);
    else join_path(full, sizeof full, incdir, name);
    struct stat st;
    if (!name[0] || (stat(full, &st) == 0 && !S_ISREG(st.st_mode)))
      rc = npu_diag_set(diag, display_path(cfg, file), line, NULL, "@include '%s' does not name a file", name);
    else if (stat(full, &st) == 0 && depth < 10)
      rc = check_includes(cfg, full, incdir, depth + 1, diag);
  }
  fclose(f);
  return rc;
}

static int load_path(struct npu_cfg *cfg, const char *path, const char *only,
                     struct npu_diag *diag)
{
  char incdir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  if (slash)
    snprintf(incdir, sizeof incdir, "%.*s", (int)(slash - path), path);
  else
    snprintf(incdir, sizeof incdir, ".");
  if (slash == path) snprintf(incdir, sizeof incdir, "/");

  for (int i = 0; i < cfg->depth; i++) {
    if (strcmp(cfg->stack[i], path) == 0)
      return npu_diag_set(diag, display_path(cfg, path), 0, NULL,
                          "preset cycle: '%s' includes itself through its presets",
                          display_path(cfg, path));
  }
  if (cfg->depth == MAX_PRESET_DEPTH)
    return npu_diag_set(diag, display_path(cfg, path), 0, NULL, "presets nested too deeply");

  FILE *probe = fopen(path, "r");
  if (!probe)
    return npu_diag_set(diag, display_path(cfg, path), 0, NULL, "cannot open: %s",
                        strerror(errno));
  fclose(probe);
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return npu_diag_set(diag, display_path(cfg, path), 0, NULL, "not a file");
  int irc = check_includes(cfg, path, incdir, 0, diag);
  if (irc) return irc;

  config_t lc;
  config_init(&lc);
  config_set_include_dir(&lc, incdir);
  if (!config_read_file(&lc, path)) {
    const char *f = config_error_file(&lc);
    int line = config_error_line(&lc);
    const char *text = config_error_text(&lc);
    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s", f ? f : path);
    if (file[0] != '/' && strcmp(file, path) != 0) {
      char joined[PATH_MAX];
      join_path(joined, sizeof joined, incdir, file);
      memcpy(file, joined, sizeof file);
    }
    int rc;
    if (text && strstr(text, "include")) {
      char inc[512];
      include_name(file, line, inc, sizeof inc);
      rc = npu_diag_set(diag, display_path(cfg, file), line, NULL,
                        "cannot open include file '%s' (looked in '%s')", inc, incdir);
    } else {
      rc = npu_diag_set(diag, display_path(cfg, file), line, NULL, "%s",
                        text ? text : "cannot read file");
    }
    config_destroy(&lc);
    return rc;
  }

  struct load ld = {.cfg = cfg, .path = path, .incdir = incdir, .only = only, .diag = diag};
  cfg->stack[cfg->depth++] = path;
  int rc = 0;
  const config_setting_t *root = config_root_setting(&lc);
  const config_setting_t *pre = config_setting_get_member(root, "preset");
  if (pre) {
    if (config_setting_type(pre) != CONFIG_TYPE_STRING) {
      rc = fail_at(&ld, pre, "preset", "expected a preset name (a string), got %s",
                   libconfig_type_noun(pre));
      goto out;
    }
    const char *p = resolve_preset(cfg, config_setting_get_string(pre), incdir,
                                   setting_file(&ld, pre), config_setting_source_line(pre),
                                   "preset", diag);
    if (!p || load_path(cfg, p, only, diag)) {
      rc = NPU_ECONFIG;
      goto out;
    }
  }
  bool found_only = false;
  int n = config_setting_length(root);
  for (int i = 0; i < n && rc == 0; i++) {
    const config_setting_t *c = config_setting_get_elem(root, (unsigned)i);
    const char *name = config_setting_name(c);
    if (strcmp(name, "preset") == 0) continue;
    int sec = find_section(cfg, name, strlen(name));
    if (sec < 0) {
      size_t ns = cfg->nsections + 1;
      const char **names = npu_xmalloc(ns * sizeof *names);
      for (size_t k = 0; k < cfg->nsections; k++) names[k] = cfg->sections[k].s->name;
      names[cfg->nsections] = "preset";
      const char *sug = npu_suggest(name, names, ns);
      if (sug) {
        rc = fail_at(&ld, c, name, "unknown key; did you mean '%s'?", sug);
      } else {
        struct npu_buf b = {0};
        for (size_t k = 0; k < ns; k++) npu_buf_printf(&b, "%s%s", k ? ", " : "", names[k]);
        rc = fail_at(&ld, c, name, "unknown key (valid top-level keys: %s)", npu_buf_str(&b));
        npu_buf_release(&b);
      }
      free(names);
      break;
    }
    if (only && strcmp(only, name) != 0) continue;
    found_only = true;
    if (cfg->presence_only) {
      struct npu_origin o = {.kind = NPU_ORIGIN_FILE, .file = setting_file(&ld, c), .line = config_setting_source_line(c)};
      mark_section(cfg, sec, &o, true);
      continue;
    }
    rc = load_section(&ld, c, sec);
  }
  if (rc == 0 && only && !found_only && !pre)
    rc = npu_diag_set(diag, display_path(cfg, path), 0, NULL, "preset has no '%s' section", only);
out:
  cfg->depth--;
  config_destroy(&lc);
  return rc;
}

int npu_cfg_load_file(struct npu_cfg *cfg, const char *path, struct npu_diag *diag)
{
  return load_path(cfg, intern(cfg, path), NULL, diag);
}

int npu_cfg_load_spec(struct npu_cfg *cfg, const char *spec, struct npu_diag *diag)
{
  if (has_slash_or_cfg(spec)) return npu_cfg_load_file(cfg, spec, diag);
  return npu_cfg_load_preset(cfg, spec, diag);
}

const char *npu_cfg_find_spec(struct npu_cfg *cfg, const char *spec)
{
  return has_slash_or_cfg(spec) ? spec : npu_cfg_find_preset(cfg, spec);
}

int npu_cfg_load_preset(struct npu_cfg *cfg, const char *name, struct npu_diag *diag)
{
  const char *path = resolve_preset(cfg, name, NULL, NULL, 0, NULL, diag);
  if (!path) return NPU_ECONFIG;
  return load_path(cfg, path, NULL, diag);
}

int npu_cfg_set(struct npu_cfg *cfg, const char *assignment, struct npu_diag *diag)
{
  const char *eq = strchr(assignment, '=');
  if (!eq || eq == assignment)
    return npu_diag_set(diag, CMDLINE, 0, NULL, "--set '%s': expected KEY=VALUE", assignment);
  char key[512];
  size_t klen = (size_t)(eq - assignment);
  if (klen >= sizeof key)
    return npu_diag_set(diag, CMDLINE, 0, NULL, "--set '%s': key too long", assignment);
  memcpy(key, assignment, klen);
  key[klen] = '\0';
  const char *value = eq + 1;
  if (strspn(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-*") != klen ||
      key[0] == '.' || key[klen - 1] == '.' || strstr(key, ".."))
    return npu_diag_set(diag, CMDLINE, 0, NULL, "--set '%s': malformed key '%s'", assignment, key);
  if (!value[0])
    return npu_diag_set(diag, CMDLINE, 0, key, "--set '%s': missing value after '='", assignment);

  if (strcmp(key, "preset") == 0) return npu_cfg_load_preset(cfg, value, diag);
  size_t kl = strlen(key);
  if (cfg->presence_only) { /* the key's section is given; its value is read by the full load */
    const char *dot = strchr(key, '.');
    int sec = dot ? find_section(cfg, key, (size_t)(dot - key)) : -1;
    if (sec >= 0) {
      struct npu_origin o = {.kind = NPU_ORIGIN_CMDLINE};
      mark_section(cfg, sec, &o, false);
      return 0;
    }
  }
  if (kl > 7 && strcmp(key + kl - 7, ".preset") == 0) {
    int sec = find_section(cfg, key, kl - 7);
    if (sec >= 0) {
      const char *path = resolve_preset(cfg, value, NULL, CMDLINE, 0, key, diag);
      if (!path) return NPU_ECONFIG;
      reset_section(cfg, sec);
      struct npu_origin o = {.kind = NPU_ORIGIN_CMDLINE};
      int rc = load_path(cfg, path, cfg->sections[sec].s->name, diag);
      if (rc == 0) mark_section(cfg, sec, &o, true);
      return rc;
    }
  }

  struct entry *e = find_entry(cfg, key);
  if (!e) {
    size_t n, no;
    char **own;
    const char **c = candidates(cfg, &n, &own, &no);
    const char *sug = npu_suggest(key, c, n);
    int rc;
    if (sug && !strcmp(sug, key)) { /* a section given a value: name its keys */
      struct npu_buf b = {0};
      list_children(cfg, key, &b);
      rc = npu_diag_set(diag, CMDLINE, 0, key, "a section, not a value: set one of its keys (%s.KEY=VALUE: %s)", key,
                        npu_buf_str(&b));
      npu_buf_release(&b);
    } else {
      rc = sug ? npu_diag_set(diag, CMDLINE, 0, key, "unknown key; did you mean '%s'?", sug)
               : npu_diag_set(diag, CMDLINE, 0, key, "unknown key");
    }
    for (size_t i = 0; i < no; i++) free(own[i]);
    free(own);
    free(c);
    return rc;
  }
  /* Accept VALUE in config syntax too: strip one level of double quotes. */
  char text[1024];
  size_t vl = strlen(value);
  if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"')
    snprintf(text, sizeof text, "%.*s", (int)(vl - 2), value + 1);
  else
    snprintf(text, sizeof text, "%s", value);
  char why[1024];
  if (parse_value(e, text, why, sizeof why)) return npu_diag_set(diag, CMDLINE, 0, key, "%s", why);
  e->origin = (struct npu_origin){.kind = NPU_ORIGIN_CMDLINE};
  mark_section(cfg, e->section, &e->origin, false);
  return 0;
}

int npu_cfg_finish(struct npu_cfg *cfg, struct npu_diag *diag)
{
  for (size_t i = 0; i < cfg->nsections; i++) {
    const struct section *s = &cfg->sections[i];
    if (s->s->required && !s->present)
      return npu_diag_set(diag, NULL, 0, s->s->name, "missing required section '%s' (%s)",
                          s->s->name, s->s->desc);
  }
  for (size_t i = 0; i < cfg->nentries; i++) {
    const struct entry *e = &cfg->entries[i];
    const struct section *s = &cfg->sections[e->section];
    if (!s->present || e->origin.kind != NPU_ORIGIN_UNSET || (e->p->flags & NPU_PF_OPTIONAL)) continue;
    if (s->origin.kind == NPU_ORIGIN_FILE)
      return npu_diag_set(diag, s->origin.file, s->origin.line, e->p->name,
                          "missing required key in section '%s' (%s)", s->s->name, e->p->desc);
    return npu_diag_set(diag, CMDLINE, 0, e->p->name, "missing required key in section '%s' (%s)",
                        s->s->name, e->p->desc);
  }
  return 0;
}

/* ------------------------------------------------------------------ paths in values */

static bool is_file(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static void dir_of(const char *file, char *out, size_t n)
{
  const char *slash = strrchr(file, '/');
  if (!slash) snprintf(out, n, ".");
  else if (slash == file) snprintf(out, n, "/");
  else snprintf(out, n, "%.*s", (int)(slash - file), file);
}

bool npu_cfg_resolve_path(const struct npu_cfg *cfg, const char *key, const char *name, char *shown, size_t nshown,
                          char *path, size_t npath)
{
  const struct npu_origin *o = npu_cfg_origin(cfg, key);
  char dir[1024];
  if (name[0] == '/' || !o || o->kind != NPU_ORIGIN_FILE) {
    return snprintf(shown, nshown, "%s", name) < (int)nshown && snprintf(path, npath, "%s", name) < (int)npath;
  }
  dir_of(o->file, dir, sizeof dir);
  int len = strcmp(dir, ".") == 0 ? snprintf(shown, nshown, "%s", name)
                                  : snprintf(shown, nshown, "%s/%s", dir, name);
  if (len >= (int)nshown || snprintf(path, npath, "%s", shown) >= (int)npath) return false;
  if (o->file[0] != '/' && !is_file(o->file)) {
    char rooted[2048];
    const char *root = cfg->display_root ? cfg->display_root : "./"; /* with its trailing '/' */
    if (snprintf(rooted, sizeof rooted, "%s%s", root, o->file) < (int)sizeof rooted && is_file(rooted))
      return snprintf(path, npath, "%s%s", root, shown) < (int)npath;
  }
  return true;
}

bool npu_cfg_section_present(const struct npu_cfg *cfg, const char *section)
{
  int sec = find_section(cfg, section, strlen(section));
  return sec >= 0 && cfg->sections[sec].present;
}

const struct npu_origin *npu_cfg_origin(const struct npu_cfg *cfg, const char *key)
{
  const struct entry *e = find_entry(cfg, key);
  return e ? &e->origin : NULL;
}

const struct npu_param *npu_cfg_param(const struct npu_cfg *cfg, const char *key)
{
  const struct entry *e = find_entry(cfg, key);
  return e ? e->p : NULL;
}

int npu_cfg_fail(const struct npu_cfg *cfg, struct npu_diag *diag, const char *key,
                 const char *fmt, ...)
{
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const struct entry *e = find_entry(cfg, key);
  NPU_ASSERT(e != NULL);
  const struct npu_origin *o = &e->origin;
  if (o->kind == NPU_ORIGIN_DEFAULT || o->kind == NPU_ORIGIN_UNSET)
    o = &cfg->sections[e->section].origin;
  if (o->kind == NPU_ORIGIN_FILE) return npu_diag_set(diag, o->file, o->line, key, "%s", msg);
  return npu_diag_set(diag, CMDLINE, 0, key, "%s", msg);
}

void npu_cfg_format_value(const struct npu_cfg *cfg, const char *key, char *buf, size_t n)
{
  const struct entry *e = find_entry(cfg, key);
  NPU_ASSERT(e != NULL);
  format_entry(e, buf, n, false);
}

/* ---------------------------------------------------------------- output */

/* Length of the group part of a dotted name ("chip.hbm.bandwidth" -> 8, "chip.hbm"). */
static size_t group_len(const char *name)
{
  const char *d = strrchr(name, '.');
  return d ? (size_t)(d - name) : 0;
}

/* Number of leading dotted components two group paths share. */
static int common_depth(const char *a, size_t alen, const char *b, size_t blen)
{
  int depth = 0;
  size_t i = 0;
  for (;;) {
    size_t ea = i, eb = i;
    while (ea < alen && a[ea] != '.') ea++;
    while (eb < blen && b[eb] != '.') eb++;
    if (ea != eb || ea == i || strncmp(a + i, b + i, ea - i) != 0) return depth;
    depth++;
    if (ea >= alen || eb >= blen) return depth;
    i = ea + 1;
  }
}

static int count_depth(const char *g, size_t len)
{
  if (len == 0) return 0;
  int d = 1;
  for (size_t i = 0; i < len; i++) d += g[i] == '.';
  return d;
}

/* The i-th component (0-based) of a dotted path. */
static void component(const char *g, size_t len, int idx, char *out, size_t n)
{
  size_t i = 0;
  for (int k = 0; k < idx; k++) {
    while (i < len && g[i] != '.') i++;
    i++;
  }
  size_t e = i;
  while (e < len && g[e] != '.') e++;
  snprintf(out, n, "%.*s", (int)(e - i), g + i);
}

void npu_cfg_write_config(const struct npu_cfg *cfg, struct npu_buf *out)
{
  const char *prev = "";
  size_t prevlen = 0;
  int open = 0;
  for (size_t i = 0; i < cfg->nentries; i++) {
    const struct entry *e = &cfg->entries[i];
    if (!cfg->sections[e->section].present || e->origin.kind == NPU_ORIGIN_UNSET) continue;
    const char *name = e->p->name;
    size_t glen = group_len(name);
    int keep = common_depth(prev, prevlen, name, glen);
    for (; open > keep; open--) {
      for (int k = 1; k < open; k++) npu_buf_puts(out, "  ");
      npu_buf_puts(out, "};\n");
    }
    int want = count_depth(name, glen);
    for (; open < want; open++) {
      char comp[128];
      component(name, glen, open, comp, sizeof comp);
      for (int k = 0; k < open; k++) npu_buf_puts(out, "  ");
      npu_buf_printf(out, "%s = {\n", comp);
    }
    char val[1100]; /* a string of up to 1,024 characters with its quotes and escapes */
    format_entry(e, val, sizeof val, true);
    for (int k = 0; k < open; k++) npu_buf_puts(out, "  ");
    npu_buf_printf(out, "%s = %s;", name + glen + 1, val);
    switch (e->origin.kind) {
    case NPU_ORIGIN_FILE: npu_buf_printf(out, "  # %s:%d\n", e->origin.file, e->origin.line); break;
    case NPU_ORIGIN_CMDLINE: npu_buf_puts(out, "  # --set\n"); break;
    default: npu_buf_puts(out, "  # default\n");
    }
    prev = name;
    prevlen = glen;
  }
  for (; open > 0; open--) {
    for (int k = 1; k < open; k++) npu_buf_puts(out, "  ");
    npu_buf_puts(out, "};\n");
  }
}

static const char *json_suffix(enum npu_ptype t)
{
  switch (t) {
  case NPU_PT_FREQUENCY: return "_hz";
  case NPU_PT_BANDWIDTH: return "_bytes_per_s";
  case NPU_PT_TIME: return "_s";
  case NPU_PT_SIZE: return "_bytes";
  case NPU_PT_FLOP_RATE: return "_flops_per_s";
  default: return "";
  }
}

void npu_cfg_write_json(const struct npu_cfg *cfg, const char *section, struct npu_json *j)
{
  size_t slen = strlen(section);
  const char *prev = section;
  size_t prevlen = slen;
  int base = 1, open = 1;
  npu_json_object_begin(j);
  for (size_t i = 0; i < cfg->nentries; i++) {
    const struct entry *e = &cfg->entries[i];
    const char *name = e->p->name;
    if (strncmp(name, section, slen) != 0 || name[slen] != '.' || e->origin.kind == NPU_ORIGIN_UNSET) continue;
    size_t glen = group_len(name);
    int keep = common_depth(prev, prevlen, name, glen);
    if (keep < base) keep = base;
    for (; open > keep; open--) npu_json_object_end(j);
    int want = count_depth(name, glen);
    for (; open < want; open++) {
      char comp[128];
      component(name, glen, open, comp, sizeof comp);
      npu_json_key(j, comp);
      npu_json_object_begin(j);
    }
    char key[256];
    snprintf(key, sizeof key, "%s%s", name + glen + 1, json_suffix(e->p->type));
    npu_json_key(j, key);
    switch (e->p->type) {
    case NPU_PT_INT: npu_json_int(j, *(const int *)e->field); break;
    case NPU_PT_BOOL: npu_json_bool(j, *(const bool *)e->field); break;
    case NPU_PT_STRING: npu_json_string(j, (const char *)e->field); break;
    case NPU_PT_ENUM: npu_json_string(j, e->p->enums[*(const int *)e->field]); break;
    case NPU_PT_SIZE: npu_json_int(j, (int64_t) * (const uint64_t *)e->field); break;
    default: npu_json_number(j, *(const double *)e->field);
    }
    prev = name;
    prevlen = glen;
  }
  for (; open > base; open--) npu_json_object_end(j);
  npu_json_object_end(j);
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void npu_cfg_list_presets(const struct npu_cfg *cfg, char ***out, size_t *n)
{
  char **names = NULL;
  size_t k = 0;
  for (size_t i = 0; i < cfg->ndirs; i++) {
    DIR *d = opendir(cfg->dirs[i]);
    if (!d) continue;
    struct dirent *de;
    while ((de = readdir(d))) {
      size_t len = strlen(de->d_name);
      if (len <= 4 || strcmp(de->d_name + len - 4, ".cfg") != 0 || de->d_name[0] == '.') continue;
      char *name = npu_xmalloc(len - 3);
      memcpy(name, de->d_name, len - 4);
      name[len - 4] = '\0';
      bool dup = false;
      for (size_t j = 0; j < k && !dup; j++) dup = strcmp(names[j], name) == 0;
      if (dup) {
        free(name);
        continue;
      }
      names = npu_xrealloc(names, (k + 1) * sizeof *names);
      names[k++] = name;
    }
    closedir(d);
  }
  if (k) qsort(names, k, sizeof *names, cmp_str);
  *out = names;
  *n = k;
}

void npu_cfg_free_names(char **names, size_t n)
{
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
}

static const char *type_text(const struct npu_param *p)
{
  switch (p->type) {
  case NPU_PT_INT: return "integer";
  case NPU_PT_REAL: return "number";
  case NPU_PT_BOOL: return "boolean";
  case NPU_PT_STRING: return "string";
  case NPU_PT_ENUM: return "choice";
  case NPU_PT_FREQUENCY: return "frequency";
  case NPU_PT_BANDWIDTH: return "bandwidth";
  case NPU_PT_TIME: return "time";
  case NPU_PT_SIZE: return "size";
  case NPU_PT_FLOP_RATE: return "FLOP rate";
  }
  return "?";
}

void npu_cfg_write_keys(const struct npu_cfg *cfg, struct npu_buf *out)
{
  npu_buf_puts(out, "| key | type | default | meaning |\n|---|---|---|---|\n");
  for (size_t i = 0; i < cfg->nentries; i++) {
    const struct npu_param *p = cfg->entries[i].p;
    npu_buf_printf(out, "| `%s` | %s", p->name, type_text(p));
    if (p->type == NPU_PT_ENUM) {
      npu_buf_puts(out, ":");
      for (size_t k = 0; p->enums[k]; k++) npu_buf_printf(out, "%s%s", k ? "," : " ", p->enums[k]);
    }
    if (p->def)
      npu_buf_printf(out, " | `%s` | %s |\n", p->def[0] ? p->def : "\"\"", p->desc);
    else if (p->flags & NPU_PF_OPTIONAL)
      npu_buf_printf(out, " | unset | %s |\n", p->desc);
    else
      npu_buf_printf(out, " | required | %s |\n", p->desc);
  }
}
