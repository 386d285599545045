/* args.c - command-line helpers shared by subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch/arch.h"
#include "cli/cli.h"
#include "common/cfg.h"
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

int cli_write_file(const char *path, const struct npu_buf *b, const char *key, struct npu_diag *diag)
{
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return npu_diag_set(diag, path, 0, key, "cannot write: %m"), NPU_EIO;
  bool ok = fwrite(npu_buf_str(b), 1, b->len, f) == b->len;
  ok &= fclose(f) == 0;
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    return npu_diag_set(diag, path, 0, key, "cannot write"), NPU_EIO;
  }
  return 0;
}

int cli_load_system(struct npu_cfg **cfg, struct arch_system *sys, const char *spec, const struct cli_sets *sets,
                    struct npu_diag *diag)
{
  *cfg = npu_cfg_create();
  npu_cfg_set_display_root(*cfg, arch_source_root());
  arch_register(*cfg, sys);
  int rc = npu_cfg_load_spec(*cfg, spec, diag);
  for (int i = 0; rc == 0 && i < sets->n; i++) rc = npu_cfg_set(*cfg, sets->items[i], diag);
  if (rc == 0) rc = arch_finish(*cfg, sys, diag);
  return rc;
}

int cli_parse_int(const char *opt, const char *v, int min, int *out, struct npu_diag *diag)
{
  char *end;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || end == v || *end || x < min || x > 1000000)
    return npu_diag_set(diag, "command line", 0, opt, "expected an integer >= %d, got '%s'", min, v ? v : ""),
           NPU_EINVAL;
  *out = (int)x;
  return 0;
}

int cli_default_jobs(void)
{
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

bool cli_metric_maximised(const char *m)
{
  return !strcmp(m, "mfu") || !strcmp(m, "hfu") || strstr(m, "per_s") || strstr(m, "throughput") ||
         strstr(m, "speedup") || strstr(m, "goodput") || strstr(m, "attainment") || strstr(m, "accepted");
}
