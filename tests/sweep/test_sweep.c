/*
 * test_sweep.c - npusim sweep end to end: rows of a 2-axis sweep, failing points, resuming after
 * SIGKILL, MPI against -j 2, shards and merge, batch runs, report and plot.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/sweep/common.h"

static char *dir;

static void setup(void)
{
  dir = ts_tmpdir();
  sweep_base(dir);
}

static void teardown(void)
{
  ts_rmtree(dir);
  free(dir);
}

TestSuite(sweep, .init = setup, .fini = teardown, .timeout = 240);

static const char two_axes[] =
    "  axes = (\n"
    "    { key = \"plan.global_batch\"; values = [16, 32]; },\n"
    "    { key = \"cluster.scaleout.nic_bandwidth\"; values = [\"100Gbps\", \"200Gbps\", \"400Gbps\"]; }\n"
    "  );\n";

static char *path_in(const char *name)
{
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return strdup(p);
}

/* The field of a CSV line (no quotes in the fields compared here). */
static void field(const char *line, int k, char *buf, size_t n)
{
  for (int i = 0; i < k && line; i++) {
    line = strchr(line, ',');
    if (line) line++;
  }
  size_t l = line ? strcspn(line, ",\n") : 0;
  snprintf(buf, n, "%.*s", (int)l, line ? line : "");
}

