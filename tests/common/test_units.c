/* test_units.c - parsing and printing quantities with units. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/units.h"

static double parse_ok(const char *text, enum npu_unit_kind kind)
{
  double v = -1;
  char why[256] = "";
  int rc = npu_unit_parse(text, kind, &v, why, sizeof why);
  cr_assert_eq(rc, 0, "'%s' should parse: %s", text, why);
  return v;
}

static const char *parse_err(const char *text, enum npu_unit_kind kind)
{
  static char why[256];
  double v;
  cr_assert_neq(npu_unit_parse(text, kind, &v, why, sizeof why), 0, "'%s' should not parse", text);
  return why;
}

Test(units, parses_the_documented_forms, .timeout = 10)
{
  cr_assert_eq(parse_ok("1.85GHz", NPU_UNIT_FREQUENCY), 1.85e9);
  cr_assert_eq(parse_ok("1800MHz", NPU_UNIT_FREQUENCY), 1.8e9);
  cr_assert_eq(parse_ok("1.6TBps", NPU_UNIT_BANDWIDTH), 1.6e12);
  cr_assert_eq(parse_ok("56GBps", NPU_UNIT_BANDWIDTH), 56e9);
  cr_assert_eq(parse_ok("56 GB/s", NPU_UNIT_BANDWIDTH), 56e9);
  cr_assert_eq(parse_ok("200Gbps", NPU_UNIT_BANDWIDTH), 25e9);
  cr_assert_eq(parse_ok("1GiBps", NPU_UNIT_BANDWIDTH), 1073741824.0);
  cr_assert_eq(parse_ok("2us", NPU_UNIT_TIME), 2e-6);
  cr_assert_eq(parse_ok("0.5ns", NPU_UNIT_TIME), 0.5e-9);
  cr_assert_eq(parse_ok("1.5ms", NPU_UNIT_TIME), 1.5e-3);
  cr_assert_eq(parse_ok("3s", NPU_UNIT_TIME), 3.0);
  cr_assert_eq(parse_ok("192KiB", NPU_UNIT_SIZE), 196608.0);
  cr_assert_eq(parse_ok("64GiB", NPU_UNIT_SIZE), 68719476736.0);
  cr_assert_eq(parse_ok("2MB", NPU_UNIT_SIZE), 2e6);
  cr_assert_eq(parse_ok("512B", NPU_UNIT_SIZE), 512.0);
  cr_assert_eq(parse_ok("1.5e3GBps", NPU_UNIT_BANDWIDTH), 1.5e12);
  cr_assert_eq(parse_ok("312TFLOPS", NPU_UNIT_FLOP_RATE), 312e12);
  cr_assert_eq(parse_ok("-1.8GHz", NPU_UNIT_FREQUENCY), -1.8e9);
  cr_assert_eq(parse_ok("  4 KiB ", NPU_UNIT_SIZE), 4096.0);
}

Test(units, names_what_is_wrong, .timeout = 10)
{
  cr_assert_str_eq(parse_err("1.6", NPU_UNIT_BANDWIDTH),
                   "missing unit: expected a bandwidth like '1.6TBps', got '1.6'");
  cr_assert_str_eq(parse_err("56GHz", NPU_UNIT_BANDWIDTH),
                   "expected a bandwidth like '1.6TBps', got '56GHz' (a frequency)");
  cr_assert_str_eq(parse_err("2us", NPU_UNIT_SIZE),
                   "expected a size like '192KiB', got '2us' (a time)");
  cr_assert_str_eq(parse_err("12 parsecs", NPU_UNIT_TIME),
                   "unknown unit 'parsecs': expected a time like '2us'");
  cr_assert_str_eq(parse_err("fast", NPU_UNIT_FREQUENCY),
                   "expected a frequency like '1.85GHz', got 'fast'");
  parse_err("1.6TBps extra", NPU_UNIT_BANDWIDTH);
  parse_err("inf", NPU_UNIT_TIME);
  parse_err("nanGHz", NPU_UNIT_FREQUENCY);
  parse_err("0x10B", NPU_UNIT_SIZE);
  parse_err("--1B", NPU_UNIT_SIZE);
  parse_err("", NPU_UNIT_SIZE);
  parse_err("1e999GHz", NPU_UNIT_FREQUENCY);
  parse_err("1.2.3GHz", NPU_UNIT_FREQUENCY);
  parse_err("1Gbps", NPU_UNIT_SIZE); /* bits are no size */
}

/* Exponents beyond any double, written out or folded with the unit's, are out of range: never
 * wrapped around (a signed overflow once turned 1e99999999999999999999GBps into 0 B/s) nor
 * flushed to zero. */
