/*
 * mpi.c - points spread over MPI ranks with dynamic load balancing; see mpi.h.
 *
 * Protocol (tag 1, worker -> rank 0): int32 {kind (0 request/result, 1 bye), want, index,
 * status} then the row's bytes. Tag 2, rank 0 -> worker: int32 index, -1 when none is left.
 * A worker keeps -j requests in flight or running; each finished point's row goes back with
 * the next request, so a fast rank simply asks more often.
 */
#include "sweep/mpi.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

bool sw_mpi_launched(void)
{
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", NULL};
  for (int i = 0; vars[i]; i++)
    if (getenv(vars[i])) return true;
  return false;
}

#ifdef NPUSIM_HAVE_MPI
#include <mpi.h>

#define TAG_MSG 1
#define TAG_WORK 2

bool sw_mpi_available(void)
{
  return true;
}

int sw_mpi_init(int *rank, int *size, struct npu_diag *diag)
{
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited && MPI_Init(NULL, NULL) != MPI_SUCCESS)
    return npu_diag_set(diag, NULL, 0, NULL, "MPI_Init failed"), NPU_EINTERNAL;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return 0;
}

void sw_mpi_finalize(void)
{
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

int sw_mpi_agree(int rc)
{
  int v = rc;
  MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return v;
}

static void send_msg(int kind, int want, int index, int status, const char *row)
{
  size_t rl = row ? strlen(row) : 0;
  char *buf = npu_xmalloc(16 + rl);
  int32_t h[4] = {kind, want, index, status};
  memcpy(buf, h, 16);
  if (rl) memcpy(buf + 16, row, rl);
  MPI_Send(buf, (int)(16 + rl), MPI_BYTE, 0, TAG_MSG, MPI_COMM_WORLD);
  free(buf);
}

int sw_mpi_poll(struct sw_mpi_msg *m)
{
  int flag = 0;
  MPI_Status st;
  memset(m, 0, sizeof *m);
  MPI_Iprobe(MPI_ANY_SOURCE, TAG_MSG, MPI_COMM_WORLD, &flag, &st);
  if (!flag) return 0;
  int n = 0;
  MPI_Get_count(&st, MPI_BYTE, &n);
  char *buf = npu_xmalloc((size_t)n + 1);
  MPI_Recv(buf, n, MPI_BYTE, st.MPI_SOURCE, TAG_MSG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  int32_t h[4];
  memcpy(h, buf, 16);
  buf[n] = '\0';
  m->src = st.MPI_SOURCE;
  m->bye = h[0] == 1;
  m->want = h[1] != 0;
  m->index = h[2];
  m->status = h[3];
  if (n > 16) npu_buf_puts(&m->row, buf + 16);
  free(buf);
  return 1;
}

void sw_mpi_reply(int dest, int index)
{
  int32_t v = index;
  MPI_Send(&v, 1, MPI_INT32_T, dest, TAG_WORK, MPI_COMM_WORLD);
}

struct worker {
  bool no_more;
  int outstanding;
};

static void sent_back(void *ctx, int index, enum sw_status st, const char *row)
{
  struct worker *w = ctx;
  send_msg(0, !w->no_more, index, (int)st, row);
  if (!w->no_more) w->outstanding++;
}

int sw_mpi_worker(const struct sw_spec *s, const struct sw_exec_options *o)
{
  struct sw_pool *pool = sw_pool_create(s, o->jobs, o->timeout_s);
  struct worker w = {0};
  int jobs = o->jobs < 1 ? 1 : o->jobs;
  for (int i = 0; i < jobs; i++) {
    send_msg(0, 1, -1, 0, NULL);
    w.outstanding++;
  }
  while (w.outstanding > 0 || sw_pool_running(pool) > 0) {
    int flag = 0;
    MPI_Status st;
    for (;;) {
      MPI_Iprobe(0, TAG_WORK, MPI_COMM_WORLD, &flag, &st);
      if (!flag) break;
      int32_t idx;
      MPI_Recv(&idx, 1, MPI_INT32_T, 0, TAG_WORK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      w.outstanding--;
      if (idx < 0) w.no_more = true;
      else if (idx < s->npoints) sw_pool_start(pool, idx);
    }
    sw_pool_wait(pool, 2, sent_back, &w);
  }
  send_msg(1, 0, -1, 0, NULL);
  sw_pool_destroy(pool);
  return 0;
}

#else /* no MPI in this build */

bool sw_mpi_available(void)
{
  return false;
}

int sw_mpi_init(int *rank, int *size, struct npu_diag *diag)
{
  *rank = 0;
  *size = 1;
  return npu_diag_set(diag, NULL, 0, NULL, "this npusim was built without MPI (install libopenmpi-dev and rebuild)"),
         NPU_EUNSUPPORTED;
}

void sw_mpi_finalize(void) {}

int sw_mpi_agree(int rc)
{
  return rc;
}

int sw_mpi_poll(struct sw_mpi_msg *m)
{
  memset(m, 0, sizeof *m);
  return 0;
}

void sw_mpi_reply(int dest, int index)
{
  (void)dest;
  (void)index;
}

int sw_mpi_worker(const struct sw_spec *s, const struct sw_exec_options *o)
{
  (void)s;
  (void)o;
  return NPU_EUNSUPPORTED;
}

#endif
