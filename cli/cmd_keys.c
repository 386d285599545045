/*
 * cmd_keys.c - `npusim keys`: every key a scenario file may set (system, model, plan, routing,
 * run), with type, default and meaning, as the Markdown table of docs/SCENARIOS.md.
 */
#include "cli/cli.h"
#include "common/cfg.h"
#include "workloads/job.h"

static const char usage[] =
    "usage: npusim keys\n"
    "\n"
    "Print every key of a scenario file: the system (chip, node, cluster; also `npusim arch\n"
    "keys`), the model, the parallel plan, MoE routing and the run settings, as a Markdown table\n"
    "(key, type, default, meaning). docs/SCENARIOS.md lists the same keys.\n";

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  if (argc > 1) return cli_bad_arg(diag, "keys", argv[1]);
  struct wl_job job;
  wl_job_init(&job, "keys");
  npu_cfg_write_keys(job.cfg, out);
  wl_job_release(&job);
  return 0;
}

const struct npu_cmd npu_cmd_keys = {"keys", "every key of a scenario file, with type, default and meaning", usage,
                                     run};
