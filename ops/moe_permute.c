/*
 * moe_permute.c - the MoE dispatch permute (Ascend MoeInitRouting): token rows copied into
 * expert-sorted order, one row per (token, selected expert).
 *
 * Inputs: x [tokens, hidden] and expert_ids [tokens, k] int32. Outputs:
 *   y        [tokens * k, hidden]  rows sorted by expert, stable in token order within an expert
 *                                  (a source slot s = t * k + j; slots of one token have distinct
 *                                  experts, so token order and slot order agree);
 *   row_map  [tokens * k] int32    the source slot s of each output row (dst -> src);
 *   dst_row  [tokens * k] int32    the output row of each source slot (src -> dst: MoeInitRouting's
 *                                  expanded_row_idx, what moe_unpermute / MoeFinalizeRouting take);
 *   counts   [experts] int32       rows per expert (their prefix sums are the groups of a grouped
 *                                  GEMM).
 *
 * Algorithm: a counting sort over all vector cores with data-independent control flow. Each core
 * owns a contiguous range of tokens.
 *   A. histogram of its expert ids: ids are loaded in chunks and narrowed to int16; for every
 *      expert e a compare against e, a select of ones and a whole-repeat sum give 128-slot partial
 *      counts, which one more reduction per chunk folds into the core's int32 histogram. The
 *      histogram goes to a GM workspace [cores, experts].
 *   -- all-core barrier (core_sync_all) --
 *   B. every core reads all histograms: its base per expert (rows of that expert on earlier cores)
 *      and the totals, whose exclusive prefix over experts (suffix adds of each total, a scalar
 *      read from UB) gives the experts' first rows; core 0 writes the counts. The sum is each
 *      expert's next free row G[e]. The core then walks its tokens in tiles: for each slot, in
 *      order, dst = G[e] (a compare of the expert iota with the slot's id, a select of G, two
 *      reductions) and G[e] += 1 (a select of G + 1); dst lands in a 32-byte block of its own,
 *      where the indexed copies read it. The tile's token rows are loaded once (MTE2, contiguous) and
 *      written k times with indexed copies to y + dst x row bytes (MTE3); row_map gets 4-byte
 *      indexed writes of s at dst; dst_row is written densely after a one-element-per-repeat
 *      reduction compacts the dst blocks.
 * So x is read once and y written once: (k + 1) x tokens x hidden x bytes of traffic, against
 * 2 k x tokens x hidden x bytes for the gather formulation (read a token's row once per expert),
 * plus a few bytes per slot (the ids read twice, a 4-byte row_map write in one burst, dst_row).
 * The per-slot work of phase B (about 6 x ceil(experts / 64) + 2 vector cycles) runs while the
 * previous tile's rows move: ids, dst blocks and row buffers are double buffered. Rows wider than
 * 32 KiB are moved in column chunks. Phase A costs experts / 32 vector cycles per slot.
 *
 * The expert ids of a functional run are generated in setup() from the execution's seeded
 * generator: k distinct experts per token, uniform, or Zipf-skewed with `skew` (a few hot
 * experts, as real routers produce). Timing-only runs have no ids: their indexed copies move data
 * as if the index were 0 (the model's rule). Byte counts and pipe times are those of the real
 * kernel, and the L2 models of both fidelities take each indexed store of a timing-only run to
 * write lines nobody touched before and nobody touches again (a scatter of distinct rows, which
 * this kernel's stores are: every output row is written once), so the stores reach HBM; a
 * functional run gives the models the rows really written (cores/exec_int.h core__gm_tile).
 *
 * Reference: the stable counting sort on the host (exact: every output is compared bit for bit).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "ops/moe_int.h"

static const struct op_param params[] = {
    {"tokens", OP_P_DIM, NULL, "tokens", NULL},
    {"hidden", OP_P_DIM, NULL, "hidden size (columns of a row)", NULL},
    {"experts", OP_P_DIM, "8", "experts", NULL},
    {"topk", OP_P_DIM, "2", "experts per token (rows per token)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of the token rows (any type of 8 bits or more)", NULL},
    {"skew", OP_P_REAL, "0", "Zipf exponent of the generated expert load (0: uniform)", NULL},
    {"tile", OP_P_INT, "0", "tokens per tile of phase B (0: auto)", NULL},
    {"cores", OP_P_INT, "0", "vector cores to use (0: all)", NULL},
};

/* Block classes (the analytic fidelity times one representative of each). */
enum { C_HIST, C_HIST_TAIL0, C_HIST_TAIL1, C_BARRIER, C_PREP, C_TILE, C_TILE_TAIL0, C_TILE_TAIL1 };
/* Flag ids. */
enum { ID_CHUNK = 0, ID_IDS = 2, ID_ROWS = 4, ID_HIST = 6, ID_PREP = 7, ID_COUNTS = 8 };

