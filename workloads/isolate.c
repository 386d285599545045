/*
 * isolate.c - work in a child process, and a training scenario replayed in one; see isolate.h.
 */
#include "workloads/isolate.h"

#include <errno.h>
#include <poll.h>
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
    memcpy(o->hidden_s, res.hidden_s, sizeof o->hidden_s);
  }
  wl_result_release(&res);
  wl_job_release(&job);
}

/* A child started: its pid and the read end of its pipe. */
struct started {
  pid_t pid;
  int fd;
};

static int start_child(void (*fn)(void *ctx, void *record), void *ctx, void *record, size_t size, const char *path,
                       struct started *st, struct npu_diag *diag)
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
    npu_child_exit(ok ? 0 : 1);
  }
  close(fds[1]);
  *st = (struct started){pid, fds[0]};
  return 0;
}

static int finish_child(const struct started *c, void *record, size_t size, const char *path, struct npu_diag *diag)
{
  bool got = npu_read_all(c->fd, record, size);
  close(c->fd);
  int st = 0;
  npu_wait_child(c->pid, &st);
  if (!got) {
    if (WIFSIGNALED(st))
      return npu_diag_set(diag, path, 0, NULL, "the run died with signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st))),
             NPU_EINTERNAL;
    return npu_diag_set(diag, path, 0, NULL, "the run ended without a result (exit status %d)", WEXITSTATUS(st)),
           NPU_EINTERNAL;
  }
  return 0;
}

int wl_isolate(void (*fn)(void *ctx, void *record), void *ctx, void *record, size_t size, const char *path,
               struct npu_diag *diag)
{
  struct started c;
  int rc = start_child(fn, ctx, record, size, path, &c, diag);
  return rc ? rc : finish_child(&c, record, size, path, diag);
}

int wl_isolate_all(struct wl_isolate_task *t, int n, int jobs, void (*done)(void *dctx, int index), void *dctx,
                   struct npu_diag *diag)
{
  if (jobs < 1) jobs = 1;
  struct started *c = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *c);
  int *running = npu_xcalloc((size_t)jobs, sizeof *running);
  struct pollfd *pfd = npu_xcalloc((size_t)jobs, sizeof *pfd);
  int rc = 0, next = 0, nrun = 0;
  /* up to jobs children; whichever reports first is finished and replaced (a child writes its
   * record only at its end, so a readable pipe means the whole record is coming) */
  while (!rc && (next < n || nrun > 0)) {
    while (!rc && next < n && nrun < jobs) {
      rc = start_child(t[next].fn, t[next].ctx, t[next].record, t[next].size, t[next].path, &c[next], diag);
      if (!rc) running[nrun++] = next++;
    }
    if (rc || nrun <= 0) break;
    for (int k = 0; k < nrun; k++) pfd[k] = (struct pollfd){.fd = c[running[k]].fd, .events = POLLIN};
    if (poll(pfd, (nfds_t)nrun, -1) < 0) {
      if (errno == EINTR) continue;
      npu_diag_set(diag, t[running[0]].path, 0, NULL, "poll: %s", strerror(errno));
      rc = NPU_EINTERNAL;
      break;
    }
    for (int k = 0; k < nrun && !rc; k++) {
      if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int i = running[k];
      rc = finish_child(&c[i], t[i].record, t[i].size, t[i].path, diag);
      running[k] = -1;
      if (!rc && done) done(dctx, i);
    }
    int m = 0; /* keep the ones still running */
    for (int k = 0; k < nrun; k++)
      if (running[k] >= 0) running[m++] = running[k];
    nrun = m;
  }
  for (int k = 0; k < nrun; k++) { /* after a failure: the others are waited for, their records dropped */
    struct npu_diag ignore;
    finish_child(&c[running[k]], t[running[k]].record, t[running[k]].size, t[running[k]].path, &ignore);
  }
  free(pfd);
  free(running);
  free(c);
  return rc;
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
