/* cost_cache.c - memo and cache file of operator costs; see cost_cache.h. */
#include "ops/cost_cache.h"
#include "ops/plugin.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "common/strutil.h"

#define HEADER_MAGIC "npusim-cost-cache"
#define HEADER_FORMAT "1"

struct entry {
  char *key;
  struct op_cost cost;
  bool saved; /* present in the file as of the last load or save */
};

struct op_cache {
  char *path;
  FILE *warn;
  struct entry *e;
  size_t n, cap;
  size_t *index; /* open addressing over e, SIZE_MAX empty */
  size_t mask;
  uint64_t hits, misses;
};

static uint64_t fnv(const char *s, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static void rehash(struct op_cache *c, size_t size)
{
  free(c->index);
  c->index = npu_xmalloc(size * sizeof *c->index);
  memset(c->index, 0xff, size * sizeof *c->index);
  c->mask = size - 1;
  for (size_t i = 0; i < c->n; i++) {
    size_t h = fnv(c->e[i].key, strlen(c->e[i].key)) & c->mask;
    while (c->index[h] != SIZE_MAX) h = (h + 1) & c->mask;
    c->index[h] = i;
  }
}

static struct entry *find(const struct op_cache *c, const char *key)
{
  if (!c->index) return NULL;
  size_t h = fnv(key, strlen(key)) & c->mask;
  while (c->index[h] != SIZE_MAX) {
    struct entry *e = &c->e[c->index[h]];
    if (!strcmp(e->key, key)) return e;
    h = (h + 1) & c->mask;
  }
  return NULL;
}

static void put(struct op_cache *c, const char *key, const struct op_cost *cost, bool saved)
{
  struct entry *e = find(c, key);
  if (e) {
    e->cost = *cost;
    e->saved = e->saved && saved;
    return;
  }
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 64;
    c->e = npu_xrealloc(c->e, c->cap * sizeof *c->e);
  }
  c->e[c->n++] = (struct entry){npu_xstrdup(key), *cost, saved};
  if (2 * c->n > c->mask) rehash(c, c->index ? 2 * (c->mask + 1) : 128);
  else {
    size_t h = fnv(key, strlen(key)) & c->mask;
    while (c->index[h] != SIZE_MAX) h = (h + 1) & c->mask;
    c->index[h] = c->n - 1;
  }
}

/* ------------------------------------------------------------------ file format */

static void format_line(struct npu_buf *b, const char *key, const struct op_cost *x)
{
  size_t start = b->len;
  npu_buf_printf(b, "%s\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64
                    "\t%.17g\t%.17g\t%.17g\t%.17g\t%s",
                 key, x->time_s, x->launch_s, x->flops, x->cube_busy_s, x->vec_busy_s, x->gm_read_bytes,
                 x->gm_write_bytes, x->hbm_bytes, x->aic_mac_ratio, x->aiv_vec_ratio, x->aic_mte2_ratio,
                 x->aiv_mte2_ratio, x->bottleneck);
  uint64_t h = fnv(b->data + start, b->len - start);
  npu_buf_printf(b, "\t%016" PRIx64 "\n", h);
}

static bool parse_double(const char *s, double *out)
{
  char *end;
  errno = 0;
  *out = strtod(s, &end);
  return end != s && !*end && !errno;
}

static bool parse_u64(const char *s, uint64_t *out)
{
  char *end;
  errno = 0;
  *out = strtoull(s, &end, 10);
  return end != s && !*end && !errno;
}

/* Parse one entry line (without its newline); false if anything is off. */
static bool parse_line(char *line, char **key, struct op_cost *x)
{
  char *f[16];
  int n = 0;
  for (char *p = line; n < 16;) {
    f[n++] = p;
    char *t = strchr(p, '\t');
    if (!t) break;
    *t = '\0';
    p = t + 1;
  }
  if (n != 15) return false;
  /* the checksum covers the line up to its last tab: rebuild that text */
  struct npu_buf b = {0};
  for (int i = 0; i < 14; i++) npu_buf_printf(&b, "%s%s", i ? "\t" : "", f[i]);
  char want[17];
  snprintf(want, sizeof want, "%016" PRIx64, fnv(npu_buf_str(&b), b.len));
  npu_buf_release(&b);
  if (strcmp(want, f[14])) return false;
  memset(x, 0, sizeof *x);
  bool ok = parse_double(f[1], &x->time_s) && parse_double(f[2], &x->launch_s) && parse_double(f[3], &x->flops) &&
            parse_double(f[4], &x->cube_busy_s) && parse_double(f[5], &x->vec_busy_s) &&
            parse_u64(f[6], &x->gm_read_bytes) && parse_u64(f[7], &x->gm_write_bytes) &&
            parse_u64(f[8], &x->hbm_bytes) && parse_double(f[9], &x->aic_mac_ratio) &&
            parse_double(f[10], &x->aiv_vec_ratio) && parse_double(f[11], &x->aic_mte2_ratio) &&
            parse_double(f[12], &x->aiv_mte2_ratio) && strlen(f[13]) < sizeof x->bottleneck && f[0][0];
  if (!ok) return false;
  strcpy(x->bottleneck, f[13]);
  *key = f[0];
  return true;
}