struct perm {
  uint32_t T, H, E, k;
  enum npu_dtype dt;
  double skew;
  int C;                     /* cores (units); unit u owns tokens [tok0[u], tok0[u + 1]) */
  uint32_t *tok0;            /* C + 1 entries (host tiling data, freed by release) */
  uint64_t *base;            /* C + 1 entries: first block of each unit */
  uint32_t HC;               /* slots per histogram chunk (a multiple of 128) */
  uint32_t R;                /* tokens per tile of phase B */
  uint32_t hc, nch;          /* columns per row chunk, chunks per row */
  uint32_t HR;               /* histogram rows per load in the prep block */
  uint32_t nE;               /* int32 repeats covering the experts */
  uint32_t E8;               /* experts rounded up to 8: a workspace row is whole 32-byte blocks */
  uint64_t nblocks;
  uint64_t x, ids, y, row_map, dst_row, counts, ws; /* GM */
  /* UB, phase A */
  uint64_t id32[2], id16, bits, t16, one16, zero16, p16, h16, h32, hist;
  uint32_t ps;               /* bytes of one expert's partial counts */
  /* UB, phase B */
  uint64_t wsh, total, g[2], gp1, iota, zero32, ebits, ts, part, sio;
  uint64_t idt[2], db[2], sv[2], dro[2], xb[2];
  uint64_t rowb;             /* UB bytes of one row chunk */
};

/* One launch unit's emission state (the launch's unit context, core_unit_ctx). */
struct perm_unit {
  uint64_t nchunk, ntile;    /* histogram chunks and tiles emitted so far (ping-pong parities) */
  uint64_t nrow;             /* row chunks emitted so far */
  int gcur;                  /* which of g[0], g[1] holds the current destinations */
};

static struct perm_unit *unit_of(struct core_tp *t)
{
  return core_unit_ctx(t);
}

static uint32_t unit_slots(const struct perm *m, int u)
{
  return (m->tok0[u + 1] - m->tok0[u]) * m->k;
}

static uint32_t nchunks(const struct perm *m, int u)
{
  return ops_ceil(unit_slots(m, u), m->HC);
}

static uint32_t ntiles(const struct perm *m, int u)
{
  return ops_ceil(m->tok0[u + 1] - m->tok0[u], m->R);
}

/* UB of phase A for chunk HC; returns the bytes. */
static uint64_t layout_a(struct perm *m, uint32_t HC)
{
  struct moe_ub a = {0};
  m->ps = (uint32_t)ops_roundup(HC / 128 * 2, 32);
  for (int p = 0; p < 2; p++) m->id32[p] = moe_alloc(&a, (uint64_t)HC * 4, 0);
  m->id16 = moe_alloc(&a, (uint64_t)HC * 2, 256);
  m->t16 = moe_alloc(&a, (uint64_t)HC * 2, 0);
  m->bits = moe_alloc(&a, HC / 8, 0);
  m->one16 = moe_alloc(&a, 256, 0);
  m->zero16 = moe_alloc(&a, 256, 256);
  m->p16 = moe_alloc(&a, (uint64_t)m->E * m->ps + 256, 0); /* + one repeat read past the end */
  m->h16 = moe_alloc(&a, ops_roundup((uint64_t)m->E * 2, 256), 256);
  m->h32 = moe_alloc(&a, (uint64_t)m->nE * 256, 0);
  m->hist = moe_alloc(&a, (uint64_t)m->nE * 256, 256);
  return a.top;
}

/*
 * UB of phase B for tile R and chunk hc; returns the bytes. The per-slot vectors are placed for
 * the UB banks: G (the expert's next row) alternates between two buffers in different 64 KiB rows
 * (a select reads one and writes the other in the same groups), and each op's two sources have
 * opposite bank-group phases.
 */
static uint64_t layout_b(struct perm *m, uint32_t R, uint32_t hc, uint64_t ub)
{
  struct moe_ub a = {0};
  uint64_t eb = (uint64_t)m->nE * 256;
  uint32_t slots = R * m->k;
  m->rowb = ops_roundup((uint64_t)hc * moe_es(m->dt), 32);
  m->g[0] = moe_alloc(&a, eb, 0);
  m->zero32 = moe_alloc(&a, 256, 256);
  m->iota = moe_alloc(&a, eb, 0);
  m->ebits = moe_alloc(&a, (uint64_t)m->nE * 8, 0);
  m->part = moe_alloc(&a, 256, 0);
  m->total = moe_alloc(&a, eb, 256);
  m->wsh = moe_alloc(&a, (uint64_t)m->HR * m->E8 * 4, 0);
  uint64_t sb = ops_roundup(slots, 8) * 32; /* one 32-byte block per slot, whole repeats */
  m->sio = moe_alloc(&a, sb, 0);
  for (int p = 0; p < 2; p++) {
    m->idt[p] = moe_alloc(&a, (uint64_t)slots * 4, 0);
    m->db[p] = moe_alloc(&a, sb, 256);
    m->sv[p] = moe_alloc(&a, sb, 0);
    m->dro[p] = moe_alloc(&a, (uint64_t)slots * 4, 0);
  }
  for (int p = 0; p < 2; p++) m->xb[p] = moe_alloc(&a, m->rowb * R, 0);
  m->g[1] = moe_alloc_apart(&a, eb, 0, m->g[0], ub);
  m->gp1 = moe_alloc(&a, eb, 256);
  m->ts = moe_alloc_apart(&a, eb, 256, m->zero32, ub);
  return a.top;
}