Test(sweep, two_axes_give_one_row_per_point_in_order)
{
  char *sw = sweep_file(dir, "two_sweep.cfg", two_axes);
  char *csv = path_in("two.csv");
  struct run_result r = ts_npusim("sweep", sw, "-o", csv, "-j", "2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "6 points") && strstr(r.out, ": 6 ok"), "%s", r.out);
  char *text = ts_read(csv);
  cr_assert(text != NULL);
  /* the contract: point, parameters (units in the names), status, summary.csv's metrics, message */
  cr_assert(!strncmp(text, "point,plan.global_batch,cluster.scaleout.nic_bandwidth_bytes_per_s,status,scenario,", 82),
            "%s", text);
  const char *nl = strchr(text, '\n');
  char header[4096];
  snprintf(header, sizeof header, "%.*s", (int)(nl - text), text);
  static const char *const metrics[] = {",step_time_s,", ",tokens_per_s,", ",mfu,", ",hfu,", ",memory_peak_bytes,",
                                        ",gemm_s,", ",bubble_s,", ",bottleneck,"};
  for (size_t i = 0; i < sizeof metrics / sizeof metrics[0]; i++)
    cr_assert(strstr(header, metrics[i]) != NULL, "%s not in %s", metrics[i], header);
  cr_assert(strstr(header, ",message") == header + strlen(header) - 8);
  cr_assert_eq(count_lines(text), 7);
  static const char *const gb[] = {"16", "16", "16", "32", "32", "32"};
  static const char *const nic[] = {"12500000000", "25000000000", "50000000000"};
  const char *line = nl + 1;
  char f[128], step16[64] = "", step32[64] = "";
  for (int i = 0; i < 6; i++) {
    field(line, 0, f, sizeof f);
    cr_assert_eq(atoi(f), i);
    field(line, 1, f, sizeof f);
    cr_assert_str_eq(f, gb[i]);
    field(line, 2, f, sizeof f);
    cr_assert_str_eq(f, nic[i % 3]);
    field(line, 3, f, sizeof f);
    cr_assert_str_eq(f, "ok", "row %d: %.200s", i, line);
    int stepcol = 0;
    for (char *c = header, *e = strstr(header, ",step_time_s,"); c < e; c++) stepcol += *c == ',';
    field(line, stepcol + 1, i < 3 ? step16 : step32, 64);
    line = strchr(line, '\n') + 1;
  }
  cr_assert(atof(step32) > 1.5 * atof(step16), "twice the batch, about twice the step: %s vs %s", step16, step32);
  /* --list names the same points */
  struct run_result l = ts_npusim("sweep", sw, "--list", NULL);
  cr_assert_eq(l.status, 0, "%s", l.err);
  cr_assert_eq(count_lines(l.out), 7);
  cr_assert(strstr(l.out, "\n5,32,50000000000\n") != NULL, "%s", l.out);
  ts_run_free(&l);
  /* the journal is next to the results; running again is a no-op giving the same file */
  char *jpath = path_in("two.csv.journal");
  struct stat st;
  cr_assert_eq(stat(jpath, &st), 0);
  struct run_result again = ts_npusim("sweep", sw, "-o", csv, NULL);
  cr_assert_eq(again.status, 0, "%s", again.err);
  cr_assert(strstr(again.out, "ran 0 points (6 more from the journal)") != NULL, "%s", again.out);
  char *text2 = ts_read(csv);
  cr_assert_str_eq(text2, text);
  ts_run_free(&again);
  free(text2);
  free(jpath);
  free(text);
  ts_run_free(&r);
  free(csv);
  free(sw);
}

Test(sweep, failing_points_become_rows_and_the_sweep_goes_on)
{
  /* plan.tp = 3 does not divide 8 devices (error); the child of point 2 aborts (crash); point 3
   * hangs and is killed by --timeout, which is far above what an ok point takes even under the
   * sanitizers on a loaded machine (2 s was not: an ok point timed out there) */
  char *sw = sweep_file(dir, "fail_sweep.cfg", "  axes = ( { key = \"plan.tp\"; values = [1, 3, 2, 4, 1]; } );\n");
  char *csv = path_in("fail.csv");
  char *argv[] = {(char *)NPUSIM_BINARY, "sweep", sw, "-o", csv, "-j", "2", "--timeout", "20", NULL};
  struct run_result r = ts_run(argv, "NPUSIM_SWEEP_FAULT=crash:2,hang:3");
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "2 ok, 1 error, 1 crash, 1 timeout") != NULL, "%s", r.out);
  char *text = ts_read(csv);
  cr_assert(strstr(text, "\n0,1,ok,") != NULL, "%s", text);
  cr_assert(strstr(text, "\n1,3,error,") != NULL, "%s", text);
  cr_assert(strstr(text, "plan.tp: tp 3 x cp 1 x pp 2 = 6 does not divide the 8 devices") != NULL, "%s", text);
  cr_assert(strstr(text, "\n2,2,crash,") != NULL && strstr(text, "signal 6") != NULL, "%s", text);
  cr_assert(strstr(text, "\n3,4,timeout,") != NULL && strstr(text, "--timeout 20 s") != NULL, "%s", text);
  cr_assert(strstr(text, "\n4,1,ok,") != NULL, "%s", text);
  /* report counts them and names the failures */
  struct run_result rep = ts_npusim("report", csv, "--best", "mfu", NULL);
  cr_assert_eq(rep.status, 0, "%s", rep.err);
  cr_assert(strstr(rep.out, "5 points: 2 ok, 1 error, 1 crash, 1 timeout") != NULL, "%s", rep.out);
  cr_assert(strstr(rep.out, "best by mfu (largest):\n  point 0: plan.tp=1") != NULL, "%s", rep.out);
  ts_run_free(&rep);
  free(text);
  ts_run_free(&r);
  free(csv);
  free(sw);
}

/* A re-run keeps every row of the journal; --retry-failed runs the failed points again (the
 * crashed one now succeeds, the refused one is refused again) and keeps the rest. */
Test(sweep, retry_failed_reruns_only_the_failed_points)
{
  char *sw = sweep_file(dir, "retry_sweep.cfg", "  axes = ( { key = \"plan.tp\"; values = [1, 3, 2]; } );\n");
  char *csv = path_in("retry.csv");
  char *argv[] = {(char *)NPUSIM_BINARY, "sweep", sw, "-o", csv, "-j", "2", NULL};
  struct run_result r = ts_run(argv, "NPUSIM_SWEEP_FAULT=crash:2");
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "1 ok, 1 error, 1 crash") != NULL, "%s", r.out);
  ts_run_free(&r);
  r = ts_run(argv, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "ran 0 points (3 more from the journal)") != NULL, "%s", r.out);
  ts_run_free(&r);
  char *again[] = {(char *)NPUSIM_BINARY, "sweep", sw, "-o", csv, "-j", "2", "--retry-failed", NULL};
  r = ts_run(again, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "ran 2 points (1 more from the journal)") != NULL && strstr(r.out, "2 ok, 1 error"), "%s",
            r.out);
  char *text = ts_read(csv);
  cr_expect(strstr(text, "\n2,2,ok,") != NULL && strstr(text, "\n1,3,error,") != NULL, "%s", text);
  cr_expect(count_lines(text) == 4, "a header and one row per point: %s", text);
  free(text);
  ts_run_free(&r);
  /* a plain resume now takes the retried rows */
  r = ts_run(argv, NULL);
  cr_expect(strstr(r.out, "2 ok, 1 error") != NULL, "%s", r.out);
  ts_run_free(&r);
  free(csv);
  free(sw);
}

