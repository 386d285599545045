/*
 * kind_serve.c - the kind "serve": LLM inference serving on a simulated cluster (serve/,
 * docs/SERVING.md): TTFT, TPOT, inter-token and end-to-end latencies, throughput, goodput under
 * SLOs, KV-cache occupancy. Detected by a serve section; it comes before "training", as a
 * serving scenario has a model section too.
 */
#include "scenario/scenario_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "serve/serve.h"

struct serve {
  struct scn_scenario base; /* first */
  struct sv_job job;
  struct sv_result res;
  struct sv_report report;  /* what the columns read */
};

#define S(s) ((struct serve *)(s))

static void *serve_add(struct npu_cfg *cfg)
{
  struct sv_spec *spec = npu_xcalloc(1, sizeof *spec);
  sv_spec_register(cfg, spec);
  return spec;
}

static const struct scn_section section_serve = {"serve", serve_add, free};

/* The training group holds the model and run sections a serving job reads (its plan and
 * routing keys are refused by sv_job_load, which does not register them). */
static const struct scn_section *const sections[] = {&scn__section_system, &scn__section_training, &section_serve,
                                                     NULL};

static bool detect(const struct npu_cfg *cfg)
{
  return npu_cfg_section_present(cfg, "serve");
}

static int load(struct scn_scenario **out, const char *path, const char *const *sets, int nsets,
                struct npu_diag *diag)
{
  struct serve *v = npu_xcalloc(1, sizeof *v);
  v->base.kind = &scn__kind_serve;
  int rc = sv_job_load(&v->job, path, sets, nsets, diag);
  if (rc) {
    sv_job_release(&v->job);
    free(v);
    return rc;
  }
  v->report.job = &v->job;
  v->report.res = &v->res;
  *out = &v->base;
  return 0;
}

static int run(struct scn_scenario *s, bool want_trace, struct npu_diag *diag)
{
  return sv_run(&S(s)->job, want_trace ? &s->trace : NULL, &S(s)->res, diag);
}

static const void *row(const struct scn_scenario *s)
{
  return &S(s)->report;
}

static void json(const struct scn_scenario *s, struct npu_buf *out)
{
  sv_summary_json(&S(s)->job, &S(s)->res, out);
}

static void text(const struct scn_scenario *s, struct npu_buf *out)
{
  sv_summary_text(&S(s)->job, &S(s)->res, out);
}

static void html(const struct scn_scenario *s, struct npu_buf *out)
{
  sv_summary_html(&S(s)->job, &S(s)->res, out);
}

static void set_display(struct scn_scenario *s, const char *name)
{
  snprintf(S(s)->job.path, sizeof S(s)->job.path, "%s", name);
}

static void release(struct scn_scenario *s)
{
  sv_job_release(&S(s)->job);
  free(s);
}

/* a serving job has no global batch; the training group's loader asks for one */
static struct scn_probe *probe_open(const char *path, const char *const *sets, int nsets, struct npu_diag *diag)
{
  return scn__probe_open(sections, "plan.global_batch=1", path, sets, nsets, diag);
}

const struct scn_kind scn__kind_serve = {
    .name = "serve",
    .desc = "LLM inference serving (npusim run on a scenario with a serve section): TTFT, TPOT, throughput, "
            "goodput, KV cache",
    .sections = sections,
    .detect = detect,
    .load = load,
    .run = run,
    .columns = sv_summary_columns,
    .row = row,
    .json = json,
    .text = text,
    .html = html,
    .set_display = set_display,
    .release = release,
    .probe_open = probe_open,
    .probe_finish = scn__probe_finish,
    .probe_number = scn__probe_number,
    .probe_close = scn__probe_close,
};
