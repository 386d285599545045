/* chrome.c - Chrome trace JSON writer; see chrome.h. */
#include "report/chrome.h"

#include "common/json.h"

void rpt_chrome_write(const struct npu_trace *t, struct npu_buf *out)
{
  struct npu_json j;
  npu_json_init(&j, out);
  npu_json_object_begin(&j);
  npu_json_key(&j, "displayTimeUnit");
  npu_json_string(&j, "ns");
  npu_json_key(&j, "traceEvents");
  npu_json_array_begin(&j);
  for (size_t i = 0; i < t->ntracks; i++) {
    const struct npu_trace_track *k = &t->tracks[i];
    npu_json_object_begin(&j);
    npu_json_key(&j, "name");
    npu_json_string(&j, k->tid < 0 ? "process_name" : "thread_name");
    npu_json_key(&j, "ph");
    npu_json_string(&j, "M");
    npu_json_key(&j, "pid");
    npu_json_int(&j, k->pid);
    if (k->tid >= 0) {
      npu_json_key(&j, "tid");
      npu_json_int(&j, k->tid);
    }
    npu_json_key(&j, "args");
    npu_json_object_begin(&j);
    npu_json_key(&j, "name");
    npu_json_string(&j, k->name);
    npu_json_object_end(&j);
    npu_json_object_end(&j);
  }
  for (size_t i = 0; i < t->n; i++) {
    const struct npu_trace_event *e = &t->ev[i];
    npu_json_object_begin(&j);
    npu_json_key(&j, "name");
    npu_json_string(&j, e->name);
    npu_json_key(&j, "ph");
    npu_json_string(&j, "X");
    npu_json_key(&j, "ts");
    npu_json_number(&j, e->start_s * 1e6);
    npu_json_key(&j, "dur");
    npu_json_number(&j, e->dur_s * 1e6);
    npu_json_key(&j, "pid");
    npu_json_int(&j, e->pid);
    npu_json_key(&j, "tid");
    npu_json_int(&j, e->tid);
    npu_json_object_end(&j);
  }
  npu_json_array_end(&j);
  if (t->dropped) {
    npu_json_key(&j, "droppedEvents");
    npu_json_int(&j, (int64_t)t->dropped);
  }
  npu_json_object_end(&j);
  npu_json_finish(&j);
}