static int plan(void *p, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct perm *m = p;
  memset(m, 0, sizeof *m);
  uint64_t T = op_u(d, a, "tokens"), H = op_u(d, a, "hidden"), E = op_u(d, a, "experts"), k = op_u(d, a, "topk");
  m->dt = op_dtype(d, a, "dtype");
  m->skew = op_r(d, a, "skew");
  if (npu_dtype_bits(m->dt) < 8)
    return npu_diag_set(diag, "command line", 0, "--dtype", "rows of %s are not byte addressable",
                        npu_dtype_name(m->dt)), NPU_EUNSUPPORTED;
  if (k > E)
    return npu_diag_set(diag, "command line", 0, "--topk", "top-%llu of %llu experts", (unsigned long long)k,
                        (unsigned long long)E), NPU_EINVAL;
  if (E > 4096) /* a slot's lookup folds 64 lanes per repeat, then at most 64 repeats */
    return npu_diag_set(diag, "command line", 0, "--experts", "at most 4096 experts, got %llu", (unsigned long long)E),
           NPU_EINVAL;
  if (T * k > INT32_MAX || H > UINT32_MAX / 8)
    return npu_diag_set(diag, "command line", 0, "--tokens", "tokens x topk must stay below 2^31 (int32 row indices)"),
           NPU_EINVAL;
  if (m->skew < 0) return npu_diag_set(diag, "command line", 0, "--skew", "must be at least 0"), NPU_EINVAL;
  m->T = (uint32_t)T;
  m->H = (uint32_t)H;
  m->E = (uint32_t)E;
  m->k = (uint32_t)k;
  m->nE = ops_ceil(m->E, 64);
  m->E8 = (uint32_t)ops_roundup(m->E, 8);
  uint64_t cores = op_u(d, a, "cores");
  if (cores > (uint64_t)moe_cores(chip))
    return npu_diag_set(diag, "command line", 0, "--cores", "%s has %d vector cores", chip->name, moe_cores(chip)),
           NPU_EINVAL;
  int C = cores ? (int)cores : moe_cores(chip);
  if ((uint64_t)C > T) C = (int)T;
  m->C = C;
  m->tok0 = npu_xcalloc((size_t)C + 1, sizeof *m->tok0);
  m->base = npu_xcalloc((size_t)C + 1, sizeof *m->base);
  for (int u = 0; u <= C; u++) m->tok0[u] = (uint32_t)(T / (uint64_t)C * (uint64_t)u + ((uint64_t)u < T % (uint64_t)C ? (uint64_t)u : T % (uint64_t)C));
  uint64_t ub = moe_ub_bytes(chip);
  /* phase A: the largest chunk that fits (16384 keeps partial sums within int16), no larger
   * than a core's slots */
  uint32_t most = unit_slots(m, 0);
  m->HC = 0;
  for (uint32_t hc = 16384; hc >= 128; hc /= 2)
    if (layout_a(m, hc) <= ub) {
      m->HC = hc;
      if (hc / 2 < most) break;
    }
  if (!m->HC)
    return npu_diag_set(diag, "command line", 0, "--experts",
                        "%u experts need %llu bytes of UB for their histogram, has %llu", m->E,
                        (unsigned long long)layout_a(m, 128), (unsigned long long)ub), NPU_ENOFIT;
  layout_a(m, m->HC);
  /* phase B: rows in chunks of at most 32 KiB, as many tokens per tile as 64 KiB of rows hold
   * (at most 248 slots: one reduction compacts a tile's destinations) */
  uint32_t es = moe_es(m->dt);
  m->hc = (uint64_t)m->H * es <= 32768 ? m->H : 32768 / es;
  m->nch = ops_ceil(m->H, m->hc);
  m->HR = (uint32_t)(m->C < 16 ? m->C : 16);
  uint64_t tile = op_u(d, a, "tile");
  uint32_t rmax = MOE_RED_CHUNK / m->k ? MOE_RED_CHUNK / m->k : 1;
  if (tile) {
    m->R = (uint32_t)(tile < rmax ? tile : rmax);
    if (tile > rmax)
      return npu_diag_set(diag, "command line", 0, "--tile", "at most %u tokens of top-%u (%u slots per tile)", rmax,
                          m->k, MOE_RED_CHUNK), NPU_EINVAL;
    if (layout_b(m, m->R, m->hc, ub) > ub)
      return npu_diag_set(diag, "command line", 0, "--tile", "%u tokens of %u %s columns need %llu bytes of UB, has %llu",
                          m->R, m->hc, npu_dtype_name(m->dt), (unsigned long long)layout_b(m, m->R, m->hc, ub),
                          (unsigned long long)ub), NPU_ENOFIT;
  } else {
    uint64_t r = 65536 / ops_roundup((uint64_t)m->hc * es, 32);
    if (r < 1) r = 1;
    if (r > rmax) r = rmax;
    uint32_t most_tok = m->tok0[1] - m->tok0[0];
    if (r > most_tok) r = most_tok;
    while (r > 1 && layout_b(m, (uint32_t)r, m->hc, ub) > ub) r--;
    m->R = (uint32_t)r;
    if (layout_b(m, m->R, m->hc, ub) > ub)
      return npu_diag_set(diag, "command line", 0, "--experts",
                          "a tile of one token with %u experts needs %llu bytes of UB, has %llu", m->E,
                          (unsigned long long)layout_b(m, 1, m->hc, ub), (unsigned long long)ub), NPU_ENOFIT;
  }
  layout_b(m, m->R, m->hc, ub);
  /* blocks: per unit its histogram chunks, the barrier, the prep, its tiles */
  m->base[0] = 0;
  for (int u = 0; u < C; u++) m->base[u + 1] = m->base[u] + nchunks(m, u) + 2 + ntiles(m, u);
  m->nblocks = m->base[C];
  return 0;
}

