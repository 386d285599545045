/* progress.c - one progress line on stderr while a command works; see cli.h. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void note(void *ctx, const char *what, double done, double total)
{
  struct cli_progress *p = ctx;
  double t = now_s();
  if (t - p->last < 0.25) return; /* a few lines a second at most */
  p->last = t;
  double pct = total > 0 ? 100 * done / total : 0;
  fprintf(stderr, "\r%s: %.0f%% (%.0f of %.0f), %.0f s   ", what, pct > 100 ? 100 : pct, done, total, t - p->t0);
  fflush(stderr);
  p->shown = true;
}

void cli_progress_init(struct cli_progress *p, int enabled)
{
  *p = (struct cli_progress){.sink = {note, p}, .t0 = now_s(), .last = 0};
  p->on = enabled < 0 ? isatty(STDERR_FILENO) : enabled;
  p->last = p->t0; /* the first line after a quarter of a second: short commands print nothing */
}

const struct npu_progress *cli_progress_sink(struct cli_progress *p)
{
  return p->on ? &p->sink : NULL;
}

void cli_progress_end(struct cli_progress *p)
{
  if (p->shown) fprintf(stderr, "\r\033[K");
  p->shown = false;
}
