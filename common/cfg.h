/*
 * cfg.h - parameters declared as data, loaded from libconfig files, presets and --set.
 *
 * A module describes its parameters in a table of struct npu_param (name, type, where the value
 * lives in the module's plain struct, default, range, description), as Redis static_configs[]
 * and gem5 Param do. One generic loader then:
 *   - applies defaults, checks type and range, converts units ("1.6TBps" -> 1.6e12 bytes/s);
 *   - rejects unknown keys with a "did you mean" suggestion;
 *   - follows presets: a top-level `preset = "NAME"` loads a whole preset first, and
 *     `SECTION = { preset = "NAME"; ... }` resets that section and loads it from the preset,
 *     then the keys written next to it override; presets are looked up by name in the preset
 *     directories or, when the name contains '/' or ends in ".cfg", as a path relative to the
 *     file that names it; libconfig's @include works too (paths relative to the including
 *     top-level file's directory);
 *   - takes overrides "KEY=VALUE" from the command line;
 *   - remembers where every value came from (file:line, default, command line), so validation
 *     errors and the effective configuration can name it.
 *
 * Top-level groups are sections ("chip", "node", "cluster"). A required section must be given;
 * an optional one is present once any of its keys or its group is given. Required keys (no
 * default) must be set when their section is present.
 */
#ifndef NPUSIM_COMMON_CFG_H
#define NPUSIM_COMMON_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/diag.h"
#include "common/json.h"
#include "common/strutil.h"

enum npu_ptype {
  NPU_PT_INT,        /* int; plain integer in files */
  NPU_PT_REAL,       /* double; plain number in files */
  NPU_PT_BOOL,       /* bool; true/false */
  NPU_PT_STRING,     /* char[size]; string */
  NPU_PT_ENUM,       /* int index into enums[]; string */
  NPU_PT_FREQUENCY,  /* double Hz; string with unit, "1.85GHz" */
  NPU_PT_BANDWIDTH,  /* double bytes/s; "1.6TBps", "200Gbps" */
  NPU_PT_TIME,       /* double s; "2us" */
  NPU_PT_SIZE,       /* uint64_t bytes; "192KiB" */
  NPU_PT_FLOP_RATE,  /* double FLOP/s; "312TFLOPS" */
};

#define NPU_PF_POSITIVE 0x1u /* value must be > 0 */
#define NPU_PF_NONNEG 0x2u   /* value must be >= 0 */
#define NPU_PF_FRACTION 0x4u /* value must be in (0, 1] */
#define NPU_PF_OPTIONAL 0x8u /* no default (def NULL) yet not required: the key may stay unset, which
                                npu_cfg_origin reports as NPU_ORIGIN_UNSET; the writers skip it */

struct npu_param {
  const char *name;          /* dotted key from the root: "chip.hbm.bandwidth" */
  enum npu_ptype type;       /* value type, and the C type of the field */
  size_t offset;             /* offsetof the field in the table's target struct */
  size_t size;               /* NPU_PT_STRING: size of the char array; else 0 */
  const char *def;           /* default as text ("1.0", "64KiB"); NULL: required */
  unsigned flags;            /* NPU_PF_* */
  double min, max;           /* further inclusive bounds (SI units) when min < max */
  const char *const *enums;  /* NPU_PT_ENUM: NULL-terminated value names */
  const char *desc;          /* one line; plain numbers state their unit here */
};

/*
 * Entries of a parameter table, written once for every table: a file that defines
 * NPU_PARAM_STRUCT as its table's target (`#define NPU_PARAM_STRUCT struct wl_plan`) writes
 * NPU_PARAM_INT("plan.tp", tp, "1", NPU_PF_POSITIVE, "tensor-parallel size"), and so on.
 */
#define NPU_PARAM_OFF(field) offsetof(NPU_PARAM_STRUCT, field)
#define NPU_PARAM_SZ(field) sizeof(((NPU_PARAM_STRUCT *)0)->field)
#define NPU_PARAM_INT(name, field, def, flags, desc) \
  {name, NPU_PT_INT, NPU_PARAM_OFF(field), 0, def, flags, 0, 0, NULL, desc}
#define NPU_PARAM_BOOL(name, field, def, desc) \
  {name, NPU_PT_BOOL, NPU_PARAM_OFF(field), 0, def, 0, 0, 0, NULL, desc}
#define NPU_PARAM_ENUM(name, field, def, names, desc) \
  {name, NPU_PT_ENUM, NPU_PARAM_OFF(field), 0, def, 0, 0, 0, names, desc}
#define NPU_PARAM_STR(name, field, def, desc) \
  {name, NPU_PT_STRING, NPU_PARAM_OFF(field), NPU_PARAM_SZ(field), def, 0, 0, 0, NULL, desc}

struct npu_section {
  const char *name;     /* top-level group name: "chip" */
  bool required;        /* must be present */
  const char *desc;     /* one line */
};

struct npu_table {
  const struct npu_section *sections; /* sections owned by this table */
  size_t nsections;
  const struct npu_param *params;     /* contiguous per group, in print order */
  size_t nparams;
};

enum npu_origin_kind { NPU_ORIGIN_UNSET, NPU_ORIGIN_DEFAULT, NPU_ORIGIN_FILE, NPU_ORIGIN_CMDLINE };

struct npu_origin {
  enum npu_origin_kind kind;
  const char *file; /* display path (owned by the cfg), for NPU_ORIGIN_FILE */
  int line;         /* 1-based, for NPU_ORIGIN_FILE */
};

