/* list_vector.h - the vector-core operators (norms, activations, convolutions, losses, optimizer, quant). */
#ifndef NPUSIM_OPS_LIST_VECTOR_H
#define NPUSIM_OPS_LIST_VECTOR_H

#define OPS_LIST_VECTOR(XX) \
  XX(op_rms_norm)           \
  XX(op_layer_norm)         \
  XX(op_softmax)            \
  XX(op_swiglu)             \
  XX(op_rope)               \
  XX(op_causal_conv1d)      \
  XX(op_cross_entropy)      \
  XX(op_adamw)              \
  XX(op_quantize)           \
  XX(op_dequantize)         \
  XX(op_quantize_int8)      \
  XX(op_dropout)           \
  XX(op_eltwise)

#endif
