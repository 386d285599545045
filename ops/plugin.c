/* plugin.c - loading operators from shared objects; see plugin.h. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "ops/plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/ops_int.h"

struct loaded {
  const struct op_desc *d;
  const char *origin; /* the file (interned, never freed: the operators outlive every caller) */
  uint64_t hash;
};

static struct loaded *loaded;
static size_t nloaded;
static const struct op_desc **combined; /* built-ins, then loaded */
static char **files;                    /* every file loaded, once */
static size_t nfiles;

const struct op_desc *const *op__plugin_all(size_t *n)
{
  if (!nloaded) return NULL;
  size_t nb;
  op_builtins(&nb);
  *n = nb + nloaded;
  return combined;
}

const char *op_origin(const struct op_desc *d)
{
  for (size_t i = 0; i < nloaded; i++)
    if (loaded[i].d == d) return loaded[i].origin;
  return NULL;
}

uint64_t op_origin_hash(const struct op_desc *d)
{
  for (size_t i = 0; i < nloaded; i++)
    if (loaded[i].d == d) return loaded[i].hash;
  return 0;
}

/* FNV-1a over the file's bytes; 0 with errno set when it cannot be read. */
static uint64_t file_hash(const char *path)
{
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  uint64_t h = 14695981039346656037ull;
  unsigned char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; i++) h = (h ^ buf[i]) * 1099511628211ull;
  int bad = ferror(f);
  fclose(f);
  return bad ? 0 : (h ? h : 1);
}

/* Whether s is a name the command line can give: letters, digits, '_' (not first a digit). */
static bool good_name(const char *s)
{
  if (!s || !s[0] || strlen(s) >= 48 || (s[0] >= '0' && s[0] <= '9')) return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
  return true;
}

/* An operator of a plugin, checked as far as a table can be: every function a run calls. */
static int check_desc(const struct op_desc *d, const char *where, const char *key, struct npu_diag *diag)
{
  char why[160] = "";
  if (!d || !good_name(d->name))
    snprintf(why, sizeof why, "an operator without a name of letters, digits and '_'");
  else if (!d->summary)
    snprintf(why, sizeof why, "operator '%s' has no summary", d->name);
  else if (!d->plan || !d->setup || !d->flops || !d->check || !d->plan_size)
    snprintf(why, sizeof why, "operator '%s' lacks plan, setup, flops, check or plan_size", d->name);
  else if ((int)d->bwd.kind < OP_BWD_NONE || d->bwd.kind > OP_BWD_PROXY || (d->bwd.kind != OP_BWD_NONE && !d->bwd.build) ||
           !d->bwd.rule || (d->bwd.kind == OP_BWD_PROXY && !d->bwd.reason))
    snprintf(why, sizeof why, "operator '%s' has an incomplete backward rule (kind, rule, build, and a reason for a proxy)",
             d->name);
  if (why[0]) return npu_diag_set(diag, where, 0, key, "%s", why);
  struct npu_diag pd;
  if (op__check_params(d, &pd)) return npu_diag_set(diag, where, 0, key, "%s: %s", pd.key, pd.msg);
  if (op_find(d->name)) {
    const struct op_desc *o = op_find(d->name);
    return npu_diag_set(diag, where, 0, key, "operator '%s' is already %s%s", d->name,
                        op_origin(o) ? "loaded from " : "built in", op_origin(o) ? op_origin(o) : "");
  }
  return 0;
}

int op_plugin_load(const char *path, const char *key, struct npu_diag *diag)
{
  char *real = realpath(path, NULL);
  if (!real) return npu_diag_set(diag, path, 0, key, "cannot open kernel plugin: %s", strerror(errno));
  for (size_t i = 0; i < nfiles; i++)
    if (!strcmp(files[i], real)) {
      free(real);
      return 0;
    }
  uint64_t hash = file_hash(real);
  if (!hash) {
    free(real);
    return npu_diag_set(diag, path, 0, key, "cannot read kernel plugin: %s", strerror(errno));
  }
  void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    int rc = npu_diag_set(diag, path, 0, key, "cannot load kernel plugin: %s (built against the headers of this npusim, "
                          "`pkg-config --cflags npusim-kernel`?)", dlerror());
    free(real);
    return rc;
  }
  const struct op_plugin *(*entry)(void) = NULL;
  void *sym = dlsym(h, OP_PLUGIN_SYMBOL);
  memcpy(&entry, &sym, sizeof entry); /* ISO C has no object-to-function pointer conversion */
  const struct op_plugin *pl = entry ? entry() : NULL;
  int rc = 0;
  if (!pl)
    rc = npu_diag_set(diag, path, 0, key, "not a kernel plugin: no %s() (define it with NPUSIM_KERNEL_PLUGIN)",
                      OP_PLUGIN_SYMBOL);
  else if (pl->api_version != NPUSIM_KERNEL_API_VERSION)
    rc = npu_diag_set(diag, path, 0, key, "built against kernel API version %u, this npusim has version %u: rebuild it "
                      "against this npusim's headers", pl->api_version, NPUSIM_KERNEL_API_VERSION);
  else if (pl->abi != OP_PLUGIN_ABI)
    rc = npu_diag_set(diag, path, 0, key, "built against headers of another layout (ABI hash %016llx, this npusim "
                      "%016llx): rebuild it against this npusim's headers", (unsigned long long)pl->abi,
                      (unsigned long long)OP_PLUGIN_ABI);
  else if (pl->nops < 1 || !pl->ops)
    rc = npu_diag_set(diag, path, 0, key, "plugin '%s' provides no operator", pl->name ? pl->name : "?");
  for (int i = 0; !rc && i < pl->nops; i++) {
    rc = check_desc(pl->ops[i], path, key, diag);
    for (int j = 0; !rc && j < i; j++)
      if (!strcmp(pl->ops[j]->name, pl->ops[i]->name))
        rc = npu_diag_set(diag, path, 0, key, "operator '%s' is listed twice", pl->ops[i]->name);
  }
  if (rc) {
    dlclose(h);
    free(real);
    return NPU_ECONFIG;
  }
  /* registered for the life of the process: never closed, since calls keep pointers to the operators */
  size_t nb;
  const struct op_desc *const *builtin = op_builtins(&nb);
  loaded = npu_xrealloc(loaded, (nloaded + (size_t)pl->nops) * sizeof *loaded);
  for (int i = 0; i < pl->nops; i++) loaded[nloaded++] = (struct loaded){pl->ops[i], real, hash};
  combined = npu_xrealloc(combined, (nb + nloaded) * sizeof *combined);
  memcpy(combined, builtin, nb * sizeof *combined);
  for (size_t i = 0; i < nloaded; i++) combined[nb + i] = loaded[i].d;
  files = npu_xrealloc(files, (nfiles + 1) * sizeof *files);
  files[nfiles++] = real;
  return 0;
}
