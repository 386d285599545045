/*
 * test_fuzz.c - every fuzz target (fuzz.h) over its seed corpus (tests/fuzz/corpus/<target>/,
 * which holds each input a fuzzer or a report found, as a regression) and over the project's
 * own files: every scenario and preset through the scenario loader. Nothing may crash, leak or
 * trip the sanitizers (this suite runs under ASan and UBSan in make test-sanitize); the targets
 * refuse bad input through the loaders' located errors.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/strutil.h"
#include "tests/fuzz/fuzz.h"

TestSuite(fuzz, .timeout = 600);

/* Run target over every file under dir (recursively, .cfg only when cfg_only); returns how many. */
static int replay(int (*target)(const uint8_t *, size_t), const char *dir, bool cfg_only)
{
  DIR *d = opendir(dir);
  cr_assert(d, "no directory %s", dir);
  int n = 0;
  struct dirent *e;
  char **names = NULL;
  int nn = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    names = realloc(names, (size_t)(nn + 1) * sizeof *names);
    names[nn++] = strdup(e->d_name);
  }
  closedir(d);
  for (int i = 0; i < nn; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
      n += replay(target, path, cfg_only);
    } else if (!cfg_only || strstr(names[i], ".cfg")) {
      struct npu_buf b = {0};
      cr_assert(npu_buf_read_file(&b, path), "cannot read %s", path);
      target((const uint8_t *)(b.data ? b.data : ""), b.len);
      npu_buf_release(&b);
      n++;
    }
    free(names[i]);
  }
  free(names);
  return n;
}

#define CORPUS NPUSIM_SOURCE_DIR "/tests/fuzz/corpus/"

Test(fuzz, unit_strings_of_the_corpus)
{
  cr_assert_geq(replay(fuzz_units, CORPUS "units", false), 10);
}

Test(fuzz, set_assignments_of_the_corpus)
{
  cr_assert_geq(replay(fuzz_set, CORPUS "set", false), 10);
  cr_assert_geq(fuzz_loaded, 2, "the good assignments load: %d", fuzz_loaded);
}

Test(fuzz, results_csvs_of_the_corpus)
{
  cr_assert_geq(replay(fuzz_csv, CORPUS "csv", false), 5);
}

Test(fuzz, collective_tables_of_the_corpus)
{
  cr_assert_geq(replay(fuzz_nccl, CORPUS "nccl", false), 5);
}

Test(fuzz, profiler_traces_of_the_corpus)
{
  cr_assert_geq(replay(fuzz_kineto, CORPUS "kineto", false), 5);
}

Test(fuzz, scenario_files_of_the_corpus_and_of_the_project)
{
  int n = replay(fuzz_scenario, CORPUS "scenario", false);
  cr_assert_geq(n, 5);
  int before = fuzz_loaded, own = replay(fuzz_scenario, NPUSIM_SOURCE_DIR "/scenarios", true);
  own += replay(fuzz_scenario, NPUSIM_SOURCE_DIR "/arch/presets", true);
  cr_assert_geq(own, 90, "every scenario and preset file: %d", own);
  /* read from a scratch directory, files that include others by relative path do not load;
   * the rest do (presets hold a system only, which is refused: no model) */
  cr_assert_geq(fuzz_loaded - before, 30, "the project's own scenarios load: %d of %d", fuzz_loaded - before, own);
}
