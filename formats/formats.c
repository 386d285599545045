/*
 * formats.c - access by enum npu_dtype: element storage (4-bit packing, 8/16/32-bit words in
 * host byte order) and dispatch to each format's encoder and decoder; see formats.h.
 */
#include "formats/formats.h"

#include <math.h>
#include <string.h>

#include "common/err.h"
#include "formats/formats_int.h"

/* Code of @v in type @t, in the low npu_dtype_bits(t) bits. */
static uint32_t encode_code(enum npu_dtype t, double v)
{
  switch (t) {
  case NPU_DT_FP16: return fmt_fp16_from_double(v);
  case NPU_DT_BF16: return fmt_bf16_from_double(v);
  case NPU_DT_HF32: return fmt_hf32_from_double(v);
  case NPU_DT_FP32: return fmt_fp32_from_double(v);
  case NPU_DT_INT8: return (uint8_t)fmt_int8_from_double(v);
  case NPU_DT_INT4: return fmt_int4_from_double(v);
  case NPU_DT_FP8_E4M3:
  case NPU_DT_MXFP8: return fmt_fp8_e4m3_from_double(v);
  case NPU_DT_FP8_E5M2: return fmt_fp8_e5m2_from_double(v);
  case NPU_DT_HIF8: return fmt_hif8_from_double(v);
  case NPU_DT_FP4_E2M1:
  case NPU_DT_MXFP4: return fmt_fp4_e2m1_from_double(v);
  case NPU_DT_INT32: return (uint32_t)fmt_int32_from_double(v);
  case NPU_DT_INT16: return (uint16_t)fmt_int16_from_double(v);
  case NPU_DT_UINT8: return fmt_uint8_from_double(v);
  case NPU_DT_COUNT: break;
  }
  NPU_PANIC("unknown dtype %d", (int)t);
}

/* Two's complement value of the low @bits bits of @code. */
static double signed_value(uint32_t code, int bits)
{
  double u = code;
  return (code >> (bits - 1)) & 1 ? u - ldexp(1.0, bits) : u;
}

/* Value of code @c of type @t. */
static double decode_code(enum npu_dtype t, uint32_t c)
{
  switch (t) {
  case NPU_DT_FP16: return fmt_fp16_to_double((uint16_t)c);
  case NPU_DT_BF16: return fmt_bf16_to_double((uint16_t)c);
  case NPU_DT_HF32: return fmt_hf32_to_double(c);
  case NPU_DT_FP32: return fmt_fp32_to_double(c);
  case NPU_DT_INT8: return signed_value(c, 8);
  case NPU_DT_INT4: return fmt_int4_to_double((uint8_t)c);
  case NPU_DT_FP8_E4M3:
  case NPU_DT_MXFP8: return fmt_fp8_e4m3_to_double((uint8_t)c);
  case NPU_DT_FP8_E5M2: return fmt_fp8_e5m2_to_double((uint8_t)c);
  case NPU_DT_HIF8: return fmt_hif8_to_double((uint8_t)c);
  case NPU_DT_FP4_E2M1:
  case NPU_DT_MXFP4: return fmt_fp4_e2m1_to_double((uint8_t)c);
  case NPU_DT_INT32: return signed_value(c, 32);
  case NPU_DT_INT16: return signed_value(c, 16);
  case NPU_DT_UINT8: return fmt_uint8_to_double((uint8_t)c);
  case NPU_DT_COUNT: break;
  }
  NPU_PANIC("unknown dtype %d", (int)t);
}

/* Raw code of element @index; words are read with memcpy, so @data needs no alignment. */
static uint32_t load(enum npu_dtype t, const void *data, size_t index)
{
  const unsigned char *p = data;
  uint16_t w16;
  uint32_t w32;
  switch (npu_dtype_bits(t)) {
  case 4: return index % 2 ? p[index / 2] >> 4 : p[index / 2] & 0xFu;
  case 8: return p[index];
  case 16: memcpy(&w16, p + 2 * index, sizeof w16); return w16;
  case 32: memcpy(&w32, p + 4 * index, sizeof w32); return w32;
  default: NPU_PANIC("dtype %s: unexpected width", npu_dtype_name(t));
  }
}

