/*
 * units.h - physical quantities written with units, in one place.
 *
 * Configuration values carry their unit as text ("1.85GHz", "1.6TBps", "200Gbps", "2us",
 * "192KiB"), as in SimGrid platform files and gem5 parameters. Internally every quantity is SI:
 * seconds, bytes, bytes per second, hertz, FLOP per second. SI prefixes are decimal (k, M, G,
 * T, P), IEC prefixes binary (Ki, Mi, Gi, Ti, Pi). "B" is a byte and "b" a bit, so "200Gbps"
 * is 25e9 bytes/s. Parsing is exact to the last bit: the mantissa and the decimal exponent are
 * read by one strtod call, binary prefixes and bits multiply by powers of two.
 * npu_unit_format prints the shortest text that parses back to the same double.
 */
#ifndef NPUSIM_COMMON_UNITS_H
#define NPUSIM_COMMON_UNITS_H

#include <stdbool.h>
#include <stddef.h>

enum npu_unit_kind {
  NPU_UNIT_FREQUENCY, /* Hz: "1.85GHz" */
  NPU_UNIT_BANDWIDTH, /* bytes/s: "1.6TBps", "56GB/s", "200Gbps" */
  NPU_UNIT_TIME,      /* s: "2us", "1.5ms", "0.5ns" */
  NPU_UNIT_SIZE,      /* bytes: "192KiB", "64GiB", "2MB" */
  NPU_UNIT_FLOP_RATE, /* FLOP/s: "312TFLOPS" */
  NPU_UNIT_KIND_COUNT
};

/* "frequency", "bandwidth", ... */
const char *npu_unit_kind_name(enum npu_unit_kind kind);

/* An example value of the kind, for messages: "1.85GHz", "1.6TBps", "2us", "192KiB", ... */
const char *npu_unit_example(enum npu_unit_kind kind);

/*
 * Parse text as a quantity of the given kind into *out (SI units). Leading/trailing blanks and
 * one blank between number and unit are accepted. Returns 0 on success; on failure returns
 * NPU_EINVAL and writes a reason (no key, no location) into why, e.g.
 * "expected a bandwidth like '1.6TBps', got '56GHz' (a frequency)".
 * Negative values parse; range checks belong to the caller.
 */
int npu_unit_parse(const char *text, enum npu_unit_kind kind, double *out, char *why,
                   size_t whylen);

/*
 * Write the shortest text with a unit of the kind that npu_unit_parse reads back to exactly v.
 * Sizes that are whole multiples of 1024^k use IEC prefixes ("192KiB"), everything else SI.
 * Non-finite values are written as "nan"/"inf" (not parseable: they never come from input).
 * Returns the length written (as snprintf).
 */
int npu_unit_format(double v, enum npu_unit_kind kind, char *buf, size_t n);

/*
 * Write the shortest "%g"-style text of v that strtod reads back to exactly v ("0.1", "1e+20",
 * "353894400000000"). Used for every number in result files, so they are deterministic.
 */
int npu_fmt_double(double v, char *buf, size_t n);

/*
 * Readable text for people, not for reading back: 4 significant digits with an SI prefix
 * ("353.9 TFLOP/s", "1.1 TFLOP", "4.049 TB/s"). The one formatter of the text reports.
 */
int npu_fmt_human(double v, const char *unit, char *buf, size_t n);

/* A duration the same way, in s, ms, us or ns ("9.439 ms", "77.16 us"), never "kus". */
int npu_fmt_human_time(double seconds, char *buf, size_t n);

#endif
