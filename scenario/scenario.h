/*
 * scenario.h - the scenario layer: one table of the kinds of scenario npusim runs, between the
 * models (workloads/, rl/, micro/) and what drives them (cli/, sweep/).
 *
 * A kind is a struct of function pointers (SQLite's VFS, Lua's library registration): its
 * name and one line, the configuration sections it registers, detection from the *parsed*
 * configuration (which sections are present), load, run, its result columns (report/columns.h),
 * JSON and text summaries, release, and a probe (loaded, not run) that sweeps read keys from.
 * The kinds today: training (workloads/), rl (rl/), kernel and collective (micro/). A new kind
 * is one file (scenario/kind_NAME.c) and one line of the table in scenario/kinds.c.
 *
 * Usage sketch (what `npusim run` does):
 *
 *     struct scn_scenario *s;
 *     int rc = scn_load(&s, NULL, path, sets, nsets, diag);   // detect the kind, load, check
 *     if (!rc) rc = scn_run(s, want_trace, diag);             // may start this process's engine
 *     if (!rc) { scn_text(s, out); scn_csv(s, &csv); scn_json(s, &js); }
 *     scn_destroy(s);
 *
 * One SimGrid engine per process: scn_run may start it, so anything that runs several
 * scenarios runs each in a child (scn_run_isolated, or the sweep's pool).
 */
#ifndef NPUSIM_SCENARIO_SCENARIO_H
#define NPUSIM_SCENARIO_SCENARIO_H

#include <stdbool.h>

#include "arch/arch.h"
#include "common/cfg.h"
#include "common/diag.h"
#include "common/strutil.h"
#include "common/progress.h"
#include "common/trace.h"
#include "report/columns.h"

struct scn_kind;

/* A loaded scenario; each kind embeds this as the first member of its own struct. */
struct scn_scenario {
  const struct scn_kind *kind;
  bool ran;                 /* scn_run succeeded: the result is there */
  bool traced;              /* run with a trace: trace holds it */
  struct npu_trace trace;   /* the run's timeline (with want_trace) */
  const struct npu_progress *progress; /* set before scn_run to be told how far it got (may be NULL) */
};

/* A scenario loaded with its kind's sections, not finished, not run; kinds embed it first. */
struct scn_probe {
  const struct scn_kind *kind;
  struct npu_cfg *cfg;             /* the kind's loader (owned by the kind's probe) */
  const struct arch_system *sys;   /* the system, filled by finishing */
  int finished;                    /* 0 not yet, 1 ok, -1 failed (fdiag kept) */
  struct npu_diag fdiag;
};

/* A group of configuration sections registered together (the system; model, plan, routing and
 * run of a training job; rl; kernel; collective). Several kinds may share one. */
struct scn_section {
  const char *name;                      /* "training" */
  void *(*add)(struct npu_cfg *cfg);     /* register with cfg; returns what holds the values */
  void (*release)(void *values);         /* after cfg is destroyed */
};

struct scn_kind {
  const char *name;                            /* "training": also a sweep file's `kind` */
  const char *desc;                            /* one line */
  const struct scn_section *const *sections;   /* what it registers, NULL-terminated */
  /* Whether a configuration loaded with every kind's sections is of this kind. */
  bool (*detect)(const struct npu_cfg *cfg);
  /* Load and check path with overrides "KEY=VALUE" (nothing run). 0 or an npu_err with diag;
   * *out is set (to free with release) only on success. */
  int (*load)(struct scn_scenario **out, const char *path, const char *const *sets, int nsets,
              struct npu_diag *diag);
  /* Run it (may start the engine); with want_trace fill s->trace or refuse with a located error. */
  int (*run)(struct scn_scenario *s, bool want_trace, struct npu_diag *diag);
  /* The result columns (summary.csv, sweep rows, `npusim columns`), and what they read. */
  const struct rpt_column *(*columns)(void);
  const void *(*row)(const struct scn_scenario *s);
  void (*json)(const struct scn_scenario *s, struct npu_buf *out); /* summary.json */
  void (*text)(const struct scn_scenario *s, struct npu_buf *out); /* what `npusim run` prints */
  /* Further files of `npusim run -o DIR` (NULL: none): the name of file i (i = 0, 1, ...; NULL
   * past the last) and its contents. */
  const char *(*extra_file)(const struct scn_scenario *s, int i, struct npu_buf *out);
  /* One self-contained HTML page of the result (`npusim run --html`); NULL: the kind has none. */
  void (*html)(const struct scn_scenario *s, struct npu_buf *out);
  void (*set_display)(struct scn_scenario *s, const char *name);   /* the name the scenario column shows */
  void (*release)(struct scn_scenario *s);                         /* frees s */
  /* Probes (sweeps): open (load with the kind's sections, overrides applied), finish (the
   * checks sweep values need; sets p->sys), kind-specific numbers ("devices", ...; 1 when key
   * is not one of them), close. */
  struct scn_probe *(*probe_open)(const char *path, const char *const *sets, int nsets, struct npu_diag *diag);
  int (*probe_finish)(struct scn_probe *p, struct npu_diag *diag);
  int (*probe_number)(struct scn_probe *p, const char *key, double *out, struct npu_diag *diag);
  void (*probe_close)(struct scn_probe *p);
};

/* ------------------------------------------------------------------ the table */

/* The kinds in detection order (more specific first); n gets their number. Static. */
const struct scn_kind *const *scn_kinds(int *n);
/* The kind called name, or NULL. */
const struct scn_kind *scn_kind_find(const char *name);
/* Names of the kinds, comma-separated, for messages ("rl, serve, training, kernel, collective"). */
const char *scn_kind_names(void);

