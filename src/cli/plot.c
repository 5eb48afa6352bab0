/* plot.c — `zero plot METRICS.jsonl... -o OUT.svg|.png|.pdf`: the curves of one or more runs'
 * metrics logs (--metrics), overlaid for comparison, drawn with cairo.
 *
 * Four panels against the optimizer step: training loss (with the validation loss dashed, its
 * points marked), learning rate, gradient norm (logarithmic: it falls by orders of magnitude
 * in the first steps) and tokens/s. One colour per file, named in the legend. A last line cut
 * short (a log still being written, or a crash) is left out; any other line that is not a
 * metrics record fails, naming the file and the line.
 */
#include "cli/cli.h"
#include "core/core_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ZERO_HAVE_CAIRO
#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>

enum { SERIES_LOSS, SERIES_VAL, SERIES_LR, SERIES_NORM, SERIES_TOKS, SERIES_COUNT };
enum { MAX_RUNS = 8 };

typedef struct {
    double *x, *y;
    int n, cap;
} series_t;

typedef struct {
    const char *path, *label;
    series_t s[SERIES_COUNT];
} run_t;

static const double palette[MAX_RUNS][3] = {
    {0.12, 0.47, 0.71}, {0.84, 0.15, 0.16}, {0.17, 0.63, 0.17}, {0.58, 0.40, 0.74},
    {1.00, 0.50, 0.05}, {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50}};

static int push(series_t *s, double x, double y) {
    if (!isfinite(x) || !isfinite(y)) return 0;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (!nx) return -1;
        s->x = nx;
        double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (!ny) return -1;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
    return 0;
}

