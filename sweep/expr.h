/*
 * expr.h - the small expression language of sweep files: derived values and constraints.
 *
 *   expr    := or
 *   or      := and ('||' and)*
 *   and     := cmp ('&&' cmp)*
 *   cmp     := sum (('==' | '!=' | '<' | '<=' | '>' | '>=') sum)?
 *   sum     := product (('+' | '-') product)*
 *   product := unary (('*' | '/' | '%') unary)*
 *   unary   := ('-' | '!') unary | primary
 *   primary := NUMBER | NAME | '(' expr ')'
 *
 * Numbers are doubles (a unit suffix is allowed and converted to SI: 1.6TBps, 200Gbps);
 * NAME is a dotted key (plan.tp, chip.hbm.bandwidth) or a name the caller resolves (devices).
 * Comparisons and logic give 1 or 0; '%' is the remainder of integers (both sides must be
 * whole numbers). Division by zero is an evaluation error, never inf.
 */
#ifndef NPUSIM_SWEEP_EXPR_H
#define NPUSIM_SWEEP_EXPR_H

#include <stddef.h>

struct sw_expr;

/* Parse text; 0, or -1 with why ("at column 7: expected ')'"). *out owned by the caller. */
int sw_expr_parse(const char *text, struct sw_expr **out, char *why, size_t whylen);
void sw_expr_free(struct sw_expr *e);

/* The names the expression uses, in order of first use; *names is borrowed from e. */
size_t sw_expr_names(const struct sw_expr *e, const char *const **names);

/* Resolve a name to a number: 0, or -1 with why. */
typedef int (*sw_resolve_fn)(void *ctx, const char *name, double *out, char *why, size_t whylen);

/* Evaluate; 0, or -1 with why (a name that did not resolve, division by zero, ...). */
int sw_expr_eval(const struct sw_expr *e, sw_resolve_fn resolve, void *ctx, double *out, char *why,
                 size_t whylen);

#endif
