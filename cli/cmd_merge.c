/*
 * cmd_merge.c - `npusim merge OUT.csv SHARD.csv...`: the shards of a sweep (--shard I/N) into
 * one results file, as one run of the whole sweep would have written it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/err.h"
#include "sweep/table.h"

static const char usage[] =
    "usage: npusim merge OUT.csv SHARD.csv...\n"
    "\n"
    "Combine the results of a sweep's shards ('npusim sweep ... --shard I/N') into OUT.csv,\n"
    "rows in point order: the same file one run of the whole sweep writes. Refused (exit 2):\n"
    "shards of different sweeps (another header, or another fingerprint in SHARD.csv.journal),\n"
    "a point in two shards (overlap), and points in none (gaps; the count of points comes from\n"
    "the shards' journals when they are next to them).\n";

struct shard_info {
  bool have;
  unsigned long long fp;
  int points, si, sn;
};

static void read_journal(const char *csv, struct shard_info *in)
{
  char path[4200];
  snprintf(path, sizeof path, "%s.journal", csv);
  memset(in, 0, sizeof *in);
  FILE *f = fopen(path, "r");
  if (!f) return;
  char l1[256], l2[256];
  if (fgets(l1, sizeof l1, f) && fgets(l2, sizeof l2, f) && !strncmp(l1, "npusim-sweep-journal", 20))
    in->have = sscanf(l2, "fingerprint %llx points %d shard %d/%d", &in->fp, &in->points, &in->si, &in->sn) == 4;
  fclose(f);
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  const char *dst = NULL;
  int nin = 0, rc = 0;
  const char **in = npu_xcalloc((size_t)argc + 1, sizeof *in);
  for (int i = 1; i < argc && !rc; i++) {
    if (argv[i][0] == '-' && argv[i][1]) rc = cli_bad_arg(diag, "merge", argv[i]);
    else if (!dst) dst = argv[i];
    else in[nin++] = argv[i];
  }
  if (!rc && (!dst || !nin)) rc = npu_diag_set(diag, "command line", 0, NULL, "merge needs OUT.csv and at least one shard");
  struct sw_table *t = npu_xcalloc((size_t)nin + 1, sizeof *t);
  struct shard_info *si = npu_xcalloc((size_t)nin + 1, sizeof *si);
  int loaded = 0, total = -1, maxp = -1, rows = 0;
  for (int i = 0; i < nin && !rc; i++) {
    rc = sw_table_read(in[i], &t[i], diag);
    if (rc) break;
    loaded++;
    if (t[i].ncols < 1 || strcmp(t[i].cols[0], "point") != 0 || t[i].status_col < 0) {
      rc = (npu_diag_set(diag, in[i], 1, NULL, "not a sweep's results (no point and status columns)"), NPU_ECONFIG);
      break;
    }
    if (i && strcmp(t[i].header, t[0].header) != 0) {
      rc = (npu_diag_set(diag, in[i], 1, NULL, "mismatched sweeps: the header differs from %s's", in[0]), NPU_ECONFIG);
      break;
    }
    read_journal(in[i], &si[i]);
    for (int j = 0; j < i && !rc; j++) {
      if (!si[i].have || !si[j].have) continue;
      if (si[i].fp != si[j].fp || si[i].points != si[j].points)
        rc = (npu_diag_set(diag, in[i], 0, NULL, "mismatched sweeps: its journal's fingerprint differs from %s's", in[j]), NPU_ECONFIG);
    }
    if (si[i].have) total = si[i].points;
    rows += t[i].nrows;
  }
  /* every point once */
  int *owner = NULL;
  int cap = 0;
  char **line_of = NULL;
  for (int i = 0; i < loaded && !rc; i++)
    for (int r = 0; r < t[i].nrows && !rc; r++) {
      char *end;
      long p = strtol(t[i].rows[r][0], &end, 10);
      if (end == t[i].rows[r][0] || *end || p < 0 || p > 100000000) {
        rc = (npu_diag_set(diag, in[i], r + 2, "point", "not a point number: '%s'", t[i].rows[r][0]), NPU_ECONFIG);
        break;
      }
      if (p >= cap) {
        int nc = (int)p + 1 > cap * 2 ? (int)p + 1 : cap * 2;
        owner = npu_xrealloc(owner, (size_t)nc * sizeof *owner);
        line_of = npu_xrealloc(line_of, (size_t)nc * sizeof *line_of);
        for (int k = cap; k < nc; k++) owner[k] = -1, line_of[k] = NULL;
        cap = nc;
      }
      if (line_of[p]) {
        rc = (npu_diag_set(diag, in[i], r + 2, "point", "overlap: point %ld is also in %s", p,
                          in[owner[p]]), NPU_ECONFIG);
        break;
      }
      line_of[p] = t[i].lines[r];
      owner[p] = i;
      if (p > maxp) maxp = (int)p;
    }
  if (!rc) {
    int n = total >= 0 ? total : maxp + 1;
    if (maxp >= n) rc = (npu_diag_set(diag, dst, 0, NULL, "point %d is beyond the sweep's %d points", maxp, n), NPU_ECONFIG);
    struct npu_buf miss = {0};
    int nmiss = 0;
    for (int p = 0; p < n && !rc; p++)
      if (p >= cap || !line_of[p]) {
        if (nmiss++ < 10) npu_buf_printf(&miss, "%s%d", nmiss > 1 ? ", " : "", p);
      }
    if (!rc && nmiss)
      rc = (npu_diag_set(diag, dst, 0, NULL, "gaps: %d of %d points are in no shard (%s%s)", nmiss, n, npu_buf_str(&miss),
                        nmiss > 10 ? ", ..." : ""), NPU_ECONFIG);
    npu_buf_release(&miss);
    if (!rc) {
      struct npu_buf b = {0};
      npu_buf_printf(&b, "%s\n", t[0].header);
      for (int p = 0; p < n; p++) npu_buf_printf(&b, "%s\n", line_of[p]);
      rc = cli_write_file(dst, &b, NULL, diag);
      npu_buf_release(&b);
      if (!rc)
        npu_buf_printf(out, "merged %d shards: %d points into %s%s\n", nin, n, dst,
                       total < 0 ? " (no journals next to the shards: trailing gaps cannot be seen)" : "");
    }
  }
  for (int i = 0; i < loaded; i++) sw_table_free(&t[i]);
  free(t);
  free(si);
  free(owner);
  free(line_of);
  free(in);
  return rc;
}

const struct npu_cmd npu_cmd_merge = {
    .name = "merge",
    .summary = "combine the shard results of a sweep into one CSV, checking gaps and overlaps",
    .usage = usage,
    .run = run};