/* Block b: its unit and its index in the unit's sequence. */
static void locate(const struct perm *m, uint64_t b, int *u, uint64_t *i)
{
  int lo = 0, hi = m->C - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (m->base[mid] <= b) lo = mid; else hi = mid - 1;
  }
  *u = lo;
  *i = b - m->base[lo];
}

static uint64_t block_of(void *ctx, int unit, uint64_t i)
{
  const struct perm *m = ctx;
  return m->base[unit] + i < m->base[unit + 1] ? m->base[unit] + i : UINT64_MAX;
}

static int block_class(void *ctx, uint64_t b)
{
  const struct perm *m = ctx;
  int u;
  uint64_t i;
  locate(m, b, &u, &i);
  uint32_t na = nchunks(m, u);
  bool big = m->tok0[u + 1] - m->tok0[u] > m->tok0[m->C] - m->tok0[m->C - 1];
  if (i < na) return i + 1 < na || unit_slots(m, u) % m->HC == 0 ? C_HIST : big ? C_HIST_TAIL1 : C_HIST_TAIL0;
  if (i == na) return C_BARRIER;
  if (i == na + 1) return C_PREP;
  uint32_t tok = m->tok0[u + 1] - m->tok0[u];
  return i + 1 < m->base[u + 1] - m->base[u] || tok % m->R == 0 ? C_TILE : big ? C_TILE_TAIL1 : C_TILE_TAIL0;
}

/* dst[0..n) of int32 = 0, 1, 2, ... (masked adds of the bits of the lane, then doubling). */
static void iota_i32(struct core_tp *t, uint64_t dst, uint32_t n)
{
  uint32_t reps = ops_ceil(n, 64);
  struct core_vec v = moe_v(CORE_VEC_DUP, NPU_DT_INT32, dst, 0, 0, 1);
  core_vec(t, &v);
  for (uint32_t b = 0; b < 6; b++) {
    v = moe_v(CORE_VEC_ADDS, NPU_DT_INT32, dst, dst, 0, 1);
    v.mask[0] = 0;
    for (uint32_t i = 0; i < 64; i++)
      if (i >> b & 1) v.mask[0] |= 1ull << i;
    v.scalar = (double)(1u << b);
    core_vec(t, &v);
  }
  for (uint32_t have = 1; have < reps; have *= 2) {
    uint32_t r = reps - have < have ? reps - have : have;
    v = moe_v(CORE_VEC_ADDS, NPU_DT_INT32, dst + have * 256ull, dst, 0, r);
    v.scalar = 64.0 * have;
    core_vec(t, &v);
  }
}

