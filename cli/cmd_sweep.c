/*
 * cmd_sweep.c - `npusim sweep SWEEP.cfg -o RESULTS.csv [-j N] [--timeout S] [--force] ...`:
 * run a sweep's points, each in its own process, into one CSV row per point (sweep/); and the
 * batch form of `npusim run A.cfg B.cfg ... --csv OUT.csv`, which cmd_run.c hands over here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/err.h"
#include "sweep/mpi.h"
#include "sweep/sweep.h"

static const char usage[] =
    "usage: npusim sweep SWEEP.cfg -o RESULTS.csv [-j N] [--timeout S] [--force] [--shard I/N]\n"
    "                    [--sample N] [--seed S] [--set KEY=VALUE]... [--list] [--retry-failed] [--yes]\n"
    "\n"
    "Run every point of a sweep file (a base scenario and axes over its keys; docs/SWEEPS.md),\n"
    "each in its own process, N at a time, and write one CSV row per point: the point's number,\n"
    "every swept and derived key (physical values in SI units, the unit in the column name),\n"
    "status (ok, error, crash, timeout), every metric of summary.csv, and the error message.\n"
    "A failing point becomes a row with its status; the sweep goes on.\n"
    "\n"
    "Rows are appended, fsync'd, to RESULTS.csv.journal as points finish: running the same\n"
    "command again after a crash or a kill skips the finished points, and RESULTS.csv (rows in\n"
    "point order) is the same as an uninterrupted run's. A changed sweep file is refused.\n"
    "\n"
    "  -o FILE        the results (CSV); FILE.journal next to it\n"
    "  -j N           points at a time (default: the number of processors)\n"
    "  --timeout S    kill a point after S seconds (status timeout)\n"
    "  --force        start over: discard a journal of another sweep, overwrite FILE\n"
    "  --shard I/N    run only points i with i % N == I (batch schedulers; 'npusim merge')\n"
    "  --sample N     run N random points of the grid (or N samples of a sampled sweep)\n"
    "  --seed S       the sampling seed (default: the file's, else 1)\n"
    "  --set K=V      override a scenario key for every point\n"
    "  --list         print the points (CSV) without running them\n"
    "  --retry-failed run again the points whose rows say error, crash or timeout (the others\n"
    "                 are kept from the journal)\n"
    "  --yes          run a sweep of more than 10,000 points (refused without it: a typo in a\n"
    "                 range's unit can make tens of thousands)\n"
    "\n"
    "Under mpirun (when built with MPI), rank 0 hands points out to every rank and writes the\n"
    "files: mpirun -n K npusim sweep SWEEP.cfg -o RESULTS.csv -j N.\n"
    "Exit status 2 for a bad sweep file, naming file:line and the key.\n";

/* A sweep of more points than this runs only with --yes. */
#define SWEEP_CONFIRM_POINTS 10000

static int parse_seconds(const char *opt, const char *v, double *out, struct npu_diag *diag)
{
  char *end;
  double x = v ? strtod(v, &end) : 0;
  if (!v || end == v || *end || !(x > 0))
    return npu_diag_set(diag, "command line", 0, opt, "expected seconds > 0, got '%s'", v ? v : ""), NPU_EINVAL;
  *out = x;
  return 0;
}

/* What the sweep file made: points, skipped ones by reason, the sampling and its seed. */
static void spec_summary(const struct sw_spec *s, const struct sw_exec_options *o, int shard_points, struct npu_buf *out)
{
  if (s->path[0]) {
    npu_buf_printf(out, "sweep %s: %d points", s->path, s->npoints);
    int skipped = s->candidates - s->npoints;
    if (skipped > 0) npu_buf_printf(out, " (of %d; %d skipped by constraints)", s->candidates, skipped);
    npu_buf_puts(out, "\n");
    for (int i = 0; i < s->nskips; i++) npu_buf_printf(out, "  skipped %d: %s\n", s->skips[i].count, s->skips[i].reason);
    if (s->sampling[0]) npu_buf_printf(out, "  sampling: %s, seed %lu (gsl_rng_mt19937)\n", s->sampling, s->seed);
    if (o->shard_n) npu_buf_printf(out, "  shard %d/%d: %d points\n", o->shard_i, o->shard_n, shard_points);
  }
}

