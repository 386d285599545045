/* fuzz_targets.c - the fuzz targets; see fuzz.h. */
#include "tests/fuzz/fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/diag.h"
#include "common/err.h"
#include "common/units.h"
#include "report/kineto.h"
#include "report/nccl_table.h"
#include "scenario/scenario.h"
#include "sweep/table.h"

char *fuzz_string(const uint8_t *data, size_t size)
{
  char *s = npu_xmalloc(size + 1);
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

const char *fuzz_file(const char *name, const uint8_t *data, size_t size)
{
  static char dir[256], path[512];
  if (!dir[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/npusim-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) abort();
  }
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  return path;
}

int fuzz_units(const uint8_t *data, size_t size)
{
  char *s = fuzz_string(data, size);
  for (int k = 0; k < NPU_UNIT_KIND_COUNT; k++) {
    double v;
    char why[256], back[64];
    if (npu_unit_parse(s, (enum npu_unit_kind)k, &v, why, sizeof why) == 0) npu_unit_format(v, (enum npu_unit_kind)k, back, sizeof back);
  }
  free(s);
  return 0;
}

int fuzz_loaded;

/* Load (and check) a scenario; nothing runs: simulating is not what is fuzzed here. */
static void load(const char *path, const char *const *sets, int nsets)
{
  struct scn_scenario *s = NULL;
  struct npu_diag d;
  npu_diag_clear(&d);
  if (scn_load(&s, NULL, path, sets, nsets, &d) == 0) {
    fuzz_loaded++;
    scn_destroy(s);
  }
}

int fuzz_set(const uint8_t *data, size_t size)
{
  char *s = fuzz_string(data, size);
  const char *sets[] = {s};
  load(NPUSIM_SOURCE_DIR "/tests/workloads/data/tiny.cfg", sets, 1);
  free(s);
  return 0;
}

int fuzz_scenario(const uint8_t *data, size_t size)
{
  load(fuzz_file("s.cfg", data, size), NULL, 0);
  return 0;
}

int fuzz_csv(const uint8_t *data, size_t size)
{
  struct sw_table t;
  struct npu_diag d;
  npu_diag_clear(&d);
  memset(&t, 0, sizeof t);
  if (sw_table_read(fuzz_file("r.csv", data, size), &t, &d) == 0) {
    for (int i = 0; i < t.ncols; i++) sw_table_col(&t, t.cols[i]);
  }
  sw_table_free(&t);
  return 0;
}

int fuzz_nccl(const uint8_t *data, size_t size)
{
  struct nccl_table t;
  struct npu_diag d;
  npu_diag_clear(&d);
  const char *path = fuzz_file("t.txt", data, size);
  if (nccl_table_sniff(path) && nccl_table_read(path, &t, &d) == 0) nccl_table_free(&t);
  return 0;
}

static void count_event(const struct kineto_event *ev, void *ctx)
{
  *(double *)ctx += ev->dur_us + (double)strlen(ev->cat) + (double)strlen(ev->name);
}

int fuzz_kineto(const uint8_t *data, size_t size)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  double sum = 0;
  const char *path = fuzz_file("t.json", data, size);
  kineto_sniff(path);
  kineto_read(path, count_event, &sum, &d);
  return 0;
}
