/*
 * bench_sweep.c - throughput of `npusim sweep`: points per minute on a 1,000-point sweep of a
 * 64-NPU training job (llama2_7b_64_sweep.cfg) with -j 2, without and with the persistent kernel
 * cost cache (run.cost_cache: every point's process reads and merges one shared file).
 *
 *   bench_sweep [NOCACHE_POINTS [CACHE_POINTS]]   default 100 and 1000
 *
 * Without the cache every point costs its ~25 kernels through the chip model; the run without
 * it takes a random sample of NOCACHE_POINTS points (the same kind of points) to bound the
 * benchmark's time. Target: at least 100 points per minute.
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/benchutil.h"

static char dir[256];

/* Run npusim sweep with extra arguments; returns the wall time, or -1. */
static double sweep(const char *csv, int sample, const char *cache)
{
  char path[1024], out[512], samp[32], set[512];
  snprintf(path, sizeof path, "%s/bench/sweep/llama2_7b_64_sweep.cfg", NPUSIM_SOURCE_DIR);
  snprintf(out, sizeof out, "%s/%s", dir, csv);
  snprintf(samp, sizeof samp, "%d", sample);
  snprintf(set, sizeof set, "run.cost_cache=%s", cache ? cache : "");
  const char *argv[20];
  int n = 0;
  argv[n++] = "npusim";
  argv[n++] = "sweep";
  argv[n++] = path;
  argv[n++] = "-o";
  argv[n++] = out;
  argv[n++] = "-j";
  argv[n++] = "2";
  argv[n++] = "--force";
  if (cache) {
    argv[n++] = "--set";
    argv[n++] = set;
  }
  if (sample < 1000) {
    argv[n++] = "--sample";
    argv[n++] = samp;
  }
  argv[n] = NULL;
  double t0 = bench_now();
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(127);
    execv(NPUSIM_BINARY, (char *const *)argv);
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
  return bench_now() - t0;
}

static void line(const char *label, int points, double wall)
{
  if (wall < 0) printf("%-58s failed\n", label);
  else printf("%-58s %5d points %8.1f s %8.0f points/min\n", label, points, wall, points / wall * 60);
}

int main(int argc, char **argv)
{
  int nocache = argc > 1 ? atoi(argv[1]) : 100;
  int cached = argc > 2 ? atoi(argv[2]) : 1000;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/npusim-bench-sweep-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) return 1;
  char cache[512];
  snprintf(cache, sizeof cache, "%s/costs.cache", dir);
  printf("npusim sweep: Llama 2 7B on 64 NPUs (bench/sweep/llama2_7b_64_sweep.cfg), -j 2, target 100 points/min\n");
  double a = sweep("nocache.csv", nocache, NULL);
  line("no cost cache (every point costs its kernels)", nocache, a);
  double b = sweep("cold.csv", cached, cache);
  line("shared cost cache, empty at the start", cached, b);
  double c = sweep("warm.csv", cached, cache);
  line("shared cost cache, filled by the run before", cached, c);
  if (a > 0 && b > 0) printf("speed-up of the cache (cold, per point): %.1fx\n", (a / nocache) / (b / cached));
  if (a > 0 && c > 0) printf("speed-up of the cache (warm, per point): %.1fx\n", (a / nocache) / (c / cached));
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) return 1;
  return 0;
}
