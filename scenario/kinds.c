/*
 * kinds.c - THE table of scenario kinds, and what every caller does through it: detection from
 * the parsed configuration, loading, running, reports, rows of sweeps and batches.
 */
#include "scenario/scenario.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "scenario/scenario_int.h"

/*
 * Detection order: the first kind that detects a configuration is its kind, so a kind that
 * refines another comes before it (an RL scenario has a model section too). Registration of
 * sections for detection and `npusim keys` follows this order as well, each group once.
 */
static const struct scn_kind *const kinds[] = {
    &scn__kind_rl,
    &scn__kind_serve,
    &scn__kind_training,
    &scn__kind_kernel,
    &scn__kind_collective,
};
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

const struct scn_kind *const *scn_kinds(int *n)
{
  *n = NKINDS;
  return kinds;
}

const struct scn_kind *scn_kind_find(const char *name)
{
  for (int i = 0; i < NKINDS; i++)
    if (!strcmp(kinds[i]->name, name)) return kinds[i];
  return NULL;
}

const char *scn_kind_names(void)
{
  static char names[256];
  if (!names[0]) {
    size_t l = 0;
    for (int i = 0; i < NKINDS; i++) l += (size_t)snprintf(names + l, sizeof names - l, "%s%s", i ? ", " : "", kinds[i]->name);
  }
  return names;
}

/* ------------------------------------------------------------------ sections and detection */

#define MAX_GROUPS 32

struct scn_sections {
  const struct scn_section *group[MAX_GROUPS + 1];
  void *values[MAX_GROUPS + 1];
};

struct scn_sections *scn_sections_add_all(struct npu_cfg *cfg)
{
  struct scn_sections *s = npu_xcalloc(1, sizeof *s);
  int n = 0;
  for (int k = 0; k < NKINDS; k++)
    for (const struct scn_section *const *g = kinds[k]->sections; *g; g++) {
      bool seen = false;
      for (int i = 0; i < n && !seen; i++) seen = s->group[i] == *g;
      if (seen) continue;
      NPU_ASSERT(n < MAX_GROUPS);
      s->group[n] = *g;
      s->values[n++] = (*g)->add(cfg);
    }
  return s;
}

void scn_sections_release(struct scn_sections *s)
{
  if (!s) return;
  for (int i = 0; s->group[i]; i++)
    if (s->group[i]->release) s->group[i]->release(s->values[i]);
  free(s);
}

/* The kind of path with sets, loaded with every kind's sections (presence_only: only noting
 * which sections are given, npu_cfg_set_presence_only). */
static int detect(const struct scn_kind **out, const char *path, const char *const *sets, int nsets, bool presence_only,
                  struct npu_diag *diag)
{
  *out = NULL;
  struct npu_cfg *cfg = npu_cfg_create();
  npu_cfg_set_display_root(cfg, arch_source_root());
  if (presence_only) npu_cfg_set_presence_only(cfg);
  struct scn_sections *s = scn_sections_add_all(cfg);
  int rc = scn__cfg_load(cfg, path, sets, nsets, diag);
  for (int i = 0; !rc && i < NKINDS && !*out; i++)
    if (kinds[i]->detect(cfg)) *out = kinds[i];
  npu_cfg_destroy(cfg);
  scn_sections_release(s);
  return rc;
}

/* The sections given decide the kind, and the kind's load checks everything: most scenarios
 * need no more than their top level read here (detecting by a full load was a third of loading
 * one). Where that fails or finds no kind, the full load with every kind's sections says why,
 * as it always did. */
int scn_detect(const struct scn_kind **out, const char *path, const char *const *sets, int nsets,
               struct npu_diag *diag)
{
  struct npu_diag quiet;
  npu_diag_clear(&quiet);
  if (!detect(out, path, sets, nsets, true, &quiet) && *out) return 0;
  return detect(out, path, sets, nsets, false, diag);
}

/* ------------------------------------------------------------------ scenarios */

int scn_load(struct scn_scenario **out, const struct scn_kind *kind, const char *path, const char *const *sets,
             int nsets, struct npu_diag *diag)
{
  *out = NULL;
  if (!kind) {
    int rc = scn_detect(&kind, path, sets, nsets, diag);
    if (rc) return rc;
    if (!kind)
      return npu_diag_set(diag, path, 0, "model",
                          "the scenario describes a system only (no model section): 'npusim arch show %s' prints it",
                          path),
             NPU_ECONFIG;
  }
  return kind->load(out, path, sets, nsets, diag);
}

int scn_run(struct scn_scenario *s, bool want_trace, struct npu_diag *diag)
{
  int rc = s->kind->run(s, want_trace, diag);
  s->ran = rc == 0;
  s->traced = s->ran && want_trace;
  return rc;
}

void scn_destroy(struct scn_scenario *s)
{
  if (!s) return;
  npu_trace_release(&s->trace);
  s->kind->release(s);
}

void scn_text(const struct scn_scenario *s, struct npu_buf *out)
{
  NPU_ASSERT(s->ran);
  s->kind->text(s, out);
}

void scn_json(const struct scn_scenario *s, struct npu_buf *out)
{
  NPU_ASSERT(s->ran);
  s->kind->json(s, out);
}

void scn_csv(const struct scn_scenario *s, struct npu_buf *out)
{
  NPU_ASSERT(s->ran);
  rpt_columns_csv_header(s->kind->columns(), out);
  rpt_columns_csv_row(s->kind->columns(), s->kind->row(s), out);
}

const char *scn_extra_file(const struct scn_scenario *s, int i, struct npu_buf *out)
{
  NPU_ASSERT(s->ran);
  return s->kind->extra_file ? s->kind->extra_file(s, i, out) : NULL;
}

bool scn_has_html(const struct scn_scenario *s)
{
  return s->kind->html != NULL;
}

void scn_html(const struct scn_scenario *s, struct npu_buf *out)
{
  NPU_ASSERT(s->ran && s->kind->html);
  s->kind->html(s, out);
}

/* The first line of a CSV text, without its newline. */
static void first_line(struct npu_buf *out, const struct npu_buf *csv)
{
  const char *t = npu_buf_str(csv);
  npu_buf_printf(out, "%.*s", (int)strcspn(t, "\n"), t);
}

void scn_kind_header(const struct scn_kind *kind, struct npu_buf *out)
{
  struct npu_buf b = {0};
  rpt_columns_csv_header(kind->columns(), &b);
  first_line(out, &b);
  npu_buf_release(&b);
}

int scn_run_row(const struct scn_kind *kind, const char *path, const char *display, const char *const *sets,
                int nsets, struct npu_buf *row, struct npu_diag *diag)
{
  struct scn_scenario *s;
  int rc = scn_load(&s, kind, path, sets, nsets, diag);
  if (rc) return rc;
  rc = scn_run(s, false, diag);
  if (!rc) {
    if (display) s->kind->set_display(s, display);
    struct npu_buf b = {0};
    rpt_columns_csv_row(s->kind->columns(), s->kind->row(s), &b);
    first_line(row, &b);
    npu_buf_release(&b);
  }
  scn_destroy(s);
  return rc;
}
