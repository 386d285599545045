/*
 * test_golden.c - every scenario under scenarios/ runs and reproduces the figures pinned in the
 * golden file beside it (<name>.expect, tests/support/golden.h), and `npusim validate --json`
 * reproduces scenarios/validation/validate.expect. `make golden` rewrites the golden files
 * from what the code computes now: a changed figure is then a visible edit, explained in the
 * commit that makes it.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/support/golden.h"
#include "tests/support/support.h"

TestSuite(golden, .timeout = 1800);

/* Check the summary.csv text csv of scenario path (NULL: none was written) against path's
 * .expect; NULL or a message. */
static char *check_csv(const char *path, const char *csv)
{
  char expect[1100];
  snprintf(expect, sizeof expect, "%.*s.expect", (int)(strlen(path) - 4), path);
  struct ts_figures f = {0};
  ts_figures_from_csv(&f, csv ? csv : "");
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  char header[3072]; /* the base name twice (up to 1,023 bytes each) and the text */
  snprintf(header, sizeof header,
           "# Golden figures of %s: `npusim run %s -o DIR`, columns of DIR/summary.csv\n"
           "# (docs/SCENARIOS.md), checked by tests/cli/test_golden.c. KEY VALUE [TOLERANCE]: relative\n"
           "# tolerance 0.1%% unless a line says otherwise (and why). A changed figure is a deliberate\n"
           "# edit (`make golden`), with its reason in the commit message.\n",
           base, base);
  char *msg = ts_golden_check(expect, &f, header, ts_golden_pin_default);
  ts_figures_free(&f);
  return msg;
}

/* Run one scenario with -o, check its summary.csv against path's .expect; NULL or a message.
 * Training, RL and serving scenarios share the cost cache file `cache` (`run.cost_cache`: the
 * scenarios of one model and chip cost the same kernels; a cache hit is the cost a miss computes,
 * keyed by the chip and the cost model's fingerprint); kernel and collective ones (micro) have
 * none. */
static char *check_scenario(const char *path, bool micro, const char *cache)
{
  char *dir = ts_tmpdir();
  char out[1100], set[1200];
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(set, sizeof set, "run.cost_cache=%s", cache);
  struct run_result r = micro ? ts_npusim("run", path, "-o", out, NULL) : ts_npusim("run", path, "-o", out, "--set", set, NULL);
  char *msg = NULL;
  if (r.status != 0 || r.err[0]) {
    msg = malloc(strlen(path) + strlen(r.err) + 64);
    sprintf(msg, "%s: exit %d: %s", path, r.status, r.err);
  } else {
    char csvp[1200];
    snprintf(csvp, sizeof csvp, "%s/summary.csv", out);
    char *csv = ts_read(csvp);
    msg = check_csv(path, csv);
    free(csv);
  }
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
  return msg;
}

/*
 * The scenarios under dir (recursively, but not into the subdirectory `skip`), appended to
 * list[*n]. Sweep files (*_sweep.cfg) are not scenarios: tests/sweep runs each on a
 * sample against its own golden file.
 */
enum { MAX_SCENARIOS = 256 };

static int by_path(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void collect(const char *dir, const char *skip, char **list, int *n)
{
  DIR *d = opendir(dir);
  cr_assert(d != NULL, "%s", dir);
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *name = e->d_name;
    size_t len = strlen(name);
    if (name[0] == '.' || !strcmp(name, "models") || (skip && !strcmp(name, skip))) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s", path);
    if (S_ISDIR(st.st_mode)) {
      collect(path, NULL, list, n);
      continue;
    }
    if (len < 5 || strcmp(name + len - 4, ".cfg") != 0) continue;
    if (len >= 10 && strcmp(name + len - 10, "_sweep.cfg") == 0) continue;
    cr_assert_lt(*n, MAX_SCENARIOS);
    list[(*n)++] = strdup(path);
  }
  closedir(d);
}

