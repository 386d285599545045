/*
 * algo_log.c - the logarithmic algorithms: recursive halving-doubling (Rabenseifner; a
 * non-power-of-two p first folds the 2r extra ranks into their partners and unfolds them at
 * the end, HCCL's "extra reduce step and final copy"), NHR as a ring-ordered Bruck schedule
 * (step s exchanges min(2^s, p - 2^s) blocks with the rank 2^s away, ceil(log2 p) steps, HCCL's
 * NHR/NB cost), binomial scatter and gather, and the dispatch of flat algorithms per op.
 */
#include "common/err.h"
#include "interconnect/interconnect_int.h"

#include <stdlib.h>

static int ilog2(int k)
{
  int l = 0;
  while ((1 << (l + 1)) <= k) l++;
  return l;
}

static int clog2(int k)
{
  int l = 0;
  while ((1 << l) < k) l++;
  return l;
}

/* Recursive halving among K (a power of two) members: each ends with n / K reduced. */
static void rs_pow2(struct ic__b *b, const int *a, int K, double n)
{
  for (int s = 0; (K >> (s + 1)) >= 1; s++) {
    int dist = K >> (s + 1);
    double bytes = n / (double)(2 << s);
    for (int i = 0; i < K; i++) ic__b_send(b, a[i], a[i ^ dist], bytes);
    for (int i = 0; i < K; i++) ic__b_reduce(b, a[i], bytes);
    ic__b_end_step(b, a, K);
  }
  ic__b_end_phase(b);
}

/* Recursive doubling among K members, each starting with n / K. */
static void ag_pow2(struct ic__b *b, const int *a, int K, double n)
{
  for (int dist = 1; dist < K; dist <<= 1) {
    double bytes = n / K * dist;
    for (int i = 0; i < K; i++) ic__b_send(b, a[i], a[i ^ dist], bytes);
    ic__b_end_step(b, a, K);
  }
  ic__b_end_phase(b);
}

/* Split m into the power-of-two active set and the r extra members (odd index < 2r). */
static int *active_set(const int *m, int k, int *K)
{
  *K = 1 << ilog2(k);
  int r = k - *K;
  int *a = npu_xmalloc((size_t)*K * sizeof *a);
  int n = 0;
  for (int i = 0; i < k; i++)
    if (!(i < 2 * r && (i & 1))) a[n++] = m[i];
  NPU_ASSERT(n == *K);
  return a;
}

/* One step between each extra member and its partner: extra -> partner (to_partner) or back. */
static void fold(struct ic__b *b, const int *m, int k, double bytes, bool to_partner, bool reduce)
{
  int r = k - (1 << ilog2(k));
  for (int e = 1; e < 2 * r; e += 2) {
    int from = to_partner ? m[e] : m[e - 1], to = to_partner ? m[e - 1] : m[e];
    ic__b_send(b, from, to, bytes);
    if (reduce) ic__b_reduce(b, to, bytes);
  }
  ic__b_end_step(b, m, 2 * r);
  ic__b_end_phase(b);
}

void ic__rs_rhd(struct ic__b *b, const int *m, int k, double n)
{
  if (k < 2) return;
  int K;
  int *a = active_set(m, k, &K);
  if (K != k) fold(b, m, k, n, true, true);
  rs_pow2(b, a, K, n);
  if (K != k) fold(b, m, k, n / k, false, false);
  free(a);
}

void ic__ag_rhd(struct ic__b *b, const int *m, int k, double n)
{
  if (k < 2) return;
  int K;
  int *a = active_set(m, k, &K);
  if (K != k) fold(b, m, k, n / k, true, false);
  ag_pow2(b, a, K, n);
  if (K != k) fold(b, m, k, n, false, false);
  free(a);
}

void ic__ar_rhd(struct ic__b *b, const int *m, int k, double n)
{
  if (k < 2) return;
  int K;
  int *a = active_set(m, k, &K);
  if (K != k) fold(b, m, k, n, true, true);
  rs_pow2(b, a, K, n);
  ag_pow2(b, a, K, n);
  if (K != k) fold(b, m, k, n, false, false);
  free(a);
}

