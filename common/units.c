/* units.c - parse and print quantities with units; see units.h for the conventions. */
#include "common/units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

struct unit {
  const char *sym; /* unit text, case-sensitive */
  int exp10;       /* decimal exponent of the prefix */
  int exp2;        /* binary exponent: IEC prefixes, and -3 for bits -> bytes */
};

static const struct unit freq_units[] = {
    {"Hz", 0, 0}, {"kHz", 3, 0}, {"KHz", 3, 0}, {"MHz", 6, 0}, {"GHz", 9, 0}, {"THz", 12, 0},
    {NULL, 0, 0}};

static const struct unit bw_units[] = {
    {"Bps", 0, 0},      {"kBps", 3, 0},     {"KBps", 3, 0},     {"MBps", 6, 0},
    {"GBps", 9, 0},     {"TBps", 12, 0},    {"PBps", 15, 0},    {"KiBps", 0, 10},
    {"MiBps", 0, 20},   {"GiBps", 0, 30},   {"TiBps", 0, 40},   {"B/s", 0, 0},
    {"kB/s", 3, 0},     {"KB/s", 3, 0},     {"MB/s", 6, 0},     {"GB/s", 9, 0},
    {"TB/s", 12, 0},    {"KiB/s", 0, 10},   {"MiB/s", 0, 20},   {"GiB/s", 0, 30},
    {"TiB/s", 0, 40},   {"bps", 0, -3},     {"kbps", 3, -3},    {"Kbps", 3, -3},
    {"Mbps", 6, -3},    {"Gbps", 9, -3},    {"Tbps", 12, -3},   {"Kibps", 0, 7},
    {"Mibps", 0, 17},   {"Gibps", 0, 27},   {"Tibps", 0, 37},   {"b/s", 0, -3},
    {"kb/s", 3, -3},    {"Kb/s", 3, -3},    {"Mb/s", 6, -3},    {"Gb/s", 9, -3},
    {"Tb/s", 12, -3},   {NULL, 0, 0}};

static const struct unit time_units[] = {
    {"s", 0, 0}, {"ms", -3, 0}, {"us", -6, 0}, {"ns", -9, 0}, {"ps", -12, 0}, {NULL, 0, 0}};

static const struct unit size_units[] = {
    {"B", 0, 0},     {"kB", 3, 0},    {"KB", 3, 0},    {"MB", 6, 0},    {"GB", 9, 0},
    {"TB", 12, 0},   {"PB", 15, 0},   {"KiB", 0, 10},  {"MiB", 0, 20},  {"GiB", 0, 30},
    {"TiB", 0, 40},  {"PiB", 0, 50},  {NULL, 0, 0}};

static const struct unit flops_units[] = {
    {"FLOPS", 0, 0},   {"kFLOPS", 3, 0},  {"KFLOPS", 3, 0}, {"MFLOPS", 6, 0},
    {"GFLOPS", 9, 0},  {"TFLOPS", 12, 0}, {"PFLOPS", 15, 0}, {"EFLOPS", 18, 0},
    {"FLOP/s", 0, 0},  {"GFLOP/s", 9, 0}, {"TFLOP/s", 12, 0}, {"PFLOP/s", 15, 0},
    {NULL, 0, 0}};

static const struct {
  const char *name;
  const char *example;
  const struct unit *units;
} kinds[NPU_UNIT_KIND_COUNT] = {
    [NPU_UNIT_FREQUENCY] = {"frequency", "1.85GHz", freq_units},
    [NPU_UNIT_BANDWIDTH] = {"bandwidth", "1.6TBps", bw_units},
    [NPU_UNIT_TIME] = {"time", "2us", time_units},
    [NPU_UNIT_SIZE] = {"size", "192KiB", size_units},
    [NPU_UNIT_FLOP_RATE] = {"FLOP rate", "312TFLOPS", flops_units},
};

const char *npu_unit_kind_name(enum npu_unit_kind kind)
{
  NPU_ASSERT(kind >= 0 && kind < NPU_UNIT_KIND_COUNT);
  return kinds[kind].name;
}

const char *npu_unit_example(enum npu_unit_kind kind)
{
  NPU_ASSERT(kind >= 0 && kind < NPU_UNIT_KIND_COUNT);
  return kinds[kind].example;
}

static const struct unit *find_unit(const struct unit *table, const char *sym)
{
  for (; table->sym; table++)
    if (strcmp(table->sym, sym) == 0) return table;
  return NULL;
}

/*
 * Split "  1.5e3 GBps " into a decimal number text and a unit symbol. The number must be
 * [+-]digits[.digits][e[+-]digits] (no hex, inf or nan). Returns false if malformed.
 */
