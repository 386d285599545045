/* chrome.c - Chrome trace JSON formatting; see chrome.h. */
#include "report/chrome.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/json.h"

void rpt_chrome_us(struct npu_buf *b, double seconds)
{
  double ps = seconds * 1e12;
  if (!(fabs(ps) < 9e18)) { /* beyond int64 picoseconds (about 100 days), or not a number */
    npu_buf_puts(b, ps == ps ? (ps > 0 ? "1e300" : "-1e300") : "0");
    return;
  }
  int64_t v = llround(ps);
  char s[32];
  const char *sign = v < 0 ? "-" : "";
  uint64_t a = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
  int n = snprintf(s, sizeof s, "%s%" PRIu64 ".%06" PRIu64, sign, a / 1000000, a % 1000000);
  npu_buf_append(b, s, (size_t)n);
}

void rpt_chrome_event(struct npu_buf *b, const struct npu_trace_event *e)
{
  npu_buf_puts(b, "{\"name\":");
  npu_json_quote(b, e->name);
  switch (e->ph) {
  case 'C': /* a counter: its value under the counter's name */
    npu_buf_puts(b, ",\"ph\":\"C\",\"ts\":");
    rpt_chrome_us(b, e->start_s);
    npu_buf_printf(b, ",\"pid\":%d,\"args\":{", e->pid);
    npu_json_quote(b, e->name);
    npu_buf_printf(b, ":%.6g}}", e->value);
    return;
  case 's':
  case 'f': /* a flow arrow's ends; the finish binds to the slice that encloses it */
    npu_buf_printf(b, ",\"cat\":\"flow\",\"ph\":\"%c\",\"id\":%llu,\"ts\":", e->ph, e->id);
    rpt_chrome_us(b, e->start_s);
    npu_buf_printf(b, ",\"pid\":%d,\"tid\":%d%s}", e->pid, e->tid, e->ph == 'f' ? ",\"bp\":\"e\"" : "");
    return;
  default:
    npu_buf_puts(b, ",\"ph\":\"X\",\"ts\":");
    rpt_chrome_us(b, e->start_s);
    npu_buf_puts(b, ",\"dur\":");
    rpt_chrome_us(b, e->dur_s);
    npu_buf_printf(b, ",\"pid\":%d,\"tid\":%d", e->pid, e->tid);
    if (e->args) {
      npu_buf_puts(b, ",\"args\":");
      npu_buf_puts(b, e->args);
    }
    npu_buf_puts(b, "}");
  }
}

void rpt_chrome_track(struct npu_buf *b, const struct npu_trace_track *k)
{
  npu_buf_printf(b, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d", k->tid < 0 ? "process_name" : "thread_name", k->pid);
  if (k->tid >= 0) npu_buf_printf(b, ",\"tid\":%d", k->tid);
  npu_buf_puts(b, ",\"args\":{\"name\":");
  npu_json_quote(b, k->name);
  npu_buf_puts(b, "}}");
}

void rpt_chrome_write(const struct npu_trace *t, struct npu_buf *out)
{
  npu_buf_puts(out, RPT_CHROME_HEAD);
  size_t n = 0;
  for (size_t i = 0; i < t->ntracks; i++, n++) {
    if (n) npu_buf_puts(out, ",\n");
    rpt_chrome_track(out, &t->tracks[i]);
  }
  for (size_t i = 0; i < t->n; i++, n++) {
    if (n) npu_buf_puts(out, ",\n");
    rpt_chrome_event(out, &t->ev[i]);
  }
  npu_buf_puts(out, RPT_CHROME_TAIL);
}
