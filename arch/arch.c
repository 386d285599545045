/*
 * arch.c - registering the hardware description with the loader, and the cross-field checks
 * that no single parameter's range can express.
 */
#include "arch/arch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/units.h"

#ifndef NPUSIM_SOURCE_DIR
#error "NPUSIM_SOURCE_DIR must be defined by the build"
#endif

/* PREFIX/share/npusim of the running executable (PREFIX/bin/npusim), if it holds presets. */
static bool installed_root(char *out, size_t n)
{
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return false;
  exe[len] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return false;
  *slash = '\0'; /* PREFIX/bin */
  slash = strrchr(exe, '/');
  if (!slash || strcmp(slash, "/bin")) return false;
  *slash = '\0'; /* PREFIX */
  char presets[4200];
  snprintf(presets, sizeof presets, "%s/share/npusim/arch/presets", exe);
  struct stat st;
  if (stat(presets, &st) || !S_ISDIR(st.st_mode)) return false;
  return snprintf(out, n, "%s/share/npusim", exe) < (int)n;
}

const char *arch_source_root(void)
{
  static char root[4200];
  if (!root[0]) {
    const char *env = getenv("NPUSIM_DATA_DIR");
    if (env && env[0]) snprintf(root, sizeof root, "%s", env);
    else if (!installed_root(root, sizeof root)) snprintf(root, sizeof root, "%s", NPUSIM_SOURCE_DIR);
  }
  return root;
}

const char *arch_preset_dir(void)
{
  static char dir[4300];
  const char *env = getenv("NPUSIM_PRESET_DIR");
  if (env && env[0]) return env;
  snprintf(dir, sizeof dir, "%s/arch/presets", arch_source_root());
  return dir;
}

void arch_register(struct npu_cfg *cfg, struct arch_system *sys)
{
  memset(sys, 0, sizeof *sys);
  npu_cfg_add_table(cfg, arch_table(), sys);
  npu_cfg_add_preset_dir(cfg, arch_preset_dir());
}

static const char *const path_names[ARCH_PATH_COUNT] = {
#define ARCH__PATH_NAME(e, name, desc) name,
    ARCH_PATH_MAP(ARCH__PATH_NAME)
#undef ARCH__PATH_NAME
};

static const char *const buf_names[ARCH_BUF_COUNT] = {"l1", "l0a", "l0b", "l0c",
                                                      "ub", "bias_table", "fixpipe_buf"};

const char *arch_path_name(enum arch_path p)
{
  NPU_ASSERT(p >= 0 && p < ARCH_PATH_COUNT);
  return path_names[p];
}

const char *arch_buf_name(enum arch_buf b)
{
  NPU_ASSERT(b >= 0 && b < ARCH_BUF_COUNT);
  return buf_names[b];
}

int arch_fractal_k(const struct arch_chip *chip, enum npu_dtype t)
{
  return chip->cube.fractal_k_bytes * 8 / npu_dtype_bits(t);
}

static bool pow2(uint64_t x)
{
  return x && !(x & (x - 1));
}