/* Read path into c (entries marked saved). A missing file is empty; a bad one warns, adds nothing. */
static void load(struct op_cache *c, const char *path)
{
  struct npu_buf text = {0};
  if (!npu_buf_read_file(&text, path)) {
    npu_buf_release(&text);
    return;
  }
  char *data = text.data ? text.data : (char *)"";
  const char *why = NULL;
  int bad_line = 0;
  struct op_cache tmp = {0};
  char *line = data;
  int lineno = 0;
  while (*line) {
    char *nl = strchr(line, '\n');
    lineno++;
    if (!nl) {
      why = "truncated (no newline at the end)";
      bad_line = lineno;
      break;
    }
    *nl = '\0';
    if (lineno == 1) {
      char want[256];
      snprintf(want, sizeof want, "%s\t%s\t%s", HEADER_MAGIC, HEADER_FORMAT, OP_MODEL_REVISION);
      if (strncmp(line, HEADER_MAGIC "\t", strlen(HEADER_MAGIC) + 1)) {
        why = "not an npusim cost cache";
      } else if (strcmp(line, want)) {
        why = "stale: written by another model revision";
      }
      if (why) {
        bad_line = 1;
        break;
      }
    } else {
      char *key;
      struct op_cost x;
      if (!parse_line(line, &key, &x)) {
        why = "corrupt entry";
        bad_line = lineno;
        break;
      }
      put(&tmp, key, &x, true);
    }
    line = nl + 1;
  }
  if (!why && lineno == 0) why = "empty file", bad_line = 1;
  if (why) {
    if (c->warn) fprintf(c->warn, "warning: cost cache %s:%d: %s; ignoring the file\n", path, bad_line, why);
  } else {
    for (size_t i = 0; i < tmp.n; i++) put(c, tmp.e[i].key, &tmp.e[i].cost, true);
  }
  for (size_t i = 0; i < tmp.n; i++) free(tmp.e[i].key);
  free(tmp.e);
  free(tmp.index);
  npu_buf_release(&text);
}

struct op_cache *op_cache_open(const char *path, FILE *warn)
{
  struct op_cache *c = npu_xcalloc(1, sizeof *c);
  c->warn = warn;
  rehash(c, 128);
  if (path) {
    c->path = npu_xstrdup(path);
    load(c, path);
  }
  return c;
}

int op_cache_save(struct op_cache *c)
{
  if (!c->path) return 0;
  bool dirty = false;
  for (size_t i = 0; i < c->n && !dirty; i++) dirty = !c->e[i].saved;
  if (!dirty) return 0;
  char lock[4096], tmp[4096];
  snprintf(lock, sizeof lock, "%s.lock", c->path);
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", c->path, (long)getpid());
  int lfd = open(lock, O_CREAT | O_RDWR, 0644);
  if (lfd >= 0) flock(lfd, LOCK_EX);
  /* merge what others saved meanwhile (a bad file is warned about and replaced) */
  FILE *w = c->warn;
  c->warn = NULL;
  load(c, c->path);
  c->warn = w;
  struct npu_buf b = {0};
  npu_buf_printf(&b, "%s\t%s\t%s\n", HEADER_MAGIC, HEADER_FORMAT, OP_MODEL_REVISION);
  for (size_t i = 0; i < c->n; i++) format_line(&b, c->e[i].key, &c->e[i].cost);
  int rc = 0;
  FILE *f = fopen(tmp, "w");
  if (!f || fwrite(npu_buf_str(&b), 1, b.len, f) != b.len || fflush(f) || fsync(fileno(f))) rc = NPU_EIO;
  if (f && fclose(f)) rc = NPU_EIO;
  if (!rc && rename(tmp, c->path)) rc = NPU_EIO;
  if (rc) unlink(tmp);
  else
    for (size_t i = 0; i < c->n; i++) c->e[i].saved = true;
  npu_buf_release(&b);
  if (lfd >= 0) {
    flock(lfd, LOCK_UN);
    close(lfd);
  }
  return rc;
}

void op_cache_close(struct op_cache *c)
{
  if (!c) return;
  for (size_t i = 0; i < c->n; i++) free(c->e[i].key);
  free(c->e);
  free(c->index);
  free(c->path);
  free(c);
}

void op_cache_stats(const struct op_cache *c, size_t *entries, uint64_t *hits, uint64_t *misses)
{
  *entries = c->n;
  *hits = c->hits;
  *misses = c->misses;
}

/* ------------------------------------------------------------------ costing */

