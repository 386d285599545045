/* opsupport.h - run an operator in tests. */
#ifndef NPUSIM_TESTS_OPS_OPSUPPORT_H
#define NPUSIM_TESTS_OPS_OPSUPPORT_H

#include <criterion/criterion.h>
#include <stdio.h>

#include "ops/op.h"
#include "tests/support/chip.h"
#include "tests/support/support.h"

/* Run op on chip with "name=value" arguments (NULL-terminated); fail the test on error. */
static inline struct op_result ts_op(const struct arch_chip *chip, const char *op, enum core_fidelity f,
                                     bool functional, const char *const *kv)
{
  const struct op_desc *d = op_find(op);
  cr_assert(d != NULL, "no operator %s", op);
  int n = 0;
  while (kv[n]) n++;
  struct op_args a;
  struct npu_diag diag;
  npu_diag_clear(&diag);
  char msg[2048];
  int rc = op_args_parse(d, &a, kv, n, &diag);
  npu_diag_format(&diag, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  struct op_run_opts o = {.fidelity = f, .functional = functional, .seed = 7};
  struct op_result r;
  rc = op_run(d, &a, chip, &o, &r, &diag);
  npu_diag_format(&diag, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  if (functional) cr_assert(r.checked && r.passed, "%s: %s", op, r.check_summary);
  return r;
}

/* The status and message (2048 bytes) of running op with arguments and options o; *r its result. */
static inline int ts_op_with(const struct arch_chip *chip, const char *op, const char *const *kv,
                             const struct op_run_opts *o, struct op_result *r, char *msg)
{
  const struct op_desc *d = op_find(op);
  cr_assert(d != NULL, "no operator %s", op);
  int n = 0;
  while (kv[n]) n++;
  struct op_args a;
  struct npu_diag diag;
  npu_diag_clear(&diag);
  int rc = op_args_parse(d, &a, kv, n, &diag);
  if (!rc) rc = op_run(d, &a, chip, o, r, &diag);
  npu_diag_format(&diag, msg, 2048);
  return rc;
}

/* The status and message of running op with arguments (for error tests). */
static inline int ts_op_err(const struct arch_chip *chip, const char *op, const char *const *kv, char *msg)
{
  struct op_run_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC, .seed = 7};
  struct op_result r;
  return ts_op_with(chip, op, kv, &o, &r, msg);
}

#endif