Test(units, huge_exponents_are_out_of_range, .timeout = 10)
{
  cr_assert_str_eq(parse_err("1e99999999999999999999GBps", NPU_UNIT_BANDWIDTH),
                   "value out of range: '1e99999999999999999999GBps'");
  cr_assert_str_eq(parse_err("1e-99999999999999999999GBps", NPU_UNIT_BANDWIDTH),
                   "value out of range: '1e-99999999999999999999GBps'");
  parse_err("1e400GBps", NPU_UNIT_BANDWIDTH);
  parse_err("1e300TBps", NPU_UNIT_BANDWIDTH); /* finite as written, not once scaled */
  parse_err("1e-330s", NPU_UNIT_TIME);
  parse_err("9223372036854775807e9223372036854775807B", NPU_UNIT_SIZE);
  cr_assert_eq(parse_ok("0e99999999999999999999GBps", NPU_UNIT_BANDWIDTH), 0.0);
  cr_assert_eq(parse_ok("1e300B", NPU_UNIT_SIZE), 1e300);
}

static const char *fmt(double v, enum npu_unit_kind kind)
{
  static char buf[96];
  npu_unit_format(v, kind, buf, sizeof buf);
  return buf;
}

Test(units, prints_readable_canonical_text, .timeout = 10)
{
  cr_assert_str_eq(fmt(1.6e12, NPU_UNIT_BANDWIDTH), "1.6TBps");
  cr_assert_str_eq(fmt(25e9, NPU_UNIT_BANDWIDTH), "25GBps");
  cr_assert_str_eq(fmt(1.85e9, NPU_UNIT_FREQUENCY), "1.85GHz");
  cr_assert_str_eq(fmt(2e-6, NPU_UNIT_TIME), "2us");
  cr_assert_str_eq(fmt(0.5e-6, NPU_UNIT_TIME), "500ns");
  cr_assert_str_eq(fmt(0, NPU_UNIT_TIME), "0s");
  cr_assert_str_eq(fmt(196608, NPU_UNIT_SIZE), "192KiB");
  cr_assert_str_eq(fmt(64.0 * 1024 * 1024 * 1024, NPU_UNIT_SIZE), "64GiB");
  cr_assert_str_eq(fmt(7168, NPU_UNIT_SIZE), "7KiB");
  cr_assert_str_eq(fmt(141e9, NPU_UNIT_SIZE), "141GB");
  cr_assert_str_eq(fmt(32, NPU_UNIT_SIZE), "32B");
  cr_assert_str_eq(fmt(312e12, NPU_UNIT_FLOP_RATE), "312TFLOPS");
}

/* xorshift64*: a fixed, portable sequence for property tests. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

Test(units, every_printed_value_parses_back_exactly, .timeout = 30)
{
  for (int kind = 0; kind < NPU_UNIT_KIND_COUNT; kind++) {
    for (int i = 0; i < 20000; i++) {
      uint64_t r = next_u64();
      double v;
      if (kind == NPU_UNIT_SIZE) {
        v = (double)(r >> (r % 50 + 14)); /* whole bytes, 0 .. 2^50 */
      } else {
        double mant = (double)(r >> 11) / 9007199254740992.0; /* [0,1) */
        int ex = (int)(next_u64() % 40) - 20;
        v = (1 + mant) * __builtin_pow(10, ex);
      }
      char buf[96], why[256];
      npu_unit_format(v, (enum npu_unit_kind)kind, buf, sizeof buf);
      double back = -1;
      cr_assert_eq(npu_unit_parse(buf, (enum npu_unit_kind)kind, &back, why, sizeof why), 0,
                   "'%s' does not parse: %s", buf, why);
      cr_assert_eq(back, v, "%.17g printed as '%s' reads back as %.17g", v, buf, back);
    }
  }
}

Test(units, shortest_doubles_round_trip, .timeout = 30)
{
  char buf[64];
  npu_fmt_double(0.1, buf, sizeof buf);
  cr_assert_str_eq(buf, "0.1");
  npu_fmt_double(353894400000000.0, buf, sizeof buf);
  cr_assert_str_eq(buf, "353894400000000");
  npu_fmt_double(-0.0, buf, sizeof buf);
  cr_assert_str_eq(buf, "0");
  for (int i = 0; i < 100000; i++) {
    uint64_t bits = next_u64();
    double v;
    memcpy(&v, &bits, sizeof v);
    if (v != v || v - v != 0) continue;
    npu_fmt_double(v, buf, sizeof buf);
    cr_assert_eq(strtod(buf, NULL), v, "%s", buf);
  }
}
