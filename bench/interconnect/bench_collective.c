/*
 * bench_collective.c - cost of simulating collectives at scale: a 4,096-rank AllReduce of
 * 1 GiB and an 8,192-rank AllToAll of 1 GiB per rank on Atlas 800T A2 servers (HCCS full mesh,
 * 200G RoCE on a 3-tier fat tree), at bulk and at step fidelity. Each case runs in its own
 * process (one SimGrid engine per process) and prints the simulated time, the wall time, the
 * platform's generation + parse time and the peak resident memory. Prints figures; never
 * fails on time.
 *
 * Usage: bench_collective            bulk at full scale, step at 1/8 scale
 *        bench_collective --full     also step at full scale, each stopped after 600 s
 *        bench_collective CASE bulk|step [LIMIT_S]   CASE: allreduce-4096, alltoall-8192,
 *                                    allreduce-512, alltoall-1024, alltoall-2048, alltoall-4096
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "common/cfg.h"
#include "interconnect/run.h"

#define GIB (1024.0 * 1024 * 1024)

struct bcase {
  const char *name;
  const char *sets[4];
  int ranks;
  enum ic_op op;
};

#define TIERS3 "cluster.scaleout.tiers=3"
static const struct bcase cases[] = {
    {"allreduce-4096", {"cluster.nodes=512", TIERS3, NULL}, 4096, IC_OP_ALLREDUCE},
    {"alltoall-8192", {"cluster.nodes=1024", TIERS3, NULL}, 8192, IC_OP_ALLTOALL},
    {"allreduce-512", {"cluster.nodes=64", TIERS3, NULL}, 512, IC_OP_ALLREDUCE},
    {"alltoall-1024", {"cluster.nodes=128", TIERS3, NULL}, 1024, IC_OP_ALLTOALL},
    /* for the step-fidelity scaling figures (by name only) */
    {"alltoall-2048", {"cluster.nodes=256", TIERS3, NULL}, 2048, IC_OP_ALLTOALL},
    {"alltoall-4096", {"cluster.nodes=512", TIERS3, NULL}, 4096, IC_OP_ALLTOALL},
};
#define NCASES (sizeof cases / sizeof cases[0])

static int run_case(const struct bcase *c, enum ic_fidelity f)
{
  double w0 = bench_now();
  struct npu_cfg *cfg = npu_cfg_create();
  struct arch_system sys;
  struct npu_diag d;
  npu_diag_clear(&d);
  arch_register(cfg, &sys);
  int rc = npu_cfg_load_spec(cfg, "atlas-800t-a2", &d);
  for (int i = 0; rc == 0 && c->sets[i]; i++) rc = npu_cfg_set(cfg, c->sets[i], &d);
  if (rc == 0) rc = arch_finish(cfg, &sys, &d);
  struct ic_params prm;
  ic_params_default(&prm, &sys);
  struct ic_sim *sim = NULL;
  if (rc == 0) rc = ic_sim_create(&sim, &sys, c->ranks, &prm, &d);
  double p0 = bench_now();
  if (rc == 0) rc = ic_sim_start_engine(sim, &d);
  double parse = bench_now() - p0;
  struct ic_comm comm = {0};
  if (rc == 0) rc = ic_comm_init_range(&comm, 0, c->ranks, 1, ic_sim_topo(sim), "ranks", &d);
  struct ic_run r = {.comm = &comm, .coll = {.op = c->op, .fidelity = f, .bytes = GIB}};
  if (rc == 0) rc = ic_sim_run(sim, &r, 1, &d);
  if (rc) {
    char msg[2048];
    npu_diag_format(&d, msg, sizeof msg);
    fprintf(stderr, "%s: %s\n", c->name, msg);
    return 1;
  }
  const struct ic_platform_stats *st = ic_sim_platform_stats(sim);
  double algbw = ic_algbw_bytes_per_s(GIB, r.result.time_s);
  printf("%-15s %-5s %-28s %9.3f %8.2f %9zu %7zu %7zu %7.2f %7.2f %8.0f\n", c->name,
         ic_fidelity_name(f), r.result.plan.name, r.result.time_s * 1e3,
         algbw * ic_busbw_factor(c->op, c->ranks) / 1e9, r.result.flows, st->hosts, st->links,
         parse, bench_now() - w0, bench_peak_rss_bytes() / (1024.0 * 1024));
  fflush(stdout);
  ic_comm_release(&comm);
  ic_sim_destroy(sim);
  npu_cfg_destroy(cfg);
  return 0;
}

/* Run one case in a child process, stopped after limit_s seconds of wall time. */
static void spawn(const struct bcase *c, enum ic_fidelity f, unsigned limit_s)
{
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(limit_s);
    _exit(run_case(c, f));
  }
  int status;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    printf("%-15s %-5s did not finish within %u s\n", c->name, ic_fidelity_name(f), limit_s);
  else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    printf("%-15s %-5s failed\n", c->name, ic_fidelity_name(f));
}

static void header(void)
{
  printf("# 1 GiB per rank on atlas-800t-a2 servers, 3-tier fat tree; algorithm chosen by HCCL's "
         "rules\n");
  printf("%-15s %-5s %-28s %9s %8s %9s %7s %7s %7s %7s %8s\n", "case", "fid", "algorithm",
         "sim_ms", "busbw", "flows", "hosts", "links", "parse_s", "wall_s", "rss_MiB");
}

int main(int argc, char **argv)
{
  if (argc >= 3) {
    for (size_t i = 0; i < NCASES; i++) {
      if (strcmp(argv[1], cases[i].name) != 0) continue;
      enum ic_fidelity f;
      if (ic_fidelity_parse(argv[2], &f)) break;
      header();
      spawn(&cases[i], f, argc > 3 ? (unsigned)atoi(argv[3]) : 600);
      return 0;
    }
    fprintf(stderr, "usage: bench_collective [--full | CASE bulk|step [LIMIT_S]]\n");
    return 2;
  }
  bool full = argc == 2 && strcmp(argv[1], "--full") == 0;
  header();
  spawn(&cases[0], IC_FIDELITY_BULK, 600);
  spawn(&cases[1], IC_FIDELITY_BULK, 600);
  spawn(&cases[2], IC_FIDELITY_STEP, 600);
  spawn(&cases[3], IC_FIDELITY_STEP, 600);
  if (full) {
    spawn(&cases[0], IC_FIDELITY_STEP, 600);
    spawn(&cases[1], IC_FIDELITY_STEP, 600);
  }
  return 0;
}
