/* test_profiles.c - what `npusim kernel` writes for profilers: the msprof op simulator's layout
 * (--msprof DIR) and instruction traces streamed to disk (--trace FILE[.gz]), checked against
 * the figures the same run prints. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "tests/support/support.h"

TestSuite(profiles, .timeout = 120);

static double json_num(const char *js, const char *key)
{
  char k[128];
  snprintf(k, sizeof k, "\"%s\": ", key);
  const char *p = strstr(js, k);
  cr_assert(p, "the JSON has %s", key);
  return strtod(p + strlen(k), NULL);
}

/* The column index of name in a CSV header line. */
static int column(const char *header, const char *name)
{
  int i = 0;
  for (const char *p = header;; i++) {
    size_t n = strcspn(p, ",\n");
    if (n == strlen(name) && !strncmp(p, name, n)) return i;
    if (p[n] != ',') break;
    p += n + 1;
  }
  cr_assert_fail("no column %s", name);
  return -1;
}

/* Field i of a CSV line (no quoted commas in the fields this reads). */
static double field(const char *line, int i)
{
  const char *p = line;
  for (int k = 0; k < i; k++) p = strchr(p, ',') + 1;
  return strtod(p, NULL);
}

/* Sum of a column over the rows of a CSV file. */
static double column_sum(const char *csv, const char *name, int *rows)
{
  int c = column(csv, name);
  double s = 0;
  *rows = 0;
  for (const char *p = strchr(csv, '\n') + 1; *p; p = strchr(p, '\n') + 1) {
    s += field(p, c);
    ++*rows;
  }
  return s;
}

static char *read_in(const char *dir, const char *name)
{
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  char *s = ts_read(p);
  cr_assert(s, "%s exists", p);
  return s;
}

/* A MIX kernel (cube and vector cores, cross-core flags): FlashAttention forward. */
#define FA "flash_attention", "--heads", "2", "--seq", "256", "--dim", "128"

Test(profiles, msprof_pipe_times_add_up_to_the_kernel_it_ran)
{
  char *dir = ts_tmpdir(), out[2048];
  snprintf(out, sizeof out, "%s/prof", dir);
  struct run_result r = ts_npusim("kernel", FA, "--msprof", out, "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *pu = read_in(out, "PipeUtilization.csv");
  int rows, rv;
  double cube = column_sum(pu, "aic_cube_time(us)", &rows), vec = column_sum(pu, "aiv_vec_time(us)", &rv);
  double t = json_num(r.out, "time_s"), aic = json_num(r.out, "aic_used"), aiv = json_num(r.out, "aiv_used");
  cr_assert_eq(rows, (int)(aic + aiv), "a row per core that ran: %d rows, %g + %g cores", rows, aic, aiv);
  /* the kernel's ratios are busy / (time x cores): the busy time the rows add up to */
  double want_cube = json_num(r.out, "aic_mac_ratio") * t * aic * 1e6, want_vec = json_num(r.out, "aiv_vec_ratio") * t * aiv * 1e6;
  cr_assert(want_cube > 0 && want_vec > 0, "flash attention runs both the cube and the vector units");
  cr_assert(fabs(cube - want_cube) < 1e-5 * want_cube + 1e-4, "cube: %.6f us in the rows, %.6f in the run", cube, want_cube);
  cr_assert(fabs(vec - want_vec) < 1e-5 * want_vec + 1e-4, "vector: %.6f us in the rows, %.6f in the run", vec, want_vec);
  char *ob = read_in(out, "OpBasicInfo.csv");
  cr_assert(!strncmp(ob, "Op Name,Op Type,Task Duration(us),Block Dim,Mix Block Dim,", 57), "%s", ob);
  double task = field(strchr(ob, '\n') + 1, 2), launch = json_num(r.out, "launch_s");
  cr_assert(fabs(task - (t - launch) * 1e6) < 1e-5, "task duration %.6f us is the run's %.6f us without the launch",
            task, (t - launch) * 1e6);
  free(pu);
  free(ob);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}

Test(profiles, msprof_writes_a_folder_per_core_with_every_instruction)
{
  char *dir = ts_tmpdir(), out[2048];
  snprintf(out, sizeof out, "%s/prof", dir);
  struct run_result r = ts_npusim("kernel", FA, "--msprof", out, "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  double instructions = json_num(r.out, "instructions");
  char sim[3072];
  snprintf(sim, sizeof sim, "%s/simulator", out);
  DIR *d = opendir(sim);
  cr_assert(d);
  struct dirent *de;
  int cores = 0, cube = 0;
  double calls = 0;
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "core", 4)) continue;
    cores++;
    cube += strstr(de->d_name, ".cubecore") != NULL;
    char name[4096];
    snprintf(name, sizeof name, "%s/%s_instr_exe.csv", de->d_name, de->d_name);
    char *csv = read_in(sim, name);
    cr_assert(!strncmp(csv, "instr,addr,pipe,call_count,cycles,running_time(us),detail", 57), "msprof's columns");
    int c = column(csv, "call_count");
    for (const char *p = strchr(csv, '\n') + 1; *p; p = strchr(p, '\n') + 1)
      if (strncmp(p, "SET_FLAG", 8) && strncmp(p, "WAIT_FLAG", 9) && strncmp(p, "CROSS_CORE", 10) && strncmp(p, "PIPE_BARRIER", 12))
        calls += field(p, c);
    free(csv);
    snprintf(name, sizeof name, "%s/trace.json", de->d_name);
    free(read_in(sim, name));
  }
  closedir(d);
  cr_assert_eq(cores, (int)(json_num(r.out, "aic_used") + json_num(r.out, "aiv_used")));
  cr_assert(cube > 0 && cube < cores, "cube and vector cores both have folders");
  cr_assert_eq(calls, instructions, "the tables hold every instruction: %g of %g", calls, instructions);
  /* the summary pipeline: msprof's pipe names, one X event per instruction, flows paired */
  char *tr = read_in(sim, "trace.json");
  const char *tracks[] = {"\"SCALAR\"", "\"MTE2\"", "\"MTE3\"", "\"CUBE\"", "\"VECTOR\"", "\"FIXP\""};
  for (size_t i = 0; i < sizeof tracks / sizeof *tracks; i++) cr_assert(strstr(tr, tracks[i]), "a %s track", tracks[i]);
  size_t starts = ts_count(tr, "\"ph\":\"s\""), ends = ts_count(tr, "\"ph\":\"f\"");
  cr_assert(starts > 0 && starts == ends, "every flag set starts a flow a wait ends: %zu starts, %zu ends", starts, ends);
  cr_assert(strstr(tr, "\"cat\":\"cross_core_flag\""), "cross-core flags are flows too");
  cr_assert_geq((double)ts_count(tr, "\"ph\":\"X\""), instructions + (double)starts, "every instruction and flag is an event");
  free(tr);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}

