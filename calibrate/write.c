/*
 * write.c - a fitted knob written into the preset file that sets it; see calibrate.h.
 *
 * The loader knows where every value came from (npu_cfg_origin): the knob's own line when a
 * file sets it, its value replaced there; otherwise the line of a sibling of its group
 * (chip.calib.*, node.link.*, ...) that a file sets, and the knob is added right after that
 * sibling's setting (on its line, so that it lands inside the same group even when the group is
 * written on one line). Its `_source` string goes right after it. The file is rewritten whole
 * (a temporary renamed into place).
 */
#include "calibrate/calibrate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cfg.h"
#include "common/err.h"

/* The end (one past the ';') of the setting `leaf = ...;` that starts at or after p on its line,
 * skipping quoted text; NULL if the line has none. */
static char *setting_end(char *line, const char *leaf)
{
  size_t n = strlen(leaf);
  for (char *s = line; (s = strstr(s, leaf)); s += n) {
    if (s > line && (s[-1] == '_' || (s[-1] >= 'a' && s[-1] <= 'z'))) continue;
    char *q = s + n;
    while (*q == ' ' || *q == '\t') q++;
    if (*q != '=' && *q != ':') continue;
    bool quoted = false;
    for (q++; *q && *q != '\n'; q++) {
      if (*q == '"') quoted = !quoted;
      else if (*q == ';' && !quoted) return q + 1;
    }
    return NULL;
  }
  return NULL;
}

/* Read a file into lines (each keeps its newline); NULL on failure. */
static char **read_lines(const char *path, int *n)
{
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char **lines = NULL, buf[8192];
  int cap = 0;
  *n = 0;
  while (fgets(buf, sizeof buf, f)) {
    if (*n == cap) lines = npu_xrealloc(lines, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *lines);
    lines[(*n)++] = npu_xstrdup(buf);
  }
  fclose(f);
  return lines;
}

static const char *leaf_of(const char *key)
{
  const char *d = strrchr(key, '.');
  return d ? d + 1 : key;
}

/* Replace line[at..end) by text. */
static void splice(char **line, char *at, char *end, const char *text)
{
  size_t pre = (size_t)(at - *line), post = strlen(end);
  char *nl = npu_xcalloc(pre + strlen(text) + post + 1, 1);
  memcpy(nl, *line, pre);
  strcpy(nl + pre, text);
  strcat(nl, end);
  free(*line);
  *line = nl;
}

static void full_path(char *out, size_t n, const char *file)
{
  if (file[0] == '/') snprintf(out, n, "%s", file);
  else snprintf(out, n, "%s/%s", arch_source_root(), file);
}

/* Append text to buf (capacity n, length *len), cut with "..." when it does not fit. */
static void put(char *buf, size_t n, size_t *len, const char *text)
{
  size_t t = strlen(text);
  if (*len + t < n) {
    memcpy(buf + *len, text, t + 1);
    *len += t;
  } else if (*len + 4 < n) {
    size_t keep = n - *len - 4;
    memcpy(buf + *len, text, keep);
    memcpy(buf + *len + keep, "...", 4);
    *len = n - 1;
  }
}

void cal_provenance(const struct cal_fit *f, const struct cal_set *set, char *buf, size_t n)
{
  size_t len = 0;
  char t[1400];
  buf[0] = '\0';
  snprintf(t, sizeof t, "npusim calibrate: %d point%s (rms residual %.1f%%%s):", f->npoints, f->npoints == 1 ? "" : "s",
           100 * f->rms, f->at_bound ? ", at the bound: a modelling gap" : "");
  put(buf, n, &len, t);
  /* the points as file:first-last ranges of consecutive lines */
  for (int i = 0; i < f->npoints;) {
    const char *w = set->p[f->res[i].point].where, *colon = strrchr(w, ':');
    int file_len = (int)(colon - w), first = atoi(colon + 1), last = first, k = i + 1;
    for (; k < f->npoints; k++) {
      const char *wk = set->p[f->res[k].point].where, *ck = strrchr(wk, ':');
      if ((int)(ck - wk) != file_len || strncmp(wk, w, (size_t)file_len) || atoi(ck + 1) != last + 1) break;
      last++;
    }
    if (first == last) snprintf(t, sizeof t, " %.*s:%d", file_len, w, first);
    else snprintf(t, sizeof t, " %.*s:%d-%d", file_len, w, first, last);
    put(buf, n, &len, t);
    i = k;
  }
  /* the distinct sources, as far as they fit */
  for (int i = 0; i < f->npoints; i++) {
    const char *src = set->p[f->res[i].point].source;
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= !strcmp(src, set->p[f->res[j].point].source);
    if (seen) continue;
    snprintf(t, sizeof t, "%s %s", i ? ";" : "; from", src);
    put(buf, n, &len, t);
  }
  for (char *c = buf; *c; c++)
    if (*c == '"') *c = '\'';
}

/* Whether origin o is a line of the file own (any file when own is NULL). */
static bool in_file(const struct npu_origin *o, const char *own)
{
  if (!o || o->kind != NPU_ORIGIN_FILE) return false;
  if (!own) return true;
  char a[1100], b[1100];
  full_path(a, sizeof a, o->file);
  full_path(b, sizeof b, own);
  return !strcmp(a, b);
}

