/* args.c - command-line helpers shared by subcommands. */
#include <string.h>

#include "cli/cli.h"
#include "common/err.h"

int cli_take_set(int argc, char **argv, int *i, struct cli_sets *sets, struct npu_diag *diag)
{
  const char *a = argv[*i];
  char *value;
  if (strcmp(a, "--set") == 0) {
    if (*i + 1 >= argc) {
      npu_diag_set(diag, "command line", 0, NULL, "--set needs KEY=VALUE");
      return -1;
    }
    value = argv[++*i];
  } else if (strncmp(a, "--set=", 6) == 0) {
    value = argv[*i] + 6;
  } else {
    return 0;
  }
  sets->items = npu_xrealloc(sets->items, (size_t)(sets->n + 1) * sizeof *sets->items);
  sets->items[sets->n++] = value;
  return 1;
}

int cli_bad_arg(struct npu_diag *diag, const char *cmd, const char *arg)
{
  if (arg[0] == '-')
    npu_diag_set(diag, "command line", 0, NULL, "unknown option '%s' for '%s' (see 'npusim help %s')",
                 arg, cmd, cmd);
  else
    npu_diag_set(diag, "command line", 0, NULL, "unexpected argument '%s' for '%s' (see 'npusim help %s')",
                 arg, cmd, cmd);
  return NPU_EINVAL;
}
