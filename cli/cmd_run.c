/*
 * cmd_run.c - `npusim run SCENARIO.cfg [-o DIR] [--trace] [--set KEY=VALUE]...`: run a scenario
 * of any kind (scenario/: a training step, an RL iteration, a kernel, a collective) and print
 * its report.
 *
 * With -o DIR: DIR/summary.json, DIR/summary.csv (a header and one row) and, with --trace,
 * DIR/trace.json (Chrome trace; --trace=gz: trace.json.gz), streamed while the scenario runs.
 * Files are written whole or not at all.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/err.h"
#include "report/trace_file.h"
#include "scenario/scenario.h"

static const char usage[] =
    "usage: npusim run SCENARIO.cfg [-o DIR] [--trace[=gz]] [--html FILE] [--progress|--no-progress]\n"
    "                  [--set KEY=VALUE]...\n"
    "\n"
    "Simulate one training step of a scenario: the system (chip, node, cluster), the model\n"
    "and the parallel plan. Prints step time, tokens/s, MFU and HFU (with the formula and the\n"
    "peak), the bottleneck, memory per device and the time breakdown per pipeline stage.\n"
    "A scenario with an rl section simulates one RL iteration instead (docs/RL.md): time per\n"
    "phase and pool, utilisation, straggler idle time, tokens/s, MFU per phase, the bottleneck.\n"
    "A scenario with a serve section simulates LLM serving (docs/SERVING.md): TTFT, TPOT, ITL\n"
    "and end-to-end latency percentiles, throughput, goodput under SLOs, KV cache, bottleneck.\n"
    "A scenario with a kernel or a collective section runs that one kernel on the chip or that\n"
    "collective on the cluster, and prints what 'npusim kernel' or 'npusim collective' prints.\n"
    "\n"
    "  -o DIR       also write DIR/summary.json and DIR/summary.csv (a training step: and\n"
    "               DIR/operators.csv, the per-operator statistics of its slowest stage)\n"
    "  --trace      with -o: DIR/trace.json, a Chrome trace (a track per stage and stream),\n"
    "               streamed to disk while the scenario runs, never cut\n"
    "  --trace=gz   the same, gzip-compressed: DIR/trace.json.gz\n"
    "  --html FILE  one self-contained HTML page (no network): a training step's key figures,\n"
    "               breakdown and memory per stage as charts and the slowest stage's operators;\n"
    "               a serving run's figures, latencies and engine time by kind of step; an RL\n"
    "               iteration's figures and phases; a kernel's figures and busy pipes; a\n"
    "               collective's bandwidths against a device's links and its nccl-tests table\n"
    "  --progress   a progress line on stderr (kernels costed, schedule slots replayed, blocks of\n"
    "               an event-fidelity kernel); the default when stderr is a terminal;\n"
    "               --no-progress turns it off\n"
    "  --set K=V    override a scenario key (repeatable), e.g. --set plan.tp=4\n"
    "\n"
    "npusim run A.cfg B.cfg ... --csv OUT.csv [-j N] [--timeout S] [--set K=V]...: a batch, one\n"
    "CSV row per scenario (status, the metrics of summary.csv), each run in its own process.\n"
    "\n"
    "Keys: docs/SCENARIOS.md. Exit status 2 for bad input, naming file:line and the key.\n";

static int ensure_dir(const char *dir, struct npu_diag *diag)
{
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return npu_diag_set(diag, dir, 0, "-o", "cannot create the directory: %s", strerror(errno)), NPU_EIO;
  if (access(dir, W_OK | X_OK) != 0)
    return npu_diag_set(diag, dir, 0, "-o", "cannot write into the directory: %s", strerror(errno)), NPU_EIO;
  return 0;
}

/* DIR/summary.json and DIR/summary.csv: built first, then each written whole (cli_write_file).
 * The trace was streamed into place while the scenario ran. */
static int write_outputs(const char *dir, const struct scn_scenario *s, struct npu_diag *diag)
{
  struct npu_buf js = {0}, csv = {0};
  scn_json(s, &js);
  scn_csv(s, &csv);
  char p[4096];
  int rc = (snprintf(p, sizeof p, "%s/summary.json", dir), cli_write_file(p, &js, "-o", diag));
  if (!rc) rc = (snprintf(p, sizeof p, "%s/summary.csv", dir), cli_write_file(p, &csv, "-o", diag));
  npu_buf_release(&js);
  npu_buf_release(&csv);
  for (int i = 0; !rc; i++) { /* the kind's own files (training: operators.csv) */
    struct npu_buf b = {0};
    const char *name = scn_extra_file(s, i, &b);
    if (name) rc = (snprintf(p, sizeof p, "%s/%s", dir, name), cli_write_file(p, &b, "-o", diag));
    npu_buf_release(&b);
    if (!name) break;
  }
  return rc;
}

