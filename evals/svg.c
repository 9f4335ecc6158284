/* SVG plots (see svg.h): axes with "nice" ticks, one polyline + markers per series, a legend on
 * the right. Text is XML-escaped; numbers are printed with %.2f so files are stable. */
#include "evals/svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

enum { W = 880, H = 440, ML = 70, MR = 300, MT = 44, MB = 56 };

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

static void esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            /* control characters are not allowed in XML 1.0 */
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n') fputc(*s, f);
        }
    }
}

/* A tick step of 1, 2 or 5 x 10^k giving about `want` intervals over span. */
static double nice_step(double span, int want) {
    if (!(span > 0)) return 1;
    double raw = span / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

static void fmt_tick(char *buf, size_t cap, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0;
    if (step >= 1 && fabs(v) < 1e9) snprintf(buf, cap, "%.0f", v);
    else {
        int dec = (int)ceil(-log10(step));
        if (dec > 6) dec = 6;
        snprintf(buf, cap, "%.*f", dec, v);
    }
}

char *flint_svg_render(const flint_svg_plot *p, const flint_svg_series *s, int n) {
    double xmin = p->xmin, xmax = p->xmax, ymin = p->ymin, ymax = p->ymax;
    if (xmin == xmax || ymin == ymax) {
        double dx0 = INFINITY, dx1 = -INFINITY, dy1 = -INFINITY;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < s[i].n; j++) {
                if (!isfinite(s[i].x[j]) || !isfinite(s[i].y[j])) continue;
                dx0 = fmin(dx0, s[i].x[j]);
                dx1 = fmax(dx1, s[i].x[j]);
                dy1 = fmax(dy1, s[i].y[j]);
            }
        if (!isfinite(dx0)) dx0 = 0, dx1 = 1, dy1 = 1;
        if (xmin == xmax) {
            xmin = p->x_integer ? dx0 : fmin(0, dx0);
            xmax = dx1 > xmin ? dx1 : xmin + 1;
            if (!p->x_integer) xmax += 0.12 * (xmax - xmin); /* room for point labels */
        }
        if (ymin == ymax) {
            ymin = 0;
            ymax = dy1 > 0 ? dy1 * 1.08 : 1;
        }
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int pw = W - ML - MR, ph = H - MT - MB;
#define PX(v) (ML + ((v) - xmin) / (xmax - xmin) * pw)
#define PY(v) (MT + ph - ((v) - ymin) / (ymax - ymin) * ph)
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<title>");
    esc(f, p->title);
    fprintf(f, "</title>\n<text x=\"%d\" y=\"24\" font-size=\"15\" font-weight=\"bold\">", ML);
    esc(f, p->title);
    fprintf(f, "</text>\n");
    /* grid and ticks */
    fprintf(f, "<g class=\"axes\" stroke=\"#cccccc\" stroke-width=\"1\">\n");
    double ys = nice_step(ymax - ymin, 6);
    double xs = p->x_integer ? fmax(1, nice_step(xmax - xmin, 8)) : nice_step(xmax - xmin, 6);
    for (double v = ceil(ymin / ys - 1e-9) * ys; v <= ymax + ys * 1e-9; v += ys)
        fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>\n", ML, PY(v), ML + pw, PY(v));
    for (double v = ceil(xmin / xs - 1e-9) * xs; v <= xmax + xs * 1e-9; v += xs)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>\n", PX(v), MT, PX(v), MT + ph);
    fprintf(f, "</g>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"black\"/>\n", ML,
            MT, pw, ph);
    char t[64];
    for (double v = ceil(ymin / ys - 1e-9) * ys; v <= ymax + ys * 1e-9; v += ys) {
        fmt_tick(t, sizeof t, v, ys);
        fprintf(f, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", ML - 6, PY(v) + 4, t);
    }
    for (double v = ceil(xmin / xs - 1e-9) * xs; v <= xmax + xs * 1e-9; v += xs) {
        fmt_tick(t, sizeof t, v, xs);
        fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", PX(v), MT + ph + 18, t);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", ML + pw / 2, H - 12);
    esc(f, p->xlabel);
    fprintf(f, "</text>\n<text x=\"16\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 16 %d)\">", MT + ph / 2,
            MT + ph / 2);
    esc(f, p->ylabel);
    fprintf(f, "</text>\n");
    /* series */
    for (int i = 0; i < n; i++) {
        const char *col = palette[s[i].color % 10];
        fprintf(f, "<g class=\"series\" data-name=\"");
        esc(f, s[i].name);
        fprintf(f, "\">\n");
        if (p->lines) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", col,
                    s[i].dashed ? " stroke-dasharray=\"6 4\"" : "");
            for (int j = 0, first = 1; j < s[i].n; j++) {
                if (!isfinite(s[i].x[j]) || !isfinite(s[i].y[j])) continue;
                fprintf(f, "%s%.2f,%.2f", first ? "" : " ", PX(s[i].x[j]), PY(s[i].y[j]));
                first = 0;
            }
            fprintf(f, "\"/>\n");
        }
        for (int j = 0; j < s[i].n; j++) {
            if (!isfinite(s[i].x[j]) || !isfinite(s[i].y[j])) continue;
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\"><title>", PX(s[i].x[j]), PY(s[i].y[j]),
                    s[i].dashed ? "white" : col);
            esc(f, s[i].name);
            fprintf(f, ": (%g, %.4g)</title></circle>\n", s[i].x[j], s[i].y[j]);
            if (s[i].dashed)
                fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"none\" stroke=\"%s\"/>\n", PX(s[i].x[j]),
                        PY(s[i].y[j]), col);
            if (s[i].labels && s[i].labels[j]) {
                fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"10\" fill=\"%s\">", PX(s[i].x[j]) + 5,
                        PY(s[i].y[j]) - 5, col);
                esc(f, s[i].labels[j]);
                fprintf(f, "</text>\n");
            }
        }
        fprintf(f, "</g>\n");
    }
    /* legend */
    fprintf(f, "<g class=\"legend\">\n");
    for (int i = 0; i < n; i++) {
        int y = MT + 10 + i * 20;
        const char *col = palette[s[i].color % 10];
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                ML + pw + 12, y, ML + pw + 36, y, col, s[i].dashed ? " stroke-dasharray=\"6 4\"" : "");
        fprintf(f, "<text x=\"%d\" y=\"%d\">", ML + pw + 42, y + 4);
        esc(f, s[i].name);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</g>\n</svg>\n");
#undef PX
#undef PY
    fclose(f);
    return buf;
}

int flint_svg_write(const char *path, const flint_svg_plot *p, const flint_svg_series *s, int n, flint_err *err) {
    char *svg = flint_svg_render(p, s, n);
    FILE *f = fopen(path, "w");
    if (!f) {
        free(svg);
        return flint_err_set(err, FLINT_ERR_IO, "cannot write %s", path);
    }
    int ok = fputs(svg, f) >= 0;
    ok &= fclose(f) == 0;
    free(svg);
    return ok ? 0 : flint_err_set(err, FLINT_ERR_IO, "writing %s failed", path);
}