/* A sweep killed with kill -9 cannot remove the private directory of its @include scenario: the
 * next sweep removes every such directory whose owner process is gone, and its own on exit. */
Test(sweep, a_killed_sweeps_scratch_directory_is_removed_by_the_next)
{
  char *tmp = path_in("tmp");
  cr_assert_eq(mkdir(tmp, 0700), 0);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0); /* a pid nothing runs as */
  char stale[1200], pidf[1300], alive[1200], env[1200];
  snprintf(stale, sizeof stale, "%s/npusim-sweep-dead01", tmp);
  snprintf(alive, sizeof alive, "%s/npusim-sweep-live01", tmp);
  cr_assert_eq(mkdir(stale, 0700), 0);
  cr_assert_eq(mkdir(alive, 0700), 0);
  snprintf(pidf, sizeof pidf, "%s/owner.pid", stale);
  FILE *f = fopen(pidf, "w");
  fprintf(f, "%ld\n", (long)dead);
  fclose(f);
  snprintf(pidf, sizeof pidf, "%s/owner.pid", alive);
  f = fopen(pidf, "w");
  fprintf(f, "%ld\n", (long)getpid());
  fclose(f);
  char *sw = ts_write(dir, "incl.cfg",
                      "@include \"tiny.cfg\"\nsweep = { axes = ( { key = \"plan.global_batch\"; values = [16]; } ); };\n");
  char *argv[] = {(char *)NPUSIM_BINARY, "sweep", sw, "--list", NULL};
  snprintf(env, sizeof env, "TMPDIR=%s", tmp);
  struct run_result r = ts_run(argv, env);
  cr_assert_eq(r.status, 0, "%s", r.err);
  struct stat st;
  cr_expect(stat(stale, &st) != 0, "the dead sweep's directory is gone");
  cr_expect(stat(alive, &st) == 0, "a running sweep's directory stays");
  DIR *d = opendir(tmp);
  int left = 0;
  for (struct dirent *e; (e = readdir(d));) left += e->d_name[0] != '.';
  closedir(d);
  cr_expect_eq(left, 1, "only the live one is left: the sweep removed its own");
  ts_run_free(&r);
  free(sw);
  free(tmp);
}

static int journal_rows(const char *path)
{
  char *t = ts_read(path);
  int n = t ? count_lines(t) - 4 : 0;
  free(t);
  return n;
}