static bool split_number(const char *text, char *num, size_t numlen, char *sym, size_t symlen)
{
  const char *p = text;
  while (isspace((unsigned char)*p)) p++;
  const char *start = p;
  if (*p == '+' || *p == '-') p++;
  const char *digits = p;
  while (isdigit((unsigned char)*p)) p++;
  int nd = (int)(p - digits);
  if (*p == '.') {
    p++;
    const char *frac = p;
    while (isdigit((unsigned char)*p)) p++;
    nd += (int)(p - frac);
  }
  if (nd == 0) return false;
  if ((*p == 'e' || *p == 'E') &&
      (isdigit((unsigned char)p[1]) ||
       ((p[1] == '+' || p[1] == '-') && isdigit((unsigned char)p[2])))) {
    p += 2;
    while (isdigit((unsigned char)*p)) p++;
  }
  size_t len = (size_t)(p - start);
  if (len + 1 > numlen) return false;
  memcpy(num, start, len);
  num[len] = '\0';
  if (*p == ' ') p++;
  const char *s = p;
  while (*p && !isspace((unsigned char)*p)) p++;
  size_t slen = (size_t)(p - s);
  while (isspace((unsigned char)*p)) p++;
  if (*p) return false; /* junk after the unit */
  if (slen + 1 > symlen) return false;
  memcpy(sym, s, slen);
  sym[slen] = '\0';
  return true;
}

/*
 * num (a decimal number as written) times the unit's factor; *range is set when the value
 * overflows or underflows a double. The exponents are folded in integer arithmetic with its
 * range checked ("1e99999999999999999999" must not wrap around to a tiny value).
 */
static double apply_unit(const char *num, const struct unit *u, bool *range)
{
  char buf[160];
  long long ex = u->exp10;
  int mant_len = (int)strlen(num);
  char *e = strpbrk(num, "eE");
  if (e) {
    errno = 0;
    long long given = strtoll(e + 1, NULL, 10);
    if (errno == ERANGE || given > 100000 || given < -100000) given = given > 0 ? 100000 : -100000;
    ex += given;
    mant_len = (int)(e - num);
  }
  snprintf(buf, sizeof buf, "%.*se%lld", mant_len, num, ex);
  errno = 0;
  double v = strtod(buf, NULL);
  *range = errno == ERANGE;
  v = ldexp(v, u->exp2);
  if (!isfinite(v)) *range = true;
  return v;
}

int npu_unit_parse(const char *text, enum npu_unit_kind kind, double *out, char *why,
                   size_t whylen)
{
  NPU_ASSERT(kind >= 0 && kind < NPU_UNIT_KIND_COUNT);
  char num[128], sym[64];
  const char *name = kinds[kind].name;
  const char *ex = kinds[kind].example;
  if (!split_number(text, num, sizeof num, sym, sizeof sym)) {
    snprintf(why, whylen, "expected a %s like '%s', got '%s'", name, ex, text);
    return NPU_EINVAL;
  }
  if (!sym[0]) {
    snprintf(why, whylen, "missing unit: expected a %s like '%s', got '%s'", name, ex, text);
    return NPU_EINVAL;
  }
  const struct unit *u = find_unit(kinds[kind].units, sym);
  if (!u) {
    for (int k = 0; k < NPU_UNIT_KIND_COUNT; k++) {
      if (k != (int)kind && find_unit(kinds[k].units, sym)) {
        snprintf(why, whylen, "expected a %s like '%s', got '%s' (a %s)", name, ex, text,
                 kinds[k].name);
        return NPU_EINVAL;
      }
    }
    snprintf(why, whylen, "unknown unit '%s': expected a %s like '%s'", sym, name, ex);
    return NPU_EINVAL;
  }
  bool range = false;
  double v = apply_unit(num, u, &range);
  if (range || !isfinite(v)) {
    snprintf(why, whylen, "value out of range: '%s'", text);
    return NPU_EINVAL;
  }
  *out = v;
  return 0;
}

int npu_fmt_double(double v, char *buf, size_t n)
{
  if (isnan(v)) return snprintf(buf, n, "nan");
  if (isinf(v)) return snprintf(buf, n, v < 0 ? "-inf" : "inf");
  if (v == 0) return snprintf(buf, n, "0"); /* also -0: result files never need the sign */
  char tmp[400];
  double a = fabs(v);
  if (a >= 1e-9 && a < 1e17) {
    /* Plain decimal with the fewest fractional digits that read back exactly. */
    for (int d = 0; d <= 40; d++) {
      snprintf(tmp, sizeof tmp, "%.*f", d, v);
      if (strtod(tmp, NULL) == v) return snprintf(buf, n, "%s", tmp);
    }
  }
  for (int p = 0; p <= 16; p++) {
    snprintf(tmp, sizeof tmp, "%.*e", p, v);
    if (strtod(tmp, NULL) == v) break;
  }
  return snprintf(buf, n, "%s", tmp);
}