/* Element 0 of block i of dst = i, for n blocks (the other lanes are zero). */
static void iota_blocks(struct core_tp *t, uint64_t dst, uint32_t n)
{
  uint32_t reps = ops_ceil(n, 8);
  moe_vrun(t, CORE_VEC_DUP, NPU_DT_INT32, dst, 0, 0, (uint64_t)reps * 64, 0);
  for (uint32_t b = 0; b < 3; b++) {
    struct core_vec v = moe_v(CORE_VEC_ADDS, NPU_DT_INT32, dst, dst, 0, 1);
    v.mask[0] = 0;
    for (uint32_t i = 0; i < 8; i++)
      if (i >> b & 1) v.mask[0] |= 1ull << (8 * i);
    v.scalar = (double)(1u << b);
    core_vec(t, &v);
  }
  for (uint32_t have = 1; have < reps; have *= 2) {
    uint32_t r = reps - have < have ? reps - have : have;
    struct core_vec v = moe_v(CORE_VEC_ADDS, NPU_DT_INT32, dst + have * 256ull, dst, 0, r);
    v.mask[0] = 0x0101010101010101ull;
    v.scalar = 8.0 * have;
    core_vec(t, &v);
  }
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct perm *m = ctx;
  *unit_of(t) = (struct perm_unit){0};
  for (int p = 0; p < 2; p++) {
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_CHUNK + p);
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_IDS + p);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_IDS + p);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, ID_ROWS + p);
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_PREP);
  /* phase A constants and a zero histogram */
  struct core_vec v = moe_v(CORE_VEC_DUP, NPU_DT_INT16, m->one16, 0, 0, 1);
  v.scalar = 1;
  core_vec(t, &v);
  v = moe_v(CORE_VEC_DUP, NPU_DT_INT16, m->zero16, 0, 0, 1);
  core_vec(t, &v);
  moe_vrun(t, CORE_VEC_DUP, NPU_DT_INT32, m->hist, 0, 0, (uint64_t)m->nE * 64, 0);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  (void)ctx;
  for (int p = 0; p < 2; p++) {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_CHUNK + p);
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_IDS + p);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_IDS + p);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, ID_ROWS + p);
  }
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_PREP);
}

/* Phase A: the histogram of one chunk of the unit's slots, added to m->hist. */
static void hist_chunk(struct core_tp *t, struct perm *m, int u, uint64_t i)
{
  int p = (int)(unit_of(t)->nchunk++ % 2);
  uint32_t first = (uint32_t)i * m->HC, cnt = unit_slots(m, u) - first < m->HC ? unit_slots(m, u) - first : m->HC;
  uint64_t s0 = (uint64_t)m->tok0[u] * m->k + first;
  uint32_t reps = ops_ceil(cnt, 128); /* int16 repeats */
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_CHUNK + p);
  struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, m->ids + s0 * 4, 1, cnt, 0);
  struct core_tile l = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, m->id32[p], 1, cnt, 0);
  core_copy(t, &l, &g);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_CHUNK + p);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_CHUNK + p);
  moe_vcast(t, m->id16, NPU_DT_INT16, m->id32[p], NPU_DT_INT32, cnt);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_CHUNK + p);
  if (cnt % 128) { /* the tail of the last repeat matches no expert */
    struct core_vec v = moe_v(CORE_VEC_DUP, NPU_DT_INT16, m->id16 + (uint64_t)(cnt / 128) * 256, 0, 0, 1);
    moe_mask_first(v.mask, 128);
    uint64_t keep[2];
    moe_mask_first(keep, cnt % 128);
    v.mask[0] &= ~keep[0];
    v.mask[1] &= ~keep[1];
    v.scalar = -1;
    core_vec(t, &v);
  }
  for (uint32_t e = 0; e < m->E; e++) {
    struct core_vec c = moe_v(CORE_VEC_CMPS, NPU_DT_INT16, m->bits, m->id16, 0, reps);
    c.cmp = CORE_CMP_EQ;
    c.scalar = e;
    core_vec(t, &c);
    struct core_vec s = moe_v(CORE_VEC_SELECT, NPU_DT_INT16, m->t16, m->one16, m->zero16, reps);
    s.src0_rep = s.src1_rep = 0;
    s.aux = m->bits;
    core_vec(t, &s);
    struct core_vec r = moe_v(CORE_VEC_REDUCE_SUM, NPU_DT_INT16, m->p16 + (uint64_t)e * m->ps, m->t16, 0, reps);
    core_vec(t, &r);
  }
  /* fold the partial counts of each expert: one reduction per expert, in int16 */
  for (uint32_t e0 = 0; e0 < m->E; e0 += 240) {
    uint32_t ne = m->E - e0 < 240 ? m->E - e0 : 240;
    struct core_vec r = moe_v(CORE_VEC_REDUCE_SUM, NPU_DT_INT16, m->h16 + (uint64_t)e0 * 2, m->p16 + (uint64_t)e0 * m->ps,
                              0, ne);
    r.src0_rep = (uint16_t)(m->ps / 32);
    moe_mask_first(r.mask, reps);
    core_vec(t, &r);
  }
  moe_vcast(t, m->h32, NPU_DT_INT32, m->h16, NPU_DT_INT16, m->E);
  moe_vrun(t, CORE_VEC_ADD, NPU_DT_INT32, m->hist, m->hist, m->h32, m->E, 0);
}

/* The unit's histogram to the GM workspace, then the all-core barrier (which waits until the
 * store has landed: every pipe's data must be in before it arrives). */
static void barrier(struct core_tp *t, struct perm *m, int u)
{
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_HIST);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_HIST);
  struct core_tile l = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, m->hist, 1, m->E, 0);
  struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, m->ws + (uint64_t)u * m->E8 * 4, 1, m->E, 0);
  core_copy(t, &g, &l);
  core_sync_all(t);
}