Test(sweep, resuming_after_sigkill_gives_the_uninterrupted_file)
{
  char *sw = sweep_file(dir, "kill_sweep.cfg",
                        "  axes = (\n"
                        "    { key = \"plan.global_batch\"; values = [16, 32]; },\n"
                        "    { key = \"cluster.scaleout.nic_bandwidth\"; range = { from = \"50Gbps\"; to = \"800Gbps\"; "
                        "factor = 2; }; }\n"
                        "  );\n");
  char *ref = path_in("ref.csv"), *csv = path_in("killed.csv"), *jpath = path_in("killed.csv.journal");
  struct run_result r = ts_npusim("sweep", sw, "-o", ref, "-j", "2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  /* the same sweep, one point at a time, point 4 slow: kill the parent once rows are written */
  fflush(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int dn = open("/dev/null", 1);
    dup2(dn, 1);
    dup2(dn, 2);
    setenv("NPUSIM_SWEEP_FAULT", "sleep:4", 1);
    execl(NPUSIM_BINARY, NPUSIM_BINARY, "sweep", sw, "-o", csv, "-j", "1", (char *)NULL);
    _exit(127);
  }
  int rows = 0;
  for (int i = 0; i < 3000 && rows < 3; i++) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
    rows = journal_rows(jpath);
  }
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  cr_assert(WIFSIGNALED(st), "the sweep ended before the kill");
  rows = journal_rows(jpath);
  cr_assert(rows >= 3 && rows < 10, "%d rows", rows);
  struct stat sb;
  cr_assert_neq(stat(csv, &sb), 0, "no results file before the sweep is complete");
  /* a write the kill cut short */
  FILE *f = fopen(jpath, "a");
  fputs("9\t1234abcd\t9,32,1000", f);
  fclose(f);
  r = ts_npusim("sweep", sw, "-o", csv, "-j", "2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.err, "dropped a half-written row") != NULL, "%s", r.err);
  char want[64];
  snprintf(want, sizeof want, "ran %d points (%d more from the journal)", 10 - rows, rows);
  cr_assert(strstr(r.out, want) != NULL, "%s", r.out);
  char *a = ts_read(ref), *b = ts_read(csv);
  cr_assert_str_eq(b, a);
  free(a);
  free(b);
  ts_run_free(&r);
  free(ref);
  free(csv);
  free(jpath);
  free(sw);
}

Test(sweep, mpi_two_ranks_give_the_file_of_j2)
{
#ifndef NPUSIM_MPIEXEC
  cr_skip_test("built without MPI");
#else
  char *sw = sweep_file(dir, "mpi_sweep.cfg", two_axes);
  char *ref = path_in("j2.csv"), *csv = path_in("mpi.csv");
  struct run_result r = ts_npusim("sweep", sw, "-o", ref, "-j", "2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  char *argv[20];
  int n = 0;
  argv[n++] = (char *)NPUSIM_MPIEXEC;
  if (geteuid() == 0) argv[n++] = "--allow-run-as-root";
  argv[n++] = "--oversubscribe";
  argv[n++] = "-n";
  argv[n++] = "2";
  argv[n++] = (char *)NPUSIM_BINARY;
  argv[n++] = "sweep";
  argv[n++] = sw;
  argv[n++] = "-o";
  argv[n++] = csv;
  argv[n++] = "-j";
  argv[n++] = "1";
  argv[n] = NULL;
  /* Open MPI's own allocations are not ours to leak-check */
  r = ts_run(argv, "ASAN_OPTIONS=detect_leaks=0");
  cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
  cr_assert(strstr(r.out, "on each of 2 MPI ranks: 6 ok") != NULL, "%s", r.out);
  char *a = ts_read(ref), *b = ts_read(csv);
  cr_assert(b != NULL);
  cr_assert_str_eq(b, a);
  free(a);
  free(b);
  ts_run_free(&r);
  free(ref);
  free(csv);
  free(sw);
#endif
}

Test(sweep, shards_merge_into_the_full_file)
{
  char *sw = sweep_file(dir, "shard_sweep.cfg", two_axes);
  char *full = path_in("full.csv"), *s0 = path_in("s0.csv"), *s1 = path_in("s1.csv"), *m = path_in("merged.csv");
  struct run_result r = ts_npusim("sweep", sw, "-o", full, "-j", "2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("sweep", sw, "-o", s0, "--shard", "0/2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "shard 0/2: 3 points") != NULL, "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("sweep", sw, "-o", s1, "--shard", "1/2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("merge", m, s1, s0, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *a = ts_read(full), *b = ts_read(m);
  cr_assert_str_eq(b, a);
  free(a);
  free(b);
  ts_run_free(&r);
  /* gaps, overlaps */
  r = ts_npusim("merge", m, s0, NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "gaps: 3 of 6 points are in no shard (1, 3, 5)") != NULL, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("merge", m, s0, s1, s0, NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "overlap: point 0 is also in") != NULL, "%s", r.err);
  ts_run_free(&r);
  /* shards of another sweep */
  char *other = sweep_file(dir, "other_sweep.cfg", "  axes = ( { key = \"plan.global_batch\"; values = [16, 32]; } );\n");
  char *o1 = path_in("o1.csv");
  r = ts_npusim("sweep", other, "-o", o1, "--shard", "1/2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("merge", m, s0, o1, NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "mismatched sweeps") != NULL, "%s", r.err);
  ts_run_free(&r);
  free(other);
  free(o1);
  free(full);
  free(s0);
  free(s1);
  free(m);
  free(sw);
}

Test(sweep, batch_run_writes_a_row_per_scenario)
{
  char *a = path_in("tiny.cfg");
  char *b = ts_write(dir, "b.cfg", "preset = \"atlas-800t-a2\";\nmodel = { preset = \"llama2-7b\"; layers = 4; "
                                   "seq_len = 1024; };\nplan = { tp = 3; global_batch = 16; };\n");
  char *csv = path_in("batch.csv");
  struct run_result r = ts_npusim("run", a, b, "--csv", csv, "-j", "2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "2 scenarios: 1 ok, 1 failed") != NULL, "%s", r.out);
  char *t = ts_read(csv);
  cr_assert(!strncmp(t, "point,file,status,scenario,model,", 33), "%s", t);
  char want[1200];
  snprintf(want, sizeof want, "\n0,%s,ok,%s,llama2-7b,", a, a);
  cr_assert(strstr(t, want) != NULL, "%s", t);
  snprintf(want, sizeof want, "\n1,%s,error,", b);
  cr_assert(strstr(t, want) != NULL, "%s", t);
  free(t);
  ts_run_free(&r);
  free(a);
  free(b);
  free(csv);
}

/* npusim plot draws the points that ran and fit in memory, and says what it left out: a stand-in
 * gnuplot (NPUSIM_GNUPLOT) writes the output file and copies the data it was given. */
Test(sweep, plot_leaves_out_points_out_of_memory_and_says_so)
{
  char *csv = path_in("oom.csv");
  FILE *f = fopen(csv, "w");
  cr_assert(f != NULL);
  fputs("point,plan.tp,status,step_time_s,oom,message\n"
        "0,1,ok,2.0,1,\n1,2,ok,1.5,0,\n2,4,ok,1.2,0,\n3,8,error,,0,bad\n",
        f);
  fclose(f);
  char *fake = path_in("gnuplot"), *copy = path_in("drawn.txt"), *png = path_in("oom.png");
  f = fopen(fake, "w");
  cr_assert(f != NULL);
  char *script = path_in("drawn.gp");
  fprintf(f, "#!/bin/sh\nout=$(sed -n 's/^set output \"\\(.*\\)\"$/\\1/p' \"$1\")\necho png > \"$out\"\n"
             "data=$(dirname \"$1\")/data.txt\ncp \"$data\" %s\ncp \"$1\" %s\n",
          copy, script);
  fclose(f);
  cr_assert_eq(chmod(fake, 0755), 0);
  char env[1200];
  snprintf(env, sizeof env, "NPUSIM_GNUPLOT=%s", fake);
  char *argv[] = {(char *)NPUSIM_BINARY, "plot", csv, "--x", "plan.tp", "-o", png, NULL};
  struct run_result r = ts_run(argv, env);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "2 points in 1 series"), "%s", r.out);
  cr_assert(strstr(r.out, "1 points out of memory (oom = 1) left out (--include-oom draws them)"), "%s", r.out);
  cr_assert(strstr(r.out, "1 points that did not run (status not ok) left out"), "%s", r.out);
  ts_run_free(&r);
  char *drawn = ts_read(copy);
  cr_assert(drawn && !strstr(drawn, "2.0") && !strstr(drawn, " 2\n"), "the out-of-memory point is not drawn: %s", drawn);
  free(drawn);
  char *with[] = {(char *)NPUSIM_BINARY, "plot", csv, "--x", "plan.tp", "-o", png, "--include-oom", NULL};
  r = ts_run(with, env);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "3 points in 1 series") && !strstr(r.out, "out of memory"), "%s", r.out);
  ts_run_free(&r);
  /* axes in the units people read, legends with their values in units, a title of what is drawn */
  f = fopen(csv, "w");
  cr_assert(f != NULL);
  fputs("point,chip.hbm.bandwidth_bytes_per_s,plan.tp,status,mfu,oom,message\n"
        "0,800000000000,1,ok,0.41,0,\n1,800000000000,2,ok,0.45,0,\n"
        "2,1600000000000,1,ok,0.52,0,\n3,1600000000000,2,ok,0.55,0,\n",
        f);
  fclose(f);
  char *units[] = {(char *)NPUSIM_BINARY, "plot", csv, "--x", "plan.tp", "--y", "mfu", "-o", png, NULL};
  r = ts_run(units, env);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  char *gp = ts_read(script);
  cr_assert(gp && strstr(gp, "set ylabel \"mfu (%)\"") && strstr(gp, "set title \"mfu against plan.tp\""), "%s", gp);
  cr_assert(strstr(gp, "title \"chip.hbm.bandwidth=800 GB/s\"") && strstr(gp, "title \"chip.hbm.bandwidth=1.6 TB/s\""),
            "%s", gp);
  free(gp);
  drawn = ts_read(copy);
  cr_assert(drawn && strstr(drawn, "1 41\n"), "mfu in percent: %s", drawn);
  free(drawn);
  free(script);
  free(csv);
  free(fake);
  free(copy);
  free(png);
}

