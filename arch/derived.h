/*
 * derived.h - figures that follow from a hardware description by formula: peak FLOP/s per
 * input type, vector FLOP/s, aggregate bandwidths, machine balance, per-device link
 * bandwidths. Nothing here is calibrated: these are nameplate figures, the formulas printed by
 * `npusim arch show`.
 */
#ifndef NPUSIM_ARCH_DERIVED_H
#define NPUSIM_ARCH_DERIVED_H

#include "arch/arch.h"

struct arch_derived {
  double peak_flops_per_s[NPU_DT_CUBE_COUNT];  /* aic_count x MAC/cycle x 2 x clock; 0: unsupported */
  double vector_flops_per_s_fp16;         /* aiv_count x (bytes/cycle / 2) x flops/elem x clock */
  double vector_flops_per_s_fp32;         /* aiv_count x (bytes/cycle / 4) x flops/elem x clock */
  double hbm_bw_bytes_per_s;              /* aggregate HBM */
  double l2_bw_bytes_per_s;               /* aggregate L2 */
  double core_gm_read_bw_bytes_per_s;     /* one core's GM read port: bytes/cycle x clock */
  double balance_flops_per_byte[NPU_DT_CUBE_COUNT]; /* peak / HBM bandwidth */
  int packages_per_node;                  /* node.devices / dies_per_package; 0 without node */
  double intra_node_bw_bytes_per_s;       /* per device, one direction; 0 without node */
  double superpod_bw_bytes_per_s;         /* per device, one direction; 0 without SuperPoD */
  double scale_out_bw_bytes_per_s;        /* per device, one direction; 0 without cluster */
  long long devices;                      /* in the whole system */
};

/* Compute every derived figure of sys. */
void arch_derive(const struct arch_system *sys, struct arch_derived *out);

#endif
