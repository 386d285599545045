/* golden.c - golden files of expected figures; see golden.h. */
#include "tests/support/golden.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/support.h"

void ts_figures_add(struct ts_figures *f, const char *key, const char *value)
{
  if (f->n == f->cap) {
    f->cap = f->cap ? 2 * f->cap : 32;
    f->keys = realloc(f->keys, (size_t)f->cap * sizeof *f->keys);
    f->values = realloc(f->values, (size_t)f->cap * sizeof *f->values);
  }
  f->keys[f->n] = strdup(key);
  f->values[f->n] = strdup(value);
  f->n++;
}

void ts_figures_free(struct ts_figures *f)
{
  for (int i = 0; i < f->n; i++) {
    free(f->keys[i]);
    free(f->values[i]);
  }
  free(f->keys);
  free(f->values);
  memset(f, 0, sizeof *f);
}

/* One CSV record starting at *p (RFC 4180): fields appended to out; *p moves past the line. */
static void csv_record(const char **p, struct ts_figures *out)
{
  const char *s = *p;
  char field[4096];
  for (;;) {
    size_t n = 0;
    if (*s == '"') {
      for (s++; *s && !(*s == '"' && s[1] != '"'); s++) {
        if (*s == '"') s++; /* "" inside quotes */
        if (n + 1 < sizeof field) field[n++] = *s;
      }
      if (*s == '"') s++;
    }
    while (*s && *s != ',' && *s != '\n' && *s != '\r')
      if (n + 1 < sizeof field) field[n++] = *s++;
      else s++;
    field[n] = '\0';
    ts_figures_add(out, "", field);
    if (*s == ',') {
      s++;
      continue;
    }
    while (*s == '\r' || *s == '\n') s++;
    break;
  }
  *p = s;
}

void ts_figures_from_csv(struct ts_figures *f, const char *csv)
{
  struct ts_figures head = {0}, rows = {0};
  const char *p = csv;
  csv_record(&p, &head);
  int nrows = 0;
  while (*p) {
    csv_record(&p, &rows);
    nrows++;
  }
  for (int r = 0; r < nrows; r++)
    for (int c = 0; c < head.n && r * head.n + c < rows.n; c++) {
      char key[512];
      if (nrows == 1) snprintf(key, sizeof key, "%s", head.values[c]);
      else snprintf(key, sizeof key, "%s[%d]", head.values[c], r + 1);
      ts_figures_add(f, key, rows.values[r * head.n + c]);
    }
  ts_figures_free(&head);
  ts_figures_free(&rows);
}

bool ts_golden_pin_default(const char *key, const char *value)
{
  size_t n = strcspn(key, "[");
  if (!value[0]) return false;
  static const char *const echoed[] = {"scenario", "args", "message", "point"};
  for (size_t i = 0; i < sizeof echoed / sizeof echoed[0]; i++)
    if (strlen(echoed[i]) == n && !strncmp(key, echoed[i], n)) return false;
  char *end;
  strtod(value, &end);
  if (end != value && *end == '\0') return true; /* a number */
  return !strpbrk(value, "0123456789");          /* a label */
}

bool ts_golden_updating(void)
{
  const char *u = getenv("NPUSIM_GOLDEN_UPDATE");
  return u && !strcmp(u, "1");
}

static const char *lookup(const struct ts_figures *f, const char *key)
{
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->keys[i], key)) return f->values[i];
  return NULL;
}

/* A token at s (quoted, or up to white space): its text (quotes removed) into buf; returns the
 * end of the token in s. */
static const char *token(const char *s, char *buf, size_t cap)
{
  size_t n = 0;
  if (*s == '"') {
    for (s++; *s && *s != '"' && *s != '\n'; s++)
      if (n + 1 < cap) buf[n++] = *s;
    if (*s == '"') s++;
  } else {
    for (; *s && !isspace((unsigned char)*s); s++)
      if (n + 1 < cap) buf[n++] = *s;
  }
  buf[n] = '\0';
  return s;
}

static const char *skip_blank(const char *s)
{
  while (*s == ' ' || *s == '\t') s++;
  return s;
}

static bool parse_number(const char *text, double *out)
{
  char *end;
  errno = 0;
  *out = strtod(text, &end);
  return end != text && *end == '\0' && errno == 0;
}

/* Whether got agrees with want under tol ("0.1%", "abs:X"); why receives the reason if not. */
static bool agrees(const char *want, bool quoted, const char *got, const char *tol, char *why, size_t n)
{
  if (quoted) {
    if (!strcmp(want, got)) return true;
    snprintf(why, n, "\"%s\", expected \"%s\"", got, want);
    return false;
  }
  double w, g, t = 1e-3;
  bool abs_tol = false;
  if (!parse_number(want, &w)) return snprintf(why, n, "the golden value '%s' is not a number", want), false;
  if (!parse_number(got, &g)) return snprintf(why, n, "'%s' is not a number (expected %s)", got, want), false;
  if (tol[0]) {
    char *end;
    if (!strncmp(tol, "abs:", 4)) {
      abs_tol = true;
      t = strtod(tol + 4, &end);
      if (*end) return snprintf(why, n, "bad tolerance '%s'", tol), false;
    } else {
      t = strtod(tol, &end) / 100.0;
      if (strcmp(end, "%") != 0) return snprintf(why, n, "bad tolerance '%s' (write '0.1%%' or 'abs:1e-9')", tol), false;
    }
  }
  double bound = abs_tol ? t : t * fabs(w);
  if (fabs(g - w) <= bound) return true;
  if (w != 0) snprintf(why, n, "%s, expected %s (%+.4g%%, tolerance %s)", got, want, 100 * (g - w) / fabs(w), tol[0] ? tol : "0.1%");
  else snprintf(why, n, "%s, expected %s (tolerance %s)", got, want, tol[0] ? tol : "0.1%");
  return false;
}