static int check_chip(struct npu_cfg *cfg, const struct arch_chip *c, struct npu_diag *d)
{
  if (c->org == ARCH_ORG_SPLIT && c->aiv_count % c->aic_count != 0)
    return npu_cfg_fail(cfg, d, "chip.aiv_count",
                        "a split chip needs a whole number of vector cores per cube core "
                        "(%d AIV for %d AIC)", c->aiv_count, c->aic_count);
  if (c->org == ARCH_ORG_COUPLED && c->aiv_count != c->aic_count)
    return npu_cfg_fail(cfg, d, "chip.aiv_count",
                        "a coupled chip has one vector unit per core: expected %d, got %d",
                        c->aic_count, c->aiv_count);
  if (c->dma.multicast > 16 || c->aic_count % c->dma.multicast != 0)
    return npu_cfg_fail(cfg, d, "chip.dma.multicast",
                        "a cluster is at most 16 cores and divides the %d cube cores, got %d", c->aic_count,
                        c->dma.multicast);
  bool any = false;
  for (int t = 0; t < NPU_DT_CUBE_COUNT; t++) any |= c->cube.macs_per_cycle[t] > 0;
  if (!any)
    return npu_cfg_fail(cfg, d, "chip.cube.macs_per_cycle.fp16",
                        "the cube supports no input type: set chip.cube.macs_per_cycle.<dtype>");
  if (c->cube.fractal_k_bytes * 8 % 4 != 0)
    return npu_cfg_fail(cfg, d, "chip.cube.fractal_k_bytes", "must hold whole 4-bit elements");

  /* A fractal of the narrowest-stored operands must fit where the cube reads and writes. */
  uint64_t frac_ab = (uint64_t)c->cube.fractal_m * (uint64_t)c->cube.fractal_k_bytes;
  uint64_t frac_b = (uint64_t)c->cube.fractal_n * (uint64_t)c->cube.fractal_k_bytes;
  uint64_t frac_c = (uint64_t)c->cube.fractal_m * (uint64_t)c->cube.fractal_n * 4;
  static const struct { enum arch_buf b; const char *key; int which; } need[] = {
      {ARCH_BUF_L1, "chip.l1.size", 0},  {ARCH_BUF_L0A, "chip.l0a.size", 0},
      {ARCH_BUF_L0B, "chip.l0b.size", 1}, {ARCH_BUF_L0C, "chip.l0c.size", 2},
      {ARCH_BUF_UB, "chip.ub.size", 0}};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
    uint64_t want = need[i].which == 0 ? frac_ab : need[i].which == 1 ? frac_b : frac_c;
    if (c->buf[need[i].b].size_bytes < want)
      return npu_cfg_fail(cfg, d, need[i].key,
                          "smaller than one fractal: %llu bytes, need at least %llu",
                          (unsigned long long)c->buf[need[i].b].size_bytes,
                          (unsigned long long)want);
  }
  for (int b = 0; b < ARCH_BUF_COUNT; b++) {
    char key[64];
    const struct arch_buffer *buf = &c->buf[b];
    snprintf(key, sizeof key, "chip.%s.align", buf_names[b]);
    if (!pow2(buf->align_bytes))
      return npu_cfg_fail(cfg, d, key, "alignment must be a power of two, got %llu bytes",
                          (unsigned long long)buf->align_bytes);
    if (buf->size_bytes % buf->align_bytes)
      return npu_cfg_fail(cfg, d, key, "size %llu bytes is not a multiple of the alignment",
                          (unsigned long long)buf->size_bytes);
  }
  if (c->ub.banks % c->ub.bank_groups)
    return npu_cfg_fail(cfg, d, "chip.ub.bank_groups",
                        "%d banks do not split into %d equal groups", c->ub.banks,
                        c->ub.bank_groups);
  if (c->ub.bank_bytes * (uint64_t)c->ub.banks < c->buf[ARCH_BUF_UB].size_bytes)
    return npu_cfg_fail(cfg, d, "chip.ub.bank_bytes",
                        "%d banks of %llu bytes hold less than the UB", c->ub.banks,
                        (unsigned long long)c->ub.bank_bytes);
  if (c->vector.bytes_per_cycle < c->vector.block_bytes)
    return npu_cfg_fail(cfg, d, "chip.vector.bytes_per_cycle",
                        "narrower than one %d-byte block", c->vector.block_bytes);
  if (c->hbm.bw_bytes_per_s > c->l2.bw_bytes_per_s * 1.0001)
    return npu_cfg_fail(cfg, d, "chip.hbm.bandwidth",
                        "HBM faster than L2 (all GM traffic goes through L2)");
  return 0;
}

