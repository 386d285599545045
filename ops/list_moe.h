/* list_moe.h - the mixture-of-experts routing operators. */
#ifndef NPUSIM_OPS_LIST_MOE_H
#define NPUSIM_OPS_LIST_MOE_H

#define OPS_LIST_MOE(XX)

#endif