static void append(char **buf, size_t *len, size_t *cap, const char *text, size_t n)
{
  if (*len + n + 1 > *cap) {
    while (*len + n + 1 > *cap) *cap = *cap ? 2 * *cap : 4096;
    *buf = realloc(*buf, *cap);
  }
  memcpy(*buf + *len, text, n);
  *len += n;
  (*buf)[*len] = '\0';
}

static void write_text(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* A created golden file: the header, then one line per wanted figure. */
static void create(const char *path, const struct ts_figures *got, const char *header,
                   bool (*want)(const char *key, const char *value))
{
  char *buf = NULL;
  size_t len = 0, cap = 0;
  append(&buf, &len, &cap, header, strlen(header));
  for (int i = 0; i < got->n; i++) {
    if (want && !want(got->keys[i], got->values[i])) continue;
    double v;
    bool num = parse_number(got->values[i], &v);
    bool bare = !strpbrk(got->keys[i], " \t\"#");
    char line[1024];
    snprintf(line, sizeof line, bare ? "%-32s %s%s%s\n" : "\"%s\" %s%s%s\n", got->keys[i], num ? "" : "\"",
             got->values[i], num ? "" : "\"");
    append(&buf, &len, &cap, line, strlen(line));
  }
  write_text(path, buf ? buf : "");
  free(buf);
}

char *ts_golden_check(const char *path, const struct ts_figures *got, const char *header,
                      bool (*want)(const char *key, const char *value))
{
  bool update = ts_golden_updating();
  char *text = ts_read(path);
  if (!text) {
    if (update) {
      create(path, got, header, want);
      return NULL;
    }
    char *m = malloc(strlen(path) + 128);
    sprintf(m, "%s: no golden file (make golden creates it)", path);
    return m;
  }
  char *msg = NULL, *out = NULL;
  size_t mlen = 0, mcap = 0, olen = 0, ocap = 0;
  int pinned = 0;
  for (const char *line = text; *line;) {
    const char *eol = strchr(line, '\n');
    size_t llen = eol ? (size_t)(eol - line + 1) : strlen(line);
    const char *s = skip_blank(line);
    if (*s == '#' || *s == '\n' || *s == '\0') {
      append(&out, &olen, &ocap, line, llen);
      line += llen;
      continue;
    }
    char key[512], want_v[512], tol[64] = "";
    s = token(s, key, sizeof key);
    const char *vstart = skip_blank(s);
    bool quoted = *vstart == '"';
    const char *vend = token(vstart, want_v, sizeof want_v);
    const char *t = skip_blank(vend);
    if (*t && *t != '#' && *t != '\n') token(t, tol, sizeof tol);
    pinned++;
    const char *g = lookup(got, key);
    char why[1024];
    if (update && (!g || agrees(want_v, quoted, g, tol, why, sizeof why))) {
      /* agrees (or nothing to take the value from): the line stays as written */
      append(&out, &olen, &ocap, line, llen);
    } else if (update) {
      append(&out, &olen, &ocap, line, (size_t)(vstart - line));
      char nv[600];
      if (g) snprintf(nv, sizeof nv, quoted ? "\"%s\"" : "%s", g);
      else snprintf(nv, sizeof nv, "%.*s", (int)(vend - vstart), vstart);
      append(&out, &olen, &ocap, nv, strlen(nv));
      /* keep what follows aligned where the new value is no longer than the old one */
      size_t old = (size_t)(vend - vstart), now = strlen(nv);
      const char *rest = skip_blank(vend);
      bool more = *rest && *rest != '\n'; /* a tolerance or a comment follows */
      if (more) {
        for (size_t k = now; k < old; k++) append(&out, &olen, &ocap, " ", 1);
        if (now > old && (*vend == ' ' || *vend == '\t')) append(&out, &olen, &ocap, " ", 1);
        append(&out, &olen, &ocap, vend, (size_t)(line + llen - vend));
      } else {
        append(&out, &olen, &ocap, rest, (size_t)(line + llen - rest)); /* no trailing blanks */
      }
    } else if (!g) {
      snprintf(why, sizeof why, "%s: %s: no such figure in the result\n", path, key);
      append(&msg, &mlen, &mcap, why, strlen(why));
    } else if (!agrees(want_v, quoted, g, tol, why, sizeof why)) {
      char m[1700];
      snprintf(m, sizeof m, "%s: %s: %s\n", path, key, why);
      append(&msg, &mlen, &mcap, m, strlen(m));
    }
    line += llen;
  }
  if (update) write_text(path, out ? out : "");
  else if (pinned == 0) {
    char m[600];
    snprintf(m, sizeof m, "%s: pins no figure\n", path);
    append(&msg, &mlen, &mcap, m, strlen(m));
  }
  free(out);
  free(text);
  return msg;
}
