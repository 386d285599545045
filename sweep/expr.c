/*
 * expr.c - parsing and evaluating sweep expressions; see expr.h.
 */
#include "sweep/expr.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"

enum op { OP_NUM, OP_NAME, OP_NEG, OP_NOT, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD, OP_EQ, OP_NE, OP_LT, OP_LE,
          OP_GT, OP_GE, OP_AND, OP_OR };

struct node {
  enum op op;
  double num;
  int name;          /* OP_NAME: index into names */
  struct node *a, *b;
};

struct sw_expr {
  struct node *root;
  char **names;
  size_t nnames;
};

struct parser {
  const char *text, *p;
  struct sw_expr *e;
  char *why;
  size_t whylen;
  int failed;
};

static void fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct parser *ps, const char *fmt, ...)
{
  if (ps->failed) return;
  ps->failed = 1;
  int col = (int)(ps->p - ps->text) + 1;
  int k = snprintf(ps->why, ps->whylen, "at column %d: ", col);
  if (k < 0 || (size_t)k >= ps->whylen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ps->why + k, ps->whylen - (size_t)k, fmt, ap);
  va_end(ap);
}

static struct node *mk(enum op op, struct node *a, struct node *b)
{
  struct node *n = npu_xcalloc(1, sizeof *n);
  n->op = op;
  n->a = a;
  n->b = b;
  return n;
}

static void free_node(struct node *n)
{
  if (!n) return;
  free_node(n->a);
  free_node(n->b);
  free(n);
}

static void skip_ws(struct parser *ps)
{
  while (isspace((unsigned char)*ps->p)) ps->p++;
}

static int accept(struct parser *ps, const char *tok)
{
  skip_ws(ps);
  size_t n = strlen(tok);
  if (strncmp(ps->p, tok, n) != 0) return 0;
  /* '<' must not eat the start of '<=', '=' alone is not an operator */
  if (n == 1 && (tok[0] == '<' || tok[0] == '>' || tok[0] == '!') && ps->p[1] == '=') return 0;
  ps->p += n;
  return 1;
}

static struct node *parse_or(struct parser *ps);

static int name_index(struct sw_expr *e, const char *s, size_t n)
{
  for (size_t i = 0; i < e->nnames; i++)
    if (strlen(e->names[i]) == n && !strncmp(e->names[i], s, n)) return (int)i;
  e->names = npu_xrealloc(e->names, (e->nnames + 1) * sizeof *e->names);
  char *c = npu_xmalloc(n + 1);
  memcpy(c, s, n);
  c[n] = '\0';
  e->names[e->nnames] = c;
  return (int)e->nnames++;
}

static struct node *parse_primary(struct parser *ps)
{
  skip_ws(ps);
  const char *s = ps->p;
  if (*s == '(') {
    ps->p++;
    struct node *n = parse_or(ps);
    if (!accept(ps, ")")) {
      fail(ps, "expected ')'");
      free_node(n);
      return NULL;
    }
    return n;
  }
  if (isdigit((unsigned char)*s) || (*s == '.' && isdigit((unsigned char)s[1]))) {
    char *end;
    double v = strtod(s, &end);
    const char *u = end;
    while (isalpha((unsigned char)*u) || *u == '/') u++;
    if (u > end) {
      /* a number with a unit: try every kind */
      char text[128];
      snprintf(text, sizeof text, "%.*s", (int)(u - s), s);
      int ok = 0;
      for (int k = 0; k < NPU_UNIT_KIND_COUNT && !ok; k++) {
        char why[256];
        ok = npu_unit_parse(text, (enum npu_unit_kind)k, &v, why, sizeof why) == 0;
      }
      if (!ok) {
        ps->p = end;
        fail(ps, "unknown unit '%.*s'", (int)(u - end), end);
        return NULL;
      }
      end = (char *)u;
    }
    ps->p = end;
    struct node *n = mk(OP_NUM, NULL, NULL);
    n->num = v;
    return n;
  }
  if (isalpha((unsigned char)*s) || *s == '_') {
    const char *t = s;
    while (isalnum((unsigned char)*t) || *t == '_' || *t == '.') t++;
    if (t[-1] == '.') {
      ps->p = t - 1;
      fail(ps, "a name cannot end with '.'");
      return NULL;
    }
    struct node *n = mk(OP_NAME, NULL, NULL);
    n->name = name_index(ps->e, s, (size_t)(t - s));
    ps->p = t;
    return n;
  }
  if (!*s) fail(ps, "unexpected end of expression");
  else fail(ps, "unexpected '%c'", *s);
  return NULL;
}

static struct node *parse_unary(struct parser *ps)
{
  if (accept(ps, "-")) {
    struct node *a = parse_unary(ps);
    return a ? mk(OP_NEG, a, NULL) : NULL;
  }
  if (accept(ps, "!")) {
    struct node *a = parse_unary(ps);
    return a ? mk(OP_NOT, a, NULL) : NULL;
  }
  if (accept(ps, "+")) return parse_unary(ps);
  return parse_primary(ps);
}

