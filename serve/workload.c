/*
 * workload.c - token-length distributions (shared with the RL rollout) and request trace files.
 *
 * Lengths are drawn from GSL's mt19937 seeded by the caller (reported), never from the
 * environment: fixed, uniform, lognormal, or a measured histogram (a bin picked with probability
 * proportional to its weight, gsl_ran_discrete).
 */
#include "serve/workload.h"

#include <errno.h>
#include <gsl/gsl_randist.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

const char *const sv_dist_names[] = {"fixed", "uniform", "lognormal", "histogram", NULL};

static int parse_histogram(const struct npu_cfg *cfg, const char *k, struct sv_dist *s, struct npu_diag *diag)
{
  const char *p = s->histogram;
  double total = 0;
  s->hist_n = 0;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    char *end;
    long len = strtol(p, &end, 10);
    if (end == p || *end != ':') return npu_cfg_fail(cfg, diag, k, "expected \"LEN:WEIGHT, ...\", got '%s'", p);
    p = end + 1;
    double w = strtod(p, &end);
    if (end == p || (*end && *end != ',' && *end != ' '))
      return npu_cfg_fail(cfg, diag, k, "expected a weight after '%ld:', got '%s'", len, p);
    p = end;
    if (len < 1 || len > s->max)
      return npu_cfg_fail(cfg, diag, k, "length %ld is outside 1..max (%d)", len, s->max);
    if (!(w >= 0) || !isfinite(w))
      return npu_cfg_fail(cfg, diag, k, "weight %g of length %ld must be a non-negative number", w, len);
    if (s->hist_n == SV_HIST_MAX) return npu_cfg_fail(cfg, diag, k, "more than %d bins", SV_HIST_MAX);
    s->hist_len[s->hist_n] = (int)len;
    s->hist_w[s->hist_n++] = w;
    total += w;
  }
  if (!(total > 0)) return npu_cfg_fail(cfg, diag, k, "a histogram needs at least one bin of positive weight");
  return 0;
}

int sv_dist_finish(const struct npu_cfg *cfg, const char *prefix, struct sv_dist *d, struct npu_diag *diag)
{
  char k[96];
  snprintf(k, sizeof k, "%s.histogram", prefix);
  if (d->distribution != SV_DIST_HISTOGRAM) {
    if (d->histogram[0])
      return npu_cfg_fail(cfg, diag, k, "a histogram needs %s.distribution = \"histogram\"", prefix);
  } else {
    return parse_histogram(cfg, k, d, diag); /* its bins are the lengths */
  }
  const char *name = sv_dist_names[d->distribution];
  if (d->mean == 0) {
    snprintf(k, sizeof k, "%s.mean", prefix);
    return npu_cfg_fail(cfg, diag, k, "the %s distribution needs the length %s.mean", name, prefix);
  }
  if (d->max < d->mean) {
    snprintf(k, sizeof k, "%s.max", prefix);
    return npu_cfg_fail(cfg, diag, k, "the longest length (%d) is shorter than the mean (%d)", d->max, d->mean);
  }
  if (d->min > d->mean) {
    snprintf(k, sizeof k, "%s.min", prefix);
    return npu_cfg_fail(cfg, diag, k, "the shortest length (%d) is longer than the mean (%d)", d->min, d->mean);
  }
  return 0;
}

void sv_dist_draw(const struct sv_dist *s, gsl_rng *r, int n, int *out)
{
  gsl_ran_discrete_t *hist = NULL;
  if (s->distribution == SV_DIST_HISTOGRAM) {
    hist = gsl_ran_discrete_preproc((size_t)s->hist_n, s->hist_w);
    NPU_ASSERT(hist != NULL); /* sv_dist_finish checked the weights */
  }
  for (int i = 0; i < n; i++) {
    double v = s->mean;
    if (s->distribution == SV_DIST_UNIFORM) {
      int lo = s->min, hi = 2 * s->mean - s->min;
      v = lo + (double)gsl_rng_uniform_int(r, (unsigned long)(hi - lo + 1));
    } else if (s->distribution == SV_DIST_LOGNORMAL) {
      v = floor(gsl_ran_lognormal(r, log((double)s->mean), s->sigma) + 0.5);
    } else if (s->distribution == SV_DIST_HISTOGRAM) {
      v = s->hist_len[gsl_ran_discrete(r, hist)];
    }
    if (v < s->min) v = s->min;
    if (v > s->max) v = s->max;
    out[i] = (int)v;
  }
  if (hist) gsl_ran_discrete_free(hist);
}

