/*
 * parity.h - numerical parity of an operator: which changes that must not change its results do.
 *
 * Low-precision training and serving depend on kernels whose outputs do not move when nothing
 * about the mathematics moved: a row's output must be the same bits whatever the batch it is
 * computed in (batch invariance: serving batches requests differently from run to run), the
 * tiling, the split of a reduction or the number of cores. op_parity runs an operator
 * functionally with the given arguments (the base), then once per case, and compares the
 * tensors the base run wrote, element by element, bit for bit:
 *
 *   batch    the batch parameter (rows, m, tokens or batch, the first the operator has) at 1, 3
 *            and half its value: the outputs whose size scales with it are compared on the rows
 *            the two runs share (inputs are streams of (seed, tensor name), so those rows hold
 *            the same inputs; a case where an input's shared rows differ is reported as not
 *            comparable, and so are all batch cases of a call with a transposed operand
 *            (a trans_* parameter true), whose rows are not contiguous);
 *   tiling   each tiling parameter the operator has (tile_*, swizzle, split_k, cores) at other
 *            values (listed in parity.c), every written tensor compared whole;
 *   cores    the chip with half its cube and vector cores.
 *
 * A case the operator refuses (its plan's error) is listed with the reason, not counted. Each
 * compared case reports the elements compared and differing, the largest difference in units
 * in the last place of the tensor's type and relative, and the first differing element.
 */
#ifndef NPUSIM_OPS_PARITY_H
#define NPUSIM_OPS_PARITY_H

#include <stdbool.h>
#include <stdint.h>

#include "arch/arch.h"
#include "common/diag.h"
#include "ops/op.h"

enum op_parity_kind { OP_PARITY_BATCH, OP_PARITY_TILING, OP_PARITY_CORES };

struct op_parity_case {
  enum op_parity_kind kind;
  char what[96];                /* "m=1", "split_k=2", "cores halved (12 cube, 24 vector)" */
  bool ran;                     /* the operator accepted and ran it */
  bool comparable;              /* ran, and the inputs the comparison relies on agree */
  char why[256];                /* not ran: the operator's reason; not comparable: which input */
  int tensors;                  /* tensors compared */
  uint64_t compared, differing; /* elements */
  double max_ulp, max_rel;      /* largest difference: ulps of the tensor's type, relative */
  char first[200];              /* the first differing element: "c[37]: 0.1234 vs 0.1235", or "" */
};

struct op_parity {
  char base[1024];              /* the base arguments, canonical */
  char batch_param[32];         /* "" when the operator has none */
  char tensors[256];            /* the tensors the base run writes (compared), comma-separated */
  struct op_parity_case *cases;
  int n;
  int differ;                   /* comparable cases with at least one differing element */
};

/* Run the parity cases of operator d with arguments a on chip, inputs of seed. 0, or the base
 * run's error with diag (a base the operator refuses, or whose functional check fails). */
int op_parity_run(const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip, uint64_t seed,
                  struct op_parity *out, struct npu_diag *diag);

void op_parity_release(struct op_parity *p);

const char *op_parity_kind_name(enum op_parity_kind k);

#endif
