/* helpers.c - see helpers.h. */
#include "tests/workloads/helpers.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "workloads/program.h"

void tw_load(struct tw *w, const char *model, int devices, const char *const *sets)
{
  struct npu_diag d;
  char buf[256], msg[2048];
  npu_diag_clear(&d);
  memset(w, 0, sizeof *w);
  w->cfg = npu_cfg_create();
  wl_model_register(w->cfg, &w->m);
  wl_plan_register(w->cfg, &w->p);
  w->sys.has_node = true;
  w->sys.node.devices = devices;
  snprintf(buf, sizeof buf, "model.preset=%s", model);
  int rc = npu_cfg_set(w->cfg, buf, &d);
  for (int i = 0; sets && sets[i] && rc == 0; i++) rc = npu_cfg_set(w->cfg, sets[i], &d);
  if (rc == 0) rc = npu_cfg_finish(w->cfg, &d);
  if (rc == 0) rc = wl_model_finish(w->cfg, &w->m, &d);
  if (rc == 0) rc = wl_plan_finish(w->cfg, &w->p, &w->m, &w->sys, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s: %s", model, msg);
}

void tw_fini(struct tw *w)
{
  npu_cfg_destroy(w->cfg);
  w->cfg = NULL;
}

void tw_close(double got, double want, double rel, const char *what)
{
  cr_assert(fabs(got - want) <= rel * fabs(want), "%s: got %.9g, want %.9g (+-%.3g%%)", what, got, want,
            rel * 100);
}

void tw_job_load(struct wl_job *job, const char *file, const char *const *sets, int n)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  char msg[1024];
  int rc = wl_job_load(job, file, sets, n, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
}

void tw_job_refused(const char *file, const char *const *sets, int n, const char *key, const char *words)
{
  struct wl_job job;
  struct npu_diag d;
  npu_diag_clear(&d);
  int rc = wl_job_load(&job, file, sets, n, &d);
  cr_expect_eq(rc, NPU_ECONFIG, "%s refused", key);
  cr_expect_str_eq(d.key, key);
  cr_expect(strstr(d.msg, words) != NULL, "'%s' in: %s", words, d.msg);
  wl_job_release(&job);
}

int tw_count_op(const struct wl_program *p, int k, const char *op, struct op_call *first)
{
  int n = 0;
  const struct wl_seg *sg = &p->seg[k];
  for (int i = sg->first_item; i < sg->first_item + sg->nitems; i++) {
    const struct wl_item *it = &p->items[i];
    if (it->coll || strcmp(p->kernels[it->index].op, op)) continue;
    if (!n++ && first) *first = p->kernels[it->index].call;
  }
  return n;
}
