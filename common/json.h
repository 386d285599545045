/*
 * json.h - a small streaming JSON writer into an npu_buf.
 *
 * Output is deterministic: keys in the order written, numbers in the shortest form that reads
 * back to the same double (npu_fmt_double), non-finite numbers as null, two-space indentation.
 * Misuse (a value where a key is due, unbalanced nesting) is a bug and aborts.
 */
#ifndef NPUSIM_COMMON_JSON_H
#define NPUSIM_COMMON_JSON_H

#include <stdbool.h>
#include <stdint.h>

#include "common/strutil.h"

#define NPU_JSON_MAX_DEPTH 32

struct npu_json {
  struct npu_buf *out;                 /* where text goes (borrowed) */
  int depth;                           /* open containers */
  bool is_object[NPU_JSON_MAX_DEPTH];  /* container kind per level */
  int count[NPU_JSON_MAX_DEPTH];       /* members written per level */
  bool key_pending;                    /* a key was written, its value is due */
};

void npu_json_init(struct npu_json *j, struct npu_buf *out);
void npu_json_object_begin(struct npu_json *j);
void npu_json_object_end(struct npu_json *j);
void npu_json_array_begin(struct npu_json *j);
void npu_json_array_end(struct npu_json *j);
void npu_json_key(struct npu_json *j, const char *key);
void npu_json_string(struct npu_json *j, const char *s);
void npu_json_number(struct npu_json *j, double v);
void npu_json_int(struct npu_json *j, int64_t v);
void npu_json_bool(struct npu_json *j, bool v);
void npu_json_null(struct npu_json *j);
/* Finish: asserts all containers are closed and appends a newline. */
void npu_json_finish(struct npu_json *j);

/* Write s as a JSON string literal (with quotes and escapes) into b. */
void npu_json_quote(struct npu_buf *b, const char *s);

#endif
