/*
 * golden.h - expected figures kept beside an input (SimGrid's .tesh habit), checked by the tests.
 *
 * A golden file (scenarios/<name>.expect, beside <name>.cfg) pins the headline figures of what
 * a command prints for that input. One figure per line:
 *
 *     KEY  VALUE  [TOLERANCE]  [# why]
 *
 * KEY names a column of a CSV result (`step_time_s`), `column[N]` for row N (1-based) of a
 * result with several rows, or any quoted text ("gpt3-22b a100 sp+selective/mfu") for results
 * that are not CSV; VALUE is a number, or a quoted string compared exactly; TOLERANCE is
 * relative ("0.1%", the default) or absolute ("abs:1e-9"). A zero VALUE with a relative
 * tolerance must stay exactly zero. Lines starting with '#' are comments.
 *
 * With NPUSIM_GOLDEN_UPDATE=1 in the environment (`make golden`), a check rewrites the VALUE of
 * each line that disagrees from what was measured instead of failing, keeping keys, tolerances,
 * comments and every line that still agrees (so the diff shows only the figures that moved);
 * a golden file that does not exist is then created with the default keys the caller names.
 * Review the diff and give the reason for every changed figure in the commit message.
 */
#ifndef NPUSIM_TESTS_GOLDEN_H
#define NPUSIM_TESTS_GOLDEN_H

#include <stdbool.h>

/* Measured figures: parallel arrays of keys and value texts (as the result printed them). */
struct ts_figures {
  char **keys;
  char **values;
  int n, cap;
};

void ts_figures_add(struct ts_figures *f, const char *key, const char *value);
void ts_figures_free(struct ts_figures *f);

/*
 * The figures of a CSV text (a header line and one or more rows; RFC 4180 quoting): one
 * figure per column, keyed `column` when there is one row and `column[N]` for row N otherwise.
 */
void ts_figures_from_csv(struct ts_figures *f, const char *csv);

/* The figures a created golden file pins: numbers, and labels without digits ("cube_bound",
 * "mesh"); not inputs echoed back (scenario, args, message) nor sentences carrying numbers (a
 * bottleneck line with percentages would flip on a last-digit change). Their base key names
 * are those of the CSV column, with any "[N]" row suffix ignored. */
bool ts_golden_pin_default(const char *key, const char *value);

/* Whether update mode is on (NPUSIM_GOLDEN_UPDATE=1). */
bool ts_golden_updating(void);

/*
 * Check the measured figures against the golden file at path (see above), or rewrite it in
 * update mode. Returns NULL when every pinned figure agrees, else a message listing every
 * disagreement, one per line (owned by the caller). A missing golden file is a disagreement
 * outside update mode. `header` is the comment written at the top of a file created in update
 * mode; `want(key)` chooses which figures a created file pins.
 */
char *ts_golden_check(const char *path, const struct ts_figures *got, const char *header,
                      bool (*want)(const char *key, const char *value));

#endif
