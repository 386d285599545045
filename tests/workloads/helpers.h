/* helpers.h - shared setup for the workloads tests: a model and plan loaded through the cfg loader. */
#ifndef NPUSIM_TESTS_WORKLOADS_HELPERS_H
#define NPUSIM_TESTS_WORKLOADS_HELPERS_H

#include "arch/arch.h"
#include "common/cfg.h"
#include "workloads/job.h"
#include "workloads/model.h"
#include "workloads/plan.h"

struct tw {
  struct npu_cfg *cfg;
  struct wl_model m;
  struct wl_plan p;
  struct arch_system sys; /* a bare system of `devices` devices (no chip figures needed) */
};

/*
 * Load `model = { preset = MODEL; }` and a plan from "KEY=VALUE" assignments (NULL-terminated;
 * "plan.global_batch=..." is required, "model.KEY=..." overrides the preset) on a system of
 * `devices` devices, through wl_model_finish and wl_plan_finish. Asserts success.
 */
void tw_load(struct tw *w, const char *model, int devices, const char *const *sets);
void tw_fini(struct tw *w);

/* Load the training scenario `file` with overrides sets[0..n-1] into *job; asserts success. */
void tw_job_load(struct wl_job *job, const char *file, const char *const *sets, int n);

/* Assert |got - want| <= rel * |want| with a message naming what. */
void tw_close(double got, double want, double rel, const char *what);

#endif
