/*
 * nccl_table.h - reading a collective's table as nccl-tests prints it (and as `npusim
 * collective` prints it, in the same columns), so a measurement and a simulation of a
 * collective can be set side by side by message size (`npusim compare`).
 *
 * nccl-tests (NVIDIA/nccl-tests, every *_perf binary) prints comment lines starting with '#',
 * then one row per message size:
 *
 *     size  count  type  redop  root  time algbw busbw #wrong  time algbw busbw #wrong
 *     (B)   (elements)                (us) (GB/s) (GB/s)       (us) (GB/s) (GB/s)
 *
 * the first group out of place, the second in place (a run with -c 0 prints N/A for #wrong),
 * and a footer "# Avg bus bandwidth : X". hccl_test (HCCL's performance tester) prints, after a
 * header line naming data_size, aveg_time, alg_bandwidth and check_result, rows of the data size
 * per NPU (bytes), the time (us), the algorithm bandwidth (GB/s) and the check's result: read
 * with no type, reduction or bus bandwidth (busbw_gbps < 0). `npusim collective` prints size, count, type, redop,
 * root, time, algbw, busbw, loops and the algorithm (out of place and in place being the same
 * in the model). Lines whose first field is not a whole number (NCCL's own log lines, a
 * launcher's) are not rows and are passed over; a line that starts with a size but does not
 * have the columns above is refused with its file:line.
 */
#ifndef NPUSIM_REPORT_NCCL_TABLE_H
#define NPUSIM_REPORT_NCCL_TABLE_H

#include <stdbool.h>

#include "common/diag.h"

struct nccl_row {
  double size;        /* bytes, nccl-tests' size column */
  double count;       /* elements */
  char type[16];      /* float, bfloat16, ... */
  char redop[16];     /* sum, none, ... */
  double time_us;     /* out of place */
  double algbw_gbps;  /* GB/s = 1e9 bytes/s */
  double busbw_gbps;  /* < 0 when the table has none (hccl_test) */
  double ip_time_us;  /* in place; < 0 when the row has none (npusim's rows) */
  int line;           /* in the file */
};

struct nccl_table {
  struct nccl_row *rows;
  int n;
};

/* Whether path's text looks like such a table: a '#' line naming the busbw column. */
bool nccl_table_sniff(const char *path);

/* Read path's rows (in file order). 0, or an error naming path:line. */
int nccl_table_read(const char *path, struct nccl_table *t, struct npu_diag *diag);

void nccl_table_free(struct nccl_table *t);

#endif
