/*
 * cmd_keys.c - `npusim keys`: every key a scenario file may set, the sections of every kind of
 * scenario (scenario/: the system, a training job's model, plan, routing and run, the rl
 * section of RL iterations, the kernel and collective sections), with type, default and
 * meaning, as the Markdown table of docs/SCENARIOS.md.
 */
#include "cli/cli.h"
#include "common/cfg.h"
#include "scenario/scenario.h"

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
  struct npu_cfg *cfg = npu_cfg_create();
  npu_cfg_set_display_root(cfg, arch_source_root());
  struct scn_sections *s = scn_sections_add_all(cfg); /* every kind's sections, each once */
  npu_cfg_write_keys(cfg, out);
  npu_cfg_destroy(cfg);
  scn_sections_release(s);
  return 0;
}

const struct npu_cmd npu_cmd_keys = {"keys", "every key of a scenario file, with type, default and meaning", usage,
                                     run, NULL};
