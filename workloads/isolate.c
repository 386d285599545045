/*
 * isolate.c - work in a child process, and a training scenario replayed in one; see isolate.h.
 */
#include "workloads/isolate.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fdio.h"
#include "workloads/job.h"
#include "workloads/replay.h"

/* In the child: run and fill the record. */
static void child(const char *path, const char *const *sets, int n, struct wl_outcome *o)
{
  struct npu_diag diag;
  npu_diag_clear(&diag);
  struct wl_job job;
  struct wl_result res;
  memset(&res, 0, sizeof res);
  int rc = wl_job_load(&job, path, sets, n, &diag);
  if (!rc && !wl_job_is_training(&job))
    rc = npu_diag_set(&diag, path, 0, "model", "the scenario has no model section");
  if (!rc) rc = wl_replay(&job, NULL, &res, &diag);
  o->status = rc;
  if (rc) {
    npu_diag_format(&diag, o->message, sizeof o->message);
  } else {
    o->step_time_s = res.step_s;
    o->tokens_per_s = res.tokens_per_s;
    o->devices = job.devices;
    o->tokens_per_s_per_device = res.tokens_per_s / job.devices;
    o->mfu = res.mfu;
    o->hfu = res.hfu;
    o->bubble_fraction = res.bubble_fraction;
    o->memory_peak_bytes = res.peak_mem.total_bytes;
    /* as Korthikanti et al. report them: the weights, gradients and optimizer states of a stage
     * of transformer layers only (stage 1 when there are several), stage 0's activations */
    const struct wl_mem *ms = &res.stages[res.nstages > 1 ? 1 : 0].mem;
    o->memory_weights_optimizer_bytes = ms->weights_bytes + ms->grads_bytes + ms->optimizer_bytes;
    o->memory_activations_bytes = res.stages[0].mem.activations_bytes;
    o->oom = res.oom;
    o->wall_s = res.wall_s;
    snprintf(o->bottleneck, sizeof o->bottleneck, "%s", res.bottleneck);
    memcpy(o->cat_s, res.cat_s, sizeof o->cat_s);
  }
  wl_result_release(&res);
  wl_job_release(&job);
}

int wl_isolate(void (*fn)(void *ctx, void *record), void *ctx, void *record, size_t size, const char *path,
               struct npu_diag *diag)
{
  memset(record, 0, size);
  int fds[2];
  if (pipe(fds)) return npu_diag_set(diag, path, 0, NULL, "pipe: %s", strerror(errno)), NPU_EINTERNAL;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return npu_diag_set(diag, path, 0, NULL, "fork: %s", strerror(errno)), NPU_EINTERNAL;
  }
  if (pid == 0) {
    close(fds[0]);
    fn(ctx, record); /* the child's copy of record */
    bool ok = npu_write_all(fds[1], record, size);
    close(fds[1]);
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  bool got = npu_read_all(fds[0], record, size);
  close(fds[0]);
  int st = 0;
  npu_wait_child(pid, &st);
  if (!got) {
    if (WIFSIGNALED(st))
      return npu_diag_set(diag, path, 0, NULL, "the run died with signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st))),
             NPU_EINTERNAL;
    return npu_diag_set(diag, path, 0, NULL, "the run ended without a result (exit status %d)", WEXITSTATUS(st)),
           NPU_EINTERNAL;
  }
  return 0;
}

struct train_ctx {
  const char *path;
  const char *const *sets;
  int n;
};

static void train_child(void *ctx, void *record)
{
  const struct train_ctx *c = ctx;
  child(c->path, c->sets, c->n, record);
}

int wl_run_isolated(const char *path, const char *const *sets, int n, struct wl_outcome *out, struct npu_diag *diag)
{
  struct train_ctx c = {path, sets, n};
  return wl_isolate(train_child, &c, out, sizeof *out, path, diag);
}
