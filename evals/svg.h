/* Small self-contained SVG line and scatter plots for the eval, ab and bench reports: no plotting
 * library, no fonts to install, viewable in a browser and on GitHub, well-formed XML (tests parse
 * it). NaN points are left out. */
#ifndef FLINT_EVALS_SVG_H
#define FLINT_EVALS_SVG_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flint_svg_series {
    const char *name;
    int n;
    const double *x, *y;
    int color;                 /* palette index (cycles) */
    int dashed;
    const char *const *labels; /* optional text beside each point */
} flint_svg_series;

typedef struct flint_svg_plot {
    const char *title, *xlabel, *ylabel;
    double xmin, xmax, ymin, ymax; /* min == max: fitted to the data (y from 0) */
    int x_integer;                 /* ticks on whole numbers only */
    int lines;                     /* 1: connect points; 0: points only */
} flint_svg_plot;

/* Render into a malloc'd string. */
char *flint_svg_render(const flint_svg_plot *p, const flint_svg_series *s, int n);
int flint_svg_write(const char *path, const flint_svg_plot *p, const flint_svg_series *s, int n, flint_err *err);

#ifdef __cplusplus
}
#endif
#endif