/* One binary level: operands from sub, operators from ops (tokens) mapped to codes. */
static struct node *parse_level(struct parser *ps, struct node *(*sub)(struct parser *), const char *const *ops,
                                const enum op *codes, int chain)
{
  struct node *l = sub(ps);
  while (l) {
    int k = -1;
    for (int i = 0; ops[i]; i++)
      if (accept(ps, ops[i])) {
        k = i;
        break;
      }
    if (k < 0) break;
    struct node *r = sub(ps);
    if (!r) {
      free_node(l);
      return NULL;
    }
    l = mk(codes[k], l, r);
    if (!chain) break;
  }
  return l;
}

static struct node *parse_product(struct parser *ps)
{
  static const char *const ops[] = {"*", "/", "%", NULL};
  static const enum op codes[] = {OP_MUL, OP_DIV, OP_MOD};
  return parse_level(ps, parse_unary, ops, codes, 1);
}

static struct node *parse_sum(struct parser *ps)
{
  static const char *const ops[] = {"+", "-", NULL};
  static const enum op codes[] = {OP_ADD, OP_SUB};
  return parse_level(ps, parse_product, ops, codes, 1);
}

static struct node *parse_cmp(struct parser *ps)
{
  static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">", NULL};
  static const enum op codes[] = {OP_EQ, OP_NE, OP_LE, OP_GE, OP_LT, OP_GT};
  return parse_level(ps, parse_sum, ops, codes, 0);
}

static struct node *parse_and(struct parser *ps)
{
  static const char *const ops[] = {"&&", NULL};
  static const enum op codes[] = {OP_AND};
  return parse_level(ps, parse_cmp, ops, codes, 1);
}

static struct node *parse_or(struct parser *ps)
{
  static const char *const ops[] = {"||", NULL};
  static const enum op codes[] = {OP_OR};
  return parse_level(ps, parse_and, ops, codes, 1);
}

void sw_expr_free(struct sw_expr *e)
{
  if (!e) return;
  free_node(e->root);
  for (size_t i = 0; i < e->nnames; i++) free(e->names[i]);
  free(e->names);
  free(e);
}

int sw_expr_parse(const char *text, struct sw_expr **out, char *why, size_t whylen)
{
  struct sw_expr *e = npu_xcalloc(1, sizeof *e);
  struct parser ps = {.text = text, .p = text, .e = e, .why = why, .whylen = whylen};
  e->root = parse_or(&ps);
  if (e->root && !ps.failed) {
    skip_ws(&ps);
    if (*ps.p == '=') fail(&ps, "'=' is not an operator (compare with '==')");
    else if (*ps.p) fail(&ps, "unexpected '%c'", *ps.p);
  } else if (!ps.failed) {
    fail(&ps, "empty expression");
  }
  if (ps.failed) {
    sw_expr_free(e);
    *out = NULL;
    return -1;
  }
  *out = e;
  return 0;
}

size_t sw_expr_names(const struct sw_expr *e, const char *const **names)
{
  *names = (const char *const *)e->names;
  return e->nnames;
}

struct eval {
  const struct sw_expr *e;
  sw_resolve_fn resolve;
  void *ctx;
  char *why;
  size_t whylen;
};

static int whole(double v)
{
  return isfinite(v) && v == floor(v) && fabs(v) < 9e15;
}

static int eval(struct eval *ev, const struct node *n, double *out)
{
  double a = 0, b = 0;
  switch (n->op) {
  case OP_NUM: *out = n->num; return 0;
  case OP_NAME: return ev->resolve(ev->ctx, ev->e->names[n->name], out, ev->why, ev->whylen);
  case OP_AND:
    if (eval(ev, n->a, &a)) return -1;
    if (a == 0) return *out = 0, 0;
    if (eval(ev, n->b, &b)) return -1;
    return *out = b != 0, 0;
  case OP_OR:
    if (eval(ev, n->a, &a)) return -1;
    if (a != 0) return *out = 1, 0;
    if (eval(ev, n->b, &b)) return -1;
    return *out = b != 0, 0;
  default: break;
  }
  if (eval(ev, n->a, &a)) return -1;
  if (n->b && eval(ev, n->b, &b)) return -1;
  switch (n->op) {
  case OP_NEG: *out = -a; break;
  case OP_NOT: *out = a == 0; break;
  case OP_ADD: *out = a + b; break;
  case OP_SUB: *out = a - b; break;
  case OP_MUL: *out = a * b; break;
  case OP_DIV:
    if (b == 0) return snprintf(ev->why, ev->whylen, "division by zero"), -1;
    *out = a / b;
    break;
  case OP_MOD:
    if (!whole(a) || !whole(b))
      return snprintf(ev->why, ev->whylen, "'%%' needs whole numbers, got %g %% %g", a, b), -1;
    if (b == 0) return snprintf(ev->why, ev->whylen, "remainder of a division by zero"), -1;
    *out = fmod(a, b);
    break;
  case OP_EQ: *out = a == b; break;
  case OP_NE: *out = a != b; break;
  case OP_LT: *out = a < b; break;
  case OP_LE: *out = a <= b; break;
  case OP_GT: *out = a > b; break;
  case OP_GE: *out = a >= b; break;
  default: NPU_PANIC("bad expression node %d", (int)n->op);
  }
  return 0;
}

int sw_expr_eval(const struct sw_expr *e, sw_resolve_fn resolve, void *ctx, double *out, char *why, size_t whylen)
{
  struct eval ev = {e, resolve, ctx, why, whylen};
  return eval(&ev, e->root, out);
}