/*
 * Register every kind's sections with cfg (each group once, the system first), for detection
 * and `npusim keys`. Returns what holds their values: scn_sections_release it after cfg.
 */
struct scn_sections *scn_sections_add_all(struct npu_cfg *cfg);
void scn_sections_release(struct scn_sections *s);

/*
 * The kind of the scenario at path with the overrides, from the sections it gives (its top level,
 * its top-level presets', the overrides' sections): *out is the first kind that detects it, or
 * NULL when none does (a system only). Where that reading fails or finds no kind, the file is
 * loaded in full with every kind's sections. 0, or that load's error (unknown key, bad value,
 * ...) with diag; a file of a clear kind with a wrong key or value below its top level is its
 * kind's load's error (scn_load).
 */
int scn_detect(const struct scn_kind **out, const char *path, const char *const *sets, int nsets,
               struct npu_diag *diag);

/* ------------------------------------------------------------------ scenarios */

/*
 * Load path as kind (NULL: detect it; a file of no kind is refused naming its `model` key).
 * 0 or an npu_err with diag; *out (scn_destroy it) only on success.
 */
int scn_load(struct scn_scenario **out, const struct scn_kind *kind, const char *path, const char *const *sets,
             int nsets, struct npu_diag *diag);
int scn_run(struct scn_scenario *s, bool want_trace, struct npu_diag *diag);
void scn_destroy(struct scn_scenario *s);

/* After scn_run: the text report, summary.json, summary.csv (header and row). */
void scn_text(const struct scn_scenario *s, struct npu_buf *out);
void scn_json(const struct scn_scenario *s, struct npu_buf *out);
void scn_csv(const struct scn_scenario *s, struct npu_buf *out);
/* The kind's further output file i (npusim run -o): its name, with its contents in out; NULL
 * past the last. */
const char *scn_extra_file(const struct scn_scenario *s, int i, struct npu_buf *out);
/* Whether the scenario's kind writes an HTML report; after scn_run, the page into out. */
bool scn_has_html(const struct scn_scenario *s);
void scn_html(const struct scn_scenario *s, struct npu_buf *out);

/* The CSV header of a kind's columns, one line without its newline (a sweep's metric columns). */
void scn_kind_header(const struct scn_kind *kind, struct npu_buf *out);

/*
 * Load and run path as kind (NULL: detect) and append its CSV row, one line without newline,
 * to row; display (may be NULL) replaces the scenario column. In a child process (the engine).
 */
int scn_run_row(const struct scn_kind *kind, const char *path, const char *display, const char *const *sets,
                int nsets, struct npu_buf *row, struct npu_diag *diag);

/* ------------------------------------------------------------------ isolated runs */

#define SCN_OUTCOME_MAX_COLUMNS 128

/* What a scenario run in a child brings back: its status and its columns' numbers. */
struct scn_outcome {
  int status;                               /* 0 ok, else the npu_err of the failure */
  char message[512];                        /* the error, formatted (status != 0) */
  char kind[32];                            /* the kind's name */
  int ncolumns;
  double value[SCN_OUTCOME_MAX_COLUMNS];    /* per expanded column: the number; NaN for text */
};

/*
 * Load and run path as kind (NULL: detect) in a fork()ed child. 0 when the child reported
 * (whatever its status: out->status), NPU_EINTERNAL with diag when it did not.
 */
int scn_run_isolated(const struct scn_kind *kind, const char *path, const char *const *sets, int nsets,
                     struct scn_outcome *out, struct npu_diag *diag);
/* One scenario for scn_run_isolated_all: what to run, and its outcome. */
struct scn_isolated_run {
  const struct scn_kind *kind;   /* NULL: detected */
  const char *path;
  const char *const *sets;
  int nsets;
  const char *csv_path;          /* not NULL: the child also writes the run's summary.csv
                                    (scn_csv, what `npusim run -o` writes) there, whole */
  struct scn_outcome out;
};
/* Run the n scenarios each in its own child, up to jobs at a time; done(dctx, i), if not NULL,
 * is called as run i's outcome arrives (in the order they finish). 0 when every child reported (whatever
 * its status), NPU_EINTERNAL with diag at the first that did not. */
int scn_run_isolated_all(struct scn_isolated_run *runs, int n, int jobs, void (*done)(void *dctx, int index),
                         void *dctx, struct npu_diag *diag);
/* The number of the column called name in an outcome; false when the kind has no such
 * numeric column. */
bool scn_outcome_number(const struct scn_outcome *o, const char *name, double *out);

/* ------------------------------------------------------------------ probes */

struct scn_probe *scn_probe_open(const struct scn_kind *kind, const char *path, const char *const *sets, int nsets,
                                 struct npu_diag *diag);
/* Apply one more "KEY=VALUE"; 0 or NPU_ECONFIG with diag (file "command line"). */
int scn_probe_set(struct scn_probe *p, const char *assignment, struct npu_diag *diag);
/*
 * The value of key as an SI number (unit values converted), also computed names such as
 * "devices". Finishes the probe on first use. 0, or NPU_ECONFIG / NPU_EINVAL with diag.
 */
int scn_probe_value(struct scn_probe *p, const char *key, double *out, struct npu_diag *diag);
/* Whether key is a key of the scenario (or a preset key), and its unit's column suffix. */
bool scn_probe_has_key(struct scn_probe *p, const char *key, const char **unit_suffix);
void scn_probe_close(struct scn_probe *p);

#endif
