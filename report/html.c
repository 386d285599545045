/*
 * html.c - the pieces of a self-contained HTML report page; see html.h.
 */
#include "report/html.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rpt_html_text(struct npu_buf *b, const char *s)
{
  for (; s && *s; s++) switch (*s) {
    case '&': npu_buf_puts(b, "&amp;"); break;
    case '<': npu_buf_puts(b, "&lt;"); break;
    case '>': npu_buf_puts(b, "&gt;"); break;
    case '"': npu_buf_puts(b, "&quot;"); break;
    case '\'': npu_buf_puts(b, "&#39;"); break;
    default: npu_buf_append(b, s, 1);
    }
}

void rpt_html_begin(struct npu_buf *b, const char *title)
{
  npu_buf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
  rpt_html_text(b, title);
  npu_buf_puts(b, "</title>\n<style>\n"
                  "body{font-family:sans-serif;margin:2em;max-width:70em;color:#222}\n"
                  "h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}\n"
                  "table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .8em;text-align:left}\n"
                  "th{border-bottom:1px solid #999}td.n{text-align:right;font-variant-numeric:tabular-nums}\n"
                  "table.facts td:first-child{color:#555}\n"
                  "svg text{font-family:sans-serif;font-size:12px}\n"
                  ".legend span{display:inline-block;margin-right:1.2em}"
                  ".legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em}\n"
                  "</style>\n</head>\n<body>\n<h1>");
  rpt_html_text(b, title);
  npu_buf_puts(b, "</h1>\n");
}

void rpt_html_end(struct npu_buf *b)
{
  npu_buf_puts(b, "<p style=\"color:#777;font-size:.85em\">Written by npusim (npusim run --html); "
                  "figures as in summary.json.</p>\n</body>\n</html>\n");
}

void rpt_html_heading(struct npu_buf *b, const char *text)
{
  npu_buf_puts(b, "<h2>");
  rpt_html_text(b, text);
  npu_buf_puts(b, "</h2>\n");
}

void rpt_html_para(struct npu_buf *b, const char *text)
{
  npu_buf_puts(b, "<p>");
  rpt_html_text(b, text);
  npu_buf_puts(b, "</p>\n");
}

void rpt_html_facts(struct npu_buf *b, const char *const *names, const char *const *values, int n)
{
  npu_buf_puts(b, "<table class=\"facts\">\n");
  for (int i = 0; i < n; i++) {
    npu_buf_puts(b, "<tr><td>");
    rpt_html_text(b, names[i]);
    npu_buf_puts(b, "</td><td>");
    rpt_html_text(b, values[i]);
    npu_buf_puts(b, "</td></tr>\n");
  }
  npu_buf_puts(b, "</table>\n");
}

void rpt_html_table_begin(struct npu_buf *b, const char *const *head, int ncols)
{
  npu_buf_puts(b, "<table>\n<tr>");
  for (int i = 0; i < ncols; i++) {
    npu_buf_puts(b, "<th>");
    rpt_html_text(b, head[i]);
    npu_buf_puts(b, "</th>");
  }
  npu_buf_puts(b, "</tr>\n");
}

/* A cell that reads as a number (with a unit after it: "12.5 ms", "41%") is right-aligned. */
static bool numeric(const char *s)
{
  if (!s || !*s) return false;
  if (*s == '-' || *s == '+') s++;
  return *s >= '0' && *s <= '9';
}

void rpt_html_row(struct npu_buf *b, const char *const *cells, int ncols)
{
  npu_buf_puts(b, "<tr>");
  for (int i = 0; i < ncols; i++) {
    npu_buf_puts(b, numeric(cells[i]) ? "<td class=\"n\">" : "<td>");
    rpt_html_text(b, cells[i]);
    npu_buf_puts(b, "</td>");
  }
  npu_buf_puts(b, "</tr>\n");
}

void rpt_html_table_end(struct npu_buf *b)
{
  npu_buf_puts(b, "</table>\n");
}

/* Distinct colours, by series index (cycled). */
static const char *const palette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
                                      "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#8c564b", "#17becf", "#7f7f7f"};
#define NPALETTE (sizeof palette / sizeof palette[0])