void sv_dist_describe(const struct sv_dist *d, char *buf, size_t n)
{
  if (d->distribution == SV_DIST_HISTOGRAM)
    snprintf(buf, n, "a histogram of %d bins", d->hist_n);
  else if (d->distribution == SV_DIST_FIXED)
    snprintf(buf, n, "fixed %d", d->mean);
  else
    snprintf(buf, n, "%s %s %d", sv_dist_names[d->distribution],
             d->distribution == SV_DIST_LOGNORMAL ? "median" : "mean", d->mean);
}

/* ------------------------------------------------------------------ trace files */

/* A whole decimal integer field, or false. */
static bool int_field(const char *s, long lo, long hi, int *out)
{
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

int sv_trace_load(const char *path, struct sv_request **out, int *count, struct npu_diag *diag)
{
  *out = NULL;
  *count = 0;
  FILE *f = fopen(path, "r");
  if (!f) return npu_diag_set(diag, path, 0, "serve.trace", "cannot read the request trace: %s", strerror(errno)),
              NPU_EIO;
  char line[512];
  int ln = 0, n = 0, cap = 0, rc = 0;
  struct sv_request *v = NULL;
  double last = 0;
  while (fgets(line, sizeof line, f)) {
    ln++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
      rc = npu_diag_set(diag, path, ln, "serve.trace", "line longer than %zu characters", sizeof line - 2);
      break;
    }
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (ln == 1) {
      if (strcmp(line, "arrival_s,prompt_tokens,output_tokens") &&
          strcmp(line, "arrival_s,prompt_tokens,output_tokens,prefix_group")) {
        rc = npu_diag_set(diag, path, ln, "serve.trace", "expected the header "
                          "\"arrival_s,prompt_tokens,output_tokens[,prefix_group]\", got \"%s\"", line);
        break;
      }
      continue;
    }
    if (!len) continue;
    char *fld[5];
    int nf = 0;
    for (char *p = line; nf < 5;) {
      fld[nf++] = p;
      char *c = strchr(p, ',');
      if (!c) break;
      *c = 0;
      p = c + 1;
    }
    if (nf < 3 || nf > 4) {
      rc = npu_diag_set(diag, path, ln, "serve.trace", "expected 3 or 4 comma-separated fields, got %d", nf);
      break;
    }
    char *end;
    errno = 0;
    double a = strtod(fld[0], &end);
    struct sv_request r = {a, 0, 0, -1, 0, 0, false};
    if (end == fld[0] || *end || errno || !isfinite(a) || a < 0) {
      rc = npu_diag_set(diag, path, ln, "serve.trace", "arrival_s: expected a time in seconds >= 0, got \"%s\"",
                        fld[0]);
      break;
    }
    if (a < last) {
      rc = npu_diag_set(diag, path, ln, "serve.trace", "arrivals must not decrease: %g after %g", a, last);
      break;
    }
    if (!int_field(fld[1], 1, 1 << 24, &r.prompt) || !int_field(fld[2], 1, 1 << 24, &r.output)) {
      rc = npu_diag_set(diag, path, ln, "serve.trace", "prompt_tokens and output_tokens: expected whole numbers "
                        "from 1 to 16777216, got \"%s\" and \"%s\"", fld[1], fld[2]);
      break;
    }
    if (nf == 4 && !int_field(fld[3], -1, 1 << 20, &r.prefix)) {
      rc = npu_diag_set(diag, path, ln, "serve.trace", "prefix_group: expected -1 or a group number, got \"%s\"",
                        fld[3]);
      break;
    }
    last = a;
    if (n == cap) {
      cap = cap ? 2 * cap : 1024;
      v = npu_xrealloc(v, (size_t)cap * sizeof *v);
    }
    v[n++] = r;
  }
  bool io = !rc && ferror(f);
  if (io) rc = npu_diag_set(diag, path, ln, "serve.trace", "read error");
  fclose(f);
  if (!rc && ln == 0) rc = npu_diag_set(diag, path, 0, "serve.trace", "empty file: expected a CSV header");
  if (!rc && n == 0) rc = npu_diag_set(diag, path, ln, "serve.trace", "no requests after the header");
  if (rc) {
    free(v);
    return io ? NPU_EIO : NPU_ECONFIG;
  }
  *out = v;
  *count = n;
  return 0;
}
