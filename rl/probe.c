/*
 * probe.c - the collectives of an iteration timed on the cluster's platform, and the
 * fork()ed child that runs anything needing a SimGrid engine (one engine per process: the
 * parent never starts one, so it can fork a training replay and this probe in turn).
 *
 * TP collectives of the inference engines are timed alone on their group's links, as the
 * training replay memoises its TP collectives; the weight synchronisation is one all-to-allv
 * over every rank with the byte matrix of reshard.c, so its flows contend on the real topology
 * (HCCS / NVLink inside a server, the scale-out network between the pools).
 */
#include "rl/rl_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "interconnect/run.h"

int rl__coll(struct rl_colls *c, enum ic_op op, double bytes, int group)
{
  for (int i = 0; i < c->n; i++)
    if (c->v[i].op == op && c->v[i].bytes == bytes && c->v[i].group == group) return i;
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 16;
    c->v = npu_xrealloc(c->v, (size_t)c->cap * sizeof *c->v);
  }
  c->v[c->n] = (struct rl_coll){op, bytes, group, 0};
  return c->n++;
}

void rl__colls_release(struct rl_colls *c)
{
  free(c->v);
  memset(c, 0, sizeof *c);
}

/* ------------------------------------------------------------------ fork */

static bool io_all(int fd, void *buf, size_t n, bool rd)
{
  char *p = buf;
  while (n) {
    ssize_t k = rd ? read(fd, p, n) : write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

int rl__fork(int (*fn)(void *arg, void *out, struct npu_diag *diag), void *arg, void *out, size_t size,
             struct npu_diag *diag)
{
  int fds[2];
  if (pipe(fds)) return npu_diag_set(diag, NULL, 0, NULL, "pipe: %s", strerror(errno)), NPU_EINTERNAL;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return npu_diag_set(diag, NULL, 0, NULL, "fork: %s", strerror(errno)), NPU_EINTERNAL;
  }
  if (pid == 0) {
    close(fds[0]);
    struct npu_diag d;
    npu_diag_clear(&d);
    int rc = fn(arg, out, &d);
    bool ok = io_all(fds[1], &rc, sizeof rc, false) && io_all(fds[1], &d, sizeof d, false) &&
              (rc || io_all(fds[1], out, size, false));
    close(fds[1]);
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  int rc = 0;
  struct npu_diag d;
  bool got = io_all(fds[0], &rc, sizeof rc, true) && io_all(fds[0], &d, sizeof d, true) &&
             (rc || io_all(fds[0], out, size, true));
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!got) {
    if (WIFSIGNALED(st))
      return npu_diag_set(diag, NULL, 0, NULL, "a simulation child died with signal %d (%s)", WTERMSIG(st),
                          strsignal(WTERMSIG(st))), NPU_EINTERNAL;
    return npu_diag_set(diag, NULL, 0, NULL, "a simulation child ended without a result (exit status %d)",
                        WEXITSTATUS(st)), NPU_EINTERNAL;
  }
  if (rc) *diag = d;
  return rc;
}

/* ------------------------------------------------------------------ probe */

struct probe_arg {
  const struct rl_job *job;
  const struct rl_colls *c;
};

static int probe_child(void *arg, void *out, struct npu_diag *diag)
{
  const struct probe_arg *a = arg;
  const struct rl_job *job = a->job;
  const struct rl_colls *c = a->c;
  double *times = out;
  struct ic_params prm;
  ic_params_default(&prm);
  struct ic_sim *sim = NULL;
  struct ic_comm comm[3];
  memset(comm, 0, sizeof comm);
  struct ic_run *runs = npu_xcalloc((size_t)c->n, sizeof *runs);
  int rc = ic_sim_create(&sim, &job->sys, job->devices, &prm, diag);
  if (!rc) {
    const struct ic_topo *t = ic_sim_topo(sim);
    rc = ic_comm_init_range(&comm[RL_GROUP_ROLLOUT_TP], job->rollout_first, job->spec.rollout.tp, 1, t,
                            "rl.rollout.tp", diag);
    if (!rc)
      rc = ic_comm_init_range(&comm[RL_GROUP_TRAIN_TP], job->train_first, job->plan.tp, 1, t, "plan.tp", diag);
    if (!rc)
      rc = ic_comm_init_range(&comm[RL_GROUP_ALL], 0, c->matrix_ranks > 0 ? c->matrix_ranks : job->devices, 1, t,
                              "rl.placement", diag);
  }
  for (int i = 0; !rc && i < c->n; i++) {
    runs[i].comm = &comm[c->v[i].group];
    runs[i].coll.op = c->v[i].op;
    runs[i].coll.algo = IC_ALGO_AUTO;
    runs[i].coll.fidelity = IC_FIDELITY_BULK;
    runs[i].coll.bytes = c->v[i].bytes;
    runs[i].coll.matrix = c->v[i].op == IC_OP_ALLTOALLV ? c->matrix : NULL;
    runs[i].group = i;
  }
  if (!rc && c->n) rc = ic_sim_run(sim, runs, c->n, diag);
  for (int i = 0; !rc && i < c->n; i++) times[i] = runs[i].result.time_s;
  free(runs);
  for (int i = 0; i < 3; i++) ic_comm_release(&comm[i]);
  ic_sim_destroy(sim);
  return rc;
}

int rl__probe(const struct rl_job *job, struct rl_colls *c, struct npu_diag *diag)
{
  if (!c->n) return 0;
  double *times = npu_xcalloc((size_t)c->n, sizeof *times);
  struct probe_arg a = {job, c};
  int rc = rl__fork(probe_child, &a, times, (size_t)c->n * sizeof *times, diag);
  for (int i = 0; !rc && i < c->n; i++) c->v[i].time_s = times[i];
  free(times);
  return rc;
}
