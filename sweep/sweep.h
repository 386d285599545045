/*
 * sweep.h - parameter sweeps and batch runs: points from a sweep file, each run in its own
 * process, rows of a CSV written through a crash-safe journal.
 *
 * A sweep file (libconfig; docs/SWEEPS.md) names a base scenario and axes over its keys:
 * lists, linear and log ranges, zipped axes, derived values (expressions over other keys),
 * constraints that skip combinations with a counted reason, and random or Latin-hypercube
 * sampling from a seeded gsl_rng_mt19937. sw_spec_load turns it into points: each point is the
 * scenario plus "KEY=VALUE" overrides, numbered 0..n-1 in a stable order (the first axis
 * varies slowest).
 *
 * sw_execute runs points N at a time, each in a fork()ed child (SimGrid allows one engine per
 * process), and appends each finished row, fsync'd, to OUT.journal; a re-run skips the rows
 * the journal holds, so a killed sweep resumes, and the final CSV (rows in point order) is the
 * same as an uninterrupted run's. With MPI (sweep/mpi.c), rank 0 hands points out to ranks
 * that ask for them and writes the files.
 */
#ifndef NPUSIM_SWEEP_SWEEP_H
#define NPUSIM_SWEEP_SWEEP_H

#include <stdbool.h>
#include <stdint.h>

#include "common/diag.h"
#include "common/strutil.h"
#include "scenario/scenario.h"

/* What the command line adds to a sweep file. */
struct sw_options {
  const char *const *sets; /* "KEY=VALUE" applied to every point before its own values */
  int nsets;
  int sample;              /* > 0: run a random sample of this many points instead */
  long seed;               /* with has_seed: overrides the file's sampling seed */
  bool has_seed;
};

/* One point: a scenario and its overrides; its parameter cells in column order. */
struct sw_point {
  char *scenario;  /* file to load */
  char *display;   /* name reports show */
  char **sets;     /* owned "KEY=VALUE" strings: options' sets, axis values, derived values */
  int nsets;
  char **cells;    /* one per parameter column; owned */
};

/* Points a constraint (or an evaluation error) removed, by reason. */
struct sw_skip {
  char reason[512];
  int count;
};

struct sw_spec {
  char path[1024];                /* sweep file as given; "" for batch runs */
  const struct scn_kind *kind;    /* the scenario kind of every point (scenario/) */
  char **columns;                 /* parameter columns (unit suffixes included) */
  int ncolumns;
  struct sw_point *points;
  int npoints;
  int candidates;                 /* points before constraints */
  struct sw_skip *skips;
  int nskips;
  char sampling[64];              /* "" (the full grid), "random", "lhs" */
  unsigned long seed;             /* of the sampling, reported */
  uint64_t fingerprint;           /* of the sweep file, base scenario, options and points */
  char metric_header[4096];       /* the kind's metric columns */
  char tmpdir[1024];              /* generated base scenario (sweep files with @include); "" */
};

/* Load a sweep file into points. 0, or NPU_ECONFIG / NPU_EIO with diag (file:line and key). */
int sw_spec_load(struct sw_spec *s, const char *path, const struct sw_options *o, struct npu_diag *diag);
/* Points for a batch run: one per scenario file, each with the same overrides. */
int sw_spec_batch(struct sw_spec *s, const char *const *files, int nfiles, const char *const *sets, int nsets,
                  struct npu_diag *diag);
void sw_spec_release(struct sw_spec *s);

/* The CSV header line (no newline): point, the parameter columns, status, metrics, message. */
void sw_csv_header(const struct sw_spec *s, struct npu_buf *out);

struct sw_exec_options {
  const char *csv;          /* output file */
  int jobs;                 /* points at a time (per rank) */
  double timeout_s;         /* per point; 0: none */
  bool force;               /* start over even if the journal belongs to another sweep */
  bool journal;             /* keep OUT.journal (sweeps); false for batch runs */
  bool retry_failed;        /* run again the points whose journal row is not ok */
  int shard_i, shard_n;     /* run points with index % shard_n == shard_i; shard_n 0: all */
  bool mpi;                 /* started under mpirun (sweep/mpi.c) */
};

struct sw_result {
  int total;                /* points of this run (the shard's) */
  int ran, resumed;         /* run now, taken from the journal */
  int ok, error, crash, timeout;
  double wall_s;
  int ranks;                /* MPI ranks (1 without MPI) */
};

/* Run the spec's points and write the CSV. 0, or an npu_err with diag. */
int sw_execute(struct sw_spec *s, const struct sw_exec_options *o, struct sw_result *res, struct npu_diag *diag);

/* ---- internals shared with mpi.c */

enum sw_status { SW_OK, SW_ERROR, SW_CRASH, SW_TIMEOUT };
const char *sw_status_name(enum sw_status st);
/* The status cell parsed back; -1 if unknown. */
int sw_status_parse(const char *s);

/* Points running in children, up to jobs at a time. */
struct sw_pool;
typedef void (*sw_done_fn)(void *ctx, int index, enum sw_status st, const char *row);
struct sw_pool *sw_pool_create(const struct sw_spec *s, int jobs, double timeout_s);
void sw_pool_destroy(struct sw_pool *p);
int sw_pool_free(const struct sw_pool *p);
int sw_pool_running(const struct sw_pool *p);
/* Fork a child for point index (a free slot must exist). */
void sw_pool_start(struct sw_pool *p, int index);
/* Wait up to ms for children; call done for each finished point with its full CSV row. */
void sw_pool_wait(struct sw_pool *p, int ms, sw_done_fn done, void *ctx);

/* CSV helpers (a field: npu_csv_field in common/strutil.h). */
/* Split one CSV line into fields (quotes handled); returns the count, *fields owned (free each). */
int sw_csv_split(const char *line, char ***fields);
void sw_csv_free(char **fields, int n);

#endif
