/*
 * main.c - npusim's entry point: dispatches subcommands, prints help and version, and turns
 * a command's status into the exit status (0 ok, 2 bad input, 1 internal failure).
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/err.h"

#ifndef NPUSIM_VERSION
#error "NPUSIM_VERSION must be defined by the build"
#endif

static const struct npu_cmd *const commands[] = {
    &npu_cmd_arch,
    &npu_cmd_kernel,
#ifdef NPUSIM_HAVE_COLLECTIVE
    &npu_cmd_collective,
#endif
#ifdef NPUSIM_HAVE_RUN
    &npu_cmd_run,
    &npu_cmd_validate,
    &npu_cmd_keys,
    &npu_cmd_columns,
#endif
#ifdef NPUSIM_HAVE_SWEEP
    &npu_cmd_sweep,
    &npu_cmd_plan,
    &npu_cmd_merge,
    &npu_cmd_compare,
    &npu_cmd_report,
    &npu_cmd_plot,
    &npu_cmd_calibrate,
#endif
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void print_help(FILE *f)
{
  fprintf(f,
          "usage: npusim [--version] [--help] COMMAND [ARGS]\n"
          "\n"
          "npusim simulates NPU clusters: AI cores, buffers, DMA, HBM and the interconnect,\n"
          "running operator kernels and distributed training on SimGrid.\n"
          "\n"
          "commands:\n");
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
  fprintf(f, "\n'npusim help COMMAND' describes a command.\n");
}

static const struct npu_cmd *find_command(const char *name)
{
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i]->name, name) == 0) return commands[i];
  return NULL;
}

static int unknown_command(const char *name)
{
  const char *names[NCOMMANDS + 1];
  for (size_t i = 0; i < NCOMMANDS; i++) names[i] = commands[i]->name;
  names[NCOMMANDS] = "help";
  const char *s = npu_suggest(name, names, NCOMMANDS + 1);
  if (s)
    fprintf(stderr, "error: unknown command '%s'; did you mean '%s'?\n", name, s);
  else
    fprintf(stderr, "error: unknown command '%s' (see 'npusim --help')\n", name);
  return 2;
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    print_help(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    print_help(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("npusim %s\n", NPUSIM_VERSION);
    return 0;
  }
  if (strcmp(cmd, "help") == 0) {
    if (argc == 2) {
      print_help(stdout);
      return 0;
    }
    const struct npu_cmd *c = find_command(argv[2]);
    if (!c) return unknown_command(argv[2]);
    fputs(c->usage, stdout);
    return 0;
  }
  const struct npu_cmd *c = find_command(cmd);
  if (!c) return unknown_command(cmd);
  bool help = false;
  for (int i = 2; i < argc && !help; i++) help = strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
  if (help && !c->help) {
    fputs(c->usage, stdout);
    return 0;
  }
  struct npu_buf out = {0};
  struct npu_diag diag;
  npu_diag_clear(&diag);
  int rc = (help ? c->help : c->run)(argc - 1, argv + 1, &out, &diag);
  if (rc == 0) {
    fwrite(npu_buf_str(&out), 1, out.len, stdout);
    if (fflush(stdout) != 0) rc = NPU_EIO;
  } else {
    npu_diag_print(stderr, &diag);
  }
  npu_buf_release(&out);
  return npu_exit_status(rc);
}