/*
 * Phase B preparation: the totals and this unit's base from every unit's histogram, the first
 * row of each expert (an exclusive prefix of the totals), G = first row + base, and the
 * constants of the per-slot pass. Unit 0 writes the counts.
 */
static void prep(struct core_tp *t, struct perm *m, int u)
{
  uint32_t cnt = m->nE * 64;
  uint64_t g = m->g[0];
  unit_of(t)->gcur = 0;
  moe_vrun(t, CORE_VEC_DUP, NPU_DT_INT32, m->total, 0, 0, cnt, 0);
  moe_vrun(t, CORE_VEC_DUP, NPU_DT_INT32, g, 0, 0, cnt, 0);
  for (uint32_t r0 = 0; r0 < (uint32_t)m->C; r0 += m->HR) {
    uint32_t nr = (uint32_t)m->C - r0 < m->HR ? (uint32_t)m->C - r0 : m->HR;
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_PREP);
    struct core_tile gw = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, m->ws + (uint64_t)r0 * m->E8 * 4, 1, nr * m->E8, 0);
    struct core_tile lw = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, m->wsh, 1, nr * m->E8, 0);
    core_copy(t, &lw, &gw);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_PREP);
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_PREP);
    for (uint32_t r = 0; r < nr; r++) {
      uint64_t row = m->wsh + (uint64_t)r * m->E8 * 4;
      moe_vrun(t, CORE_VEC_ADD, NPU_DT_INT32, m->total, m->total, row, m->E, 0);
      if (r0 + r < (uint32_t)u) moe_vrun(t, CORE_VEC_ADD, NPU_DT_INT32, g, g, row, m->E, 0);
    }
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_PREP);
  }
  /* G[e] += sum of totals of experts before e: suffix adds of each total */
  for (uint32_t e = 0; e + 1 < m->E; e++) {
    uint32_t a0 = e + 1, r0 = a0 / 64;
    struct core_vec v = moe_v(CORE_VEC_ADDS, NPU_DT_INT32, g + r0 * 256ull, g + r0 * 256ull, 0, 1);
    v.mask[0] = ~0ull << (a0 % 64);
    v.scalar_from_ub = true;
    v.scalar_ub = m->total + 4ull * e;
    core_vec(t, &v);
    if (r0 + 1 < m->nE) {
      v = moe_v(CORE_VEC_ADDS, NPU_DT_INT32, g + (r0 + 1) * 256ull, g + (r0 + 1) * 256ull, 0, m->nE - r0 - 1);
      v.scalar_from_ub = true;
      v.scalar_ub = m->total + 4ull * e;
      core_vec(t, &v);
    }
  }
  moe_vrun(t, CORE_VEC_ADDS, NPU_DT_INT32, m->gp1, g, 0, cnt, 1);
  iota_i32(t, m->iota, m->E);
  iota_blocks(t, m->sio, m->R * m->k);
  moe_vrun(t, CORE_VEC_DUP, NPU_DT_INT32, m->zero32, 0, 0, 64, 0);
  if (u == 0) {
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_COUNTS);
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_COUNTS);
    struct core_tile l = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, m->total, 1, m->E, 0);
    struct core_tile gc = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, m->counts, 1, m->E, 0);
    core_copy(t, &gc, &l);
    /* the totals are not written again; MTE3 is in order, so nothing else waits for this */
  }
}