Test(profiles, msprof_refuses_a_directory_in_use_and_leaves_nothing_on_failure)
{
  char *dir = ts_tmpdir();
  free(ts_write(dir, "keep.txt", "mine\n"));
  struct run_result r = ts_npusim("kernel", FA, "--msprof", dir, NULL);
  cr_assert_eq(r.status, 2, "a non-empty directory is refused before the run: %d %s", r.status, r.err);
  cr_assert(strstr(r.err, dir) && strstr(r.err, "--msprof"), "%s", r.err);
  ts_run_free(&r);
  char out[4096];
  snprintf(out, sizeof out, "%s/prof", dir);
  r = ts_npusim("kernel", FA, "--msprof", out, "--fidelity", "analytic", NULL);
  cr_assert_eq(r.status, 2, "analytic fidelity has no instruction timeline: %s", r.err);
  ts_run_free(&r);
  struct stat st;
  cr_assert_neq(stat(out, &st), 0, "nothing was written");
  ts_rmtree(dir);
  free(dir);
}

Test(profiles, kernel_trace_gz_holds_every_instruction_it_reports)
{
  char *dir = ts_tmpdir(), path[4096];
  snprintf(path, sizeof path, "%s/t.json.gz", dir);
  struct run_result r = ts_npusim("kernel", FA, "--trace", path, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  const char *line = strstr(r.out, "every instruction, ");
  cr_assert(line, "the run says how many events it wrote: %s", r.out);
  long n = strtol(line + strlen("every instruction, "), NULL, 10);
  gzFile g = gzopen(path, "rb");
  cr_assert(g);
  char chunk[65536];
  size_t events = 0;
  int k;
  char carry[16] = "";
  while ((k = gzread(g, chunk, sizeof chunk - 1)) > 0) {
    chunk[k] = '\0';
    char both[65536 + 16];
    snprintf(both, sizeof both, "%s%s", carry, chunk);
    events += ts_count(both, "\"ph\":\"X\"");
    size_t len = strlen(chunk), keep = len < 8 ? len : 8; /* a marker cut between chunks */
    memcpy(carry, chunk + len - keep, keep);
    carry[keep] = '\0';
    events -= ts_count(carry, "\"ph\":\"X\"");
  }
  gzclose(g);
  cr_assert(n > 100 && (long)events == n, "%zu events in the file, %ld reported", events, n);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}

Test(profiles, run_trace_gz_streams_the_training_timeline)
{
  char *dir = ts_tmpdir(), cfg[4096];
  snprintf(cfg, sizeof cfg, "%s/tests/workloads/data/tiny.cfg", NPUSIM_SOURCE_DIR);
  struct run_result r = ts_npusim("run", cfg, "-o", dir, "--trace=gz", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char p[4096];
  snprintf(p, sizeof p, "%s/trace.json.gz", dir);
  gzFile g = gzopen(p, "rb");
  cr_assert(g, "trace.json.gz written");
  char head[64] = {0};
  cr_assert_gt(gzread(g, head, sizeof head - 1), 0);
  gzclose(g);
  cr_assert(!strncmp(head, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", 39), "%s", head);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}

/* --progress: a line on stderr while an event-fidelity kernel runs (blocks issued of the
 * kernel's), cleared at the end; the result on stdout is unchanged. */
Test(profiles, progress_line_counts_the_blocks_of_a_long_kernel)
{
  struct run_result r = ts_npusim("kernel", "gemm", "--m", "8192", "--n", "8192", "--k", "8192", "--progress", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.err, "\rgemm: ") && strstr(r.err, "% (") && strstr(r.err, " of 2048), "), "%s", r.err);
  cr_assert(strstr(r.err, "\r\033[K"), "the line is cleared at the end");
  cr_assert(r.out[0] == '{' && !strchr(r.out, '\r'), "stdout holds the result only");
  ts_run_free(&r);
}