int arch_curve_parse(const char *text, struct arch_curve *out, char *why, size_t nwhy)
{
  memset(out, 0, sizeof *out);
  const char *s = text;
  for (;;) {
    while (*s == ' ' || *s == ',' || *s == '\t') s++;
    if (!*s) break;
    const char *colon = strchr(s, ':');
    size_t len = colon ? (size_t)(colon - s) : 0;
    char size[64];
    if (!colon || len == 0 || len >= sizeof size)
      return snprintf(why, nwhy, "expected SIZE:FRACTION pairs like \"8MiB:0.75\", got \"%.40s\"", s), NPU_EINVAL;
    memcpy(size, s, len);
    size[len] = '\0';
    if (out->n == ARCH_CURVE_MAX)
      return snprintf(why, nwhy, "more than %d points", ARCH_CURVE_MAX), NPU_EINVAL;
    double b, v;
    char w[160];
    if (npu_unit_parse(size, NPU_UNIT_SIZE, &b, w, sizeof w))
      return snprintf(why, nwhy, "point %d: %s", out->n + 1, w), NPU_EINVAL;
    char *end;
    v = strtod(colon + 1, &end);
    if (end == colon + 1 || (*end && *end != ' ' && *end != ',' && *end != '\t'))
      return snprintf(why, nwhy, "point %d: expected a fraction after '%s:'", out->n + 1, size), NPU_EINVAL;
    if (!(b > 0) || !isfinite(b))
      return snprintf(why, nwhy, "point %d: the size must be above 0", out->n + 1), NPU_EINVAL;
    if (out->n && !(b > out->bytes[out->n - 1]))
      return snprintf(why, nwhy, "point %d: sizes must increase (%s after a larger or equal one)", out->n + 1, size),
             NPU_EINVAL;
    if (!(v > 0 && v <= 1))
      return snprintf(why, nwhy, "point %d: fraction %g is outside (0, 1] (of node.link.efficiency, the link's capacity)",
                      out->n + 1, v),
             NPU_EINVAL;
    out->bytes[out->n] = b;
    out->share[out->n++] = v;
    s = end;
  }
  return 0;
}

double arch_link_fraction(const struct arch_node *n, double key_bytes, bool p2p)
{
  const struct arch_curve *c = &n->link_curve;
  if (p2p && n->link_p2p_fraction > 0) return n->link_p2p_fraction;
  if (c->n == 0 || !(key_bytes > 0)) return 1;
  if (key_bytes <= c->bytes[0]) return c->share[0];
  if (key_bytes >= c->bytes[c->n - 1]) return c->share[c->n - 1];
  int i = 1;
  while (c->bytes[i] < key_bytes) i++;
  double f = log(key_bytes / c->bytes[i - 1]) / log(c->bytes[i] / c->bytes[i - 1]);
  return c->share[i - 1] + f * (c->share[i] - c->share[i - 1]);
}

static int check_node(struct npu_cfg *cfg, struct arch_node *n, struct npu_diag *d)
{
  char why[256];
  if (arch_curve_parse(n->link_efficiency_curve, &n->link_curve, why, sizeof why))
    return npu_cfg_fail(cfg, d, "node.link.efficiency_curve", "%s", why);
  if (n->devices % n->dies_per_package)
    return npu_cfg_fail(cfg, d, "node.devices",
                        "%d devices do not fill whole packages of %d dies", n->devices,
                        n->dies_per_package);
  int packages = n->devices / n->dies_per_package;
  if (n->dies_per_package > 1 && n->d2d.bw_bytes_per_s <= 0)
    return npu_cfg_fail(cfg, d, "node.d2d.bandwidth",
                        "required when a package holds %d dies", n->dies_per_package);
  if (n->topology == ARCH_NODE_FULL_MESH && packages - 1 > n->link.ports)
    return npu_cfg_fail(cfg, d, "node.devices",
                        "a full mesh of %d packages needs %d links per package, but "
                        "node.link.ports is %d", packages, packages - 1, n->link.ports);
  if (n->nvls && n->topology != ARCH_NODE_SWITCH)
    return npu_cfg_fail(cfg, d, "node.nvls", "in-switch reduction needs topology 'switch'");
  if (n->topology == ARCH_NODE_SWITCH) {
    if (n->switch_ports == 0)
      return npu_cfg_fail(cfg, d, "node.switch_ports", "required for topology 'switch'");
    if ((long long)packages * n->link.ports > n->switch_ports)
      return npu_cfg_fail(cfg, d, "node.devices",
                          "%d packages x %d links need %d switch ports, but node.switch_ports "
                          "is %d", packages, n->link.ports, packages * n->link.ports,
                          n->switch_ports);
  }
  return 0;
}

/*
 * Endpoints a folded Clos (fat tree) of k-port switches wires: one switch, k; two tiers, d * k;
 * three, d * k * k/2, where a leaf gives d = k * o / (1 + o) ports down at oversubscription o
 * (the textbook k^2/2 and k^3/4 when o = 1). A rail-optimized Clos has the same capacity.
 */
