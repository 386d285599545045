/* derived.c - nameplate figures by formula; see derived.h. */
#include "arch/derived.h"

#include <string.h>

void arch_derive(const struct arch_system *sys, struct arch_derived *out)
{
  const struct arch_chip *c = &sys->chip;
  memset(out, 0, sizeof *out);
  for (int t = 0; t < NPU_DT_CUBE_COUNT; t++) {
    out->peak_flops_per_s[t] = (double)c->aic_count * c->cube.macs_per_cycle[t] * 2.0 * c->clock_hz;
    out->balance_flops_per_byte[t] = out->peak_flops_per_s[t] / c->hbm.bw_bytes_per_s;
  }
  out->vector_flops_per_s_fp16 =
      c->aiv_count * (c->vector.bytes_per_cycle / 2) * c->vector.flops_per_element * c->clock_hz;
  out->vector_flops_per_s_fp32 =
      c->aiv_count * (c->vector.bytes_per_cycle / 4) * c->vector.flops_per_element * c->clock_hz;
  out->hbm_bw_bytes_per_s = c->hbm.bw_bytes_per_s;
  out->l2_bw_bytes_per_s = c->l2.bw_bytes_per_s;
  out->core_gm_read_bw_bytes_per_s = c->dma.gm_read_bytes_per_cycle * c->clock_hz;
  out->devices = 1;
  if (sys->has_node) {
    const struct arch_node *n = &sys->node;
    int packages = n->devices / n->dies_per_package;
    int links = n->topology == ARCH_NODE_FULL_MESH && packages - 1 < n->link.ports
                    ? packages - 1
                    : n->link.ports;
    out->packages_per_node = packages;
    /* A package's links are shared by its dies. */
    out->intra_node_bw_bytes_per_s = links * n->link.bw_bytes_per_s / n->dies_per_package;
    out->devices = n->devices;
  }
  if (sys->has_cluster) {
    const struct arch_cluster *cl = &sys->cluster;
    out->devices = (long long)cl->nodes * sys->node.devices;
    if (cl->scaleout.topology != ARCH_SCALEOUT_NONE)
      out->scale_out_bw_bytes_per_s = cl->scaleout.nics_per_device * cl->scaleout.nic_bw_bytes_per_s;
    if (cl->superpod.nodes > 0) out->superpod_bw_bytes_per_s = cl->superpod.bw_bytes_per_s;
  }
}