struct npu_cfg;

/* Create an empty loader. Never fails (out of memory aborts). */
struct npu_cfg *npu_cfg_create(void);
void npu_cfg_destroy(struct npu_cfg *cfg);

/*
 * Register a table whose values live in target (borrowed; must outlive cfg). Defaults are
 * written into target now. Parameter names must be unique across tables and each must start
 * with one of the table's sections; a violation is a bug and aborts.
 */
void npu_cfg_add_table(struct npu_cfg *cfg, const struct npu_table *table, void *target);

/* Add a directory searched for "NAME.cfg" presets, after those added before. */
void npu_cfg_add_preset_dir(struct npu_cfg *cfg, const char *dir);

/*
 * Paths under root are shown relative to it in messages and in the effective configuration,
 * so output does not depend on where the tree is checked out.
 */
void npu_cfg_set_display_root(struct npu_cfg *cfg, const char *root);

/*
 * Loads (files, presets, --set) only note which sections are given, as npu_cfg_section_present
 * reports them: a top-level group, a top-level preset's groups, a --set key's section. No value
 * is read, no section preset opened, nothing checked below the top level. For choosing what
 * kind of scenario a file is without the cost of loading it (a third of a load, twice over);
 * load it again in full to use it.
 */
void npu_cfg_set_presence_only(struct npu_cfg *cfg);

/* Load a file on top of what is loaded. Returns 0 or NPU_ECONFIG with diag filled. */
int npu_cfg_load_file(struct npu_cfg *cfg, const char *path, struct npu_diag *diag);

/*
 * Load what a command line names: a file when spec contains '/' or ends in ".cfg", else a
 * preset by name.
 */
int npu_cfg_load_spec(struct npu_cfg *cfg, const char *spec, struct npu_diag *diag);

/* Load a preset by name (as `preset = "NAME"` at top level would). */
int npu_cfg_load_preset(struct npu_cfg *cfg, const char *name, struct npu_diag *diag);

/*
 * Apply one "KEY=VALUE" override (KEY may also be "preset" or "SECTION.preset"). Returns 0
 * or NPU_ECONFIG with diag naming "command line" and the key.
 */
int npu_cfg_set(struct npu_cfg *cfg, const char *assignment, struct npu_diag *diag);

/* Check required sections and keys. Call once after all loads and sets. */
int npu_cfg_finish(struct npu_cfg *cfg, struct npu_diag *diag);

/* Whether a section was given (by file, preset or --set). */
bool npu_cfg_section_present(const struct npu_cfg *cfg, const char *section);

/*
 * A file named by the value of key: *shown* as messages name it, *path* the file to open. A
 * relative name is taken relative to the directory of the file that set the key (as @include
 * and section presets are); that file is recorded as it is displayed (relative to the display
 * root when it lay under it), so the display root is tried when it is not found as shown. An
 * absolute name, or one set on the command line, is taken as it is. False when a buffer is short.
 */
bool npu_cfg_resolve_path(const struct npu_cfg *cfg, const char *key, const char *name, char *shown, size_t nshown,
                          char *path, size_t npath);

/* Where a key's value came from; NULL if key is not a parameter. Lives as long as cfg. */
const struct npu_origin *npu_cfg_origin(const struct npu_cfg *cfg, const char *key);

/*
 * Fill diag with the location of key's value (file:line, or "command line", or the section's
 * location for defaults) and a formatted message. For cross-field validation. Returns
 * NPU_ECONFIG.
 */
int npu_cfg_fail(const struct npu_cfg *cfg, struct npu_diag *diag, const char *key,
                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/*
 * Write every registered key, in registration order, as a Markdown table: key, type (with the
 * choices of an enum), default ("required" when none) and meaning. The scenario reference
 * (docs/SCENARIOS.md) is generated from this.
 */
void npu_cfg_write_keys(const struct npu_cfg *cfg, struct npu_buf *out);

/* The parameter called key, or NULL. */
const struct npu_param *npu_cfg_param(const struct npu_cfg *cfg, const char *key);

/* Format a parameter's current value as config text (units for physical values). */
void npu_cfg_format_value(const struct npu_cfg *cfg, const char *key, char *buf, size_t n);

/*
 * Write the effective configuration of the present sections as a libconfig file that loads
 * back to the same values, each value commented with its origin.
 */
void npu_cfg_write_config(const struct npu_cfg *cfg, struct npu_buf *out);

/*
 * Write a section's values as one JSON object per group; physical values are SI numbers whose
 * key gains a unit suffix (bandwidth -> bandwidth_bytes_per_s, _hz, _s, _bytes, _flops_per_s).
 */
void npu_cfg_write_json(const struct npu_cfg *cfg, const char *section, struct npu_json *j);

/*
 * Names of the presets in the preset directories (sorted, without ".cfg"). *out is an array of
 * *n strings; free with npu_cfg_free_names.
 */
void npu_cfg_list_presets(const struct npu_cfg *cfg, char ***out, size_t *n);
void npu_cfg_free_names(char **names, size_t n);

/* Resolve a preset name to a readable path in the preset directories; NULL if none. Owned by cfg. */
const char *npu_cfg_find_preset(struct npu_cfg *cfg, const char *name);
/* The file a spec names, as npu_cfg_load_spec reads it: the spec itself when it is a path
 * (a '/' or a .cfg name), else the preset's path; NULL if no preset has that name. */
const char *npu_cfg_find_spec(struct npu_cfg *cfg, const char *spec);

#endif
