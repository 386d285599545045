/* helpers.h - shared setup for the rl tests: small RL scenarios written to a scratch directory. */
#ifndef NPUSIM_TESTS_RL_HELPERS_H
#define NPUSIM_TESTS_RL_HELPERS_H

#include "rl/rl.h"

/*
 * Write an RL scenario: `system` (e.g. "preset = \"atlas-800t-a2\"; cluster = { nodes = 2; };"),
 * the policy Llama 3.1 8B cut to `layers` layers (0: all), the plan and rl section bodies.
 * Returns the path (owned by the caller); the directory is removed when the test process exits.
 */
char *tr_scenario(const char *system, int layers, const char *plan, const char *rl);

/* Load path with overrides (NULL-terminated), asserting success. */
void tr_load(struct rl_job *job, const char *path, const char *const *sets);

/* Assert |got - want| <= rel * |want| (+ 1e-15) naming what. */
void tr_close(double got, double want, double rel, const char *what);

#endif