static void store(enum npu_dtype t, void *data, size_t index, uint32_t code)
{
  unsigned char *p = data;
  uint16_t w16 = (uint16_t)code;
  switch (npu_dtype_bits(t)) {
  case 4:
    if (index % 2)
      p[index / 2] = (unsigned char)((p[index / 2] & 0x0F) | (code & 0xF) << 4);
    else
      p[index / 2] = (unsigned char)((p[index / 2] & 0xF0) | (code & 0xF));
    return;
  case 8: p[index] = (unsigned char)code; return;
  case 16: memcpy(p + 2 * index, &w16, sizeof w16); return;
  case 32: memcpy(p + 4 * index, &code, sizeof code); return;
  default: NPU_PANIC("dtype %s: unexpected width", npu_dtype_name(t));
  }
}

double fmt_decode(enum npu_dtype t, const void *data, size_t index)
{
  NPU_ASSERT(data != NULL);
  return decode_code(t, load(t, data, index));
}

void fmt_encode(enum npu_dtype t, void *data, size_t index, double v)
{
  NPU_ASSERT(data != NULL);
  store(t, data, index, encode_code(t, v));
}

size_t fmt_bytes(enum npu_dtype t, size_t count)
{
  size_t bits = (size_t)npu_dtype_bits(t);
  return bits == 4 ? count / 2 + count % 2 : count * (bits / 8);
}

double fmt_round(enum npu_dtype t, double v)
{
  return decode_code(t, encode_code(t, v));
}

double fmt_max_finite(enum npu_dtype t)
{
  switch (t) {
  case NPU_DT_FP16: return fmt__binary_max(&fmt__fp16);
  case NPU_DT_BF16: return fmt__binary_max(&fmt__bf16);
  case NPU_DT_HF32: return fmt__binary_max(&fmt__hf32_e8m11);
  case NPU_DT_FP32: return fmt__binary_max(&fmt__fp32);
  case NPU_DT_INT8: return INT8_MAX;
  case NPU_DT_INT4: return 7;
  case NPU_DT_FP8_E4M3:
  case NPU_DT_MXFP8: return fmt__binary_max(&fmt__e4m3);
  case NPU_DT_FP8_E5M2: return fmt__binary_max(&fmt__e5m2);
  case NPU_DT_HIF8: return fmt_hif8_to_double(0x6E); /* 2^15 */
  case NPU_DT_FP4_E2M1:
  case NPU_DT_MXFP4: return fmt__binary_max(&fmt__e2m1);
  case NPU_DT_INT32: return INT32_MAX;
  case NPU_DT_INT16: return INT16_MAX;
  case NPU_DT_UINT8: return UINT8_MAX;
  case NPU_DT_COUNT: break;
  }
  NPU_PANIC("unknown dtype %d", (int)t);
}

double fmt_min_positive(enum npu_dtype t)
{
  switch (t) {
  case NPU_DT_FP16: return fmt__binary_min(&fmt__fp16);
  case NPU_DT_BF16: return fmt__binary_min(&fmt__bf16);
  case NPU_DT_HF32: return fmt__binary_min(&fmt__hf32_e8m11);
  case NPU_DT_FP32: return fmt__binary_min(&fmt__fp32);
  case NPU_DT_FP8_E4M3:
  case NPU_DT_MXFP8: return fmt__binary_min(&fmt__e4m3);
  case NPU_DT_FP8_E5M2: return fmt__binary_min(&fmt__e5m2);
  case NPU_DT_HIF8: return fmt_hif8_to_double(0x01); /* 2^-22 */
  case NPU_DT_FP4_E2M1:
  case NPU_DT_MXFP4: return fmt__binary_min(&fmt__e2m1);
  case NPU_DT_INT8:
  case NPU_DT_INT4:
  case NPU_DT_INT32:
  case NPU_DT_INT16:
  case NPU_DT_UINT8: return 1;
  case NPU_DT_COUNT: break;
  }
  NPU_PANIC("unknown dtype %d", (int)t);
}
