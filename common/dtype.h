/*
 * dtype.h - the data types npusim knows: names, storage widths, and which are block-scaled.
 *
 * Shared by arch/ (cube MAC rates per input type) and ops/ (numeric formats, kernels).
 * Widths are in bits because int4 and fp4 pack two elements per byte.
 */
#ifndef NPUSIM_COMMON_DTYPE_H
#define NPUSIM_COMMON_DTYPE_H

#include <stdbool.h>
#include <stddef.h>

/* XX(enum suffix, name, bits) -- the cube input types, in the order presets list them. */
#define NPU_CUBE_DTYPE_MAP(XX)       \
  XX(FP16, "fp16", 16)               \
  XX(BF16, "bf16", 16)               \
  XX(HF32, "hf32", 32)               \
  XX(FP32, "fp32", 32)               \
  XX(INT8, "int8", 8)                \
  XX(INT4, "int4", 4)                \
  XX(FP8_E4M3, "fp8_e4m3", 8)        \
  XX(FP8_E5M2, "fp8_e5m2", 8)        \
  XX(HIF8, "hif8", 8)                \
  XX(MXFP8, "mxfp8", 8)              \
  XX(FP4_E2M1, "fp4_e2m1", 4)        \
  XX(MXFP4, "mxfp4", 4)

/* Types that are not cube inputs: accumulators and vector-only integer types. */
#define NPU_OTHER_DTYPE_MAP(XX)      \
  XX(INT32, "int32", 32)             \
  XX(INT16, "int16", 16)             \
  XX(UINT8, "uint8", 8)

#define NPU_DTYPE_MAP(XX) NPU_CUBE_DTYPE_MAP(XX) NPU_OTHER_DTYPE_MAP(XX)

enum npu_dtype {
#define NPU__DT_ENUM(e, name, bits) NPU_DT_##e,
  NPU_DTYPE_MAP(NPU__DT_ENUM)
#undef NPU__DT_ENUM
  NPU_DT_COUNT
};

/* The cube input types are the first NPU_DT_CUBE_COUNT of the enum. */
enum {
#define NPU__DT_ONE(e, name, bits) +1
  NPU_DT_CUBE_COUNT = 0 NPU_CUBE_DTYPE_MAP(NPU__DT_ONE)
#undef NPU__DT_ONE
};

/* "fp16", ... */
const char *npu_dtype_name(enum npu_dtype t);
/* Storage bits per element (4, 8, 16, 32). */
int npu_dtype_bits(enum npu_dtype t);
/* Parse a name; returns false if unknown. */
bool npu_dtype_parse(const char *name, enum npu_dtype *out);
/* NULL-terminated list of all names, in enum order (for enum parameters and messages). */
const char *const *npu_dtype_names(void);

#endif
