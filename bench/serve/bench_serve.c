/*
 * bench_serve.c - wall time and peak memory of serving runs (issue 20's speed target): one hour
 * of simulated serving at 100 requests/s on 384 devices (Llama 3.1 8B, 384 TP1 engines of an
 * Atlas A3 SuperPoD's dies; bench/serve/serve_384.cfg), target 60 s; then how the cost grows
 * with the request rate (25, 50, 100, 200/s on 384 devices) and with the devices (96, 192, 384
 * at 100/s), each an hour of arrivals. Each runs `npusim run` in a child process; the figures
 * are its wall time and peak RSS (wait4). Kernel costs are not cached between runs.
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/benchutil.h"

/* Run the bench scenario with `nodes` nodes (16 dies each) at `rate` requests/s for an hour. */
static void run(int nodes, double rate, const char *target)
{
  char path[1024], set_nodes[64], set_rate[64], set_req[64], label[128];
  snprintf(path, sizeof path, "%s/bench/serve/serve_384.cfg", NPUSIM_SOURCE_DIR);
  snprintf(set_nodes, sizeof set_nodes, "cluster.nodes=%d", nodes);
  snprintf(set_rate, sizeof set_rate, "serve.rate=%g", rate);
  snprintf(set_req, sizeof set_req, "serve.requests=%d", (int)(rate * 3600));
  snprintf(label, sizeof label, "%4d devices, %4.0f requests/s, 1 h (%d requests)", 16 * nodes, rate,
           (int)(rate * 3600));
  double t0 = bench_now();
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout)) _exit(127);
    execl(NPUSIM_BINARY, "npusim", "run", path, "--set", set_nodes, "--set", set_rate, "--set", set_req,
          (char *)NULL);
    _exit(127);
  }
  int st = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  if (pid < 0 || wait4(pid, &st, 0, &ru) < 0) {
    printf("%-52s could not run\n", label);
    return;
  }
  double wall = bench_now() - t0;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("%-52s failed (status %d)\n", label, st);
    return;
  }
  printf("%-52s wall %7.2f s, peak RSS %6.0f MiB%s%s%s\n", label, wall, (double)ru.ru_maxrss / 1024,
         target ? "   (target " : "", target ? target : "", target ? ")" : "");
}

int main(void)
{
  printf("serving: Llama 3.1 8B, TP1 engines on Atlas A3 dies, Poisson arrivals, least-loaded router\n");
  run(24, 100, "60 s");
  printf("growth with the request rate (384 devices)\n");
  run(24, 25, NULL);
  run(24, 50, NULL);
  run(24, 200, NULL);
  printf("growth with the devices (100 requests/s)\n");
  run(6, 100, NULL);
  run(12, 100, NULL);
  return 0;
}