/* Try "<mantissa><sym>" with the shortest mantissa that reads back to v. */
static bool try_unit(double v, enum npu_unit_kind kind, const struct unit *u, char *out,
                     size_t n)
{
  double m = ldexp(v, -u->exp2) / pow(10.0, u->exp10);
  char mant[64], text[96];
  for (int p = 1; p <= 17; p++) {
    snprintf(mant, sizeof mant, "%.*g", p, m);
    if (strchr(mant, 'e')) continue; /* keep printed values plain */
    snprintf(text, sizeof text, "%s%s", mant, u->sym);
    double back;
    char why[8];
    if (npu_unit_parse(text, kind, &back, why, sizeof why) == 0 && back == v) {
      snprintf(out, n, "%s", text);
      return true;
    }
  }
  return false;
}

int npu_unit_format(double v, enum npu_unit_kind kind, char *buf, size_t n)
{
  NPU_ASSERT(kind >= 0 && kind < NPU_UNIT_KIND_COUNT);
  if (!isfinite(v)) return npu_fmt_double(v, buf, n);
  static const char *si_syms[NPU_UNIT_KIND_COUNT][6] = {
      [NPU_UNIT_FREQUENCY] = {"Hz", "kHz", "MHz", "GHz", "THz", NULL},
      [NPU_UNIT_BANDWIDTH] = {"Bps", "kBps", "MBps", "GBps", "TBps", "PBps"},
      [NPU_UNIT_SIZE] = {"B", "kB", "MB", "GB", "TB", "PB"},
      [NPU_UNIT_FLOP_RATE] = {"FLOPS", "kFLOPS", "MFLOPS", "GFLOPS", "TFLOPS", "PFLOPS"},
  };
  const struct unit *table = kinds[kind].units;
  char out[96];
  double a = fabs(v);
  if (kind == NPU_UNIT_SIZE && a >= 1024 && a == floor(a)) {
    static const char *iec[] = {"PiB", "TiB", "GiB", "MiB", "KiB"};
    for (size_t i = 0; i < 5; i++) {
      const struct unit *u = find_unit(table, iec[i]);
      double scaled = ldexp(a, -u->exp2);
      if (scaled >= 1 && scaled == floor(scaled) && try_unit(v, kind, u, out, sizeof out))
        return snprintf(buf, n, "%s", out);
    }
  }
  if (kind == NPU_UNIT_TIME) {
    static const char *tsyms[] = {"s", "ms", "us", "ns", "ps"};
    for (size_t i = 0; i < 5; i++) {
      const struct unit *u = find_unit(table, tsyms[i]);
      if ((a >= pow(10.0, u->exp10) || i == 4 || a == 0) && try_unit(v, kind, u, out, sizeof out))
        return snprintf(buf, n, "%s", out);
    }
  } else {
    int top = 5;
    while (!si_syms[kind][top]) top--;
    for (int i = top; i >= 0; i--) {
      const struct unit *u = find_unit(table, si_syms[kind][i]);
      if ((a >= pow(10.0, u->exp10) || i == 0) && try_unit(v, kind, u, out, sizeof out))
        return snprintf(buf, n, "%s", out);
    }
  }
  /* Fallback that always round-trips: plain digits in the base unit. */
  char num[64];
  npu_fmt_double(v, num, sizeof num);
  return snprintf(buf, n, "%s%s", num, table[0].sym);
}

int npu_fmt_human(double v, const char *unit, char *buf, size_t n)
{
  static const char *const prefix[] = {"", "k", "M", "G", "T", "P", "E"};
  int p = 0;
  while (fabs(v) >= 1000 && p < 6) {
    v /= 1000;
    p++;
  }
  return snprintf(buf, n, "%.4g %s%s", v, prefix[p], unit);
}

int npu_fmt_human_time(double s, char *buf, size_t n)
{
  double a = fabs(s);
  if (a >= 1 || a == 0) return snprintf(buf, n, "%.4g s", s);
  if (a >= 1e-3) return snprintf(buf, n, "%.4g ms", s * 1e3);
  if (a >= 1e-6) return snprintf(buf, n, "%.4g us", s * 1e6);
  return snprintf(buf, n, "%.4g ns", s * 1e9);
}