/* Phase B: one tile of tokens: destinations of its slots, then its rows. */
static void tile(struct core_tp *t, struct perm *m, int u, uint64_t i)
{
  struct perm_unit *un = unit_of(t);
  int p = (int)(un->ntile++ % 2);
  uint32_t tok = m->tok0[u] + (uint32_t)i * m->R;
  uint32_t tb = m->tok0[u + 1] - tok < m->R ? m->tok0[u + 1] - tok : m->R;
  uint32_t slots = tb * m->k;
  uint64_t s0 = (uint64_t)tok * m->k;
  uint32_t es = moe_es(m->dt);
  /* ids of the tile */
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_IDS + p);
  struct core_tile gi = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, m->ids + s0 * 4, 1, slots, 0);
  struct core_tile li = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, m->idt[p], 1, slots, 0);
  core_copy(t, &li, &gi);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_IDS + p);
  /* the tile's rows, chunk by chunk (the stores of chunk c release its buffer) */
  uint64_t row0 = un->nrow;
  un->nrow += m->nch;
  for (uint32_t c = 0; c < m->nch; c++) {
    int q = (int)((row0 + c) % 2);
    uint32_t h0 = c * m->hc, hn = m->H - h0 < m->hc ? m->H - h0 : m->hc;
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, ID_ROWS + q);
    struct core_tile gx = ops_tile(MEM_GM, CORE_ND, m->dt, m->x + ((uint64_t)tok * m->H + h0) * es, tb, hn, m->H);
    struct core_tile lx = ops_tile(MEM_UB, CORE_ND, m->dt, m->xb[q], tb, hn, (uint32_t)(m->rowb / es));
    core_copy(t, &lx, &gx);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE3, ID_ROWS + q);
  }
  /* per slot, in order: dst = G[e], G[e] += 1 */
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_IDS + p);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_IDS + p);
  for (uint32_t s = 0; s < slots; s++) {
    uint64_t g = m->g[un->gcur], gn = m->g[1 - un->gcur];
    struct core_vec c = moe_v(CORE_VEC_CMPS, NPU_DT_INT32, m->ebits, m->iota, 0, m->nE);
    c.cmp = CORE_CMP_EQ;
    c.scalar_from_ub = true;
    c.scalar_ub = m->idt[p] + 4ull * s;
    core_vec(t, &c);
    struct core_vec sel = moe_v(CORE_VEC_SELECT, NPU_DT_INT32, m->ts, g, m->zero32, m->nE);
    sel.src1_rep = 0;
    sel.aux = m->ebits;
    core_vec(t, &sel);
    /* G[e]: the one lane the select kept, summed per repeat, then over the repeats */
    struct core_vec r = moe_v(CORE_VEC_REDUCE_SUM, NPU_DT_INT32, m->nE > 1 ? m->part : m->db[p] + 32ull * s, m->ts, 0,
                              m->nE);
    core_vec(t, &r);
    if (m->nE > 1) {
      r = moe_v(CORE_VEC_REDUCE_SUM, NPU_DT_INT32, m->db[p] + 32ull * s, m->part, 0, 1);
      moe_mask_first(r.mask, m->nE);
      core_vec(t, &r);
    }
    sel = moe_v(CORE_VEC_SELECT, NPU_DT_INT32, gn, m->gp1, g, m->nE);
    sel.aux = m->ebits;
    core_vec(t, &sel);
    moe_vrun(t, CORE_VEC_ADDS, NPU_DT_INT32, m->gp1, gn, 0, (uint64_t)m->nE * 64, 1);
    un->gcur = 1 - un->gcur;
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_IDS + p);
  /* the slots' source indices (row_map values) and their dense destinations (dst_row) */
  struct core_vec v = moe_v(CORE_VEC_ADDS, NPU_DT_INT32, m->sv[p], m->sio, 0, ops_ceil(slots, 8));
  v.mask[0] = 0x0101010101010101ull;
  v.scalar = (double)s0;
  core_vec(t, &v);
  for (uint32_t d0 = 0; d0 < slots; d0 += MOE_RED_CHUNK) {
    uint32_t nd = slots - d0 < MOE_RED_CHUNK ? slots - d0 : MOE_RED_CHUNK;
    struct core_vec r = moe_v(CORE_VEC_REDUCE_SUM, NPU_DT_INT32, m->dro[p] + 4ull * d0, m->db[p] + 32ull * d0, 0, nd);
    r.src0_rep = 1;
    r.mask[0] = 1;
    core_vec(t, &r);
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_IDS + p);
  /* stores: dst_row, row_map, then the rows */
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_IDS + p);
  struct core_tile ld = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, m->dro[p], 1, slots, 0);
  struct core_tile gd = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, m->dst_row + s0 * 4, 1, slots, 0);
  core_copy(t, &gd, &ld);
  for (uint32_t s = 0; s < slots; s++) {
    struct core_copy c = {.scale = 1.0f, .fb_scale = UINT64_MAX, .indexed = true, .index_ub = m->db[p] + 32ull * s,
                          .index_stride = 4};
    c.src = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, m->sv[p] + 32ull * s, 1, 1, 0);
    c.dst = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, m->row_map, 1, 1, 0);
    core_copy_ex(t, &c);
  }
  for (uint32_t c = 0; c < m->nch; c++) {
    int q = (int)((row0 + c) % 2);
    uint32_t h0 = c * m->hc, hn = m->H - h0 < m->hc ? m->H - h0 : m->hc;
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE3, ID_ROWS + q);
    for (uint32_t s = 0; s < slots; s++) {
      struct core_copy cp = {.scale = 1.0f, .fb_scale = UINT64_MAX, .indexed = true, .index_ub = m->db[p] + 32ull * s,
                             .index_stride = (uint64_t)m->H * es};
      cp.src = ops_tile(MEM_UB, CORE_ND, m->dt, m->xb[q] + (uint64_t)(s / m->k) * m->rowb, 1, hn, 0);
      cp.dst = ops_tile(MEM_GM, CORE_ND, m->dt, m->y + (uint64_t)h0 * es, 1, hn, 0);
      core_copy_ex(t, &cp);
    }
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, ID_ROWS + q);
  }
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_IDS + p);
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct perm *m = ctx;
  int u;
  uint64_t i;
  locate(m, b, &u, &i);
  uint32_t na = nchunks(m, u);
  if (i < na)
    hist_chunk(t, m, u, i);
  else if (i == na)
    barrier(t, m, u);
  else if (i == na + 1)
    prep(t, m, u);
  else
    tile(t, m, u, i - na - 2);
}