void rpt_html_bars(struct npu_buf *b, const struct rpt_html_chart *c)
{
  const double label_w = 110, bar_w = 560, row_h = 22, total_w = 110;
  double full = c->full;
  if (full <= 0)
    for (int r = 0; r < c->nrows; r++) {
      double t = 0;
      for (int s = 0; s < c->nseries; s++) t += c->values[r * c->nseries + s];
      full = t > full ? t : full;
    }
  if (c->mark > full) full = c->mark;
  if (!(full > 0)) full = 1;
  double h = c->nrows * row_h + (c->mark > 0 ? 18 : 4);
  npu_buf_printf(b, "<svg width=\"%.0f\" height=\"%.0f\" role=\"img\">\n", label_w + bar_w + total_w, h);
  for (int r = 0; r < c->nrows; r++) {
    double y = r * row_h + (c->mark > 0 ? 14 : 0), x = label_w, t = 0;
    npu_buf_printf(b, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", label_w - 6, y + 15);
    rpt_html_text(b, c->rows[r]);
    npu_buf_puts(b, "</text>\n");
    for (int s = 0; s < c->nseries; s++) {
      double v = c->values[r * c->nseries + s];
      if (!(v > 0)) continue;
      double w = bar_w * v / full;
      npu_buf_printf(b, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\"><title>", x, y + 3, w,
                     row_h - 6, palette[(size_t)s % NPALETTE]);
      rpt_html_text(b, c->series[s]);
      npu_buf_printf(b, ": %.4g %s</title></rect>\n", v * c->scale, c->unit);
      x += w;
      t += v;
    }
    npu_buf_printf(b, "<text x=\"%.2f\" y=\"%.1f\">%.4g %s</text>\n", x + 6, y + 15, t * c->scale, c->unit);
  }
  if (c->mark > 0) {
    double x = label_w + bar_w * c->mark / full;
    npu_buf_printf(b, "<line x1=\"%.2f\" y1=\"12\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/>\n",
                   x, x, h);
    npu_buf_printf(b, "<text x=\"%.2f\" y=\"10\" text-anchor=\"middle\" fill=\"#c00\">", x);
    rpt_html_text(b, c->mark_label ? c->mark_label : "");
    npu_buf_puts(b, "</text>\n");
  }
  npu_buf_puts(b, "</svg>\n<div class=\"legend\">");
  for (int s = 0; s < c->nseries; s++) {
    bool any = false;
    for (int r = 0; r < c->nrows && !any; r++) any = c->values[r * c->nseries + s] > 0;
    if (!any) continue;
    npu_buf_printf(b, "<span><i style=\"background:%s\"></i>", palette[(size_t)s % NPALETTE]);
    rpt_html_text(b, c->series[s]);
    npu_buf_puts(b, "</span>");
  }
  npu_buf_puts(b, "</div>\n");
}

void rpt_html_pre(struct npu_buf *b, const char *text)
{
  npu_buf_puts(b, "<pre>");
  rpt_html_text(b, text);
  npu_buf_puts(b, "</pre>\n");
}

/* The range [lo, hi] of v[0..n), widened when flat. */
static void range(const double *v, int n, double *lo, double *hi)
{
  *lo = *hi = n ? v[0] : 0;
  for (int i = 1; i < n; i++) {
    *lo = v[i] < *lo ? v[i] : *lo;
    *hi = v[i] > *hi ? v[i] : *hi;
  }
  if (*hi - *lo <= 1e-12 * (fabs(*hi) + 1)) {
    *lo -= fabs(*lo) * 0.05 + 0.5;
    *hi += fabs(*hi) * 0.05 + 0.5;
  }
}

void rpt_html_scatter(struct npu_buf *b, const struct rpt_html_scatter *s)
{
  const double left = 80, right = 20, top = 16, bottom = 46, w = 640, h = 360;
  double x0, x1, y0, y1;
  range(s->x, s->n, &x0, &x1);
  range(s->y, s->n, &y0, &y1);
  double pw = w - left - right, ph = h - top - bottom;
#define SX(v) (left + pw * ((v) - x0) / (x1 - x0))
#define SY(v) (top + ph * (1 - ((v) - y0) / (y1 - y0)))
  npu_buf_printf(b, "<svg width=\"%.0f\" height=\"%.0f\" role=\"img\">\n", w, h);
  npu_buf_printf(b, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#999\"/>\n", left,
                 top, pw, ph);
  for (int k = 0; k <= 4; k++) {
    double xv = x0 + (x1 - x0) * k / 4, yv = y0 + (y1 - y0) * k / 4;
    npu_buf_printf(b, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.4g</text>\n", SX(xv), top + ph + 16, xv);
    npu_buf_printf(b, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n", left - 6, SY(yv) + 4, yv);
  }
  npu_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">", left + pw / 2, h - 8);
  rpt_html_text(b, s->xlabel);
  npu_buf_printf(b, "</text>\n<text x=\"14\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 14 %.0f)\">",
                 top + ph / 2, top + ph / 2);
  rpt_html_text(b, s->ylabel);
  npu_buf_puts(b, "</text>\n");
  /* the marked points joined in x order */
  int *order = calloc((size_t)s->n + 1, sizeof *order), nm = 0;
  for (int i = 0; i < s->n; i++)
    if (s->mark && s->mark[i]) {
      int j = nm++;
      while (j > 0 && s->x[order[j - 1]] > s->x[i]) order[j] = order[j - 1], j--;
      order[j] = i;
    }
  if (nm > 1) {
    npu_buf_puts(b, "<polyline fill=\"none\" stroke=\"#e15759\" points=\"");
    for (int k = 0; k < nm; k++) npu_buf_printf(b, "%s%.1f,%.1f", k ? " " : "", SX(s->x[order[k]]), SY(s->y[order[k]]));
    npu_buf_puts(b, "\"/>\n");
  }
  free(order);
  for (int pass = 0; pass < 2; pass++) /* grey points first, marked ones on top */
    for (int i = 0; i < s->n; i++) {
      bool m = s->mark && s->mark[i];
      if (m != (pass == 1)) continue;
      npu_buf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>", SX(s->x[i]), SY(s->y[i]),
                     m ? "5" : "3", m ? "#e15759" : "#9aa");
      if (s->labels) rpt_html_text(b, s->labels[i]);
      npu_buf_printf(b, " (%.4g, %.4g)</title></circle>\n", s->x[i], s->y[i]);
    }
  npu_buf_puts(b, "</svg>\n");
#undef SX
#undef SY
}
