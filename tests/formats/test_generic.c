/*
 * test_generic.c - access by enum npu_dtype: storage sizes, 4-bit packing (element 0 in the
 * low nibble, the other nibble preserved), unaligned words, agreement of fmt_encode /
 * fmt_decode / fmt_round with the per-format functions for every dtype, and the limits.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats/formats.h"

TestSuite(generic, .timeout = 30);

/* Per-format value of @v rounded to @t, through the per-format functions only. */
static double per_format_round(enum npu_dtype t, double v)
{
  switch (t) {
  case NPU_DT_FP16: return fmt_fp16_to_double(fmt_fp16_from_double(v));
  case NPU_DT_BF16: return fmt_bf16_to_double(fmt_bf16_from_double(v));
  case NPU_DT_HF32: return fmt_hf32_to_double(fmt_hf32_from_double(v));
  case NPU_DT_FP32: return fmt_fp32_to_double(fmt_fp32_from_double(v));
  case NPU_DT_INT8: return fmt_int8_to_double(fmt_int8_from_double(v));
  case NPU_DT_INT4: return fmt_int4_to_double(fmt_int4_from_double(v));
  case NPU_DT_FP8_E4M3:
  case NPU_DT_MXFP8: return fmt_fp8_e4m3_to_double(fmt_fp8_e4m3_from_double(v));
  case NPU_DT_FP8_E5M2: return fmt_fp8_e5m2_to_double(fmt_fp8_e5m2_from_double(v));
  case NPU_DT_HIF8: return fmt_hif8_to_double(fmt_hif8_from_double(v));
  case NPU_DT_FP4_E2M1:
  case NPU_DT_MXFP4: return fmt_fp4_e2m1_to_double(fmt_fp4_e2m1_from_double(v));
  case NPU_DT_INT32: return fmt_int32_to_double(fmt_int32_from_double(v));
  case NPU_DT_INT16: return fmt_int16_to_double(fmt_int16_from_double(v));
  case NPU_DT_UINT8: return fmt_uint8_to_double(fmt_uint8_from_double(v));
  case NPU_DT_COUNT: break;
  }
  cr_assert_fail("unknown dtype");
  return 0;
}

static bool same(double a, double b)
{
  return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b));
}

Test(generic, bytes)
{
  size_t counts[] = {0, 1, 2, 7, 32, 1001};
  for (int t = 0; t < NPU_DT_COUNT; t++)
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
      size_t bits = (size_t)npu_dtype_bits((enum npu_dtype)t) * counts[i];
      cr_assert_eq(fmt_bytes((enum npu_dtype)t, counts[i]), (bits + 7) / 8, "%s x %zu",
                   npu_dtype_name((enum npu_dtype)t), counts[i]);
    }
  cr_assert_eq(fmt_bytes(NPU_DT_HF32, 3), 12);
  cr_assert_eq(fmt_bytes(NPU_DT_INT4, 3), 2);
}

Test(generic, four_bit_elements_pack_low_nibble_first)
{
  enum npu_dtype four[] = {NPU_DT_INT4, NPU_DT_FP4_E2M1, NPU_DT_MXFP4};
  for (size_t k = 0; k < 3; k++) {
    enum npu_dtype t = four[k];
    uint8_t buf[4];
    memset(buf, 0, sizeof buf);
    fmt_encode(t, buf, 0, 1.0);
    fmt_encode(t, buf, 1, -2.0);
    fmt_encode(t, buf, 2, 3.0);
    uint8_t one = t == NPU_DT_INT4 ? 0x1 : 0x2, m_two = t == NPU_DT_INT4 ? 0xE : 0xC,
            three = t == NPU_DT_INT4 ? 0x3 : 0x5;
    cr_assert_eq(buf[0], (uint8_t)(m_two << 4 | one), "%s: byte 0 = 0x%02x",
                 npu_dtype_name(t), buf[0]);
    cr_assert_eq(buf[1], three, "%s: byte 1 = 0x%02x", npu_dtype_name(t), buf[1]);
    cr_assert_eq(fmt_decode(t, buf, 0), 1.0);
    cr_assert_eq(fmt_decode(t, buf, 1), -2.0);
    cr_assert_eq(fmt_decode(t, buf, 2), 3.0);
    /* Rewriting one nibble leaves its neighbour alone, in both positions. */
    buf[2] = 0xFF;
    fmt_encode(t, buf, 4, 0.0);
    cr_assert_eq(buf[2], 0xF0, "%s", npu_dtype_name(t));
    buf[2] = 0xFF;
    fmt_encode(t, buf, 5, 0.0);
    cr_assert_eq(buf[2], 0x0F, "%s", npu_dtype_name(t));
    fmt_encode(t, buf, 0, 0.0);
    cr_assert_eq(buf[0], (uint8_t)(m_two << 4), "%s", npu_dtype_name(t));
    cr_assert_eq(buf[3], 0);
  }
}

