/*
 * cmd_columns.c - `npusim columns [KIND]`: every output column of each kind of scenario (the
 * columns of summary.csv, of sweep rows and batch rows after their own columns), with type,
 * unit and meaning, as the Markdown of docs/OUTPUTS.md: the results' counterpart of `npusim
 * keys`. The columns come from each kind's one table (report/columns.h).
 */
#include <string.h>

#include "cli/cli.h"
#include "common/err.h"
#include "report/columns.h"
#include "scenario/scenario.h"

static const char usage[] =
    "usage: npusim columns [KIND]\n"
    "\n"
    "Print the output columns of each kind of scenario (or of KIND: training, rl, serve, kernel,\n"
    "collective): the columns of summary.csv (`npusim run -o DIR`), of a sweep's or a batch's\n"
    "rows after their own columns, with type, unit and meaning, as Markdown: a section per\n"
    "kind, a table row per column. docs/OUTPUTS.md lists the same columns.\n";

static void kind_section(const struct scn_kind *k, struct npu_buf *out)
{
  npu_buf_printf(out, "## %s\n\n%s.\n\n", k->name, k->desc);
  rpt_columns_markdown(k->columns(), out);
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  if (argc > 2) return cli_bad_arg(diag, "columns", argv[2]);
  if (argc == 2) {
    if (argv[1][0] == '-') return cli_bad_arg(diag, "columns", argv[1]);
    const struct scn_kind *k = scn_kind_find(argv[1]);
    if (!k) {
      int n;
      const struct scn_kind *const *kinds = scn_kinds(&n);
      const char *names[16];
      for (int i = 0; i < n && i < 16; i++) names[i] = kinds[i]->name;
      const char *s = npu_suggest(argv[1], names, (size_t)(n < 16 ? n : 16));
      if (s) return npu_diag_set(diag, "command line", 0, NULL, "unknown kind '%s'; did you mean '%s'?", argv[1], s), NPU_EINVAL;
      return npu_diag_set(diag, "command line", 0, NULL, "unknown kind '%s' (kinds: %s)", argv[1], scn_kind_names()),
             NPU_EINVAL;
    }
    kind_section(k, out);
    return 0;
  }
  int n;
  const struct scn_kind *const *kinds = scn_kinds(&n);
  for (int i = 0; i < n; i++) {
    if (i) npu_buf_puts(out, "\n");
    kind_section(kinds[i], out);
  }
  return 0;
}

const struct npu_cmd npu_cmd_columns = {"columns", "every output column of each kind of scenario, with unit and meaning",
                                        usage, run, NULL};