Test(sweep, report_best_and_pareto_and_plot)
{
  char *sw = sweep_file(dir, "rep_sweep.cfg",
                        "  axes = ( { key = \"plan.micro_batch\"; values = [1, 2]; },\n"
                        "           { key = \"plan.pp\"; values = [1, 2]; } );\n"
                        "  derived = ( { key = \"plan.global_batch\"; expr = \"8 * plan.micro_batch\"; } );\n");
  char *csv = path_in("rep.csv");
  struct run_result r = ts_npusim("sweep", sw, "-o", csv, "-j", "2", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("report", csv, "--best", "min:step_time_s", "--top", "2", "--pareto", "step_time_s,memory_peak_bytes",
                NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "4 points: 4 ok") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "best by step_time_s (smallest):\n  point ") != NULL, "%s", r.out);
  cr_assert(strstr(r.out, "Pareto front of step_time_s,memory_peak_bytes (") != NULL, "%s", r.out);
  ts_run_free(&r);
  /* --html: the same report in a page, with the points on the two metrics and the front marked */
  char *page = path_in("rep.html");
  r = ts_npusim("report", csv, "--pareto", "step_time_s,memory_peak_bytes", "--html", page, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *html = ts_read(page);
  cr_assert(html && !strncmp(html, "<!DOCTYPE html>\n", 16), "%s", html ? html : "");
  cr_assert(strstr(html, "<h2>Pareto front</h2>"), "%s", html);
  int circles = 0, marked = 0;
  for (const char *p = strstr(html, "<circle "); p; p = strstr(p + 1, "<circle ")) {
    circles++;
    marked += strncmp(strstr(p, "fill=\""), "fill=\"#e15759\"", strlen("fill=\"#e15759\"")) == 0;
  }
  cr_assert_eq(circles, 4, "a point per ok point: %s", html);
  cr_assert(marked >= 1 && marked <= 4, "the front marked: %d", marked);
  cr_assert(strstr(html, ">step_time_s (smaller is better)</text>"), "the x axis named: %s", html);
  cr_assert(strstr(html, "<pre>") && strstr(html, "4 points: 4 ok"), "the text report in the page: %s", html);
  cr_assert(!strstr(html, "http:") && !strstr(html, "https:") && !strstr(html, "<script"), "%s", html);
  free(html);
  free(page);
  ts_run_free(&r);
  r = ts_npusim("report", csv, "--best", "mfuu", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "no such column; did you mean 'mfu'?") != NULL, "%s", r.err);
  ts_run_free(&r);
  /* without gnuplot: a clear message, status 2 */
  char *png = path_in("p.png");
  char *argv[] = {(char *)NPUSIM_BINARY, "plot", csv, "--x", "plan.micro_batch", "--y", "mfu", "-o", png, NULL};
  r = ts_run(argv, "NPUSIM_GNUPLOT=/nonexistent/gnuplot");
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "gnuplot is not installed") != NULL, "%s", r.err);
  cr_assert_str_eq(r.out, "");
  ts_run_free(&r);
  /* with gnuplot, when this machine has it */
  if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
    r = ts_npusim("plot", csv, "--x", "plan.micro_batch", "--y", "mfu", "-o", png, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    /* a line per pp: plan.global_batch, which the x axis determines, splits no line */
    cr_assert(strstr(r.out, "2 series") != NULL, "%s", r.out);
    struct stat st;
    cr_assert(stat(png, &st) == 0 && st.st_size > 1000);
    ts_run_free(&r);
  }
  free(png);
  free(csv);
  free(sw);
}
