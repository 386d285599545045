/*
 * run_micro.c - `npusim run` on kernel and collective scenarios; see run_micro.h.
 */
#include "cli/run_micro.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "report/chrome.h"

/* Write the files into dir: all built first, then each written whole (cli_write_file). */
static int write_dir(const char *dir, const struct npu_buf *json, const struct npu_buf *csv,
                     const struct npu_buf *trace, struct npu_diag *diag)
{
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return npu_diag_set(diag, dir, 0, "-o", "cannot create the directory: %s", strerror(errno)), NPU_EIO;
  char p[4096];
  snprintf(p, sizeof p, "%s/summary.json", dir);
  int rc = cli_write_file(p, json, "-o", diag);
  if (!rc) rc = (snprintf(p, sizeof p, "%s/summary.csv", dir), cli_write_file(p, csv, "-o", diag));
  if (!rc && trace) rc = (snprintf(p, sizeof p, "%s/trace.json", dir), cli_write_file(p, trace, "--trace", diag));
  return rc;
}

static int run_kernel(const char *path, const char *dir, bool want_trace, const struct cli_sets *sets,
                      struct npu_buf *out, struct npu_diag *diag)
{
  struct mc_kernel_job job;
  struct op_result res;
  struct npu_trace trace = {0};
  int rc = mc_kernel_load(&job, path, (const char *const *)sets->items, sets->n, diag);
  if (!rc && want_trace && job.spec.fidelity != CORE_FIDELITY_EVENT)
    rc = npu_cfg_fail(job.cfg, diag, "kernel.fidelity", "a trace needs kernel.fidelity = \"event\"");
  if (!rc) {
    trace.limit = 4000000;
    rc = mc_kernel_run(&job, want_trace ? &trace : NULL, &res, diag);
  }
  if (!rc) {
    const char *fid = job.spec.fidelity == CORE_FIDELITY_EVENT ? "event" : "analytic";
    struct npu_buf js = {0}, csv = {0}, tr = {0};
    if (dir) {
      mc_kernel_json(job.op, job.args_text, &job.sys, fid, (uint64_t)job.spec.seed, &res, &js);
      mc_kernel_csv_header(&csv);
      mc_kernel_csv_row(&job, &res, &csv);
      if (want_trace) rpt_chrome_write(&trace, &tr);
      rc = write_dir(dir, &js, &csv, want_trace ? &tr : NULL, diag);
    }
    if (!rc) mc_kernel_text(job.op, job.args_text, &job.sys, fid, &res, out);
    npu_buf_release(&js);
    npu_buf_release(&csv);
    npu_buf_release(&tr);
  }
  npu_trace_release(&trace);
  mc_kernel_release(&job);
  return rc;
}

static int run_coll(const char *path, const char *dir, bool want_trace, const struct cli_sets *sets,
                    struct npu_buf *out, struct npu_diag *diag)
{
  if (want_trace)
    return npu_diag_set(diag, "command line", 0, "--trace", "a collective scenario has no trace"), NPU_EINVAL;
  struct mc_coll_job job;
  struct mc_coll_result res;
  int rc = mc_coll_load(&job, path, (const char *const *)sets->items, sets->n, diag);
  if (!rc) rc = mc_coll_run(&job, &res, diag);
  if (!rc) {
    const char *arch = mc_system_name(&job.sys);
    struct npu_buf js = {0}, csv = {0};
    if (dir) {
      mc_coll_json(arch, &res, 1, &js);
      mc_coll_csv_header(&csv);
      mc_coll_csv_row(&job, &res, &csv);
      rc = write_dir(dir, &js, &csv, NULL, diag);
    }
    if (!rc) mc_coll_text(arch, &res, 1, out);
    npu_buf_release(&js);
    npu_buf_release(&csv);
  }
  mc_coll_release(&job);
  return rc;
}

int cli_run_micro(enum mc_kind kind, const char *path, const char *dir, bool trace, const struct cli_sets *sets,
                  struct npu_buf *out, struct npu_diag *diag)
{
  return kind == MC_KIND_KERNEL ? run_kernel(path, dir, trace, sets, out, diag)
                                : run_coll(path, dir, trace, sets, out, diag);
}