static int write_setting(const struct npu_cfg *cfg, const struct cal_knob *k, const char *val, const char *provenance,
                         const char *own, char *file, size_t nfile, struct npu_diag *diag)
{
  const struct npu_origin *o = npu_cfg_origin(cfg, k->key);
  const char *leaf = leaf_of(k->key), *sleaf = k->source_key ? leaf_of(k->source_key) : "";
  const char *anchor_file = NULL, *anchor_leaf = NULL;
  int anchor_line = 0;
  bool replace = false;
  if (in_file(o, own)) {
    anchor_file = o->file, anchor_line = o->line, anchor_leaf = leaf, replace = true;
  } else {
    /* a sibling of the knob's group that a file sets */
    char group[128];
    snprintf(group, sizeof group, "%.*s", (int)(leaf - k->key), k->key);
    const struct npu_table *t = arch_table();
    for (size_t i = 0; i < t->nparams && !anchor_file; i++) {
      const char *name = t->params[i].name;
      if (strncmp(name, group, strlen(group)) || strchr(name + strlen(group), '.')) continue;
      const struct npu_origin *so = npu_cfg_origin(cfg, name);
      if (in_file(so, own)) anchor_file = so->file, anchor_line = so->line, anchor_leaf = leaf_of(name);
    }
  }
  if (!anchor_file)
    return npu_diag_set(diag, own ? own : "command line", 0, k->key,
                        "the preset's own file sets neither %s nor another key of its group (a value it inherits "
                        "belongs to another preset): add the group to the preset by hand",
                        k->key),
           NPU_ECONFIG;
  full_path(file, nfile, anchor_file);
  int n;
  char **lines = read_lines(file, &n);
  if (!lines) return npu_diag_set(diag, file, 0, k->key, "cannot read: %s", strerror(errno)), NPU_EIO;
  int rc = 0;
  char text[1400];
  char *end = anchor_line >= 1 && anchor_line <= n ? setting_end(lines[anchor_line - 1], anchor_leaf) : NULL;
  if (!end) rc = npu_diag_set(diag, file, anchor_line, k->key, "cannot find the setting '%s' on this line", anchor_leaf);
  /* the _source setting: replaced where this file sets it, else added after the knob */
  const struct npu_origin *so = k->source_key ? npu_cfg_origin(cfg, k->source_key) : NULL;
  bool source_here = so && in_file(so, own) && !strcmp(so->file, anchor_file) && so->line >= 1 && so->line <= n;
  if (!rc && replace) {
    char *eq = strchr(strstr(lines[anchor_line - 1], anchor_leaf), '=');
    if (!eq) eq = strchr(strstr(lines[anchor_line - 1], anchor_leaf), ':');
    snprintf(text, sizeof text, " %s;", val);
    splice(&lines[anchor_line - 1], eq + 1, end, text);
    if (!source_here && k->source_key) {
      end = setting_end(lines[anchor_line - 1], anchor_leaf);
      snprintf(text, sizeof text, " %s = \"%s\";", sleaf, provenance);
      splice(&lines[anchor_line - 1], end, end, text);
    }
  } else if (!rc && !k->source_key) {
    snprintf(text, sizeof text, " %s = %s;", leaf, val);
    splice(&lines[anchor_line - 1], end, end, text);
  } else if (!rc) {
    snprintf(text, sizeof text, " %s = %s; %s = \"%s\";", leaf, val, sleaf, provenance);
    splice(&lines[anchor_line - 1], end, end, text);
  }
  if (!rc && source_here && replace) {
    char *s = lines[so->line - 1], *se = setting_end(s, sleaf);
    char *eq = se ? strchr(strstr(s, sleaf), '=') : NULL;
    if (!eq) rc = npu_diag_set(diag, file, so->line, k->source_key, "cannot find the setting '%s'", sleaf);
    else {
      snprintf(text, sizeof text, " \"%s\";", provenance);
      splice(&lines[so->line - 1], eq + 1, se, text);
    }
  }
  if (!rc) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    FILE *f = fopen(tmp, "w");
    bool ok = f != NULL;
    for (int i = 0; ok && i < n; i++) ok = fputs(lines[i], f) >= 0;
    if (f && fclose(f)) ok = false;
    if (!ok || rename(tmp, file)) {
      remove(tmp);
      npu_diag_set(diag, file, 0, k->key, "cannot write: %s", strerror(errno));
      rc = NPU_EIO;
    }
  }
  for (int i = 0; i < n; i++) free(lines[i]);
  free(lines);
  return rc;
}

int cal_write_knob(const struct npu_cfg *cfg, const struct cal_knob *k, double value, const char *provenance,
                   const char *own, char *file, size_t nfile, struct npu_diag *diag)
{
  char val[64];
  if (k->time) snprintf(val, sizeof val, "\"%.4gus\"", value * 1e6);
  else snprintf(val, sizeof val, "%.4g", value);
  return write_setting(cfg, k, val, provenance, own, file, nfile, diag);
}

int cal_write_text(const struct npu_cfg *cfg, const struct cal_knob *k, const char *text, const char *own, char *file,
                   size_t nfile, struct npu_diag *diag)
{
  char val[ARCH_CURVE_TEXT_MAX + 4];
  snprintf(val, sizeof val, "\"%s\"", text);
  return write_setting(cfg, k, val, "", own, file, nfile, diag);
}
