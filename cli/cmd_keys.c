/*
 * cmd_keys.c - `npusim keys`: every key a scenario file may set (system, model, plan, routing,
 * run, and the rl section of RL iterations), with type, default and meaning, as the Markdown
 * table of docs/SCENARIOS.md.
 */
#include "cli/cli.h"
#include "common/cfg.h"
#include "workloads/job.h"
#ifdef NPUSIM_HAVE_RL
#include "rl/rl.h"
#endif
#ifdef NPUSIM_HAVE_MICRO
#include "micro/micro.h"
#endif

static const char usage[] =
    "usage: npusim keys\n"
    "\n"
    "Print every key of a scenario file: the system (chip, node, cluster; also `npusim arch\n"
    "keys`), the model, the parallel plan, MoE routing, the run settings and the rl section of\n"
    "RL iterations, the kernel and collective sections of kernel and collective scenarios, as a\n"
    "Markdown table (key, type, default, meaning). docs/SCENARIOS.md lists the same keys.\n";

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  if (argc > 1) return cli_bad_arg(diag, "keys", argv[1]);
  struct wl_job job;
  wl_job_init(&job, "keys");
#ifdef NPUSIM_HAVE_RL
  struct rl_spec rl; /* an RL iteration (docs/RL.md), last as in RL scenarios */
  rl_spec_register(job.cfg, &rl);
#endif
#ifdef NPUSIM_HAVE_MICRO
  struct mc_tables *micro = mc_tables_register(job.cfg); /* kernel and collective scenarios (micro/) */
#endif
  npu_cfg_write_keys(job.cfg, out);
  wl_job_release(&job);
#ifdef NPUSIM_HAVE_MICRO
  mc_tables_destroy(micro);
#endif
  return 0;
}

const struct npu_cmd npu_cmd_keys = {"keys", "every key of a scenario file, with type, default and meaning", usage,
                                     run};