static double clos_capacity(int radix, int tiers, double oversub)
{
  double down = radix * oversub / (1 + oversub);
  double cap = down;
  for (int t = 1; t < tiers; t++) cap *= radix / 2.0;
  if (tiers > 1) cap *= 2; /* the top tier uses all its ports downward */
  return tiers == 1 ? radix : cap;
}

static int check_cluster(struct npu_cfg *cfg, const struct arch_system *s, struct npu_diag *d)
{
  const struct arch_cluster *c = &s->cluster;
  if (!s->has_node)
    return npu_cfg_fail(cfg, d, "cluster.nodes", "a cluster needs a node section");
  int pod = c->superpod.nodes;
  if (pod > 0) {
    if (c->superpod.bw_bytes_per_s <= 0)
      return npu_cfg_fail(cfg, d, "cluster.superpod.bandwidth",
                          "required when cluster.superpod.nodes is set");
    if (c->superpod.latency_s <= 0)
      return npu_cfg_fail(cfg, d, "cluster.superpod.latency",
                          "required when cluster.superpod.nodes is set");
    if (c->nodes > pod && c->nodes % pod)
      return npu_cfg_fail(cfg, d, "cluster.nodes",
                          "%d nodes do not fill whole SuperPoDs of %d nodes", c->nodes, pod);
  }
  bool need_scaleout = pod > 0 ? c->nodes > pod : c->nodes > 1;
  if (need_scaleout && c->scaleout.topology == ARCH_SCALEOUT_NONE)
    return npu_cfg_fail(cfg, d, "cluster.scaleout.topology",
                        "%d nodes need a scale-out network, got 'none'", c->nodes);
  if (c->scaleout.topology != ARCH_SCALEOUT_NONE) {
    double endpoints = (double)c->nodes * s->node.devices * c->scaleout.nics_per_device;
    double cap = clos_capacity(c->scaleout.switch_radix, c->scaleout.tiers,
                               c->scaleout.oversubscription);
    if (endpoints > cap)
      return npu_cfg_fail(cfg, d, "cluster.nodes",
                          "%d nodes x %d devices x %d NICs = %.0f endpoints, but %d tiers of "
                          "%d-port switches wire at most %.0f",
                          c->nodes, s->node.devices, c->scaleout.nics_per_device, endpoints,
                          c->scaleout.tiers, c->scaleout.switch_radix, cap);
  }
  return 0;
}

int arch_finish(struct npu_cfg *cfg, struct arch_system *sys, struct npu_diag *diag)
{
  int rc = npu_cfg_finish(cfg, diag);
  if (rc) return rc;
  sys->has_node = npu_cfg_section_present(cfg, "node");
  sys->has_cluster = npu_cfg_section_present(cfg, "cluster");
  if ((rc = check_chip(cfg, &sys->chip, diag))) return rc;
  if (sys->has_node && (rc = check_node(cfg, &sys->node, diag))) return rc;
  if (sys->has_cluster && (rc = check_cluster(cfg, sys, diag))) return rc;
  return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* A hash of the system's keys under prefix ("chip.", "node."). */
static uint64_t fingerprint(const struct arch_system *sys, const char *prefix)
{
  const struct npu_table *t = arch_table();
  uint64_t h = 0xcbf29ce484222325ull;
  size_t np = strlen(prefix);
  for (size_t i = 0; i < t->nparams; i++) {
    const struct npu_param *p = &t->params[i];
    if (strncmp(p->name, prefix, np) != 0) continue;
    const char *field = (const char *)sys + p->offset;
    h = fnv(h, p->name, strlen(p->name) + 1);
    switch (p->type) {
    case NPU_PT_INT:
    case NPU_PT_ENUM: h = fnv(h, field, sizeof(int)); break;
    case NPU_PT_BOOL: h = fnv(h, field, sizeof(bool)); break;
    case NPU_PT_STRING: h = fnv(h, field, strnlen(field, p->size)); break;
    case NPU_PT_SIZE: h = fnv(h, field, sizeof(uint64_t)); break;
    default: h = fnv(h, field, sizeof(double)); break;
    }
  }
  return h;
}

uint64_t arch_chip_fingerprint(const struct arch_system *sys)
{
  return fingerprint(sys, "chip.");
}

uint64_t arch_node_fingerprint(const struct arch_system *sys)
{
  return sys->has_node ? fingerprint(sys, "node.") : 0;
}