static void setup(void *p, struct op_exec *x)
{
  struct perm *m = p;
  uint64_t slots = (uint64_t)m->T * m->k;
  m->x = op_tensor(x, "x", m->dt, (uint64_t)m->T * m->H, OP_INIT_UNIFORM)->addr;
  struct op_tensor *ids = op_tensor(x, "expert_ids", NPU_DT_INT32, slots, OP_INIT_NONE);
  m->ids = ids->addr;
  m->y = op_tensor(x, "y", m->dt, slots * m->H, OP_INIT_NONE)->addr;
  m->row_map = op_tensor(x, "row_map", NPU_DT_INT32, slots, OP_INIT_NONE)->addr;
  m->dst_row = op_tensor(x, "dst_row", NPU_DT_INT32, slots, OP_INIT_NONE)->addr;
  m->counts = op_tensor(x, "counts", NPU_DT_INT32, m->E, OP_INIT_NONE)->addr;
  m->ws = op_tensor(x, "hist_ws", NPU_DT_INT32, (uint64_t)m->C * m->E8, OP_INIT_SCRATCH)->addr;
  if (op_functional(x)) moe_route(x, ids->host, m->T, m->k, m->E, m->skew);
  struct core_kernel k = {.name = "moe_permute", .mode = CORE_MODE_VECTOR, .block_dim = m->C,
                          .nblocks = m->nblocks, .ctx = m, .unit_begin = unit_begin, .unit_end = unit_end,
                          .block = block, .block_of = block_of, .block_class = block_class,
                          .unit_ctx_bytes = sizeof(struct perm_unit)};
  op_kernel(x, &k);
}

static double flops(const void *p)
{
  (void)p;
  return 0;
}

static void release(void *p)
{
  struct perm *m = p;
  free(m->tok0);
  free(m->base);
}

static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct perm *m = p;
  uint64_t slots = (uint64_t)m->T * m->k;
  const int32_t *ids = op_find_tensor(x, "expert_ids")->host;
  int32_t *rm = npu_xmalloc(slots * sizeof *rm), *dr = npu_xmalloc(slots * sizeof *dr);
  int32_t *cnt = npu_xmalloc(m->E * sizeof *cnt);
  moe_sort(ids, slots, m->E, rm, dr, cnt);
  const int32_t *grm = op_find_tensor(x, "row_map")->host, *gdr = op_find_tensor(x, "dst_row")->host;
  const int32_t *gcnt = op_find_tensor(x, "counts")->host;
  uint64_t bad_map = 0, bad_dst = 0, bad_cnt = 0, bad_rows = 0, first = UINT64_MAX;
  for (uint64_t s = 0; s < slots; s++) {
    if (grm[s] != rm[s]) bad_map++;
    if (gdr[s] != dr[s]) bad_dst++;
  }
  for (uint32_t e = 0; e < m->E; e++) bad_cnt += gcnt[e] != cnt[e];
  size_t rb = fmt_bytes(m->dt, m->H);
  const uint8_t *X = op_find_tensor(x, "x")->host, *Y = op_find_tensor(x, "y")->host;
  for (uint64_t r = 0; r < slots; r++)
    if (memcmp(Y + r * rb, X + (uint64_t)(rm[r] / (int32_t)m->k) * rb, rb)) {
      if (first == UINT64_MAX) first = r;
      bad_rows++;
    }
  uint64_t bad = bad_map + bad_dst + bad_cnt + bad_rows;
  *max_err = bad ? 1.0 + (double)bad : 0;
  if (bad)
    snprintf(summary, n, "%u tokens x top-%u of %u experts: %llu rows differ (first %lld), %llu row_map, %llu dst_row, "
             "%llu counts", m->T, m->k, m->E, (unsigned long long)bad_rows, first == UINT64_MAX ? -1LL : (long long)first,
             (unsigned long long)bad_map, (unsigned long long)bad_dst, (unsigned long long)bad_cnt);
  else
    snprintf(summary, n, "%u tokens x top-%u of %u experts, %u %s columns: rows, row_map, dst_row and counts exact",
             m->T, m->k, m->E, m->H, npu_dtype_name(m->dt));
  free(rm);
  free(dr);
  free(cnt);
  return bad == 0;
}

/* The backward of the dispatch: the combine of the same shape. */
static int bwd(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  op_call_init(&out[0], "moe_unpermute");
  op_call_copy_given(&out[0], fwd);
  grad[0] = OP_GRAD_INPUT;
  return 1;
}

const struct op_desc op_moe_permute = {
    .name = "moe_permute",
    .summary = "MoE dispatch (MoeInitRouting): rows to expert-sorted order by a counting sort over all vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct perm),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .release = release,
    .bwd = {OP_BWD_PROXY, "moe_unpermute with the same tokens, hidden, experts, topk and dtype",
            "the backward gathers and sums each token's k expert rows: the work of the combine kernel",
            bwd},
};
