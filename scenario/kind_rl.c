/*
 * kind_rl.c - the kind "rl": one RL post-training iteration (rl/, docs/RL.md): time per phase
 * and pool, utilisation, tokens/s, MFU per phase. Detected by an rl section; it comes before
 * "training" in the table, as an RL scenario has the policy's model section too.
 */
#include "scenario/scenario_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "rl/rl.h"

struct rl {
  struct scn_scenario base; /* first */
  struct rl_job job;
  struct rl_result res;
  struct rl_report report;  /* what the columns read */
};

#define R(s) ((struct rl *)(s))

static void *rl_add(struct npu_cfg *cfg)
{
  struct rl_spec *spec = npu_xcalloc(1, sizeof *spec);
  rl_spec_register(cfg, spec);
  return spec;
}

/* The rl section: registered after the training job's, as in RL scenarios. */
static const struct scn_section section_rl = {"rl", rl_add, free};

static const struct scn_section *const sections[] = {&scn__section_system, &scn__section_training, &section_rl,
                                                     NULL};

static bool detect(const struct npu_cfg *cfg)
{
  return npu_cfg_section_present(cfg, "rl");
}

static int load(struct scn_scenario **out, const char *path, const char *const *sets, int nsets,
                struct npu_diag *diag)
{
  struct rl *r = npu_xcalloc(1, sizeof *r);
  r->base.kind = &scn__kind_rl;
  int rc = rl_job_load(&r->job, path, sets, nsets, diag);
  if (rc) {
    rl_job_release(&r->job);
    free(r);
    return rc;
  }
  r->report.job = &r->job;
  r->report.res = &r->res;
  *out = &r->base;
  return 0;
}

static int run(struct scn_scenario *s, bool want_trace, struct npu_diag *diag)
{
  return rl_run(&R(s)->job, want_trace ? &s->trace : NULL, &R(s)->res, diag);
}

static const void *row(const struct scn_scenario *s)
{
  return &R(s)->report;
}

static void json(const struct scn_scenario *s, struct npu_buf *out)
{
  rl_summary_json(&R(s)->job, &R(s)->res, out);
}

static void text(const struct scn_scenario *s, struct npu_buf *out)
{
  rl_summary_text(&R(s)->job, &R(s)->res, out);
}

static void html(const struct scn_scenario *s, struct npu_buf *out)
{
  rl_summary_html(&R(s)->job, &R(s)->res, out);
}

static void set_display(struct scn_scenario *s, const char *name)
{
  snprintf(R(s)->job.path, sizeof R(s)->job.path, "%s", name);
}

static void release(struct scn_scenario *s)
{
  rl_job_release(&R(s)->job);
  free(s);
}

/* as rl_job_load: the global batch is derived in an RL iteration, so it need not be written */
static struct scn_probe *probe_open(const char *path, const char *const *sets, int nsets, struct npu_diag *diag)
{
  return scn__probe_open(sections, "plan.global_batch=1", path, sets, nsets, diag);
}

const struct scn_kind scn__kind_rl = {
    .name = "rl",
    .desc = "one RL iteration (npusim run on a scenario with an rl section): time per phase, utilisation, "
            "tokens/s",
    .sections = sections,
    .detect = detect,
    .load = load,
    .run = run,
    .columns = rl_summary_columns,
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
