/* test_trace_file.c - Chrome traces streamed to disk: nothing kept in memory, nothing cut,
 * gzip when the name says so, nothing left behind by a failed run, located errors. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/err.h"
#include "report/chrome.h"
#include "report/trace_file.h"
#include "tests/support/support.h"

TestSuite(trace_file, .timeout = 30);

static char *gunzip(const char *path)
{
  gzFile g = gzopen(path, "rb");
  cr_assert(g, "%s opens as gzip", path);
  struct npu_buf b = {0};
  char chunk[65536];
  int n;
  while ((n = gzread(g, chunk, sizeof chunk)) > 0) npu_buf_append(&b, chunk, (size_t)n);
  gzclose(g);
  char *s = npu_xstrdup(npu_buf_str(&b));
  npu_buf_release(&b);
  return s;
}

/* 100,000 events: several 1 MiB flushes. */
static void fill(struct npu_trace *t)
{
  npu_trace_name(t, 7, -1, "core \"7\"");
  npu_trace_name(t, 7, 3, "M");
  for (int i = 0; i < 100000; i++) npu_trace_add(t, 7, 3, "mmad", i * 1e-9, 0.5e-9);
}

Test(trace_file, streams_every_event_and_keeps_none_in_memory)
{
  char *dir = ts_tmpdir(), path[4096];
  snprintf(path, sizeof path, "%s/t.json", dir);
  struct rpt_trace_file *f;
  struct npu_diag d = {0};
  cr_assert_eq(rpt_trace_file_open(&f, path, "--trace", &d), 0);
  struct npu_trace t = {0};
  rpt_trace_file_attach(f, &t);
  fill(&t);
  cr_assert_eq(t.n, 0, "a streamed trace keeps no events, kept %zu", t.n);
  cr_assert_eq(npu_trace_events(&t), 100000);
  cr_assert_eq(rpt_trace_file_close(f, &t, &d), 0, "%s", d.msg);
  char *s = ts_read(path);
  cr_assert(s);
  cr_assert(!strncmp(s, RPT_CHROME_HEAD, strlen(RPT_CHROME_HEAD)));
  cr_assert(strstr(s, RPT_CHROME_TAIL) && !strcmp(strstr(s, RPT_CHROME_TAIL), RPT_CHROME_TAIL), "ends with the tail");
  cr_assert_eq(ts_count(s, "\"ph\":\"X\""), 100000, "every event written");
  cr_assert_eq(ts_count(s, "\"ph\":\"M\""), 2, "both track names written");
  cr_assert(strstr(s, "\"name\":\"core \\\"7\\\"\""), "track names are escaped");
  cr_assert(strstr(s, "{\"name\":\"mmad\",\"ph\":\"X\",\"ts\":0.001000,\"dur\":0.000500,\"pid\":7,\"tid\":3}"),
            "compact, times in us with picoseconds");
  cr_assert_eq(ts_count(s, "\n"), 100000 + 2 + 2, "one event per line, no indentation");
  free(s);
  npu_trace_release(&t);
  ts_rmtree(dir);
  free(dir);
}

Test(trace_file, a_gz_name_writes_gzip_of_the_same_document)
{
  char *dir = ts_tmpdir(), plain[4096], gz[4096];
  snprintf(plain, sizeof plain, "%s/t.json", dir);
  snprintf(gz, sizeof gz, "%s/t.json.gz", dir);
  const char *paths[] = {plain, gz};
  for (int k = 0; k < 2; k++) {
    struct rpt_trace_file *f;
    struct npu_diag d = {0};
    cr_assert_eq(rpt_trace_file_open(&f, paths[k], "--trace", &d), 0);
    struct npu_trace t = {0};
    rpt_trace_file_attach(f, &t);
    fill(&t);
    cr_assert_eq(rpt_trace_file_close(f, &t, &d), 0, "%s", d.msg);
    npu_trace_release(&t);
  }
  char *a = ts_read(plain), *b = gunzip(gz);
  cr_assert_str_eq(a, b, "the .gz file decompresses to the plain document");
  struct stat sa, sb;
  stat(plain, &sa);
  stat(gz, &sb);
  cr_assert_lt(sb.st_size * 10, sa.st_size, "compressed: %lld bytes against %lld", (long long)sb.st_size,
               (long long)sa.st_size);
  free(a);
  free(b);
  ts_rmtree(dir);
  free(dir);
}

Test(trace_file, an_aborted_trace_leaves_no_file)
{
  char *dir = ts_tmpdir(), path[4096];
  snprintf(path, sizeof path, "%s/t.json", dir);
  struct rpt_trace_file *f;
  struct npu_diag d = {0};
  cr_assert_eq(rpt_trace_file_open(&f, path, "--trace", &d), 0);
  rpt_trace_file_event(f, &(struct npu_trace_event){0, 1e-9, 0, 0, "x", 'X', 0, 0, NULL});
  rpt_trace_file_abort(f);
  cr_assert_eq(rmdir(dir), 0, "the directory is empty again (no trace, no partial file)");
  free(dir);
}

Test(trace_file, an_unwritable_path_fails_at_open_naming_it)
{
  struct rpt_trace_file *f;
  struct npu_diag d = {0};
  cr_assert_eq(rpt_trace_file_open(&f, "/nonexistent-dir/t.json", "--trace", &d), NPU_EIO);
  cr_assert_null(f);
  cr_assert(strstr(d.msg, "No such file"), "%s", d.msg);
  cr_assert_str_eq(d.file, "/nonexistent-dir/t.json");
}

Test(trace_file, times_print_in_microseconds_to_the_picosecond)
{
  struct npu_buf b = {0};
  rpt_chrome_us(&b, 1.5e-12);
  npu_buf_puts(&b, " ");
  rpt_chrome_us(&b, 12.345678901);
  npu_buf_puts(&b, " ");
  rpt_chrome_us(&b, -2.5e-6);
  cr_assert_str_eq(npu_buf_str(&b), "0.000002 12345678.901000 -2.500000");
  npu_buf_release(&b);
}
