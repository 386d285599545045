/*
 * cmd_run.c - `npusim run SCENARIO.cfg [-o DIR] [--trace] [--set KEY=VALUE]...`: simulate one
 * training step of the scenario and report step time, MFU, memory and the bottleneck.
 *
 * With -o DIR: DIR/summary.json, DIR/summary.csv (a header and one row) and, with --trace,
 * DIR/trace.json (Chrome trace: a track per stage and stream). Files are written whole or not
 * at all.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arch/arch.h"
#include "cli/cli.h"
#include "common/err.h"
#include "report/chrome.h"
#include "workloads/job.h"
#include "workloads/replay.h"
#include "workloads/summary.h"
#ifdef NPUSIM_HAVE_RL
#include "rl/rl.h"
#endif
#ifdef NPUSIM_HAVE_MICRO
#include "cli/run_micro.h"
#endif

static const char usage[] =
    "usage: npusim run SCENARIO.cfg [-o DIR] [--trace] [--set KEY=VALUE]...\n"
    "\n"
    "Simulate one training step of a scenario: the system (chip, node, cluster), the model\n"
    "and the parallel plan. Prints step time, tokens/s, MFU and HFU (with the formula and the\n"
    "peak), the bottleneck, memory per device and the time breakdown per pipeline stage.\n"
    "A scenario with an rl section simulates one RL iteration instead (docs/RL.md): time per\n"
    "phase and pool, utilisation, straggler idle time, tokens/s, MFU per phase, the bottleneck.\n"
    "A scenario with a kernel or a collective section runs that one kernel on the chip or that\n"
    "collective on the cluster, and prints what 'npusim kernel' or 'npusim collective' prints.\n"
    "\n"
    "  -o DIR       also write DIR/summary.json and DIR/summary.csv\n"
    "  --trace      with -o: DIR/trace.json, a Chrome trace (a track per stage and stream)\n"
    "  --set K=V    override a scenario key (repeatable), e.g. --set plan.tp=4\n"
    "\n"
    "npusim run A.cfg B.cfg ... --csv OUT.csv [-j N] [--timeout S] [--set K=V]...: a batch, one\n"
    "CSV row per scenario (status, the metrics of summary.csv), each run in its own process.\n"
    "\n"
    "Keys: docs/SCENARIOS.md. Exit status 2 for bad input, naming file:line and the key.\n";

static int ensure_dir(const char *dir, struct npu_diag *diag)
{
  if (mkdir(dir, 0777) == 0 || errno == EEXIST) return 0;
  return npu_diag_set(diag, dir, 0, "-o", "cannot create the directory: %s", strerror(errno)), NPU_EIO;
}

static int write_outputs(const char *dir, const struct wl_job *job, const struct wl_result *res,
                         const struct npu_trace *trace, struct npu_diag *diag)
{
  int rc = ensure_dir(dir, diag);
  char path[4096];
  struct npu_buf b = {0};
  if (!rc) {
    wl_summary_json(job, res, &b);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    rc = cli_write_file(path, &b, "-o", diag);
    npu_buf_release(&b);
  }
  if (!rc) {
    wl_summary_csv_header(&b);
    wl_summary_csv_row(job, res, &b);
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    rc = cli_write_file(path, &b, "-o", diag);
    npu_buf_release(&b);
  }
  if (!rc && trace) {
    rpt_chrome_write(trace, &b);
    snprintf(path, sizeof path, "%s/trace.json", dir);
    rc = cli_write_file(path, &b, "--trace", diag);
    npu_buf_release(&b);
  }
  return rc;
}

#ifdef NPUSIM_HAVE_RL
/* An RL scenario (an rl section): one iteration, its phases per pool (rl/, docs/RL.md). */
static int run_rl(const char *path, const char *dir, bool want_trace, const struct cli_sets *sets, struct npu_buf *out,
                  struct npu_diag *diag)
{
  struct rl_job job;
  struct rl_result res;
  struct npu_trace trace = {0};
  int rc = rl_job_load(&job, path, (const char *const *)sets->items, sets->n, diag);
  if (!rc) rc = rl_run(&job, want_trace ? &trace : NULL, &res, diag);
  struct npu_buf js = {0}, csv = {0}, tr = {0};
  if (!rc && dir) {
    rl_summary_json(&job, &res, &js);
    rl_summary_csv_header(&csv);
    rl_summary_csv_row(&job, &res, &csv);
    if (want_trace) rpt_chrome_write(&trace, &tr);
    rc = ensure_dir(dir, diag);
    char p[4096];
    if (!rc) rc = (snprintf(p, sizeof p, "%s/summary.json", dir), cli_write_file(p, &js, "-o", diag));
    if (!rc) rc = (snprintf(p, sizeof p, "%s/summary.csv", dir), cli_write_file(p, &csv, "-o", diag));
    if (!rc && want_trace) rc = (snprintf(p, sizeof p, "%s/trace.json", dir), cli_write_file(p, &tr, "--trace", diag));
  }
  if (!rc) rl_summary_text(&job, &res, out);
  npu_buf_release(&js);
  npu_buf_release(&csv);
  npu_buf_release(&tr);
  npu_trace_release(&trace);
  rl_job_release(&job);
  return rc;
}
#endif

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
#ifdef NPUSIM_HAVE_SWEEP
  /* several scenarios, or --csv: a batch run, one CSV row per scenario (cli/cmd_sweep.c) */
  if (cli_run_is_batch(argc, argv)) return cli_run_batch(argc, argv, out, diag);