/* The directory a file is to be written in exists and takes files. */
static int writable_parent(const char *file, struct npu_diag *diag)
{
  char d[4096];
  npu_strlcpy(d, file, sizeof d);
  char *slash = strrchr(d, '/');
  if (slash == d) slash[1] = '\0';
  else if (slash) *slash = '\0';
  else npu_strlcpy(d, ".", sizeof d);
  if (access(d, W_OK | X_OK))
    return npu_diag_set(diag, file, 0, "--html", "cannot write into %s: %s", d, strerror(errno)), NPU_EIO;
  return 0;
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  /* several scenarios, or --csv: a batch run, one CSV row per scenario (cli/cmd_sweep.c) */
  if (cli_run_is_batch(argc, argv)) return cli_run_batch(argc, argv, out, diag);
  const char *path = NULL, *dir = NULL, *html = NULL;
  bool want_trace = false, gzip = false;
  int progress = -1; /* on when stderr is a terminal */
  struct cli_sets sets = {0};
  int rc = 0;
  for (int i = 1; i < argc && !rc; i++) {
    int t = cli_take_set(argc, argv, &i, &sets, diag);
    if (t < 0) rc = NPU_EINVAL;
    else if (t > 0) continue;
    else if (!strcmp(argv[i], "-o")) {
      if (i + 1 >= argc) rc = npu_diag_set(diag, "command line", 0, "-o", "needs a directory");
      else dir = argv[++i];
    } else if (!strcmp(argv[i], "--html")) {
      if (i + 1 >= argc) rc = npu_diag_set(diag, "command line", 0, "--html", "needs a file name");
      else html = argv[++i];
    } else if (!strcmp(argv[i], "--progress") || !strcmp(argv[i], "--no-progress")) {
      progress = argv[i][2] == 'p';
    } else if (!strcmp(argv[i], "--trace") || !strcmp(argv[i], "--trace=gz")) {
      want_trace = true;
      gzip = argv[i][7] == '=';
    } else if (argv[i][0] != '-' && !path) {
      path = argv[i];
    } else {
      rc = cli_bad_arg(diag, "run", argv[i]);
    }
  }
  if (!rc && !path) rc = npu_diag_set(diag, "command line", 0, NULL, "run needs a scenario file");
  if (!rc && want_trace && !dir)
    rc = npu_diag_set(diag, "command line", 0, "--trace", "the trace is written into the -o directory");
  /* the kind (training, rl, serve, kernel, collective) from the sections present: scenario/ */
  struct scn_scenario *s = NULL;
  struct rpt_trace_file *tf = NULL;
  char tpath[4096];
  if (!rc) rc = scn_load(&s, NULL, path, (const char *const *)sets.items, sets.n, diag);
  if (!rc && html && !scn_has_html(s))
    rc = npu_diag_set(diag, "command line", 0, "--html", "a %s scenario has no HTML report", s->kind->name);
  /* the directory, the HTML file's and the trace before the run: unwritable, they fail before
   * any simulation */
  if (!rc && dir) rc = ensure_dir(dir, diag);
  if (!rc && html) rc = writable_parent(html, diag);
  if (!rc && want_trace) {
    snprintf(tpath, sizeof tpath, "%s/%s", dir, gzip ? "trace.json.gz" : "trace.json");
    rc = rpt_trace_file_open(&tf, tpath, "--trace", diag);
    if (!rc) rpt_trace_file_attach(tf, &s->trace);
  }
  struct cli_progress pg;
  cli_progress_init(&pg, progress);
  if (!rc) {
    s->progress = cli_progress_sink(&pg);
    rc = scn_run(s, want_trace, diag);
    cli_progress_end(&pg);
  }
  if (!rc && tf) rc = rpt_trace_file_close(tf, &s->trace, diag), tf = NULL;
  if (!rc && dir) rc = write_outputs(dir, s, diag);
  if (!rc && html) {
    struct npu_buf page = {0};
    scn_html(s, &page);
    rc = cli_write_file(html, &page, "--html", diag);
    npu_buf_release(&page);
  }
  if (!rc) scn_text(s, out);
  rpt_trace_file_abort(tf);
  scn_destroy(s);
  free(sets.items);
  return rc;
}

const struct npu_cmd npu_cmd_run = {
    .name = "run",
    .summary = "run a scenario: a training step, an RL iteration, a serving run, a kernel or a collective",
    .usage = usage,
    .run = run};
