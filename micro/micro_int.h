/* micro_int.h - declarations shared by the files of micro/ only. */
#ifndef NPUSIM_MICRO_MICRO_INT_H
#define NPUSIM_MICRO_MICRO_INT_H

#include "micro/micro.h"

/* Register the kernel section and its kernel.<param> keys (*kp owned by the caller: free with
 * mc__kernel_unregister after cfg is destroyed). */
void mc__kernel_register(struct npu_cfg *cfg, struct mc_kernel_spec *spec, struct mc_kparams **kp);
void mc__kernel_unregister(struct mc_kparams *kp);
/* Register the collective section. */
void mc__coll_register(struct npu_cfg *cfg, struct mc_coll_spec *spec);

#endif