static double number(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Read one metrics log into r; 1 on failure (said on stderr). */
static int read_log(run_t *r) {
    FILE *f = fopen(r->path, "r");
    if (!f) {
        fprintf(stderr, "zero plot: cannot read %s: %s\n", r->path, strerror(errno));
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, bad = 0, records = 0;
    while (!bad && (len = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (line[len - 1] != '\n' && feof(f)) break; /* cut short: being written, or a crash */
        cJSON *o = cJSON_Parse(line);
        const double step = number(o, "step");
        if (!cJSON_IsObject(o) || !isfinite(step)) {
            fprintf(stderr,
                    "zero plot: %s:%d is not a metrics record (expected one JSON object with "
                    "\"step\" per line, as zero train --metrics writes)\n",
                    r->path, lineno);
            bad = 1;
        } else {
            const char *keys[SERIES_COUNT] = {"loss", "val_loss", "lr", "grad_norm",
                                              "tokens_per_s"};
            for (int k = 0; k < SERIES_COUNT && !bad; k++) {
                double v = number(o, keys[k]);
                if (k == SERIES_NORM && !(v > 0)) continue; /* a log axis */
                if (push(&r->s[k], step, v)) {
                    fprintf(stderr, "zero plot: out of memory reading %s\n", r->path);
                    bad = 1;
                }
            }
            records++;
        }
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
    if (!bad && records == 0) {
        fprintf(stderr,
                "zero plot: %s holds no metrics record (expected zero train --metrics "
                "output)\n",
                r->path);
        bad = 1;
    }
    return bad;
}

/* ---------------------------------------------------------------------------------- axes */

typedef struct {
    double x0, y0, w, h;           /* the plot area on the page */
    double xmin, xmax, ymin, ymax; /* data range (ymin, ymax: log10 of it on a log axis) */
    int ylog;
} panel_t;

static double px(const panel_t *p, double x) {
    return p->x0 + (x - p->xmin) / (p->xmax - p->xmin) * p->w;
}
static double py(const panel_t *p, double y) {
    double v = p->ylog ? log10(y) : y;
    return p->y0 + p->h - (v - p->ymin) / (p->ymax - p->ymin) * p->h;
}

/* A "nice" tick step (1, 2 or 5 x 10^k) for about `ticks` intervals over span. */
static double nice_step(double span, int ticks) {
    double raw = span / ticks, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static void label(cairo_t *cr, double x, double y, const char *text, double align_x,
                  double align_y) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, text, &e);
    cairo_move_to(cr, x - align_x * e.width - e.x_bearing, y - align_y * e.height - e.y_bearing);
    cairo_show_text(cr, text);
}

/* 0.0025, 1e-05, 950, 12.5k, 3.2M: short, and distinct for ticks of a nice step */
static void tick_text(char *buf, size_t n, double v) {
    const double a = fabs(v);
    if (a >= 1e6)
        snprintf(buf, n, "%.4gM", v / 1e6);
    else if (a >= 1e4)
        snprintf(buf, n, "%.4gk", v / 1e3);
    else if (a != 0 && a < 1e-3)
        snprintf(buf, n, "%.2g", v);
    else
        snprintf(buf, n, "%.4g", v);
}

static void draw_axes(cairo_t *cr, const panel_t *p, const char *title) {
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, p->x0, p->y0, p->w, p->h);
    cairo_stroke(cr);
    cairo_set_font_size(cr, 13);
    label(cr, p->x0 + p->w / 2, p->y0 - 8, title, 0.5, 1);
    cairo_set_font_size(cr, 10);
    char buf[32];
    const double xs = nice_step(p->xmax - p->xmin, 6);
    for (double x = ceil(p->xmin / xs) * xs; x <= p->xmax + 1e-9 * xs; x += xs) {
        cairo_move_to(cr, px(p, x), p->y0 + p->h);
        cairo_line_to(cr, px(p, x), p->y0 + p->h + 4);
        cairo_stroke(cr);
        tick_text(buf, sizeof buf, x);
        label(cr, px(p, x), p->y0 + p->h + 7, buf, 0.5, 0);
    }
    label(cr, p->x0 + p->w / 2, p->y0 + p->h + 22, "step", 0.5, 0);
    const double ys = p->ylog ? 1 : nice_step(p->ymax - p->ymin, 5);
    for (double v = ceil(p->ymin / ys) * ys; v <= p->ymax + 1e-9 * ys; v += ys) {
        const double y = p->ylog ? pow(10, v) : v;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, p->x0, py(p, y));
        cairo_line_to(cr, p->x0 + p->w, py(p, y));
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        tick_text(buf, sizeof buf, y);
        label(cr, p->x0 - 5, py(p, y), buf, 1, 0.5);
    }
}

/* The panel's data range over every run's series a and (b >= 0) b; 0 when no point. */
static int range(panel_t *p, const run_t *runs, int nruns, int a, int b) {
    int any = 0;
    p->xmin = p->ymin = INFINITY;
    p->xmax = p->ymax = -INFINITY;
    for (int r = 0; r < nruns; r++)
        for (int k = a; k >= 0; k = k == a && b >= 0 ? b : -1)
            for (int i = 0; i < runs[r].s[k].n; i++) {
                const double x = runs[r].s[k].x[i], y = runs[r].s[k].y[i];
                const double v = p->ylog ? log10(y) : y;
                p->xmin = fmin(p->xmin, x), p->xmax = fmax(p->xmax, x);
                p->ymin = fmin(p->ymin, v), p->ymax = fmax(p->ymax, v);
                any = 1;
            }
    if (!any) return 0;
    if (p->xmax == p->xmin) p->xmin -= 0.5, p->xmax += 0.5;
    if (p->ymax == p->ymin) p->ymin -= 0.5, p->ymax += 0.5;
    const double pad = 0.05 * (p->ymax - p->ymin);
    p->ymin -= pad, p->ymax += pad;
    if (p->ylog) p->ymin = floor(p->ymin), p->ymax = ceil(p->ymax);
    return 1;
}

static void draw_series(cairo_t *cr, const panel_t *p, const series_t *s, const double rgb[3],
                        int dashed) {
    if (s->n == 0) return;
    cairo_save(cr);
    cairo_rectangle(cr, p->x0, p->y0, p->w, p->h);
    cairo_clip(cr);
    cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
    cairo_set_line_width(cr, 1.5);
    const double dash[] = {6, 3};
    cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
    for (int i = 0; i < s->n; i++)
        (i ? cairo_line_to : cairo_move_to)(cr, px(p, s->x[i]), py(p, s->y[i]));
    cairo_stroke(cr);
    if (dashed) /* the few validation points, marked */
        for (int i = 0; i < s->n; i++) {
            cairo_arc(cr, px(p, s->x[i]), py(p, s->y[i]), 3, 0, 2 * M_PI);
            cairo_fill(cr);
        }
    cairo_restore(cr);
}

static void draw(cairo_t *cr, const run_t *runs, int nruns, double W, double H) {
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    /* legend: one colour per file */
    cairo_set_font_size(cr, 12);
    double lx = 70;
    for (int r = 0; r < nruns; r++) {
        cairo_set_source_rgb(cr, palette[r][0], palette[r][1], palette[r][2]);
        cairo_rectangle(cr, lx, 14, 18, 4);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_text_extents_t e;
        cairo_text_extents(cr, runs[r].label, &e);
        label(cr, lx + 24, 16, runs[r].label, 0, 0.5);
        lx += 24 + e.x_advance + 24;
    }
    const struct {
        const char *title;
        int a, b, ylog;
    } panels[4] = {{"loss (dashed, dots: validation)", SERIES_LOSS, SERIES_VAL, 0},
                   {"learning rate", SERIES_LR, -1, 0},
                   {"gradient norm (before clipping; log scale)", SERIES_NORM, -1, 1},
                   {"tokens/s (the run's average so far)", SERIES_TOKS, -1, 0}};
    const double top = 60, gap_x = 90, gap_y = 80, left = 70, right = 30, bottom = 50;
    const double pw = (W - left - right - gap_x) / 2, ph = (H - top - bottom - gap_y) / 2;
    for (int k = 0; k < 4; k++) {
        panel_t p = {left + (k % 2) * (pw + gap_x),
                     top + (k / 2) * (ph + gap_y),
                     pw,
                     ph,
                     0,
                     0,
                     0,
                     0,
                     panels[k].ylog};
        if (!range(&p, runs, nruns, panels[k].a, panels[k].b)) continue;
        draw_axes(cr, &p, panels[k].title);
        for (int r = 0; r < nruns; r++) {
            draw_series(cr, &p, &runs[r].s[panels[k].a], palette[r], 0);
            if (panels[k].b >= 0) draw_series(cr, &p, &runs[r].s[panels[k].b], palette[r], 1);
        }
    }
}

/* Draw into out (by its extension) through out.tmp and a rename: 1 on failure (said). */
static int render(const char *out, const run_t *runs, int nruns, double W, double H) {
    const char *ext = strrchr(out, '.');
    const int svg = ext && !strcmp(ext, ".svg"), png = ext && !strcmp(ext, ".png"),
              pdf = ext && !strcmp(ext, ".pdf");
    if (!svg && !png && !pdf) {
        fprintf(stderr,
                "zero plot: -o %s: unknown format (expected a name ending in .svg, .png "
                "or .pdf)\n",
                out);
        return 2;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    cairo_surface_t *s = svg   ? cairo_svg_surface_create(tmp, W, H)
                         : pdf ? cairo_pdf_surface_create(tmp, W, H)
                               : cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)W, (int)H);
    cairo_t *cr = cairo_create(s);
    draw(cr, runs, nruns, W, H);
    cairo_status_t cs = cairo_status(cr);
    cairo_destroy(cr);
    if (png && cs == CAIRO_STATUS_SUCCESS) cs = cairo_surface_write_to_png(s, tmp);
    cairo_surface_finish(s);
    if (cs == CAIRO_STATUS_SUCCESS) cs = cairo_surface_status(s);
    cairo_surface_destroy(s);
    cairo_debug_reset_static_data(); /* cairo's caches, so a leak checker sees only ours */
    if (cs != CAIRO_STATUS_SUCCESS || rename(tmp, out) != 0) {
        fprintf(stderr, "zero plot: cannot write %s: %s\n", out,
                cs != CAIRO_STATUS_SUCCESS ? cairo_status_to_string(cs) : strerror(errno));
        remove(tmp);
        return 1;
    }
    return 0;
}
#endif /* ZERO_HAVE_CAIRO */

