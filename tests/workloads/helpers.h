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

/* Expect loading the training scenario `file` with overrides sets[0..n-1] to be refused
 * (NPU_ECONFIG) with diag key `key` and `words` in the message. */
void tw_job_refused(const char *file, const char *const *sets, int n, const char *key, const char *words);

struct wl_program;
struct op_call;
/* Kernel calls of operator op in segment k (an index of p->seg) of an expanded program; the first
 * one's call into *first when not NULL. */
int tw_count_op(const struct wl_program *p, int k, const char *op, struct op_call *first);

/* Assert |got - want| <= rel * |want| with a message naming what. */
void tw_close(double got, double want, double rel, const char *what);

#endif