static void summary(const struct sw_spec *s, const struct sw_exec_options *o, const struct sw_result *r,
                    struct npu_buf *out)
{
  spec_summary(s, o, r->total, out);
  npu_buf_printf(out, "ran %d points", r->ran);
  if (r->resumed) npu_buf_printf(out, " (%d more from the journal)", r->resumed);
  npu_buf_printf(out, " in %.3g s, %d at a time", r->wall_s, o->jobs);
  if (r->ranks > 1) npu_buf_printf(out, " on each of %d MPI ranks", r->ranks);
  npu_buf_printf(out, ": %d ok", r->ok);
  if (r->error) npu_buf_printf(out, ", %d error", r->error);
  if (r->crash) npu_buf_printf(out, ", %d crash", r->crash);
  if (r->timeout) npu_buf_printf(out, ", %d timeout", r->timeout);
  npu_buf_printf(out, "\nwrote %s\n", o->csv);
}

/* Run under mpirun when launched by it; refuse a multi-rank launch of a build without MPI. */
static int mpi_mode(bool *mpi, struct npu_diag *diag)
{
  *mpi = false;
  if (!sw_mpi_launched()) return 0;
  if (sw_mpi_available()) {
    *mpi = true;
    return 0;
  }
  const char *n = getenv("OMPI_COMM_WORLD_SIZE");
  if (!n) n = getenv("PMI_SIZE");
  if (n && atoi(n) > 1)
    return npu_diag_set(diag, "command line", 0, NULL,
                        "started by mpirun on %s ranks, but this npusim was built without MPI (install "
                        "libopenmpi-dev and rebuild)", n),
           NPU_EUNSUPPORTED;
  return 0;
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  const char *path = NULL;
  struct sw_exec_options eo = {.jobs = cli_default_jobs(), .journal = true};
  struct sw_options so = {0};
  struct cli_sets sets = {0};
  bool list = false, yes = false;
  int rc = 0;
  for (int i = 1; i < argc && !rc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int t = cli_take_set(argc, argv, &i, &sets, diag);
    if (t < 0) rc = NPU_EINVAL;
    else if (t > 0) continue;
    else if (!strcmp(a, "-o")) {
      if (!v) rc = npu_diag_set(diag, "command line", 0, "-o", "needs a file name");
      else eo.csv = argv[++i];
    } else if (!strcmp(a, "-j")) {
      rc = cli_parse_int("-j", v, 1, &eo.jobs, diag);
      i++;
    } else if (!strcmp(a, "--timeout")) {
      rc = parse_seconds("--timeout", v, &eo.timeout_s, diag);
      i++;
    } else if (!strcmp(a, "--force")) {
      eo.force = true;
    } else if (!strcmp(a, "--list")) {
      list = true;
    } else if (!strcmp(a, "--yes")) {
      yes = true;
    } else if (!strcmp(a, "--retry-failed")) {
      eo.retry_failed = true;
    } else if (!strcmp(a, "--shard")) {
      int si, sn, k = 0;
      if (!v || sscanf(v, "%d/%d%n", &si, &sn, &k) != 2 || v[k] || sn < 1 || si < 0 || si >= sn)
        rc = npu_diag_set(diag, "command line", 0, "--shard", "expected I/N with 0 <= I < N, got '%s'", v ? v : "");
      eo.shard_i = si;
      eo.shard_n = sn;
      i++;
    } else if (!strcmp(a, "--sample")) {
      rc = cli_parse_int("--sample", v, 1, &so.sample, diag);
      i++;
    } else if (!strcmp(a, "--seed")) {
      int sd = 0;
      rc = cli_parse_int("--seed", v, 0, &sd, diag);
      so.seed = sd;
      so.has_seed = true;
      i++;
    } else if (a[0] != '-' && !path) {
      path = a;
    } else {
      rc = cli_bad_arg(diag, "sweep", a);
    }
  }
  if (!rc && !path) rc = npu_diag_set(diag, "command line", 0, NULL, "sweep needs a sweep file (see 'npusim help sweep')");
  if (!rc && !eo.csv && !list)
    rc = npu_diag_set(diag, "command line", 0, "-o", "sweep needs -o RESULTS.csv");
  if (!rc) rc = mpi_mode(&eo.mpi, diag);
  so.sets = (const char *const *)sets.items;
  so.nsets = sets.n;
  struct sw_spec spec;
  memset(&spec, 0, sizeof spec);
  if (!rc) rc = sw_spec_load(&spec, path, &so, diag);
  int mine = 0;
  for (int i = 0; !rc && i < spec.npoints; i++) mine += !eo.shard_n || i % eo.shard_n == eo.shard_i;
  if (!rc && !list && !yes && mine > SWEEP_CONFIRM_POINTS) {
    npu_diag_set(diag, path, 0, "sweep.axes",
                 "%d points to run (more than %d): check the axes' ranges (a unit typo in a range's from or to "
                 "makes thousands of points; --list shows them), then run again with --yes",
                 mine, SWEEP_CONFIRM_POINTS);
    rc = NPU_ECONFIG;
  }
  if (!rc && list) {
    struct npu_buf info = {0};
    spec_summary(&spec, &eo, mine, &info);
    fputs(npu_buf_str(&info), stderr);
    npu_buf_release(&info);
    sw_csv_header(&spec, out);
    npu_buf_puts(out, "\n");
    for (int i = 0; i < spec.npoints; i++) {
      if (eo.shard_n && i % eo.shard_n != eo.shard_i) continue;
      npu_buf_printf(out, "%d", i);
      for (int c = 0; c < spec.ncolumns; c++) {
        npu_buf_puts(out, ",");
        npu_csv_field(out, spec.points[i].cells[c]);
      }
      npu_buf_puts(out, "\n");
    }
  } else if (!rc) {
    struct sw_result res;
    rc = sw_execute(&spec, &eo, &res, diag);
    /* only rank 0 reports */
    if (!rc && (res.total > 0 || res.ranks == 1 || res.ran > 0)) summary(&spec, &eo, &res, out);
  }
  sw_spec_release(&spec);
  free(sets.items);
  return rc;
}

