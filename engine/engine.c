/* engine.c - SimGrid bootstrap with exact-link settings; see engine.h. */
#include "engine/engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"

#ifndef NPUSIM_SG_CONTEXTS
#define NPUSIM_SG_CONTEXTS "raw"
#endif

struct npu_xfer;
struct npu_xfer *npu__xfer_start(sg_host_t from, sg_host_t to, double bytes, double rate);
ssize_t npu__xfer_wait_any(struct npu_xfer *const *xfers, size_t n, double timeout);
void npu__xfer_release(struct npu_xfer *x);
double npu__xfer_remaining(const struct npu_xfer *x);

/* The one piece of process-wide state: SimGrid's engine exists at most once. */
static bool started;

int npu_engine_init(const char *platform_xml, struct npu_diag *diag)
{
  if (started) NPU_PANIC("a second SimGrid engine in one process");
  static char arg0[] = "npusim";
  static char *argv[] = {
      arg0,
      "--cfg=network/model:CM02",
      "--cfg=network/crosstraffic:0",
      "--cfg=network/TCP-gamma:0",
      "--cfg=network/weight-S:0",
      "--cfg=contexts/factory:" NPUSIM_SG_CONTEXTS,
      "--cfg=contexts/stack-size:256",
      "--log=root.thres:critical",
      NULL,
  };
  int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
  simgrid_init(&argc, argv);
  started = true;

  const char *tmp = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/npusim-platform-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0)
    return npu_diag_set(diag, path, 0, NULL, "cannot create the platform file: %s",
                        strerror(errno)), NPU_EIO;
  size_t len = strlen(platform_xml);
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, platform_xml + off, len - off);
    if (w <= 0) {
      int e = errno;
      close(fd);
      unlink(path);
      return npu_diag_set(diag, path, 0, NULL, "cannot write the platform file: %s",
                          strerror(e)), NPU_EIO;
    }
    off += (size_t)w;
  }
  close(fd);
  simgrid_load_platform(path);
  unlink(path);
  return 0;
}

bool npu_engine_started(void)
{
  return started;
}

sg_host_t npu_engine_host(const char *name)
{
  return sg_host_by_name(name);
}

struct trampoline {
  void (*fn)(void *);
  void *arg;
};

static void actor_main(int argc, char **argv)
{
  (void)argc;
  (void)argv;
  struct trampoline *t = sg_actor_self_get_data();
  void (*fn)(void *) = t->fn;
  void *arg = t->arg;
  free(t);
  fn(arg);
}

void npu_engine_spawn(const char *name, sg_host_t host, void (*fn)(void *arg), void *arg)
{
  NPU_ASSERT(started && host);
  struct trampoline *t = npu_xmalloc(sizeof *t);
  t->fn = fn;
  t->arg = arg;
  sg_actor_t a = sg_actor_init(name, host);
  sg_actor_set_data(a, t);
  sg_actor_start(a, actor_main, 0, NULL);
}

void npu_engine_run(void)
{
  NPU_ASSERT(started);
  simgrid_run();
}

double npu_engine_clock(void)
{
  return simgrid_get_clock();
}

void npu_engine_sleep(double seconds)
{
  sg_actor_sleep_for(seconds);
}

struct npu_xfer *npu_xfer_start(sg_host_t from, sg_host_t to, double bytes, double rate)
{
  return npu__xfer_start(from, to, bytes, rate);
}

ssize_t npu_xfer_wait_any(struct npu_xfer *const *xfers, size_t n, double timeout_s)
{
  return npu__xfer_wait_any(xfers, n, timeout_s);
}

void npu_xfer_release(struct npu_xfer *x)
{
  if (x) npu__xfer_release(x);
}

double npu_xfer_remaining(const struct npu_xfer *x)
{
  return npu__xfer_remaining(x);
}
