/*
 * queue.h - Ascend C's TPipe / TQue over the tile-program API: buffers allocated once per
 * kernel in a core's local memories, and queues between two pipes whose flags are derived
 * from the buffer protocol rather than written by hand. Part of the public kernel API.
 *
 *   Ascend C                          here
 *   pipe.InitBuffer(inQ, 2, bytes)    npk_pipe_que(&pipe, &inQ, NPK_VECIN, 2, bytes)   (plan time)
 *   pipe.InitBuffer(tbuf, bytes)      npk_pipe_buf(&pipe, MEM_UB, bytes)               (plan time)
 *   inQ.AllocTensor<T>()              npk_alloc(t, &u->inQ)      producer: a free buffer
 *   DataCopy(x, gm, n)                core_copy(t, ...)          on the producer's pipe
 *   inQ.EnQue(x)                      npk_enque(t, &u->inQ)      producer -> consumer flag
 *   inQ.DeQue<T>()                    npk_deque(t, &u->inQ)      consumer waits for the data
 *   inQ.FreeTensor(x)                 npk_free(t, &u->inQ)       consumer -> producer flag
 *
 * A queue of depth d rotates through its d buffers in order: the i-th allocation waits for the
 * (i - d)-th free (nothing to wait for while i < d), the i-th dequeue for the i-th enqueue.
 * Flags are counted (cores/kernel.h), so one flag id per direction serves the whole ring; each
 * queue takes its own id for its pipe pair when it is laid out.
 *
 * The layout (addresses, ids) is the kernel's, made in its plan function; the counters are a
 * launch unit's: copy the laid-out queues into the unit context (core_unit_ctx) in unit_begin,
 * so each unit starts with none used. Control flow may not depend on data (kernel.h): the
 * protocol is the same in every run, at either fidelity.
 */
#ifndef NPUSIM_OPS_QUEUE_H
#define NPUSIM_OPS_QUEUE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "arch/arch.h"
#include "common/err.h"
#include "cores/kernel.h"
#include "memory/space.h"

/* Where a queue's buffers are and which pipes it joins (Ascend C's TPosition). */
enum npk_pos {
  NPK_VECIN,  /* UB, MTE2 -> V: data loaded from GM for the vector unit */
  NPK_VECOUT, /* UB, V -> MTE3: results the vector unit leaves for the store */
  NPK_A1,     /* L1, MTE2 -> MTE1: cube operands loaded from GM */
  NPK_A2,     /* L0A, MTE1 -> M: left operand for the cube */
  NPK_B2,     /* L0B, MTE1 -> M: right operand for the cube */
  NPK_CO1,    /* L0C, M -> FIX: accumulators for the FixPipe */
};

struct npk_que {
  uint64_t base, bytes;       /* first buffer's address, each buffer's bytes (32-byte aligned) */
  uint8_t space;              /* enum mem_space */
  uint8_t prod, cons;         /* enum core_pipe */
  uint8_t id;                 /* flag id of the pipe pair, both directions */
  uint8_t depth;              /* buffers in the ring, 1..8 */
  uint32_t allocs, deques;    /* a unit's counters: buffers allocated, dequeued */
};

/* A kernel's allocation of local memory, in its plan function. */
struct npk_pipe {
  const struct arch_chip *chip;
  uint64_t used[MEM_SPACE_COUNT];                        /* bytes allocated per space */
  uint8_t ids[CORE_PIPE_COUNT][CORE_PIPE_COUNT];         /* flag ids taken per pipe pair */
  char error[200];                                       /* the first allocation that failed */
};

static inline void npk_pipe_init(struct npk_pipe *p, const struct arch_chip *chip)
{
  *p = (struct npk_pipe){.chip = chip};
}

/* bytes of space s for a TBuf (a buffer with no queue): its address, or UINT64_MAX when the
 * space is full (p->error says so; npk_pipe_check reports it). */
