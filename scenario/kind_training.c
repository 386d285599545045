/*
 * kind_training.c - the kind "training": one training step of a model on a system with a
 * parallel plan (workloads/): step time, MFU, memory, the bottleneck, a breakdown per stage.
 * Detected by a model section.
 */
#include "scenario/scenario_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "workloads/job.h"
#include "workloads/opstats.h"
#include "workloads/replay.h"
#include "workloads/summary.h"

struct training {
  struct scn_scenario base; /* first */
  struct wl_job job;
  struct wl_result res;
  struct wl_report report;  /* what the columns read */
};

#define T(s) ((struct training *)(s))

static const struct scn_section *const sections[] = {&scn__section_system, &scn__section_training, NULL};

static bool detect(const struct npu_cfg *cfg)
{
  return npu_cfg_section_present(cfg, "model");
}

static int load(struct scn_scenario **out, const char *path, const char *const *sets, int nsets,
                struct npu_diag *diag)
{
  struct training *t = npu_xcalloc(1, sizeof *t);
  t->base.kind = &scn__kind_training;
  int rc = wl_job_load(&t->job, path, sets, nsets, diag);
  if (!rc && !wl_job_is_training(&t->job))
    rc = (npu_diag_set(diag, path, 0, "model", "the scenario has no model section"), NPU_ECONFIG);
  if (rc) {
    wl_job_release(&t->job);
    free(t);
    return rc;
  }
  t->report.job = &t->job;
  t->report.res = &t->res;
  *out = &t->base;
  return 0;
}

static int run(struct scn_scenario *s, bool want_trace, struct npu_diag *diag)
{
  T(s)->job.progress = s->progress;
  return wl_replay(&T(s)->job, want_trace ? &s->trace : NULL, &T(s)->res, diag);
}

static const void *row(const struct scn_scenario *s)
{
  return &T(s)->report;
}

static void json(const struct scn_scenario *s, struct npu_buf *out)
{
  wl_summary_json(&T(s)->job, &T(s)->res, out);
}

static void text(const struct scn_scenario *s, struct npu_buf *out)
{
  wl_summary_text(&T(s)->job, &T(s)->res, out);
}

static void html(const struct scn_scenario *s, struct npu_buf *out)
{
  wl_summary_html(&T(s)->job, &T(s)->res, out);
}

/* operators.csv: the per-operator statistics of the slowest stage (workloads/opstats.h). */
static const char *extra_file(const struct scn_scenario *s, int i, struct npu_buf *out)
{
  if (i != 0) return NULL;
  wl_op_stats_csv(&T(s)->res, out);
  return "operators.csv";
}

static void set_display(struct scn_scenario *s, const char *name)
{
  snprintf(T(s)->job.path, sizeof T(s)->job.path, "%s", name);
}

static void release(struct scn_scenario *s)
{
  wl_result_release(&T(s)->res);
  wl_job_release(&T(s)->job);
  free(s);
}

static struct scn_probe *probe_open(const char *path, const char *const *sets, int nsets, struct npu_diag *diag)
{
  return scn__probe_open(sections, NULL, path, sets, nsets, diag);
}

const struct scn_kind scn__kind_training = {
    .name = "training",
    .desc = "one training step (npusim run): step time, MFU, memory, breakdown",
    .sections = sections,
    .detect = detect,
    .load = load,
    .run = run,
    .columns = wl_summary_columns,
    .row = row,
    .json = json,
    .text = text,
    .extra_file = extra_file,
    .html = html,
    .set_display = set_display,
    .release = release,
    .probe_open = probe_open,
    .probe_finish = scn__probe_finish,
    .probe_number = scn__probe_number,
    .probe_close = scn__probe_close,
};
