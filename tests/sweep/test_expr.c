/* test_expr.c - the expression language of sweep files (sweep/expr.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sweep/expr.h"

static int names(void *ctx, const char *name, double *out, char *why, size_t n)
{
  (void)ctx;
  if (!strcmp(name, "plan.tp")) return *out = 4, 0;
  if (!strcmp(name, "devices")) return *out = 64, 0;
  snprintf(why, n, "unknown %s", name);
  return -1;
}

static double eval(const char *text)
{
  struct sw_expr *e;
  char why[256];
  cr_assert_eq(sw_expr_parse(text, &e, why, sizeof why), 0, "%s: %s", text, why);
  double v;
  cr_assert_eq(sw_expr_eval(e, names, NULL, &v, why, sizeof why), 0, "%s: %s", text, why);
  sw_expr_free(e);
  return v;
}

static void parse_fails(const char *text, const char *want)
{
  struct sw_expr *e;
  char why[256];
  cr_assert_eq(sw_expr_parse(text, &e, why, sizeof why), -1, "%s", text);
  cr_assert_str_eq(why, want);
}

static void eval_fails(const char *text, const char *want)
{
  struct sw_expr *e;
  char why[256];
  cr_assert_eq(sw_expr_parse(text, &e, why, sizeof why), 0);
  double v;
  cr_assert_eq(sw_expr_eval(e, names, NULL, &v, why, sizeof why), -1, "%s", text);
  cr_assert_str_eq(why, want);
  sw_expr_free(e);
}

Test(expr, arithmetic_precedence_and_names)
{
  cr_assert_eq(eval("1 + 2 * 3"), 7);
  cr_assert_eq(eval("(1 + 2) * 3"), 9);
  cr_assert_eq(eval("devices / (plan.tp * 2)"), 8);
  cr_assert_eq(eval("-plan.tp + 10 - 2"), 4);
  cr_assert_eq(eval("7 % 3"), 1);
  cr_assert_eq(eval("1.5e3 / 2"), 750);
  cr_assert_eq(eval("2TBps / 1GBps"), 2000);
  cr_assert_eq(eval("200Gbps"), 25e9);
}

Test(expr, comparisons_and_logic)
{
  cr_assert_eq(eval("plan.tp <= 8 && devices % plan.tp == 0"), 1);
  cr_assert_eq(eval("plan.tp > 4 || devices != 64"), 0);
  cr_assert_eq(eval("!(plan.tp == 4)"), 0);
  cr_assert_eq(eval("(1 < 2) == 1"), 1);
  /* && and || do not evaluate what they need not */
  cr_assert_eq(eval("0 && nothing"), 0);
  cr_assert_eq(eval("1 || nothing"), 1);
}

Test(expr, errors)
{
  parse_fails("1 +", "at column 4: unexpected end of expression");
  parse_fails("(1 + 2", "at column 7: expected ')'");
  parse_fails("a = 2", "at column 3: '=' is not an operator (compare with '==')");
  parse_fails("2 $ 3", "at column 3: unexpected '$'");
  parse_fails("3furlongs", "at column 2: unknown unit 'furlongs'");
  parse_fails("", "at column 1: unexpected end of expression");
  parse_fails("1 < 2 < 3", "at column 7: unexpected '<'"); /* comparisons do not chain */
  eval_fails("1 / (plan.tp - 4)", "division by zero");
  eval_fails("7.5 % 2", "'%' needs whole numbers, got 7.5 % 2");
  eval_fails("nothing + 1", "unknown nothing");
}

Test(expr, names_in_order_of_first_use)
{
  struct sw_expr *e;
  char why[64];
  cr_assert_eq(sw_expr_parse("b + a * b + c.d", &e, why, sizeof why), 0);
  const char *const *n;
  cr_assert_eq(sw_expr_names(e, &n), 3);
  cr_assert_str_eq(n[0], "b");
  cr_assert_str_eq(n[1], "a");
  cr_assert_str_eq(n[2], "c.d");
  sw_expr_free(e);
}