Test(generic, words_are_host_order_and_need_no_alignment)
{
  unsigned char buf[16];
  memset(buf, 0, sizeof buf);
  fmt_encode(NPU_DT_FP16, buf + 1, 0, 1.0); /* odd address */
  uint16_t h;
  memcpy(&h, buf + 1, sizeof h);
  cr_assert_eq(h, 0x3C00);
  cr_assert_eq(fmt_decode(NPU_DT_FP16, buf + 1, 0), 1.0);
  fmt_encode(NPU_DT_FP32, buf + 3, 1, -2.5);
  float f;
  memcpy(&f, buf + 7, sizeof f);
  cr_assert_eq(f, -2.5f);
  fmt_encode(NPU_DT_INT32, buf + 1, 2, -7.5);
  int32_t i;
  memcpy(&i, buf + 9, sizeof i);
  cr_assert_eq(i, -8);
  cr_assert_eq(fmt_decode(NPU_DT_INT32, buf + 1, 2), -8.0);
  fmt_encode(NPU_DT_INT16, buf, 0, -300.0);
  cr_assert_eq(fmt_decode(NPU_DT_INT16, buf, 0), -300.0);
  fmt_encode(NPU_DT_INT8, buf, 0, -100.0);
  cr_assert_eq(fmt_decode(NPU_DT_INT8, buf, 0), -100.0);
  cr_assert_eq(buf[0], 0x9C);
  fmt_encode(NPU_DT_HF32, buf, 0, 1 + 0x1p-11);
  uint32_t w;
  memcpy(&w, buf, sizeof w);
  cr_assert_eq(w, 0x3F801000);
}

Test(generic, every_dtype_agrees_with_its_own_functions)
{
  static const double values[] = {0.0,    -0.0,   1.0,     -1.0,   0.3,        -0.7,  2.5,
                                  3.5,    5.0,    7.49,    100.25, -1234.567,  1e-3,  -3e-5,
                                  1e-8,   65504,  65520,   448,    464,        57344, 40960,
                                  1e6,    -3e9,   1e40,    -1e300, 1e-300,     INFINITY,
                                  -INFINITY, NAN};
  for (int t = 0; t < NPU_DT_COUNT; t++) {
    enum npu_dtype dt = (enum npu_dtype)t;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
      double v = values[i], want = per_format_round(dt, v);
      unsigned char buf[8] = {0};
      fmt_encode(dt, buf, 1, v);
      cr_assert(same(fmt_decode(dt, buf, 1), want), "%s: %a stored reads %a, expected %a",
                npu_dtype_name(dt), v, fmt_decode(dt, buf, 1), want);
      cr_assert(same(fmt_round(dt, v), want), "%s: round(%a) = %a, expected %a",
                npu_dtype_name(dt), v, fmt_round(dt, v), want);
    }
  }
}

Test(generic, limits)
{
  static const struct {
    enum npu_dtype t;
    double max, min;
  } cases[] = {
      {NPU_DT_FP16, 65504.0, 0x1p-24},      {NPU_DT_BF16, 0x1.FEp127, 0x1p-133},
      {NPU_DT_HF32, 0x1.FFEp127, 0x1p-126}, {NPU_DT_FP32, FLT_MAX, 0x1p-149},
      {NPU_DT_FP8_E4M3, 448.0, 0x1p-9},     {NPU_DT_MXFP8, 448.0, 0x1p-9},
      {NPU_DT_FP8_E5M2, 57344.0, 0x1p-16},  {NPU_DT_HIF8, 32768.0, 0x1p-22},
      {NPU_DT_FP4_E2M1, 6.0, 0.5},          {NPU_DT_MXFP4, 6.0, 0.5},
      {NPU_DT_INT8, 127, 1},                {NPU_DT_INT4, 7, 1},
      {NPU_DT_INT16, 32767, 1},             {NPU_DT_INT32, 2147483647.0, 1},
      {NPU_DT_UINT8, 255, 1},
  };
  cr_assert_eq(sizeof cases / sizeof cases[0], NPU_DT_COUNT);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    enum npu_dtype t = cases[i].t;
    cr_assert_eq(fmt_max_finite(t), cases[i].max, "%s", npu_dtype_name(t));
    cr_assert_eq(fmt_min_positive(t), cases[i].min, "%s", npu_dtype_name(t));
    cr_assert_eq(fmt_round(t, cases[i].max), cases[i].max, "%s", npu_dtype_name(t));
    cr_assert_eq(fmt_round(t, cases[i].min), cases[i].min, "%s", npu_dtype_name(t));
    cr_assert_eq(fmt_round(t, -cases[i].max), t == NPU_DT_UINT8 ? 0 : -cases[i].max, "%s",
                 npu_dtype_name(t));
  }
}