void ic__rs_nhr(struct ic__b *b, const int *m, int k, double n)
{
  double c = n / k;
  for (int s = clog2(k) - 1; s >= 0; s--) {
    int d = 1 << s, cnt = d < k - d ? d : k - d;
    for (int i = 0; i < k; i++) ic__b_send(b, m[i], m[(i + d) % k], cnt * c);
    for (int i = 0; i < k; i++) ic__b_reduce(b, m[i], cnt * c);
    ic__b_end_step(b, m, k);
  }
  ic__b_end_phase(b);
}

void ic__ag_nhr(struct ic__b *b, const int *m, int k, double n)
{
  double c = n / k;
  for (int s = 0; (1 << s) < k; s++) {
    int d = 1 << s, cnt = d < k - d ? d : k - d;
    for (int i = 0; i < k; i++) ic__b_send(b, m[i], m[(i - d + k) % k], cnt * c);
    ic__b_end_step(b, m, k);
  }
  ic__b_end_phase(b);
}

void ic__scatter_binomial(struct ic__b *b, const int *m, int k, int root, double n)
{
  double c = n / k;
  for (int s = clog2(k) - 1; s >= 0; s--) {
    int d = 1 << s;
    for (int v = 0; v + d < k; v += 2 * d) {
      int cnt = d < k - v - d ? d : k - v - d;
      ic__b_send(b, m[(v + root) % k], m[(v + d + root) % k], cnt * c);
    }
    ic__b_end_step(b, m, k);
  }
  ic__b_end_phase(b);
}

void ic__gather_binomial(struct ic__b *b, const int *m, int k, int root, double n)
{
  double c = n / k;
  for (int s = 0; (1 << s) < k; s++) {
    int d = 1 << s;
    for (int v = d; v < k; v += 2 * d) {
      int cnt = d < k - v ? d : k - v;
      ic__b_send(b, m[(v + root) % k], m[(v - d + root) % k], cnt * c);
    }
    ic__b_end_step(b, m, k);
  }
  ic__b_end_phase(b);
}

static void rs(struct ic__b *b, enum ic_algo a, const int *m, int k, double n)
{
  switch (a) {
  case IC_ALGO_RING: ic__rs_ring(b, m, k, n); break;
  case IC_ALGO_MESH: ic__rs_mesh(b, m, k, n); break;
  case IC_ALGO_RHD: ic__rs_rhd(b, m, k, n); break;
  case IC_ALGO_NHR: ic__rs_nhr(b, m, k, n); break;
  default: NPU_PANIC("no flat reduce-scatter '%s'", ic_algo_name(a));
  }
}

static void ag(struct ic__b *b, enum ic_algo a, const int *m, int k, double n)
{
  switch (a) {
  case IC_ALGO_RING: ic__ag_ring(b, m, k, n); break;
  case IC_ALGO_MESH: ic__ag_mesh(b, m, k, n); break;
  case IC_ALGO_RHD: ic__ag_rhd(b, m, k, n); break;
  case IC_ALGO_NHR: ic__ag_nhr(b, m, k, n); break;
  default: NPU_PANIC("no flat all-gather '%s'", ic_algo_name(a));
  }
}

void ic__flat(struct ic__b *b, enum ic_op op, enum ic_algo a, const int *m, int k, int root,
              double n, bool oneshot)
{
  if (k < 2) return;
  switch (op) {
  case IC_OP_ALLREDUCE:
    if (a == IC_ALGO_MESH && oneshot) ic__ar_oneshot(b, m, k, n);
    else if (a == IC_ALGO_RHD) ic__ar_rhd(b, m, k, n);
    else {
      rs(b, a, m, k, n);
      ag(b, a, m, k, n);
    }
    break;
  case IC_OP_REDUCESCATTER: rs(b, a, m, k, n); break;
  case IC_OP_ALLGATHER: ag(b, a, m, k, n); break;
  case IC_OP_BROADCAST:
    if (a == IC_ALGO_MESH) {
      ic__bcast_star(b, m, k, root, n);
    } else {
      ic__scatter_binomial(b, m, k, root, n);
      ag(b, a, m, k, n);
    }
    break;
  case IC_OP_REDUCE:
    if (a == IC_ALGO_MESH) {
      ic__reduce_star(b, m, k, root, n);
    } else {
      rs(b, a, m, k, n);
      ic__gather_binomial(b, m, k, root, n);
    }
    break;
  default: NPU_PANIC("no flat '%s' for '%s'", ic_algo_name(a), ic_op_name(op));
  }
}