void op_cost_from_result(const struct op_result *r, struct op_cost *out)
{
  const struct core_result *t = &r->total;
  memset(out, 0, sizeof *out);
  out->time_s = t->time_s;
  out->launch_s = t->launch_s;
  out->flops = r->flops;
  out->cube_busy_s = t->aic[CORE_PIPE_M].busy_s;
  out->vec_busy_s = t->aiv[CORE_PIPE_V].busy_s;
  out->gm_read_bytes = t->gm_read_bytes;
  out->gm_write_bytes = t->gm_write_bytes;
  out->hbm_bytes = t->hbm_bytes;
  out->aic_mac_ratio = t->aic_mac_ratio;
  out->aiv_vec_ratio = t->aiv_vec_ratio;
  out->aic_mte2_ratio = t->aic_mte2_ratio;
  out->aiv_mte2_ratio = t->aiv_mte2_ratio;
  npu_strlcpy(out->bottleneck, t->bottleneck ? t->bottleneck : "none", sizeof out->bottleneck);
}

static int run_here(const struct op_desc *d, const struct op_args *a, const struct arch_system *sys,
                    enum core_fidelity f, struct op_cost *out, struct npu_diag *diag)
{
  struct op_run_opts o = {.fidelity = f, .seed = 1, .node = sys->has_node ? &sys->node : NULL};
  struct op_result r;
  int rc = op_run(d, a, &sys->chip, &o, &r, diag);
  if (!rc) op_cost_from_result(&r, out);
  return rc;
}

/* Event fidelity in a child process: one engine per process, and the caller may own one. */
static int run_child(const struct op_desc *d, const struct op_args *a, const struct arch_system *sys,
                     struct op_cost *out, struct npu_diag *diag)
{
  int fd[2];
  if (pipe(fd)) return npu_diag_set(diag, NULL, 0, d->name, "cannot create a pipe: %s", strerror(errno)), NPU_EIO;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return npu_diag_set(diag, NULL, 0, d->name, "cannot fork: %s", strerror(errno)), NPU_EIO;
  }
  if (pid == 0) {
    close(fd[0]);
    struct op_cost x;
    struct npu_diag dd;
    npu_diag_clear(&dd);
    int rc = run_here(d, a, sys, CORE_FIDELITY_EVENT, &x, &dd);
    struct npu_buf b = {0};
    npu_buf_printf(&b, "%d\n", rc);
    if (rc)
      npu_buf_printf(&b, "%s\n", dd.msg);
    else
      format_line(&b, "k", &x);
    size_t off = 0;
    while (off < b.len) {
      ssize_t w = write(fd[1], b.data + off, b.len - off);
      if (w <= 0) break;
      off += (size_t)w;
    }
    npu_child_exit(0);
  }
  close(fd[1]);
  struct npu_buf b = {0};
  char chunk[4096];
  ssize_t k;
  while ((k = read(fd[0], chunk, sizeof chunk)) > 0) npu_buf_printf(&b, "%.*s", (int)k, chunk);
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  int rc = NPU_EINTERNAL;
  char *text = b.data;
  if (text && WIFEXITED(st)) {
    char *nl = strchr(text, '\n');
    if (nl) {
      *nl = '\0';
      rc = atoi(text);
      char *rest = nl + 1, *end = strrchr(rest, '\n');
      if (end) *end = '\0';
      char *key;
      if (rc)
        npu_diag_set(diag, NULL, 0, d->name, "%s", rest);
      else if (!parse_line(rest, &key, out))
        rc = NPU_EINTERNAL;
    }
  }
  if (rc == NPU_EINTERNAL && !diag->msg[0]) npu_diag_set(diag, NULL, 0, d->name, "the costing process failed");
  npu_buf_release(&b);
  return rc;
}

int op_cost_get(struct op_cache *c, const struct op_desc *d, const struct op_args *a,
                const struct arch_system *sys, enum core_fidelity f, struct op_cost *out,
                struct npu_diag *diag)
{
  char args[1024], key[1400];
  op_args_format(d, a, args, sizeof args);
  /* a loaded operator is keyed by its file's contents too: a rebuilt plugin never reuses old costs */
  char origin[24] = "";
  if (op_origin_hash(d)) snprintf(origin, sizeof origin, "@%016" PRIx64, op_origin_hash(d));
  /* an operator over several devices is costed on the node's links too */
  char node[32] = "";
  if (d->ranks) snprintf(node, sizeof node, " node=%016" PRIx64, arch_node_fingerprint(sys));
  snprintf(key, sizeof key, "%s%s %s fidelity=%s arch=%016" PRIx64 "%s", d->name, origin, args,
           f == CORE_FIDELITY_EVENT ? "event" : "analytic", arch_chip_fingerprint(sys), node);
  const struct entry *e = find(c, key);
  if (e) {
    c->hits++;
    *out = e->cost;
    return 0;
  }
  c->misses++;
  int rc = f == CORE_FIDELITY_EVENT ? run_child(d, a, sys, out, diag) : run_here(d, a, sys, f, out, diag);
  if (!rc) put(c, key, out, false);
  return rc;
}