/* Whether a line of text starts with prefix. */
static bool has_line(const char *text, const char *prefix)
{
  size_t n = strlen(prefix);
  for (const char *l = text; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (!strncmp(l, prefix, n)) return true;
  return false;
}

/*
 * Run the scenarios under dir whose index in path order is part (mod parts) and check their golden
 * figures; every disagreement is collected before the test fails. The tests below split each
 * directory into parts so that Criterion's workers share the long runs. A scenario whose comments
 * hold the line "# npusim-test: skip-under-sanitizers" (a full-scale run that takes minutes:
 * smaller scenarios cover the same code) is not run in the sanitizer build. The part's scenarios
 * share one cost cache. With outputs (not NULL), a scenario directly in dir whose summary is
 * outputs/NAME.csv (`npusim validate --outputs`: the same run) is checked from that file instead
 * of run again. The number of scenarios of the whole directory, whether run here or not.
 */
static int run_scenarios(const char *dir, const char *skip, int part, int parts, const char *outputs)
{
  char *list[MAX_SCENARIOS], *fails = NULL, cache[1100];
  int n = 0;
  collect(dir, skip, list, &n);
  qsort(list, (size_t)n, sizeof *list, by_path);
  char *cdir = ts_tmpdir();
  snprintf(cache, sizeof cache, "%s/costs.cache", cdir);
  for (int i = part; i < n; i += parts) {
    const char *path = list[i];
    char *text = ts_read(path);
    cr_assert(text != NULL, "%s", path);
    bool heavy = has_line(text, "# npusim-test: skip-under-sanitizers");
    bool micro = has_line(text, "kernel = {") || has_line(text, "collective = {");
    free(text);
    if (heavy && UNDER_SANITIZERS) {
      cr_log_info("%s: not run in the sanitizer build (skip-under-sanitizers)", path);
      continue;
    }
    char *m = NULL, *ran = NULL;
    const char *base = strrchr(path, '/') + 1;
    if (outputs && (size_t)(base - path) == strlen(dir) + 1) {
      char csvp[2200];
      snprintf(csvp, sizeof csvp, "%s/%.*s.csv", outputs, (int)strlen(base) - 4, base);
      ran = ts_read(csvp);
    }
    m = ran ? check_csv(path, ran) : check_scenario(path, micro, cache);
    free(ran);
    if (m) {
      size_t old = fails ? strlen(fails) : 0;
      fails = realloc(fails, old + strlen(m) + 2);
      strcpy(fails + old, m);
      free(m);
    }
  }
  for (int i = 0; i < n; i++) free(list[i]);
  ts_rmtree(cdir);
  free(cdir);
  cr_assert(fails == NULL, "%s", fails);
  return n;
}

/* The top-level scenarios in two parts, the validation scenarios in five (the 2,048-GPU, 32K MoE
 * and 8,192-NPU runs, the longest, fall in different parts): parts run side by side. In the
 * normal build the validation scenarios are checked by validation_table_matches_its_golden_figures
 * from the runs `npusim validate` makes of them (the same runs: run twice they took about 250 s
 * of the suite's CPU); the parts check them in the sanitizer build, where the table is not run. */
#define SCENARIO_PARTS(test, dir, skip, part, parts, atleast)                                        \
  Test(golden, test)                                                                                  \
  {                                                                                                   \
    cr_assert_geq(run_scenarios(NPUSIM_SOURCE_DIR dir, skip, part, parts, NULL), atleast);           \
  }
#define VALIDATION_PARTS(test, part, parts)                                                           \
  Test(golden, test)                                                                                  \
  {                                                                                                   \
    if (!UNDER_SANITIZERS) cr_skip_test("checked from npusim validate's runs by validation_table_matches_its_golden_figures"); \
    cr_assert_geq(run_scenarios(NPUSIM_SOURCE_DIR "/scenarios/validation", NULL, part, parts, NULL), 30); \
  }

SCENARIO_PARTS(scenarios_part_1_of_2_match_their_golden_figures, "/scenarios", "validation", 0, 2, 15)
SCENARIO_PARTS(scenarios_part_2_of_2_match_their_golden_figures, "/scenarios", "validation", 1, 2, 15)
VALIDATION_PARTS(validation_scenarios_part_1_of_5_match_their_golden_figures, 0, 5)
VALIDATION_PARTS(validation_scenarios_part_2_of_5_match_their_golden_figures, 1, 5)
VALIDATION_PARTS(validation_scenarios_part_3_of_5_match_their_golden_figures, 2, 5)
VALIDATION_PARTS(validation_scenarios_part_4_of_5_match_their_golden_figures, 3, 5)
VALIDATION_PARTS(validation_scenarios_part_5_of_5_match_their_golden_figures, 4, 5)

/* The string value after `"key": "` (or the number after `"key": `) at or after p; NULL at the
 * end. *next moves past it. */
static char *json_field(const char *p, const char *key, const char **next)
{
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *s = strstr(p, pat);
  if (!s) return NULL;
  s += strlen(pat);
  const char *e;
  if (*s == '"') {
    s++;
    e = strchr(s, '"');
  } else {
    e = s + strcspn(s, ",\n}");
  }
  if (!e) return NULL;
  *next = e;
  return strndup(s, (size_t)(e - s));
}

/* The generated part of a document: the text between "<!-- BEGIN npusim validate --markdown -->"
 * and its END marker must be `generated`; in update mode (make golden) it is rewritten. NULL or
 * a message. */
static char *doc_region_check(const char *path, const char *generated)
{
  static const char begin[] = "<!-- BEGIN npusim validate --markdown -->\n",
                    end[] = "<!-- END npusim validate --markdown -->";
  char *doc = ts_read(path);
  char *b = doc ? strstr(doc, begin) : NULL, *e = b ? strstr(b, end) : NULL;
  char *msg = NULL;
  if (!e) {
    msg = malloc(strlen(path) + 128);
    sprintf(msg, "%s: no BEGIN/END npusim validate --markdown markers", path);
  } else {
    char *inside = b + strlen(begin);
    size_t have = (size_t)(e - inside);
    if (have != strlen(generated) || memcmp(inside, generated, have)) {
      if (ts_golden_updating()) {
        FILE *f = fopen(path, "w");
        cr_assert(f != NULL);
        fwrite(doc, 1, (size_t)(inside - doc), f);
        fputs(generated, f);
        fputs(e, f);
        fclose(f);
      } else {
        msg = malloc(strlen(path) + strlen(generated) + 256);
        sprintf(msg, "%s: the generated tables differ from `npusim validate --markdown` (make golden rewrites them); now:\n%s",
                path, generated);
      }
    }
  }
  free(doc);
  return msg;
}

/* The validation table (every case of `npusim validate`, its predicted value) is pinned too: the
 * cases run the validation scenarios with their own overrides. Then every validation scenario's
 * golden figures: from validate's run of it where it ran one as it is (--outputs), else run here.
 * Not in the sanitizer build: it reruns the full-scale scenarios that build skips, and the
 * per-scenario parts cover the code there. */
Test(golden, validation_table_matches_its_golden_figures)
{
  if (UNDER_SANITIZERS) cr_skip_test("the validation table reruns full-scale scenarios (normal build only)");
  char *dir = ts_tmpdir();
  char md[1100], outputs[1100];
  snprintf(md, sizeof md, "%s/validation.md", dir);
  snprintf(outputs, sizeof outputs, "%s/outputs", dir);
  cr_assert_eq(mkdir(outputs, 0755), 0, "%s", outputs);
  struct run_result r = ts_npusim("validate", "--json", "--markdown", md, "--outputs", outputs, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *generated = ts_read(md);
  cr_assert(generated != NULL);
  cr_assert_geq(run_scenarios(NPUSIM_SOURCE_DIR "/scenarios/validation", NULL, 0, 1, outputs), 30);
  ts_rmtree(dir);
  free(dir);
  struct ts_figures f = {0};
  /* the cases come first, then the per-set errors and the headline */
  char *sets = strstr(r.out, "\"sets\": [");
  cr_assert(sets != NULL, "%s", r.out);
  *sets = '\0';
  const char *p = r.out, *q;
  char *name;
  while ((name = json_field(p, "name", &q))) {
    char *metric = json_field(q, "metric", &q);
    char *pred = json_field(q, "predicted", &q);
    cr_assert(metric && pred, "%s", r.out);
    char key[512];
    snprintf(key, sizeof key, "%s/%s", name, metric);
    ts_figures_add(&f, key, pred);
    free(name);
    free(metric);
    free(pred);
    p = q;
  }
  *sets = '"';
  for (const char *k = "counted\0mape\0bias\0reproduction_mape\0"; *k; k += strlen(k) + 1) {
    /* the headline keys follow the sets' array */
    const char *tail = strstr(sets, "\n  ]");
    cr_assert(tail != NULL, "%s", sets);
    char *v = json_field(tail, k, &q);
    cr_assert(v != NULL, "%s: %s", k, tail);
    ts_figures_add(&f, k, v);
    free(v);
  }
  cr_assert_geq(f.n, 30);
  char *msg = ts_golden_check(NPUSIM_SOURCE_DIR "/scenarios/validation/validate.expect", &f,
                              "# Golden figures of `npusim validate --json`: each case's predicted value, keyed\n"
                              "# \"case name/metric\", and the MAPE; checked by tests/cli/test_golden.c. Relative\n"
                              "# tolerance 0.1% unless a line says otherwise. A changed figure is a deliberate edit\n"
                              "# (`make golden`), with its reason in the commit message.\n",
                              NULL);
  cr_assert(msg == NULL, "%s", msg);
  ts_figures_free(&f);
  ts_run_free(&r);
  /* docs/VALIDATION.md holds the generated tables between its markers, as validate prints them */
  cr_assert(!strstr(generated, "NO EXPLANATION"), "a counted row beyond 10%% has no .why:\n%s", generated);
  msg = doc_region_check(NPUSIM_SOURCE_DIR "/docs/VALIDATION.md", generated);
  cr_assert(msg == NULL, "%s", msg);
  free(generated);
}

/* The checker itself: a figure beyond its tolerance, a missing figure, a changed label and a
 * bad tolerance are each reported; figures within tolerance (relative or absolute) are not. */
Test(golden, the_checker_reports_every_disagreement, .timeout = 30)
{
  unsetenv("NPUSIM_GOLDEN_UPDATE"); /* this test checks the comparison itself, even under make golden */
  char *dir = ts_tmpdir();
  char *path = ts_write(dir, "x.expect",
                        "# comment\n"
                        "step_time_s  1.000  # within 0.1%\n"
                        "mfu          0.500  1%\n"
                        "bubble       0.0    abs:1e-3\n"
                        "memory       100    \n"
                        "algorithm    \"ring\"\n"
                        "missing      1\n"
                        "zero         0\n"
                        "badtol       1      5\n");
  struct ts_figures f = {0};
  ts_figures_from_csv(&f, "step_time_s,mfu,bubble,memory,algorithm,zero,badtol\n"
                          "1.0009,0.504,0.0009,100.2,mesh,1e-300,1\n");
  char *msg = ts_golden_check(path, &f, "", NULL);
  cr_assert(msg != NULL);
  cr_assert(!strstr(msg, "step_time_s") && !strstr(msg, "mfu") && !strstr(msg, ": bubble"), "%s", msg);
  cr_assert(strstr(msg, "memory: 100.2, expected 100 (+0.2%, tolerance 0.1%)") != NULL, "%s", msg);
  cr_assert(strstr(msg, "algorithm: \"mesh\", expected \"ring\"") != NULL, "%s", msg);
  cr_assert(strstr(msg, "missing: no such figure in the result") != NULL, "%s", msg);
  cr_assert(strstr(msg, "zero: 1e-300, expected 0") != NULL, "%s", msg);
  cr_assert(strstr(msg, "badtol: bad tolerance '5'") != NULL, "%s", msg);
  free(msg);
  /* a CSV of several rows keys its figures column[row] */
  struct ts_figures g = {0};
  ts_figures_from_csv(&g, "a,b\n1,\"x, y\"\n2,z\n");
  cr_assert_eq(g.n, 4);
  cr_assert_str_eq(g.keys[1], "b[1]");
  cr_assert_str_eq(g.values[1], "x, y");
  cr_assert_str_eq(g.keys[2], "a[2]");
  ts_figures_free(&f);
  ts_figures_free(&g);
  free(path);
  ts_rmtree(dir);
  free(dir);
}
