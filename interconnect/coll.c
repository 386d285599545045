/* coll.c - names, defaults and the nccl-tests reporting factors; see coll.h. */
#include "interconnect/coll.h"

#include "arch/arch.h"

#include <string.h>

static const char *const op_names[IC_OP_COUNT] = {
    "allreduce", "reducescatter", "allgather", "alltoall",
    "alltoallv", "broadcast",     "reduce",    "sendrecv", "send",
};

static const char *const algo_names[IC_ALGO_COUNT] = {
    "auto", "ring", "mesh", "rhd", "nhr", "pairwise", "hierarchical", "pipeline", "direct", "nvls",
};

static const char *const fidelity_names[] = {"step", "bulk"};

void ic_params_default(struct ic_params *p, const struct arch_system *sys)
{
  p->task_overhead_s = sys ? sys->node.ccl.step_overhead_s : 1.5e-6;
  p->reduce_bytes_per_s = sys ? sys->node.ccl.reduce_bw_bytes_per_s : 483e9;
  p->buffer_bytes = 200e6;
  p->select_alpha_s = 60e-6;
  p->oneshot_max_bytes = 256.0 * 1024;
  p->pipeline_ar_slice_bytes = 1024.0 * 1024;
  p->pipeline_chunk_bytes = 32.0 * 1024;
}

const char *ic_op_name(enum ic_op op)
{
  return (unsigned)op < IC_OP_COUNT ? op_names[op] : "?";
}

const char *ic_algo_name(enum ic_algo a)
{
  return (unsigned)a < IC_ALGO_COUNT ? algo_names[a] : "?";
}

const char *ic_fidelity_name(enum ic_fidelity f)
{
  return f == IC_FIDELITY_BULK ? fidelity_names[1] : fidelity_names[0];
}

static int find(const char *const *names, int n, const char *name)
{
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return i;
  return -1;
}

int ic_op_parse(const char *name, enum ic_op *out)
{
  int i = find(op_names, IC_OP_COUNT, name);
  if (i < 0) return -1;
  *out = (enum ic_op)i;
  return 0;
}

int ic_algo_parse(const char *name, enum ic_algo *out)
{
  int i = find(algo_names, IC_ALGO_COUNT, name);
  if (i < 0) return -1;
  *out = (enum ic_algo)i;
  return 0;
}

int ic_coll_parse_algo(const char *name, struct ic_coll *coll)
{
  coll->oneshot = false;
  coll->intra = coll->inter = IC_ALGO_AUTO;
  if (!strcmp(name, "mesh(one-shot)")) {
    coll->algo = IC_ALGO_MESH;
    coll->oneshot = true;
    return 0;
  }
  const char *lp = strchr(name, '('), *plus = lp ? strchr(lp, '+') : NULL;
  size_t n = strlen(name);
  if (!lp) return ic_algo_parse(name, &coll->algo);
  if (!plus || n < 2 || name[n - 1] != ')') return -1;
  char outer[32], a[32], b[32];
  size_t lo = (size_t)(lp - name), la = (size_t)(plus - lp - 1), lb = n - 1 - (size_t)(plus - name) - 1;
  if (lo >= sizeof outer || la >= sizeof a || lb >= sizeof b) return -1;
  memcpy(outer, name, lo);
  outer[lo] = '\0';
  memcpy(a, lp + 1, la);
  a[la] = '\0';
  memcpy(b, plus + 1, lb);
  b[lb] = '\0';
  if (ic_algo_parse(outer, &coll->algo) || (coll->algo != IC_ALGO_HIER && coll->algo != IC_ALGO_PIPELINE) ||
      ic_algo_parse(a, &coll->intra) || ic_algo_parse(b, &coll->inter) || coll->intra == IC_ALGO_AUTO ||
      coll->inter == IC_ALGO_AUTO)
    return -1;
  return 0;
}

int ic_fidelity_parse(const char *name, enum ic_fidelity *out)
{
  int i = find(fidelity_names, 2, name);
  if (i < 0) return -1;
  *out = (enum ic_fidelity)i;
  return 0;
}

const char *const *ic_op_names(int *n)
{
  *n = IC_OP_COUNT;
  return op_names;
}

const char *const *ic_algo_names(int *n)
{
  *n = IC_ALGO_COUNT;
  return algo_names;
}

bool ic_op_reduces(enum ic_op op)
{
  return op == IC_OP_ALLREDUCE || op == IC_OP_REDUCESCATTER || op == IC_OP_REDUCE;
}

double ic_busbw_factor(enum ic_op op, int p)
{
  if (p <= 1) return op == IC_OP_ALLREDUCE || op == IC_OP_ALLGATHER ||
                     op == IC_OP_REDUCESCATTER || op == IC_OP_ALLTOALL || op == IC_OP_ALLTOALLV
                 ? 0 : 1;
  switch (op) {
  case IC_OP_ALLREDUCE: return 2.0 * (p - 1) / p;
  case IC_OP_ALLGATHER:
  case IC_OP_REDUCESCATTER:
  case IC_OP_ALLTOALL:
  case IC_OP_ALLTOALLV: return (double)(p - 1) / p;
  default: return 1;
  }
}

double ic_algbw_bytes_per_s(double bytes, double time_s)
{
  return time_s > 0 ? bytes / time_s : 0;
}

double ic_coll_step_bytes(const struct ic_coll *c, int p)
{
  if (c->op == IC_OP_SEND || c->op == IC_OP_SENDRECV || p < 2) return c->bytes;
  if (c->op == IC_OP_ALLTOALLV && c->matrix) { /* the mean transfer between two ranks */
    double sum = 0;
    for (int i = 0; i < p; i++)
      for (int j = 0; j < p; j++)
        if (i != j) sum += c->matrix[(size_t)i * p + j];
    return sum / ((double)p * (p - 1));
  }
  return c->bytes / p;
}

bool ic_op_p2p(enum ic_op op)
{
  return op == IC_OP_SEND || op == IC_OP_SENDRECV || op == IC_OP_ALLTOALL || op == IC_OP_ALLTOALLV;
}
