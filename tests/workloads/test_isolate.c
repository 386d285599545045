/*
 * test_isolate.c - work in child processes: every task's record comes back to its own slot
 * whatever the number run at a time and the order they end in, done is called once per task,
 * and a child that dies is reported with its path while the others are still waited for.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "workloads/isolate.h"

struct rec {
  int index;
  long square;
};

/* Task i squares i; the early tasks sleep longer, so they end after later ones. */
static void square(void *ctx, void *record)
{
  int i = *(const int *)ctx;
  struct timespec ts = {0, (long)(5 - i % 5) * 4000000L};
  nanosleep(&ts, NULL);
  struct rec *r = record;
  r->index = i;
  r->square = (long)i * i;
}

static void die(void *ctx, void *record)
{
  (void)ctx, (void)record;
  raise(SIGKILL);
}

struct seen {
  int count[16];
};

static void count_done(void *ctx, int index)
{
  ((struct seen *)ctx)->count[index]++;
}

static void run_all(int jobs)
{
  enum { N = 13 };
  int ids[N];
  struct rec recs[N];
  struct wl_isolate_task t[N];
  for (int i = 0; i < N; i++) {
    ids[i] = i;
    t[i] = (struct wl_isolate_task){square, &ids[i], &recs[i], sizeof recs[i], "square"};
  }
  struct seen s;
  memset(&s, 0, sizeof s);
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_isolate_all(t, N, jobs, count_done, &s, &d), 0, "%s", d.msg);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(recs[i].index, i, "jobs %d: record %d holds task %d's", jobs, i, recs[i].index);
    cr_assert_eq(recs[i].square, (long)i * i);
    cr_assert_eq(s.count[i], 1, "jobs %d: done called %d times for task %d", jobs, s.count[i], i);
  }
}

Test(isolate, every_record_comes_back_to_its_task_at_any_parallelism, .timeout = 60)
{
  run_all(1);
  run_all(3);
  run_all(64);
}

Test(isolate, a_child_that_dies_is_reported_with_its_path, .timeout = 60)
{
  int ids[3] = {0, 1, 2};
  struct rec recs[3];
  struct wl_isolate_task t[3] = {
      {square, &ids[0], &recs[0], sizeof recs[0], "first"},
      {die, &ids[1], &recs[1], sizeof recs[1], "the-dying-one"},
      {square, &ids[2], &recs[2], sizeof recs[2], "third"},
  };
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_isolate_all(t, 3, 2, NULL, NULL, &d), NPU_EINTERNAL);
  char msg[1024];
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert(strstr(msg, "the-dying-one") && strstr(msg, "signal"), "message: %s", msg);
}
