/*
 * bench_training.c - wall time and peak memory of one training step replay at scale:
 *   GPT-3 175B on 1,024 NPUs (TP8 PP8 DP16, interleaved 1F1B)      target 30 s
 *   Llama 3 405B on 16,384 NPUs (TP8 PP16 DP128, 1F1B)              target 5 min, 8 GiB
 *   DeepSeek-V3 on 2,048 H800 (PP16 EP64 DualPipe, fp8)             target 2 min, 8 GiB
 * Each runs `npusim run` in a child process (one SimGrid engine per process); the figures are
 * the child's wall time and peak RSS (wait4). Kernel costs are not cached between runs.
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

static void run(const char *label, const char *scenario, const char *target)
{
  char path[1024];
  snprintf(path, sizeof path, "%s/bench/workloads/%s", NPUSIM_SOURCE_DIR, scenario);
  double t0 = bench_now();
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout)) _exit(127);
    execl(NPUSIM_BINARY, "npusim", "run", path, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  if (pid < 0 || wait4(pid, &st, 0, &ru) < 0) {
    printf("%-48s could not run\n", label);
    return;
  }
  double wall = bench_now() - t0;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("%-48s failed (status %d)\n", label, st);
    return;
  }
  printf("%-48s wall %7.2f s, peak RSS %6.0f MiB   (target %s)\n", label, wall, (double)ru.ru_maxrss / 1024, target);
}

int main(void)
{
  printf("one training step, analytic kernels, bulk collectives\n");
  run("GPT-3 175B, 1,024 NPUs, TP8 PP8 DP16 (VPP 3)", "gpt3_175b_1024.cfg", "30 s");
  run("Llama 3 405B, 16,384 NPUs, TP8 PP16 DP128", "llama3_405b_16384.cfg", "5 min, 8 GiB");
  /* the validation scenario: DeepSeek's own plan, all-to-alls by closed form (run.network) */
  run("DeepSeek-V3, 2,048 GPUs, PP16 EP64 DualPipe", "../../scenarios/validation/deepseek_v3_h800.cfg", "2 min, 8 GiB");
  return 0;
}