const struct npu_cmd npu_cmd_sweep = {
    .name = "sweep",
    .summary = "run a sweep file's points (one process each) into a CSV; resumable; MPI, shards",
    .usage = usage,
    .run = run};

/* ------------------------------------------------------------ npusim run A.cfg B.cfg --csv */

bool cli_run_is_batch(int argc, char **argv)
{
  int files = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--csv") || !strncmp(argv[i], "--csv=", 6)) return true;
    if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--set") || !strcmp(argv[i], "-j") || !strcmp(argv[i], "--timeout") ||
        !strcmp(argv[i], "--html"))
      i++;
    else if (argv[i][0] != '-') files++;
  }
  return files > 1;
}

int cli_run_batch(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  struct sw_exec_options eo = {.jobs = cli_default_jobs(), .journal = false};
  struct cli_sets sets = {0};
  const char **files = npu_xcalloc((size_t)argc + 1, sizeof *files);
  int nfiles = 0, rc = 0;
  for (int i = 1; i < argc && !rc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int t = cli_take_set(argc, argv, &i, &sets, diag);
    if (t < 0) rc = NPU_EINVAL;
    else if (t > 0) continue;
    else if (!strcmp(a, "--csv")) {
      if (!v) rc = npu_diag_set(diag, "command line", 0, "--csv", "needs a file name");
      else eo.csv = argv[++i];
    } else if (!strncmp(a, "--csv=", 6)) {
      eo.csv = a + 6;
    } else if (!strcmp(a, "-j")) {
      rc = cli_parse_int("-j", v, 1, &eo.jobs, diag);
      i++;
    } else if (!strcmp(a, "--timeout")) {
      rc = parse_seconds("--timeout", v, &eo.timeout_s, diag);
      i++;
    } else if (a[0] != '-') {
      files[nfiles++] = a;
    } else {
      rc = npu_diag_set(diag, "command line", 0, NULL,
                        "unknown option '%s' for a batch run (several scenarios or --csv: -j, --timeout, --set)", a);
    }
  }
  if (!rc && !eo.csv)
    rc = npu_diag_set(diag, "command line", 0, "--csv", "several scenarios are run as a batch: add --csv OUT.csv");
  struct sw_spec spec;
  memset(&spec, 0, sizeof spec);
  if (!rc) rc = sw_spec_batch(&spec, files, nfiles, (const char *const *)sets.items, sets.n, diag);
  if (!rc) {
    struct sw_result res;
    rc = sw_execute(&spec, &eo, &res, diag);
    if (!rc) {
      npu_buf_printf(out, "%d scenarios: %d ok", res.total, res.ok);
      if (res.error + res.crash + res.timeout)
        npu_buf_printf(out, ", %d failed", res.error + res.crash + res.timeout);
      npu_buf_printf(out, "; wrote %s\n", eo.csv);
    }
  }
  sw_spec_release(&spec);
  free(files);
  free(sets.items);
  return rc;
}
