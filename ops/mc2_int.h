/* mc2_int.h - what the MC2 operators (mc2.c: all-gather, reduce-scatter and all-reduce with a
 * matmul; mc2_moe.c: the all-to-alls of MoE experts with their grouped matmul) share: the devices
 * and cores they run on, a launch unit's start (its vector cores' whole program, then the cube
 * core's GEMM), and the vector cores' copies from one device's memory into others' through UB. */
#ifndef NPUSIM_OPS_MC2_INT_H
#define NPUSIM_OPS_MC2_INT_H

#include "ops/op.h"
#include "ops/ops_int.h"

#define MC2_MAX_RANKS 16

/* The devices, the element type and the cores of an MC2 operator, from its "ranks" and "dtype"
 * parameters and the chip: ranks 2..16, fp16 or bf16, a chip with vector cores beside its cube
 * cores. units: AI cores (launch units); naiv: vector cores per device. */
struct mc2_devices {
  uint32_t ranks;
  enum npu_dtype in;
  int units, naiv;
};
int mc2_devices(const struct op_desc *d, const struct op_args *args, const struct arch_chip *chip,
                struct mc2_devices *dv, struct npu_diag *diag);

/* A unit's context: the GEMM's unit state first (ops_gemm_unit_begin uses it), a byte per signal
 * its cube core has waited for, and the GEMM of its last block (an operator that runs two). */
#define MC2_WAITS 256
struct mc2_unit {
  unsigned char gemm[64];
  unsigned char waited[MC2_WAITS];
  const struct gemm *last;
};

/* A unit's start: its vector cores' whole program (vector core v of the device: unit x vector
 * cores per unit + sub-core), then the GEMM's start on its cube core; and its end. */
void mc2_unit_begin(struct core_tp *t, struct gemm *g, int naiv, int units,
                    void (*program)(struct core_tp *t, const void *plan, int rank, int v), const void *plan);
void mc2_unit_end(struct core_tp *t, struct gemm *g);

/* Bytes of n elements of type t. */
static inline uint64_t mc2_bytes(enum npu_dtype t, uint64_t n)
{
  return n * (uint64_t)npu_dtype_bits(t) / 8;
}

/* Worker w's share [lo, hi) of elems elements split over workers (256-element aligned shares). */
void mc2_share(uint64_t elems, int workers, int w, uint64_t *lo, uint64_t *hi);
/* Elements of one of a vector core's two UB buffers. */
uint64_t mc2_piece(const struct arch_chip *chip, enum npu_dtype t);
/* len elements from GM address src into each of the ndst GM addresses dst, piece by piece through
 * the two UB buffers (MTE2 in, MTE3 out, ping-pong; *stage counts the buffers used), between
 * mc2_put_begin and mc2_put_end on the selected vector core. */
void mc2_put_begin(struct core_tp *t);
void mc2_put(struct core_tp *t, enum npu_dtype dt, uint64_t piece, uint32_t *stage, uint64_t src,
             const uint64_t *dst, uint32_t ndst, uint64_t len);
void mc2_put_end(struct core_tp *t);
/* The vector cores of a device in teams, one per device they exchange with (the peers, then the
 * device itself): vector core v of device rank works with device *to, as the w-th of the *nw
 * cores of its team. Each link of the full mesh has its own team, so that one link's flows do not
 * drift onto another's (docs/ARCHITECTURE.md, decision 52). */
void mc2_team(uint32_t rank, uint32_t ranks, int naiv, int v, uint32_t *to, int *w, int *nw);
/* The q-th device (0..ranks-1) vector core v of device rank sends to: the peers rotated by v, so
 * that every link of the full mesh carries data at once, the device itself last. */
uint32_t mc2_peer(uint32_t rank, uint32_t ranks, int v, uint32_t q);
/* Half an ulp's relative size, for the checks. */
double mc2_eps(enum npu_dtype t);

/* ------------------------------------------------------------------ the analytic fidelity */

/* The analytic result of operator d with "name=value" arguments kv (n of them) on one device: a
 * part of an MC2 operator's closed form. */
int mc2_part(const struct op_desc *d, const struct arch_chip *chip, const char *const *kv, int n,
             struct core_result *r, struct npu_diag *diag);
/* Bytes per second of one link of the server. */
double mc2_link_rate(const struct arch_node *node);
/* The result of a closed form: body seconds after the launch on `ranks` devices, whose compute is
 * `part` on each (its busy time and counts times ranks), whose vector cores copy for link_s of it
 * (reading across the links: `reads`; else writing) and whose links carry link_bytes in all. */
void mc2_form_result(struct core_result *out, const struct arch_chip *chip, const struct core_result *part,
                     int ranks, int naiv, double body, double link_s, uint64_t link_bytes, bool reads);

/* The operator description of an MC2 operator: parameter table tbl, plan type, its functions
 * named prefix plan, setup, flops, check, release, ranks_of and closed_form, no backward (rule:
 * why). */
#define MC2_DESC(op_name, op_summary, tbl, plan_type, prefix, bwd_rule)                                      \
  {                                                                                                       \
    .name = op_name, .summary = op_summary, .params = tbl, .nparams = (int)(sizeof tbl / sizeof tbl[0]),  \
    .plan_size = sizeof(plan_type), .plan = prefix##plan, .setup = prefix##setup, .flops = prefix##flops, \
    .check = prefix##check, .release = prefix##release, .ranks = prefix##ranks_of,                        \
    .closed_form = prefix##closed_form,                                                                   \
    .bwd = {.kind = OP_BWD_NONE, .rule = bwd_rule},                                                       \
  }

#endif
