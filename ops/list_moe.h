/* list_moe.h - the mixture-of-experts routing operators (moe_gating.c, moe_permute.c,
 * moe_unpermute.c): router top-k, MoeInitRouting-style permute, MoeFinalizeRouting-style combine. */
#ifndef NPUSIM_OPS_LIST_MOE_H
#define NPUSIM_OPS_LIST_MOE_H

#define OPS_LIST_MOE(XX) XX(op_moe_gating) XX(op_moe_permute) XX(op_moe_unpermute)

#endif