static void usage(FILE *f) {
    fprintf(f, "usage: zero plot METRICS.jsonl... -o OUT.svg|OUT.png|OUT.pdf [--width W] "
               "[--height H]\n\n"
               "Draws the training loss (and validation loss), learning rate, gradient norm and "
               "tokens/s\nagainst the step from `zero train --metrics` logs, one colour per file "
               "(at most 8).\nWidth and height in pixels (PNG) or points (SVG, PDF); default "
               "1200 x 800.\n");
}

int zero__cli_plot(int argc, char **argv) {
    const char *files[8], *out = NULL;
    int nfiles = 0;
    double W = 1200, H = 800;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "-o")) ||
                   (v = zero__cli_arg_value(argc, argv, &i, "--output"))) {
            if (!*v) {
                fprintf(stderr, "zero plot: -o needs a file name (OUT.svg, .png or .pdf)\n");
                return 2;
            }
            out = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--width"))) {
            if (!zero__cli_number("zero plot", "--width", v, 200, 1, &W)) return 2;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--height"))) {
            if (!zero__cli_number("zero plot", "--height", v, 200, 1, &H)) return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "zero plot: unknown option '%s' (try `zero plot --help`)\n", argv[i]);
            return 2;
        } else if (nfiles == 8) {
            fprintf(stderr, "zero plot: at most 8 metrics logs at once\n");
            return 2;
        } else {
            files[nfiles++] = argv[i];
        }
    }
    if (!nfiles || !out) {
        usage(stderr);
        return 2;
    }
#ifdef ZERO_HAVE_CAIRO
    run_t runs[MAX_RUNS] = {0};
    int rc = 0;
    for (int r = 0; r < nfiles && !rc; r++) {
        runs[r].path = files[r];
        const char *slash = strrchr(files[r], '/');
        runs[r].label = slash ? slash + 1 : files[r];
        rc = read_log(&runs[r]);
    }
    if (!rc) rc = render(out, runs, nfiles, W, H);
    for (int r = 0; r < nfiles; r++)
        for (int k = 0; k < SERIES_COUNT; k++) free(runs[r].s[k].x), free(runs[r].s[k].y);
    if (!rc) printf("zero plot: %s (%d run%s)\n", out, nfiles, nfiles == 1 ? "" : "s");
    return rc;
#else
    fprintf(stderr, "zero plot: this zero was built without cairo (install libcairo2-dev and "
                    "rebuild)\n");
    return 1;
#endif
}
