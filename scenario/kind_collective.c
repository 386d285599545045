/*
 * kind_collective.c - the kind "collective": one collective on the cluster (micro/, a
 * collective section): time, algbw, busbw, the algorithm. Its text and JSON are what `npusim
 * collective` prints for one size (the same functions).
 */
#include "scenario/scenario_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/derived.h"
#include "common/err.h"
#include "interconnect/topo.h"
#include "micro/micro.h"

struct coll {
  struct scn_scenario base; /* first */
  struct mc_coll_job job;
  struct mc_coll_result res;
  struct mc_coll_report report; /* what the columns read */
};

#define C(s) ((struct coll *)(s))

static void *coll_add(struct npu_cfg *cfg)
{
  return mc_coll_tables_register(cfg);
}

static void coll_values_release(void *v)
{
  mc_tables_destroy(v);
}

static const struct scn_section section_collective = {"collective", coll_add, coll_values_release};

static const struct scn_section *const sections[] = {&scn__section_system, &section_collective, NULL};

static bool detect(const struct npu_cfg *cfg)
{
  return npu_cfg_section_present(cfg, "collective");
}

static int load(struct scn_scenario **out, const char *path, const char *const *sets, int nsets,
                struct npu_diag *diag)
{
  struct coll *c = npu_xcalloc(1, sizeof *c);
  c->base.kind = &scn__kind_collective;
  int rc = mc_coll_load(&c->job, path, sets, nsets, diag);
  if (rc) {
    mc_coll_release(&c->job);
    free(c);
    return rc;
  }
  c->report.job = &c->job;
  c->report.res = &c->res;
  *out = &c->base;
  return 0;
}

static int run(struct scn_scenario *s, bool want_trace, struct npu_diag *diag)
{
  if (want_trace)
    return npu_diag_set(diag, "command line", 0, "--trace", "a collective scenario has no trace"), NPU_EINVAL;
  return mc_coll_run(&C(s)->job, &C(s)->res, diag);
}

static const void *row(const struct scn_scenario *s)
{
  return &C(s)->report;
}

static void json(const struct scn_scenario *s, struct npu_buf *out)
{
  mc_coll_json(mc_system_name(&C(s)->job.sys), &C(s)->res, 1, out);
}

static void text(const struct scn_scenario *s, struct npu_buf *out)
{
  mc_coll_text(mc_system_name(&C(s)->job.sys), &C(s)->res, 1, NULL, out);
}

/* What a device's links carry in one direction: its NICs' when the communicator spans servers,
 * else its links inside the server (0 when the system has no node section). */
static void html(const struct scn_scenario *s, struct npu_buf *out)
{
  const struct arch_system *sys = &C(s)->job.sys;
  const struct mc_coll_result *r = &C(s)->res;
  struct arch_derived d;
  arch_derive(sys, &d);
  bool across = r->servers > 1 && d.scale_out_bw_bytes_per_s > 0;
  mc_coll_html(C(s)->job.path, mc_system_name(sys), r, across ? d.scale_out_bw_bytes_per_s : d.intra_node_bw_bytes_per_s,
               across ? "a device's NICs" : "a device's links", out);
}

static void set_display(struct scn_scenario *s, const char *name)
{
  snprintf(C(s)->job.path, sizeof C(s)->job.path, "%s", name);
}

static void release(struct scn_scenario *s)
{
  mc_coll_release(&C(s)->job);
  free(s);
}

/* ------------------------------------------------------------------ probe */

struct probe {
  struct scn_probe base; /* first */
  struct mc_coll_job job;
};

static struct scn_probe *probe_open(const char *path, const char *const *sets, int nsets, struct npu_diag *diag)
{
  struct probe *p = npu_xcalloc(1, sizeof *p);
  mc_coll_init(&p->job, path);
  p->base.cfg = p->job.cfg;
  if (scn__cfg_load(p->base.cfg, path, sets, nsets, diag)) {
    mc_coll_release(&p->job);
    free(p);
    return NULL;
  }
  return &p->base;
}

/* The communicator against the system too. */
static int probe_finish(struct scn_probe *sp, struct npu_diag *diag)
{
  struct probe *p = (struct probe *)sp;
  sp->sys = &p->job.sys;
  return mc_coll_finish(&p->job, diag);
}

static int probe_number(struct scn_probe *sp, const char *key, double *out, struct npu_diag *diag)
{
  (void)diag;
  if (strcmp(key, "devices")) return 1;
  *out = ic_topo_system_ranks(sp->sys);
  return 0;
}

static void probe_close(struct scn_probe *sp)
{
  struct probe *p = (struct probe *)sp;
  mc_coll_release(&p->job);
  free(p);
}

const struct scn_kind scn__kind_collective = {
    .name = "collective",
    .desc = "one collective on the cluster (a collective section): time, algbw, busbw, algorithm",
    .sections = sections,
    .detect = detect,
    .load = load,
    .run = run,
    .columns = mc_coll_columns,
    .row = row,
    .json = json,
    .text = text,
    .html = html,
    .set_display = set_display,
    .release = release,
    .probe_open = probe_open,
    .probe_finish = probe_finish,
    .probe_number = probe_number,
    .probe_close = probe_close,
};
