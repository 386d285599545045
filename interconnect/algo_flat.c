/*
 * algo_flat.c - the single-level algorithms as step sequences: ring, mesh (all peers at once,
 * one-shot AllReduce, star Broadcast / Reduce / Scatter), pairwise and mesh AllToAll(V),
 * SendRecv, and the in-switch (NVLS) AllReduce. Sizes per step follow the textbook algorithms (Thakur, Rabenseifner & Gropp 2005;
 * HCCL's algorithm guide), so each step's time is alpha + bytes x beta (+ reduced bytes x
 * gamma); docs/INTERCONNECT.md gives the totals.
 */
#include "interconnect/interconnect_int.h"

void ic__rs_ring(struct ic__b *b, const int *m, int k, double n)
{
  double c = n / k;
  for (int s = 0; s < k - 1; s++) {
    for (int i = 0; i < k; i++) ic__b_send(b, m[i], m[(i + 1) % k], c);
    for (int i = 0; i < k; i++) ic__b_reduce(b, m[i], c);
    ic__b_end_step(b, m, k);
  }
  ic__b_end_phase(b);
}

void ic__ag_ring(struct ic__b *b, const int *m, int k, double n)
{
  double c = n / k;
  for (int s = 0; s < k - 1; s++) {
    for (int i = 0; i < k; i++) ic__b_send(b, m[i], m[(i + 1) % k], c);
    ic__b_end_step(b, m, k);
  }
  ic__b_end_phase(b);
}

void ic__rs_mesh(struct ic__b *b, const int *m, int k, double n)
{
  if (k < 2) return;
  double c = n / k;
  for (int i = 0; i < k; i++)
    for (int j = 1; j < k; j++) ic__b_send(b, m[i], m[(i + j) % k], c);
  for (int i = 0; i < k; i++) ic__b_reduce(b, m[i], (k - 1) * c);
  ic__b_end_step(b, m, k);
  ic__b_end_phase(b);
}

void ic__ag_mesh(struct ic__b *b, const int *m, int k, double n)
{
  if (k < 2) return;
  double c = n / k;
  for (int i = 0; i < k; i++)
    for (int j = 1; j < k; j++) ic__b_send(b, m[i], m[(i + j) % k], c);
  ic__b_end_step(b, m, k);
  ic__b_end_phase(b);
}

void ic__ar_oneshot(struct ic__b *b, const int *m, int k, double n)
{
  if (k < 2) return;
  for (int i = 0; i < k; i++)
    for (int j = 1; j < k; j++) ic__b_send(b, m[i], m[(i + j) % k], n);
  for (int i = 0; i < k; i++) ic__b_reduce(b, m[i], (k - 1) * n);
  ic__b_end_step(b, m, k);
  ic__b_end_phase(b);
}

void ic__bcast_star(struct ic__b *b, const int *m, int k, int root, double n)
{
  if (k < 2) return;
  for (int j = 1; j < k; j++) ic__b_send(b, m[root], m[(root + j) % k], n);
  ic__b_end_step(b, m, k);
  ic__b_end_phase(b);
}

void ic__scatter_star(struct ic__b *b, const int *m, int k, int root, double n)
{
  if (k < 2) return;
  for (int j = 1; j < k; j++) ic__b_send(b, m[root], m[(root + j) % k], n / k);
  ic__b_end_step(b, m, k);
  ic__b_end_phase(b);
}

void ic__reduce_star(struct ic__b *b, const int *m, int k, int root, double n)
{
  if (k < 2) return;
  for (int j = 1; j < k; j++) ic__b_send(b, m[(root + j) % k], m[root], n);
  ic__b_reduce(b, m[root], (k - 1) * n);
  ic__b_end_step(b, m, k);
  ic__b_end_phase(b);
}

void ic__a2a_mesh(struct ic__b *b, const int *m, int k, const struct ic__sizes *sz)
{
  if (k < 2) return;
  for (int i = 0; i < k; i++)
    for (int j = 1; j < k; j++) {
      int to = m[(i + j) % k];
      ic__b_send(b, m[i], to, ic__size(sz, m[i], to));
    }
  ic__b_end_step(b, m, k);
  ic__b_end_phase(b);
}

void ic__a2a_pairwise(struct ic__b *b, const int *m, int k, const struct ic__sizes *sz)
{
  ic__b_rep_first(b, true);
  for (int s = 1; s < k; s++) {
    for (int i = 0; i < k; i++) {
      int to = m[(i + s) % k];
      ic__b_send(b, m[i], to, ic__size(sz, m[i], to));
    }
    ic__b_end_step(b, m, k);
  }
  ic__b_end_phase(b);
  ic__b_rep_first(b, false);
}

/*
 * NVLink SHARP all-reduce (NCCL's NVLS): each rank's share of every chunk is read and reduced by
 * the switch (out of the rank: S; into it: its reduced S/k), then multicast from the switch (out:
 * S/k; in: S). Pipelined over chunks, both directions of a rank's port carry S (1 + 1/k) at once:
 * one step of that many bytes to a neighbour loads every port as NVLS does, with no reduction on
 * the ranks (the switch adds).
 */
void ic__ar_nvls(struct ic__b *b, const int *m, int k, double n)
{
  if (k < 2) return;
  for (int i = 0; i < k; i++) ic__b_send(b, m[i], m[(i + 1) % k], n * (1 + 1.0 / k));
  ic__b_end_step(b, m, k);
  ic__b_end_phase(b);
}

/* One transfer, m[0] -> m[1]. */
void ic__send(struct ic__b *b, const int *m, double n)
{
  ic__b_send(b, m[0], m[1], n);
  ic__b_end_step(b, m, 2);
  ic__b_end_phase(b);
}

void ic__sendrecv(struct ic__b *b, const int *m, int k, double n)
{
  if (k < 2) return;
  for (int i = 0; i < k; i++) ic__b_send(b, m[i], m[(i + 1) % k], n);
  ic__b_end_step(b, m, k);
  ic__b_end_phase(b);
}
