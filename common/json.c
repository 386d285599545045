/* json.c - streaming JSON writer. */
#include "common/json.h"

#include <inttypes.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"

void npu_json_init(struct npu_json *j, struct npu_buf *out)
{
  *j = (struct npu_json){.out = out};
}

static void indent(struct npu_json *j)
{
  npu_buf_puts(j->out, "\n");
  for (int i = 0; i < j->depth; i++) npu_buf_puts(j->out, "  ");
}

/* Emit separators before a value (or a key, inside an object). */
static void before_value(struct npu_json *j)
{
  if (j->key_pending) {
    j->key_pending = false;
    return;
  }
  if (j->depth == 0) return;
  NPU_ASSERT(!j->is_object[j->depth - 1]); /* objects need a key first */
  if (j->count[j->depth - 1]++) npu_buf_puts(j->out, ",");
  indent(j);
}

static void json_open(struct npu_json *j, bool obj)
{
  before_value(j);
  NPU_ASSERT(j->depth < NPU_JSON_MAX_DEPTH);
  npu_buf_puts(j->out, obj ? "{" : "[");
  j->is_object[j->depth] = obj;
  j->count[j->depth] = 0;
  j->depth++;
}

static void json_close(struct npu_json *j, bool obj)
{
  NPU_ASSERT(j->depth > 0 && j->is_object[j->depth - 1] == obj && !j->key_pending);
  int n = j->count[j->depth - 1];
  j->depth--;
  if (n) indent(j);
  npu_buf_puts(j->out, obj ? "}" : "]");
}

void npu_json_object_begin(struct npu_json *j) { json_open(j, true); }
void npu_json_object_end(struct npu_json *j) { json_close(j, true); }
void npu_json_array_begin(struct npu_json *j) { json_open(j, false); }
void npu_json_array_end(struct npu_json *j) { json_close(j, false); }

void npu_json_quote(struct npu_buf *b, const char *s)
{
  /* the common case, nothing to escape, in one append (traces quote millions of names) */
  size_t plain = strcspn(s, "\"\\\001\002\003\004\005\006\007\010\011\012\013\014\015\016\017\020\021\022"
                            "\023\024\025\026\027\030\031\032\033\034\035\036\037");
  if (!s[plain]) {
    npu_buf_append(b, "\"", 1);
    npu_buf_append(b, s, plain);
    npu_buf_append(b, "\"", 1);
    return;
  }
  npu_buf_puts(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': npu_buf_puts(b, "\\\""); break;
    case '\\': npu_buf_puts(b, "\\\\"); break;
    case '\n': npu_buf_puts(b, "\\n"); break;
    case '\t': npu_buf_puts(b, "\\t"); break;
    case '\r': npu_buf_puts(b, "\\r"); break;
    default:
      if (*p < 0x20)
        npu_buf_printf(b, "\\u%04x", *p);
      else
        npu_buf_printf(b, "%c", *p);
    }
  }
  npu_buf_puts(b, "\"");
}

void npu_json_key(struct npu_json *j, const char *key)
{
  NPU_ASSERT(j->depth > 0 && j->is_object[j->depth - 1] && !j->key_pending);
  if (j->count[j->depth - 1]++) npu_buf_puts(j->out, ",");
  indent(j);
  npu_json_quote(j->out, key);
  npu_buf_puts(j->out, ": ");
  j->key_pending = true;
}

void npu_json_string(struct npu_json *j, const char *s)
{
  before_value(j);
  npu_json_quote(j->out, s);
}

void npu_json_number(struct npu_json *j, double v)
{
  before_value(j);
  if (v != v || v - v != 0) { /* NaN or infinite */
    npu_buf_puts(j->out, "null");
    return;
  }
  char buf[64];
  npu_fmt_double(v, buf, sizeof buf);
  npu_buf_puts(j->out, buf);
}

void npu_json_int(struct npu_json *j, int64_t v)
{
  before_value(j);
  npu_buf_printf(j->out, "%" PRId64, v);
}

void npu_json_bool(struct npu_json *j, bool v)
{
  before_value(j);
  npu_buf_puts(j->out, v ? "true" : "false");
}

void npu_json_null(struct npu_json *j)
{
  before_value(j);
  npu_buf_puts(j->out, "null");
}

void npu_json_finish(struct npu_json *j)
{
  NPU_ASSERT(j->depth == 0 && !j->key_pending);
  npu_buf_puts(j->out, "\n");
}
