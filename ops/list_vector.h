/* list_vector.h - the vector-core operators (norms, activations, losses, optimizer, quant). */
#ifndef NPUSIM_OPS_LIST_VECTOR_H
#define NPUSIM_OPS_LIST_VECTOR_H

#define OPS_LIST_VECTOR(XX)

#endif
