/*
 * bench_mc2.c - the MC2 operators on the 8 devices of an Atlas 800T A2 server: the wall time and
 * peak memory of an event-fidelity run (every instruction of the 8 devices' cores in one engine)
 * and of the analytic fidelity (the operator's closed form), and the two predictions side by side.
 * Cases: all_gather_matmul m 1024 k 4096 n 2048 per device (8 turns), matmul_reduce_scatter of the
 * same shape, and alltoallv_grouped_matmul of scenarios/mc2_moe_dispatch_atlas_800t_a2.cfg
 * (tokens 4096, 16 experts, h 2048, n 1536). Each event run needs its own process: the program
 * re-executes itself.
 * Usage: bench_mc2            all figures
 *        bench_mc2 event I    case I at event fidelity (internal)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/ops/opbench.h"

struct mc2_case {
  const char *op;
  const char *args[6];
  int nargs;
};

static const struct mc2_case cases[] = {
    {"all_gather_matmul", {"m=1024", "k=4096", "n=2048"}, 3},
    {"matmul_reduce_scatter", {"m=1024", "k=4096", "n=2048"}, 3},
    {"alltoallv_grouped_matmul", {"tokens=4096", "experts=16", "h=2048", "n=1536"}, 4},
};

#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static int run(const struct arch_system *sys, const struct mc2_case *c, enum core_fidelity f, struct op_result *res,
               double *wall)
{
  struct op_run_opts o = {.fidelity = f, .seed = 1, .node = &sys->node};
  return opbench_run(sys, c->op, c->args, c->nargs, &o, res, wall);
}

int main(int argc, char **argv)
{
  struct arch_system sys;
  if (opbench_load(&sys, "atlas-800t-a2")) return 1;
  struct op_result *r = malloc(sizeof *r);
  if (!r) return 1;
  double wall;
  if (argc > 2 && !strcmp(argv[1], "event")) {
    int i = atoi(argv[2]);
    if (i < 0 || i >= NCASES || run(&sys, &cases[i], CORE_FIDELITY_EVENT, r, &wall)) return 1;
    printf("%.9g %.9g %.9g\n", wall, r->total.time_s, bench_peak_rss_bytes());
    free(r);
    return 0;
  }
  printf("MC2 operators on the 8 devices of an Atlas 800T A2 (per device shapes)\n");
  for (int i = 0; i < NCASES; i++) {
    /* analytic: best of 5 (the first run warms caches) */
    double best = 1e9;
    for (int k = 0; k < 5; k++) {
      if (run(&sys, &cases[i], CORE_FIDELITY_ANALYTIC, r, &wall)) return 1;
      if (wall < best) best = wall;
    }
    double an = r->total.time_s, ev_wall, ev, rss;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' event %d", argv[0], i);
    FILE *p = popen(cmd, "r");
    if (!p || fscanf(p, "%lf %lf %lf", &ev_wall, &ev, &rss) != 3) return 1;
    pclose(p);
    printf("  %s", cases[i].op);
    for (int k = 0; k < cases[i].nargs; k++) printf(" %s", cases[i].args[k]);
    printf("\n    event fidelity     wall %.2f s, peak RSS %.0f MiB, predicted %.1f us\n", ev_wall, rss / 1048576,
           ev * 1e6);
    printf("    analytic fidelity  wall %.1f ms, predicted %.1f us (%+.1f%% of the event fidelity's)\n", best * 1e3,
           an * 1e6, (an / ev - 1) * 100);
  }
  free(r);
  return 0;
}
