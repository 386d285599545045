/*
 * progress.h - how far long work has got, for a person watching: the command hands a
 * progress sink down (cli/progress.c prints one line on stderr when it is a terminal), and the
 * models say how much of their work is done. A NULL sink: nobody watches; the models pay a
 * pointer test. Progress never changes what is computed.
 *
 *   npu_progress_note(job->progress, "replay", slots_done, slots);
 */
#ifndef NPUSIM_COMMON_PROGRESS_H
#define NPUSIM_COMMON_PROGRESS_H

struct npu_progress {
  /* what: a short name of the work ("replay", "kernel"); done of total (same unit) */
  void (*note)(void *ctx, const char *what, double done, double total);
  void *ctx;
};

static inline void npu_progress_note(const struct npu_progress *p, const char *what, double done, double total)
{
  if (p && p->note) p->note(p->ctx, what, done, total);
}

#endif
