/*
 * train.c - the actor's optimizer step through the training replay (workloads/).
 *
 * The iteration's prompt + response tokens are packed into sequences of rl.train.seq_len
 * tokens (veRL's remove-padding / dynamic batch size, OpenRLHF's packing); each of the
 * mini_batches x epochs optimizer steps takes an equal share, rounded up to whole micro-batches
 * over the data-parallel ranks. One step is replayed on the training pool as a training
 * scenario: the RL scenario's effective configuration without its rl section (it is written
 * last, rl/job.c), with the pool's servers, the packed length and the global batch as
 * overrides, in a child process (workloads/isolate.c: one SimGrid engine per process).
 */
#include "rl/rl_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "workloads/isolate.h"
#include "workloads/memory.h"

/* Write the training scenario (the effective configuration up to the rl section) to a fresh
 * temporary file; its name goes to path. */
static int write_train_scenario(const struct rl_job *job, char *path, size_t n, struct npu_diag *diag)
{
  struct npu_buf b = {0};
  npu_cfg_write_config(job->cfg, &b);
  const char *s = npu_buf_str(&b);
  const char *cut = !strncmp(s, "rl = {", 6) ? s : strstr(s, "\nrl = {");
  size_t len = cut ? (size_t)(cut - s) + (cut != s) : strlen(s);
  const char *dir = getenv("TMPDIR");
  snprintf(path, n, "%s/npusim-rl-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path);
  int rc = 0;
  if (fd < 0) {
    rc = (npu_diag_set(diag, path, 0, NULL, "cannot create the training scenario file"), NPU_EIO);
  } else {
    FILE *f = fdopen(fd, "w");
    if (!f || fwrite(s, 1, len, f) != len || fclose(f) != 0) {
      if (!f) close(fd);
      unlink(path);
      rc = (npu_diag_set(diag, path, 0, NULL, "cannot write the training scenario file"), NPU_EIO);
    }
  }
  npu_buf_release(&b);
  return rc;
}

int rl__train(const struct rl_job *job, double tokens, struct rl_train *out, struct npu_diag *diag)
{
  memset(out, 0, sizeof *out);
  const struct rl_spec *s = &job->spec;
  int seq = job->train_seq_len;
  double packed = ceil(tokens / seq);
  int per = job->plan.micro_batch * job->plan.dp;
  out->steps = s->train.mini_batches * s->train.epochs;
  int gb = (int)ceil(packed / s->train.mini_batches);
  out->global_batch = (gb + per - 1) / per * per;
  char path[1024];
  int rc = write_train_scenario(job, path, sizeof path, diag);
  if (rc) return rc;
  char sets[4][64];
  const char *sp[4];
  int ns = 0;
  snprintf(sets[ns++], sizeof sets[0], "plan.global_batch=%d", out->global_batch);
  snprintf(sets[ns++], sizeof sets[0], "model.seq_len=%d", seq);
  if (job->sys.has_cluster) snprintf(sets[ns++], sizeof sets[0], "cluster.nodes=%d", job->train_nodes);
  if (job->sys.has_node) snprintf(sets[ns++], sizeof sets[0], "node.devices=%d", job->train_node_devices);
  for (int i = 0; i < ns; i++) sp[i] = sets[i];
  struct wl_outcome o;
  rc = wl_run_isolated(path, sp, ns, &o, diag);
  unlink(path);
  if (rc) return rc;
  if (o.status)
    return npu_diag_set(diag, job->path, 0, "plan", "the actor's training step failed: %s", o.message), o.status;
  out->step_s = o.step_time_s;
  out->mfu = o.mfu;
  out->memory_bytes = o.memory_peak_bytes;
  out->oom = o.oom;
  snprintf(out->bottleneck, sizeof out->bottleneck, "%s", o.bottleneck);
  struct wl_model m = job->model;
  struct wl_plan p = job->plan;
  m.seq_len = seq;
  p.global_batch = out->global_batch;
  out->model_flops = wl_model_flops(&m, (double)out->global_batch * seq, false);
  wl_memory_peak(&m, &p, &out->mem);
  return 0;
}
