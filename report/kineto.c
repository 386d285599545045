/*
 * kineto.c - one pass over a Kineto (Chrome trace) JSON file, handing its complete events to a
 * callback; see kineto.h. A small JSON scanner of its own: values it does not need are skipped
 * (nesting bounded, so a hostile file cannot exhaust the stack), strings are unescaped only for
 * the keys it reads.
 */
#include "report/kineto.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/strutil.h"

#define MAX_DEPTH 128

struct scan {
  const char *begin, *p;
  const char *path;
  struct npu_diag *diag;
  int depth;
};

static void reset(struct npu_buf *b)
{
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

static int fail(struct scan *sc, const char *what)
{
  int line = 1;
  for (const char *q = sc->begin; q < sc->p; q++) line += *q == '\n';
  return npu_diag_set(sc->diag, sc->path, line, NULL, "not a trace's JSON: %s", what);
}

static void ws(struct scan *sc)
{
  while (*sc->p == ' ' || *sc->p == '\t' || *sc->p == '\n' || *sc->p == '\r') sc->p++;
}

/* A string at p; its text (escapes resolved, \u as '?' beyond ASCII) into out when not NULL. */
static int string(struct scan *sc, struct npu_buf *out)
{
  if (*sc->p != '"') return fail(sc, "expected a string");
  sc->p++;
  if (out) reset(out);
  for (;;) {
    unsigned char c = (unsigned char)*sc->p;
    if (!c) return fail(sc, "a string does not end");
    if (c < 0x20) return fail(sc, "a control character inside a string");
    sc->p++;
    if (c == '"') return 0;
    if (c == '\\') {
      char e = *sc->p++;
      const char *esc = strchr("\"\\/bfnrtu", e);
      if (!e || !esc) return sc->p--, fail(sc, "a bad escape in a string");
      if (e == 'u') {
        for (int i = 0; i < 4; i++)
          if (!isxdigit((unsigned char)sc->p[i])) return fail(sc, "a bad \\u escape in a string");
        unsigned v = (unsigned)strtoul((char[5]){sc->p[0], sc->p[1], sc->p[2], sc->p[3], 0}, NULL, 16);
        sc->p += 4;
        c = v < 0x80 && v >= 0x20 ? (unsigned char)v : '?';
      } else {
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        c = (unsigned char)to[strchr(from, e) - from];
      }
    }
    if (out) npu_buf_append(out, &c, 1);
  }
}

static int number(struct scan *sc, double *v)
{
  const char *q = sc->p + (*sc->p == '-');
  if (!isdigit((unsigned char)*q) || (q[0] == '0' && (q[1] == 'x' || q[1] == 'X')))
    return fail(sc, "expected a value");
  char *end;
  errno = 0;
  double x = strtod(sc->p, &end);
  if (end == sc->p || !isfinite(x)) return fail(sc, "a number out of range");
  sc->p = end;
  if (v) *v = x;
  return 0;
}

static int value(struct scan *sc);

/* The object or array at p, member by member: member(sc, key, ctx) reads each value (key: the
 * member's name, unescaped into keybuf; NULL in an array or when keybuf is NULL). */
static int members(struct scan *sc, struct npu_buf *keybuf, int (*member)(struct scan *, const char *, void *),
                   void *ctx)
{
  char open = *sc->p, close = open == '{' ? '}' : ']';
  if (++sc->depth > MAX_DEPTH) return fail(sc, "nested too deep");
  sc->p++;
  ws(sc);
  if (*sc->p == close) {
    sc->p++;
    sc->depth--;
    return 0;
  }
  for (;;) {
    int rc;
    const char *key = NULL;
    if (open == '{') {
      if ((rc = string(sc, keybuf))) return rc;
      ws(sc);
      if (*sc->p != ':') return fail(sc, "expected ':' after a key");
      sc->p++;
      ws(sc);
      key = keybuf ? npu_buf_str(keybuf) : NULL;
    }
    if ((rc = member(sc, key, ctx))) return rc;
    ws(sc);
    if (*sc->p == ',') {
      sc->p++;
      ws(sc);
      continue;
    }
    if (*sc->p != close) return fail(sc, open == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
    sc->p++;
    sc->depth--;
    return 0;
  }
}

static int skip(struct scan *sc, const char *key, void *ctx)
{
  (void)key, (void)ctx;
  return value(sc);
}

static int value(struct scan *sc)
{
  switch (*sc->p) {
  case '{':
  case '[':
    return members(sc, NULL, skip, NULL);
  case '"':
    return string(sc, NULL);
  case 't':
    if (!strncmp(sc->p, "true", 4)) return sc->p += 4, 0;
    break;
  case 'f':
    if (!strncmp(sc->p, "false", 5)) return sc->p += 5, 0;
    break;
  case 'n':
    if (!strncmp(sc->p, "null", 4)) return sc->p += 4, 0;
    break;
  default:
    return number(sc, NULL);
  }
  return fail(sc, "expected a value");
}

struct fields {
  struct npu_buf topkey, key, ph, cat, name;
};

struct reader {
  struct fields f;
  void (*each)(const struct kineto_event *, void *);
  void *ctx;
  bool has_ph, has_name, has_dur;
  double ts, dur;
  int lists; /* traceEvents arrays seen */
};

static int event_member(struct scan *sc, const char *key, void *ctx)
{
  struct reader *r = ctx;
  if (!strcmp(key, "ph")) return r->has_ph = true, string(sc, &r->f.ph);
  if (!strcmp(key, "cat")) return string(sc, &r->f.cat);
  if (!strcmp(key, "name")) return r->has_name = true, string(sc, &r->f.name);
  if (!strcmp(key, "ts")) return number(sc, &r->ts);
  if (!strcmp(key, "dur")) return r->has_dur = true, number(sc, &r->dur);
  return value(sc);
}

/* One element of traceEvents: a complete event goes to each; anything else is skipped. */
static int event(struct scan *sc, const char *key, void *ctx)
{
  (void)key;
  struct reader *r = ctx;
  if (*sc->p != '{') return value(sc);
  r->has_ph = r->has_name = r->has_dur = false;
  r->ts = r->dur = 0;
  reset(&r->f.cat);
  int rc = members(sc, &r->f.key, event_member, r);
  if (!rc && r->has_ph && r->has_name && r->has_dur && !strcmp(npu_buf_str(&r->f.ph), "X")) {
    struct kineto_event ev = {npu_buf_str(&r->f.cat), npu_buf_str(&r->f.name), r->ts, r->dur};
    r->each(&ev, r->ctx);
  }
  return rc;
}

static int top_member(struct scan *sc, const char *key, void *ctx)
{
  struct reader *r = ctx;
  if (strcmp(key, "traceEvents")) return value(sc);
  if (*sc->p != '[') return fail(sc, "traceEvents is not an array");
  r->lists++;
  return members(sc, NULL, event, r);
}

bool kineto_sniff(const char *path)
{
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char head[4097];
  size_t n = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  head[n] = '\0';
  size_t i = 0;
  while (i < n && isspace((unsigned char)head[i])) i++;
  return i < n && head[i] == '{' && strstr(head, "\"traceEvents\"");
}

int kineto_read(const char *path, void (*each)(const struct kineto_event *ev, void *ctx), void *ctx,
                struct npu_diag *diag)
{
  struct npu_buf b = {0};
  if (!npu_buf_read_file(&b, path))
    return npu_buf_release(&b), npu_diag_set(diag, path, 0, NULL, "cannot read: %s", strerror(errno));
  if (b.data && strlen(b.data) != b.len)
    return npu_buf_release(&b), npu_diag_set(diag, path, 0, NULL, "not a trace's JSON: a NUL byte");
  struct scan sc = {b.data ? b.data : "", b.data ? b.data : "", path, diag, 0};
  struct reader r = {.each = each, .ctx = ctx};
  ws(&sc);
  int rc = *sc.p == '{' ? members(&sc, &r.f.topkey, top_member, &r) : fail(&sc, "expected an object");
  if (!rc) {
    ws(&sc);
    if (*sc.p) rc = fail(&sc, "text after the trace's object");
    else if (!r.lists) rc = npu_diag_set(diag, path, 0, NULL, "has no traceEvents");
  }
  npu_buf_release(&r.f.topkey);
  npu_buf_release(&r.f.key);
  npu_buf_release(&r.f.ph);
  npu_buf_release(&r.f.cat);
  npu_buf_release(&r.f.name);
  npu_buf_release(&b);
  return rc;
}