#endif
  const char *path = NULL, *dir = NULL;
  bool want_trace = false;
  struct cli_sets sets = {0};
  int rc = 0;
  for (int i = 1; i < argc && !rc; i++) {
    int t = cli_take_set(argc, argv, &i, &sets, diag);
    if (t < 0) rc = NPU_EINVAL;
    else if (t > 0) continue;
    else if (!strcmp(argv[i], "-o")) {
      if (i + 1 >= argc) rc = npu_diag_set(diag, "command line", 0, "-o", "needs a directory");
      else dir = argv[++i];
    } else if (!strcmp(argv[i], "--trace")) {
      want_trace = true;
    } else if (argv[i][0] != '-' && !path) {
      path = argv[i];
    } else {
      rc = cli_bad_arg(diag, "run", argv[i]);
    }
  }
  if (!rc && !path) rc = npu_diag_set(diag, "command line", 0, NULL, "run needs a scenario file");
  if (!rc && want_trace && !dir)
    rc = npu_diag_set(diag, "command line", 0, "--trace", "the trace is written into the -o directory");
#ifdef NPUSIM_HAVE_RL
  if (!rc && rl_file_is_rl(path, (const char *const *)sets.items, sets.n)) {
    rc = run_rl(path, dir, want_trace, &sets, out, diag);
    free(sets.items);
    return rc;
  }
#endif
#ifdef NPUSIM_HAVE_MICRO
  enum mc_kind mk = rc ? MC_KIND_NONE : mc_file_kind(path, (const char *const *)sets.items, sets.n);
  if (mk != MC_KIND_NONE) { /* a kernel or collective scenario (micro/) */
    rc = cli_run_micro(mk, path, dir, want_trace, &sets, out, diag);
    free(sets.items);
    return rc;
  }
#endif
  struct wl_job job;
  memset(&job, 0, sizeof job);
  if (!rc) rc = wl_job_load(&job, path, (const char *const *)sets.items, sets.n, diag);
  if (!rc && !wl_job_is_training(&job)) {
    rc = npu_diag_set(diag, path, 0, "model",
                      "the scenario describes a system only (no model section): 'npusim arch show %s' prints it",
                      path);
  } else if (!rc) {
    struct npu_trace trace = {0};
    struct wl_result res;
    rc = wl_replay(&job, want_trace ? &trace : NULL, &res, diag);
    if (!rc) wl_summary_text(&job, &res, out);
    if (!rc && dir) rc = write_outputs(dir, &job, &res, want_trace ? &trace : NULL, diag);
    wl_result_release(&res);
    npu_trace_release(&trace);
  }
  wl_job_release(&job);
  free(sets.items);
  return rc;
}

const struct npu_cmd npu_cmd_run = {
    .name = "run",
    .summary = "simulate a training step of a scenario: step time, MFU, memory, bottleneck",
    .usage = usage,
    .run = run,
};