static inline uint64_t npk_pipe_buf(struct npk_pipe *p, enum mem_space s, uint64_t bytes)
{
  uint64_t b = (bytes + 31) / 32 * 32, have = p->chip->buf[mem_space_buf(s)].size_bytes;
  if (p->used[s] + b > have) {
    if (!p->error[0])
      snprintf(p->error, sizeof p->error, "%s needs %llu more bytes, has %llu of %llu free", mem_space_name(s),
               (unsigned long long)b, (unsigned long long)(have - p->used[s]), (unsigned long long)have);
    return UINT64_MAX;
  }
  uint64_t a = p->used[s];
  p->used[s] += b;
  return a;
}

/* Lay out queue q at position pos with depth buffers of bytes each. */
static inline void npk_pipe_que(struct npk_pipe *p, struct npk_que *q, enum npk_pos pos, int depth, uint64_t bytes)
{
  static const uint8_t space[] = {MEM_UB, MEM_UB, MEM_L1, MEM_L0A, MEM_L0B, MEM_L0C};
  static const uint8_t prod[] = {CORE_PIPE_MTE2, CORE_PIPE_V, CORE_PIPE_MTE2, CORE_PIPE_MTE1, CORE_PIPE_MTE1, CORE_PIPE_M};
  static const uint8_t cons[] = {CORE_PIPE_V, CORE_PIPE_MTE3, CORE_PIPE_MTE1, CORE_PIPE_M, CORE_PIPE_M, CORE_PIPE_FIX};
  *q = (struct npk_que){.space = space[pos], .prod = prod[pos], .cons = cons[pos], .depth = (uint8_t)depth,
                        .bytes = (bytes + 31) / 32 * 32};
  if (depth < 1 || depth > 8) {
    if (!p->error[0]) snprintf(p->error, sizeof p->error, "a queue of depth %d (1..8)", depth);
    return;
  }
  uint8_t *id = &p->ids[q->prod][q->cons];
  if (*id >= CORE_FLAG_IDS) {
    if (!p->error[0]) snprintf(p->error, sizeof p->error, "more than %d queues between the same two pipes", CORE_FLAG_IDS);
    return;
  }
  q->id = (*id)++;
  q->base = npk_pipe_buf(p, (enum mem_space)q->space, q->bytes * (uint64_t)depth);
}

/* 0, or NPU_ENOFIT with diag (key: the parameter that decided the sizes) when an allocation of
 * the pipe failed. */
static inline int npk_pipe_check(const struct npk_pipe *p, const char *key, struct npu_diag *diag)
{
  if (!p->error[0]) return 0;
  npu_diag_set(diag, "command line", 0, key, "the tiling does not fit the %s core: %s", p->chip->name, p->error);
  return NPU_ENOFIT;
}

/* Producer: the next buffer, once its previous use has been freed. */
static inline uint64_t npk_alloc(struct core_tp *t, struct npk_que *q)
{
  if (q->allocs >= q->depth) core_wait_flag(t, (enum core_pipe)q->cons, (enum core_pipe)q->prod, q->id);
  return q->base + (uint64_t)(q->allocs++ % q->depth) * q->bytes;
}

/* Producer: the buffer allocated last is filled (after the producer pipe's instructions so far). */
static inline void npk_enque(struct core_tp *t, struct npk_que *q)
{
  core_set_flag(t, (enum core_pipe)q->prod, (enum core_pipe)q->cons, q->id);
}

/* Consumer: the oldest filled buffer, once its data has landed. */
static inline uint64_t npk_deque(struct core_tp *t, struct npk_que *q)
{
  core_wait_flag(t, (enum core_pipe)q->prod, (enum core_pipe)q->cons, q->id);
  return q->base + (uint64_t)(q->deques++ % q->depth) * q->bytes;
}

/* Consumer: the oldest dequeued buffer may be refilled (after the consumer pipe's instructions). */
static inline void npk_free(struct core_tp *t, struct npk_que *q)
{
  core_set_flag(t, (enum core_pipe)q->cons, (enum core_pipe)q->prod, q->id);
}

#endif
