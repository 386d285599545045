/*
 * cli.h - the npusim command line: subcommands and the helpers they share.
 *
 * A subcommand writes its results into an npu_buf; main prints them only when the command
 * succeeds, so a failing command leaves nothing on stdout that could pass for a result.
 * Errors go to stderr as "error: FILE:LINE: KEY: MESSAGE" with exit status 2 for bad input.
 */
#ifndef NPUSIM_CLI_CLI_H
#define NPUSIM_CLI_CLI_H

#include <stdbool.h>

#include "common/diag.h"
#include "common/progress.h"
#include "common/strutil.h"

struct npu_cmd {
  const char *name;    /* "arch" */
  const char *summary; /* one line for `npusim --help` */
  const char *usage;   /* full help text for `npusim help NAME` */
  /* Run with argv[0] == name. Returns 0 or a negative npu_err with diag filled. */
  int (*run)(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag);
  /* Optional: --help anywhere in the arguments calls this (argv as for run) instead of printing
   * usage, for help that depends on the arguments (`npusim kernel gemm --help`). */
  int (*help)(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag);
};

extern const struct npu_cmd npu_cmd_arch;
extern const struct npu_cmd npu_cmd_keys;
extern const struct npu_cmd npu_cmd_columns;
extern const struct npu_cmd npu_cmd_kernel;
extern const struct npu_cmd npu_cmd_collective;
extern const struct npu_cmd npu_cmd_run;
extern const struct npu_cmd npu_cmd_validate;
extern const struct npu_cmd npu_cmd_sweep;
extern const struct npu_cmd npu_cmd_merge;
extern const struct npu_cmd npu_cmd_compare;
extern const struct npu_cmd npu_cmd_report;
extern const struct npu_cmd npu_cmd_plot;
extern const struct npu_cmd npu_cmd_calibrate;
extern const struct npu_cmd npu_cmd_plan;

/* Batch runs (cli/cmd_sweep.c): `npusim run A.cfg B.cfg ... --csv OUT.csv`, one CSV row per
 * scenario, each in its own process. cmd_run.c hands over when cli_run_is_batch says so. */
bool cli_run_is_batch(int argc, char **argv);
int cli_run_batch(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag);

/* Options shared by commands that load a hardware description. */
struct cli_sets {
  char **items; /* "KEY=VALUE" strings from --set, borrowed from argv */
  int n;
};

/*
 * If argv[*i] is "--set K=V" or "--set=K=V", record it, advance *i past its value and return
 * 1; if --set lacks its value fill diag and return -1; otherwise return 0.
 */
int cli_take_set(int argc, char **argv, int *i, struct cli_sets *sets, struct npu_diag *diag);

/*
 * Load a hardware description: spec is a preset name or a file (npu_cfg_load_spec), then the
 * --set overrides in order, then the checks. *cfg (created here, also on error; destroy it) keeps
 * the values' origins. 0 or NPU_ECONFIG with diag.
 */
struct arch_system;
struct npu_cfg;
int cli_load_system(struct npu_cfg **cfg, struct arch_system *sys, const char *spec, const struct cli_sets *sets,
                    struct npu_diag *diag);

/* One progress line on stderr while a command works (progress.c): on when stderr is a terminal
 * (enabled < 0), or as --progress / --no-progress say (1 / 0); the line is cleared at the end. */
struct cli_progress {
  struct npu_progress sink;
  bool on, shown;
  double t0, last;
};
void cli_progress_init(struct cli_progress *p, int enabled);
/* The sink to hand down: NULL when off. */
const struct npu_progress *cli_progress_sink(struct cli_progress *p);
void cli_progress_end(struct cli_progress *p);

/* Write a file completely or not at all (a temporary next to it, renamed into place); errors
 * name path and key. 0 or NPU_EIO. */
int cli_write_file(const char *path, const struct npu_buf *b, const char *key, struct npu_diag *diag);

/* Fill diag for an unknown option or stray argument of command cmd. Returns NPU_EINVAL. */
int cli_bad_arg(struct npu_diag *diag, const char *cmd, const char *arg);

/* An integer option's value (at least min): 0, or NPU_EINVAL with diag naming the option. */
int cli_parse_int(const char *opt, const char *v, int min, int *out, struct npu_diag *diag);
/* Whether a results column is better large (mfu, hfu, throughputs, speedups) rather than small
 * (times, bytes, fractions): the default direction of report --best and plan --metric. */
bool cli_metric_maximised(const char *column);
/* The default of -j: the online processors. */
int cli_default_jobs(void);

#endif
