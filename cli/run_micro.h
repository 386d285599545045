/*
 * run_micro.h - `npusim run` on a kernel or collective scenario (micro/): what `npusim kernel`
 * or `npusim collective` prints for it, and with -o DIR, DIR/summary.json (the JSON of
 * `npusim kernel --json` / `npusim collective --json`) and DIR/summary.csv (a header and one
 * row).
 */
#ifndef NPUSIM_CLI_RUN_MICRO_H
#define NPUSIM_CLI_RUN_MICRO_H

#include <stdbool.h>

#include "cli/cli.h"
#include "micro/micro.h"

/*
 * Run the scenario at path, of kind (MC_KIND_KERNEL or MC_KIND_COLLECTIVE), with the
 * overrides; dir (or NULL) receives the files, written only once the run succeeded; trace
 * (kernel scenarios at event fidelity) adds DIR/trace.json. 0 or an npu_err with diag.
 */
int cli_run_micro(enum mc_kind kind, const char *path, const char *dir, bool trace, const struct cli_sets *sets,
                  struct npu_buf *out, struct npu_diag *diag);

#endif
