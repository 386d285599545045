/*
 * kind.h - how a sweep point of one kind of scenario runs: the per-kind runner.
 *
 * A sweep only knows scenarios as (file, "KEY=VALUE" overrides) and results as a CSV row. Each
 * kind of scenario supplies a runner: the metric columns it reports, how to run one point (in a
 * child process, which may start its own SimGrid engine) and a *probe* that loads the scenario
 * without running it, so the sweep can check its keys and values before anything runs and
 * read values for expressions. The kinds: training and RL (kind.c), kernel and collective
 * scenarios (kind_micro.c).
 */
#ifndef NPUSIM_SWEEP_KIND_H
#define NPUSIM_SWEEP_KIND_H

#include <stdbool.h>

#include "common/diag.h"
#include "common/strutil.h"

struct sw_probe;

struct sw_kind {
  const char *name; /* "training": the value of a sweep file's `kind` key */
  const char *desc; /* one line */
  /* Whether a loaded probe describes a scenario of this kind. */
  bool (*detect)(struct sw_probe *p);
  /* The metric columns, comma-separated, no newline; a contract like summary.csv's. */
  void (*header)(struct npu_buf *out);
  /*
   * In a child process: run the scenario file with the overrides and append one CSV row (no
   * newline) with header's columns to row; display is the scenario name reports show. 0 or an
   * npu_err with diag filled.
   */
  int (*run)(const char *scenario, const char *display, const char *const *sets, int nsets, struct npu_buf *row,
             struct npu_diag *diag);
  /* Load the scenario file with the overrides, without finishing it. NULL with diag on error. */
  struct sw_probe *(*probe_open)(const char *scenario, const char *const *sets, int nsets, struct npu_diag *diag);
  /* Apply one more "KEY=VALUE"; 0 or NPU_ECONFIG with diag (file "command line"). */
  int (*probe_set)(struct sw_probe *p, const char *assignment, struct npu_diag *diag);
  /*
   * The value of key as an SI number (and the column suffix of its unit, "" for plain numbers,
   * e.g. "_bytes_per_s"); also computed names such as "devices". Finishes the probe on first
   * use. 0, or NPU_ECONFIG / NPU_EINVAL with diag (unknown key, not a number).
   */
  int (*probe_value)(struct sw_probe *p, const char *key, double *out, struct npu_diag *diag);
  /* Whether key is a key of the scenario (or a preset key) and its unit suffix. */
  bool (*probe_has_key)(struct sw_probe *p, const char *key, const char **unit_suffix);
  void (*probe_close)(struct sw_probe *p);
};

/* Append the first line of a CSV text (a summary's header or row) without its newline. */
void sw_first_line(struct npu_buf *out, const struct npu_buf *csv);

/* The kind called name, or NULL. */
const struct sw_kind *sw_kind_find(const char *name);
/* The kind of the scenario a probe holds (first that detects it), or NULL. */
const struct sw_kind *sw_kind_detect(const char *scenario, const char *const *sets, int nsets, struct npu_diag *diag);
/* Names of the kinds, comma-separated, for messages. */
const char *sw_kind_names(void);

#endif
