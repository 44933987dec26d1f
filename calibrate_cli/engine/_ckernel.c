/*
 * calibrate_cli.engine._ckernel: the compiled CPU engine ("fused") of calib's summary pass, in plain
 * C99 (Python C API and the buffer protocol, no numpy headers). Scalar loops, no intrinsics; exp and log
 * are the C library's (a row's exps by glibc's vector exp where GCC builds on glibc: exp_row). Imported
 * by calibrate_cli/engine/native.py only, which makes the arrays what these loops read.
 *
 *   fused_rows(scores, labels, is_logits, m, edges, want_top5, classwise, top_label_only,
 *              conf, correct, nll, brier, top5, count, sum_p, sum_y)
 *       one row chunk of the summary pass (kernels.numpy_chunk's definition), each row read once:
 *       p = softmax(x) (or the given probabilities), conf = max p, correct = [argmax p = y] (lowest
 *       index on ties), nll = log Σ e^{x − max} − (x_y − max) (−log p_y), brier = Σ (p − [k = y])²,
 *       top5 = [rank of y < 5] (on the logits themselves), and per (class, bin) count, Σp, Σ[y = k]
 *       over the edges b/M (bin 0 closed). top_label_only: conf and correct alone.
 *   nll_rows(scores, labels, beta, out)
 *       out += Σ_i (log Σ e^{β d_i} − β d_iy, E[d_i] − d_iy, Var[d_i]) with d = x − max (the Newton
 *       pass of the exact NLL temperature fit, calibrators/temperature.py's _nll_pass).
 *   bin_sums_1d(values, targets, edges, uniform, lowest_closed, count, sum_conf, sum_correct)
 *       per-bin count, Σvalue, Σtarget of 1-D samples (binning.add_bin_sums), in sample order.
 *   spread_unit(conf, correct, g, out), ks_sorted(conf, correct)
 *       SmoothECE's spreading of (conf − correct, 1) onto the grid j/(g − 1) (smooth_ece._Grids.spread_unit)
 *       and KS-CE's max |Σ_{j ≤ i} (conf_j − correct_j)| at the ends of runs of ties (sorting.ks_from_sorted).
 *   bucket_counts(values, lo, hi, scale, counts), bucket_gather(values, lo, hi, scale, gather, span,
 *              members, low, high)
 *       the two passes of sorting.order_statistics (exact selection of a few order statistics).
 *
 * Sums are float64, added in index order: results are the same for any chunking of the rows (each
 * row's values depend on that row only), and agree with the numpy definition within
 * tests/libm.py's contract (numpy sums pairwise and may use its own SIMD exp).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---------- exp of a row ---------- */

/* e[j] = exp(a·(x[j] − mx)) for j < k. With GCC on x86-64 glibc the loop is vectorised (setup.py's
 * -fopenmp-simd) into calls of glibc's own vector exp (libmvec's _ZGVbN2v_exp, two lanes, SSE2; within
 * 4 ulps of exp, documented by glibc), about twice as fast as the scalar calls; elsewhere it is the
 * scalar exp. The values depend on the row alone, not on its neighbours or the chunking. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && defined(CALIB_VECTOR_EXP)
#pragma omp declare simd notinbranch
extern double exp(double);
#endif

static void
exp_row(const double *x, double mx, double a, double *e, Py_ssize_t k)
{
#pragma omp simd
    for (Py_ssize_t j = 0; j < k; j++) {
        e[j] = exp(a * (x[j] - mx));
    }
}

/* ---------- buffers ---------- */

typedef struct {
    Py_buffer v[16];
    int n;
} Views;

static void
release(Views *s)
{
    for (int i = 0; i < s->n; i++) {
        PyBuffer_Release(&s->v[i]);
    }
    s->n = 0;
}

/* 'f' float32, 'd' float64, 'q' int64, '?' bool, or 0. */
static char
kind_of(const Py_buffer *b)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') {
        f++;
    }
    if (f[0] == '\0' || f[1] != '\0') {
        return 0;
    }
    switch (f[0]) {
    case 'f':
        return b->itemsize == 4 ? 'f' : 0;
    case 'd':
        return b->itemsize == 8 ? 'd' : 0;
    case 'l':
    case 'q':
        return b->itemsize == 8 ? 'q' : 0;
    case '?':
        return b->itemsize == 1 ? '?' : 0;
    default:
        return 0;
    }
}

/* A C-contiguous buffer of `o` with `ndim` dimensions, of a kind in `kinds`, of length `len0` along
 * axis 0 (any when < 0); NULL with TypeError/ValueError set. Released with the other views. */
static Py_buffer *
take(Views *s, PyObject *o, const char *name, const char *kinds, int ndim, Py_ssize_t len0, int writable)
{
    Py_buffer *b = &s->v[s->n];
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected a %sC-contiguous array", name, writable ? "writable " : "");
        return NULL;
    }
    s->n++;
    char kind = kind_of(b);
    if (!kind || !strchr(kinds, kind)) {
        PyErr_Format(PyExc_TypeError, "%s: unexpected element format %.20s", name, b->format ? b->format : "B");
        return NULL;
    }
    if (b->ndim != ndim || (len0 >= 0 && b->shape[0] != len0)) {
        PyErr_Format(PyExc_ValueError, "%s: unexpected shape", name);
        return NULL;
    }
    return b;
}

/* Row i of float32/float64 scores as float64: a pointer into the scores, or `buf` filled. */
static inline const double *
row_at(const void *scores, int f32, Py_ssize_t i, Py_ssize_t k, double *buf)
{
    if (!f32) {
        return (const double *)scores + i * k;
    }
    const float *r = (const float *)scores + i * k;
    for (Py_ssize_t j = 0; j < k; j++) {
        buf[j] = (double)r[j];
    }
    return buf;
}

/* The first row whose label is outside [0, k), or −1. */
static Py_ssize_t
bad_label(const int64_t *labels, Py_ssize_t rows, Py_ssize_t k)
{
    for (Py_ssize_t i = 0; i < rows; i++) {
        if (labels[i] < 0 || labels[i] >= k) {
            return i;
        }
    }
    return -1;
}

/* ---------- bins ---------- */

/* The bin (b/M, (b+1)/M] of v for the edges b/M: ⌈v·M⌉ − 1, moved by one where it disagrees with
 * the edges themselves (binning.assign_bins compares with the edges), clamped to [−1, M − 1]; −1 is
 * below the lowest edge (or v = edges[0]). NaN lands in bin −1 or M − 1 (refused before). */
static inline Py_ssize_t
uniform_bin(double v, Py_ssize_t m, const double *edges)
{
    const double t = v * (double)m;
    Py_ssize_t b = 0;
    if (t >= (double)m) {
        b = m - 1;
    }
    else if (t > 0.0) { /* ⌈t⌉ − 1 without a call of ceil */
        b = (Py_ssize_t)t;
        b -= (double)b == t && b > 0;
    }
    if (v <= edges[b]) {
        b -= 1;
    }
    else if (b + 1 < m && v > edges[b + 1]) {
        b += 1;
    }
    return b;
}

/* #{j : edges[j] < v} − 1 (numpy's searchsorted side="left", minus one): counted without branches
 * for few edges (bisection's branches are unpredictable), else by bisection. */
static inline Py_ssize_t
search_bin(double v, Py_ssize_t m, const double *edges)
{
    if (m < 64) {
        Py_ssize_t below = 0;
        for (Py_ssize_t j = 0; j <= m; j++) {
            below += edges[j] < v;
        }
        return below - 1;
    }
    Py_ssize_t lo = 0, hi = m + 1;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        if (edges[mid] < v) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    return lo - 1;
}

/* ---------- fused_rows ---------- */

typedef struct {
    Py_ssize_t rows, k, m;
    int f32, is_logits, want_top5, classwise, top_label_only;
    const void *scores;
    const int64_t *labels;
    const double *edges;
    double *conf, *nll, *brier, *sum_p, *sum_y;
    unsigned char *correct, *top5;
    int64_t *count;
    double *buf, *p; /* scratch rows of K */
    double *low_sum;  /* the cells (j, 0) of the classwise sums, contiguous in j (scratch of K) */
    int64_t *low_count;
} Fused;

static void
fused_loop(Fused *f)
{
    /* every field in a local: stores into the outputs cannot then alias them (Python builds with
     * -fno-strict-aliasing), so they stay in registers */
    const Py_ssize_t k = f->k, m = f->m, rows = f->rows;
    const int is_logits = f->is_logits, f32 = f->f32, want_top5 = f->want_top5, classwise = f->classwise;
    const int top_label_only = f->top_label_only;
    const void *scores = f->scores;
    const int64_t *restrict labels = f->labels;
    const double *restrict edges = f->edges;
    double *restrict conf_out = f->conf, *restrict nll = f->nll, *restrict brier = f->brier;
    double *restrict sum_p = f->sum_p, *restrict sum_y = f->sum_y, *restrict buf = f->buf, *restrict p = f->p;
    unsigned char *restrict correct = f->correct, *restrict top5 = f->top5;
    int64_t *restrict count = f->count;
    double *restrict low_sum = f->low_sum;
    int64_t *restrict low_count = f->low_count;
    /* most probabilities fall in the lowest bin [0, edges[1]): its cells are kept contiguous in j (one
     * vectorisable pass a row), and start from, and go back to, the cells (j, 0): the same additions in
     * the same order as adding each into its cell */
    const double low_edge = m > 1 ? edges[1] : 2.0;
    const int split_low = classwise && !top_label_only && k >= 32; /* few classes: each into its cell */
    if (split_low) {
        for (Py_ssize_t j = 0; j < k; j++) {
            low_sum[j] = sum_p[j * m];
            low_count[j] = count[j * m];
        }
    }
    for (Py_ssize_t i = 0; i < rows; i++) {
        const double *x = row_at(scores, f32, i, k, buf);
        const int64_t y = labels[i];
        double total = 1.0, mx = 0.0, conf;
        const double *e = p;
        Py_ssize_t best = 0;
        if (is_logits) { /* e = exp(x − max), p = e / Σe */
            mx = x[0];
            for (Py_ssize_t j = 1; j < k; j++) {
                mx = x[j] > mx ? x[j] : mx;
            }
            exp_row(x, mx, 1.0, p, k);
            total = 0.0;
            for (Py_ssize_t j = 0; j < k; j++) {
                total += e[j];
            }
            /* the largest e is exp(0) = 1 exactly, so conf = 1/Σe; the argmax of p = e/Σe is the first j
             * where e_j/Σe rounds to it (e_j ≥ 0.5 passes over the rest without a division) */
            conf = 1.0 / total;
            best = -1;
            for (Py_ssize_t j = 0; j < k && best < 0; j++) {
                best = e[j] >= 0.5 && e[j] / total == conf ? j : -1;
            }
            if (best < 0) { /* (an exp(0) other than 1) the argmax of e, its p */
                best = 0;
                for (Py_ssize_t j = 1; j < k; j++) {
                    best = e[j] > e[best] ? j : best;
                }
                conf = e[best] / total;
            }
        }
        else {
            e = x;
            for (Py_ssize_t j = 1; j < k; j++) {
                best = e[j] > e[best] ? j : best;
            }
            conf = e[best];
        }
        conf_out[i] = conf;
        correct[i] = best == y;
        if (top_label_only) {
            continue;
        }
        nll[i] = is_logits ? log(total) - (x[y] - mx) : -log(e[y]);
        if (is_logits) { /* p = e·(1/Σe): within an ulp of e/Σe, a multiplication cheaper than a division */
            const double inv = 1.0 / total;
            for (Py_ssize_t j = 0; j < k; j++) {
                p[j] = e[j] * inv;
            }
            e = p;
        }
        double acc = 0.0;
        for (Py_ssize_t j = 0; j < k; j++) {
            const double d = e[j] - (double)(j == y);
            acc += d * d;
        }
        brier[i] = acc;
        if (want_top5) { /* the rank on the logits themselves (x − max rounds) */
            const double s_y = x[y];
            Py_ssize_t rank = 0;
            for (Py_ssize_t j = 0; j < k; j++) {
                rank += (x[j] > s_y) | ((x[j] == s_y) & (j < y));
            }
            top5[i] = rank < 5;
        }
        if (classwise && !split_low) {
            for (Py_ssize_t j = 0; j < k; j++) {
                const Py_ssize_t b = uniform_bin(e[j], m, edges), cell = j * m + (b < 0 ? 0 : b);
                count[cell] += 1;
                sum_p[cell] += e[j];
            }
        }
        else if (classwise) {
            Py_ssize_t high = 0;
            for (Py_ssize_t j = 0; j < k; j++) { /* x + 0.0 is x: the other rows' cells are unchanged */
                const int low = e[j] < low_edge;
                low_count[j] += low;
                low_sum[j] += low ? e[j] : 0.0;
                high += !low;
            }
            for (Py_ssize_t j = 0; high > 0 && j < k; j++) {
                if (e[j] >= low_edge) {
                    const Py_ssize_t b = uniform_bin(e[j], m, edges), cell = j * m + (b < 0 ? 0 : b);
                    count[cell] += 1;
                    sum_p[cell] += e[j];
                    high--;
                }
            }
        }
        if (classwise) {
            const Py_ssize_t b = uniform_bin(e[y], m, edges);
            sum_y[y * m + (b < 0 ? 0 : b)] += 1.0;
        }
    }
    if (split_low) {
        for (Py_ssize_t j = 0; j < k; j++) {
            sum_p[j * m] = low_sum[j];
            count[j * m] = low_count[j];
        }
    }
}

static PyObject *
py_fused_rows(PyObject *self, PyObject *args)
{
    PyObject *o[12];
    Fused f = {0};
    (void)self;
    if (!PyArg_ParseTuple(args, "OOpnOpppOOOOOOOO:fused_rows", &o[0], &o[1], &f.is_logits, &f.m, &o[2],
                          &f.want_top5, &f.classwise, &f.top_label_only, &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &o[9], &o[10])) {
        return NULL;
    }
    Views s = {.n = 0};
    Py_buffer *b[11];
    if (!(b[0] = take(&s, o[0], "scores", "fd", 2, -1, 0))) goto fail;
    f.rows = b[0]->shape[0];
    f.k = b[0]->shape[1];
    const Py_ssize_t n = f.rows, full = f.top_label_only ? 0 : n;
    const Py_ssize_t cells = f.classwise && !f.top_label_only ? f.k * f.m : 0;
    if (f.k < 1 || f.m < 1) {
        PyErr_SetString(PyExc_ValueError, "fused_rows: expected K >= 1 and m >= 1");
        goto fail;
    }
    if (!(b[1] = take(&s, o[1], "labels", "q", 1, n, 0))) goto fail;
    if (!(b[2] = take(&s, o[2], "edges", "d", 1, f.m + 1, 0))) goto fail;
    if (!(b[3] = take(&s, o[3], "conf", "d", 1, n, 1))) goto fail;
    if (!(b[4] = take(&s, o[4], "correct", "?", 1, n, 1))) goto fail;
    if (!(b[5] = take(&s, o[5], "nll", "d", 1, full, 1))) goto fail;
    if (!(b[6] = take(&s, o[6], "brier", "d", 1, full, 1))) goto fail;
    if (!(b[7] = take(&s, o[7], "top5", "?", 1, f.want_top5 ? full : -1, 1))) goto fail;
    for (int a = 8; a < 11; a++) {
        if (!(b[a] = take(&s, o[a], a == 8 ? "count" : "sums", a == 8 ? "q" : "d", 2, -1, 1))) goto fail;
        if (cells && (b[a]->shape[0] != f.k || b[a]->shape[1] != f.m)) {
            PyErr_SetString(PyExc_ValueError, "fused_rows: the classwise cells must be (K, m)");
            goto fail;
        }
    }
    f.f32 = kind_of(b[0]) == 'f';
    f.scores = b[0]->buf;
    f.labels = (const int64_t *)b[1]->buf;
    f.edges = (const double *)b[2]->buf;
    f.conf = (double *)b[3]->buf;
    f.correct = (unsigned char *)b[4]->buf;
    f.nll = (double *)b[5]->buf;
    f.brier = (double *)b[6]->buf;
    f.top5 = (unsigned char *)b[7]->buf;
    f.count = (int64_t *)b[8]->buf;
    f.sum_p = (double *)b[9]->buf;
    f.sum_y = (double *)b[10]->buf;
    f.classwise = cells > 0;
    Py_ssize_t bad = bad_label(f.labels, n, f.k);
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "labels[%zd] = %lld: expected a class index in [0, %zd)", bad,
                     (long long)f.labels[bad], f.k);
        goto fail;
    }
    f.buf = (double *)PyMem_RawMalloc(4 * (size_t)f.k * sizeof(double));
    if (f.buf == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    f.p = f.buf + f.k;
    f.low_sum = f.buf + 2 * f.k;
    f.low_count = (int64_t *)(f.buf + 3 * f.k);
    Py_BEGIN_ALLOW_THREADS
    fused_loop(&f);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(f.buf);
    release(&s);
    Py_RETURN_NONE;
fail:
    release(&s);
    return NULL;
}

/* ---------- nll_rows ---------- */

static PyObject *
py_nll_rows(PyObject *self, PyObject *args)
{
    PyObject *o_scores, *o_labels, *o_out;
    double beta;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOdO:nll_rows", &o_scores, &o_labels, &beta, &o_out)) {
        return NULL;
    }
    Views s = {.n = 0};
    Py_buffer *b_scores, *b_labels, *b_out;
    if (!(b_scores = take(&s, o_scores, "scores", "fd", 2, -1, 0))) goto fail;
    const Py_ssize_t rows = b_scores->shape[0], k = b_scores->shape[1];
    if (!(b_labels = take(&s, o_labels, "labels", "q", 1, rows, 0))) goto fail;
    if (!(b_out = take(&s, o_out, "out", "d", 1, 3, 1))) goto fail;
    const int64_t *labels = (const int64_t *)b_labels->buf;
    if (k < 1 || bad_label(labels, rows, k) >= 0) {
        PyErr_SetString(PyExc_ValueError, "nll_rows: a label outside [0, K)");
        goto fail;
    }
    const int f32 = kind_of(b_scores) == 'f';
    const void *scores = b_scores->buf;
    double *buf = (double *)PyMem_RawMalloc(2 * (size_t)k * sizeof(double));
    if (buf == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    double *e = buf + k, total = 0.0, grad = 0.0, var = 0.0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++) {
        const double *x = row_at(scores, f32, i, k, buf);
        double mx = x[0];
        for (Py_ssize_t j = 1; j < k; j++) {
            mx = x[j] > mx ? x[j] : mx;
        }
        double sum = 0.0, s1 = 0.0, s2 = 0.0;
        exp_row(x, mx, beta, e, k);
        for (Py_ssize_t j = 0; j < k; j++) {
            const double d = x[j] - mx;
            if (d != -INFINITY) { /* a log-probability of 0: e = 0, and 0 · (−inf) counts as 0 */
                sum += e[j];
                s1 += e[j] * d;
                s2 += e[j] * d * d;
            }
        }
        const double d_y = x[labels[i]] - mx, m1 = s1 / sum, v = s2 / sum - m1 * m1;
        total += log(sum) - beta * d_y;
        grad += m1 - d_y;
        var += v > 0.0 ? v : 0.0;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(buf);
    double *out = (double *)b_out->buf;
    out[0] += total;
    out[1] += grad;
    out[2] += var;
    release(&s);
    Py_RETURN_NONE;
fail:
    release(&s);
    return NULL;
}

/* ---------- bin_sums_1d ---------- */

static PyObject *
py_bin_sums_1d(PyObject *self, PyObject *args)
{
    PyObject *o_values, *o_targets, *o_edges, *o_count, *o_sum_conf, *o_sum_correct;
    int uniform, lowest_closed;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOppOOO:bin_sums_1d", &o_values, &o_targets, &o_edges, &uniform, &lowest_closed,
                          &o_count, &o_sum_conf, &o_sum_correct)) {
        return NULL;
    }
    Views s = {.n = 0};
    Py_buffer *b_values, *b_targets, *b_edges, *b_count, *b_sc, *b_st;
    if (!(b_values = take(&s, o_values, "values", "fd", 1, -1, 0))) goto fail;
    const Py_ssize_t n = b_values->shape[0];
    if (!(b_targets = take(&s, o_targets, "targets", "?d", 1, n, 0))) goto fail;
    if (!(b_edges = take(&s, o_edges, "edges", "fd", 1, -1, 0))) goto fail;
    const Py_ssize_t m = b_edges->shape[0] - 1;
    if (m < 1 || kind_of(b_edges) != kind_of(b_values)) {
        PyErr_SetString(PyExc_ValueError, "bin_sums_1d: expected >= 2 edges of the values' dtype");
        goto fail;
    }
    if (!(b_count = take(&s, o_count, "count", "q", 1, m, 1))) goto fail;
    if (!(b_sc = take(&s, o_sum_conf, "sum_conf", "d", 1, m, 1))) goto fail;
    if (!(b_st = take(&s, o_sum_correct, "sum_correct", "d", 1, m, 1))) goto fail;
    const int f32 = kind_of(b_values) == 'f', tbool = kind_of(b_targets) == '?';
    double *edges = (double *)PyMem_RawMalloc((size_t)(m + 1) * sizeof(double));
    if (edges == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t j = 0; j <= m; j++) { /* float32 edges widen exactly: the same comparisons */
        edges[j] = f32 ? (double)((const float *)b_edges->buf)[j] : ((const double *)b_edges->buf)[j];
    }
    const float *restrict v32 = (const float *)b_values->buf;
    const double *restrict v64 = (const double *)b_values->buf, *restrict t64 = (const double *)b_targets->buf;
    const unsigned char *restrict tb = (const unsigned char *)b_targets->buf;
    const double *restrict e = edges;
    int64_t *restrict count = (int64_t *)b_count->buf;
    double *restrict sum_conf = (double *)b_sc->buf, *restrict sum_correct = (double *)b_st->buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const double v = f32 ? (double)v32[i] : v64[i];
        Py_ssize_t b = uniform ? uniform_bin(v, m, e) : search_bin(v, m, e);
        if (b > m - 1) {
            b = m - 1;
        }
        if (b < 0) {
            if (!lowest_closed) {
                continue;
            }
            b = 0;
        }
        count[b] += 1;
        sum_conf[b] += v;
        sum_correct[b] += tbool ? (double)tb[i] : t64[i];
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(edges);
    release(&s);
    Py_RETURN_NONE;
fail:
    release(&s);
    return NULL;
}

/* ---------- SmoothECE's spreading, KS-CE ---------- */

static PyObject *
py_spread_unit(PyObject *self, PyObject *args)
{
    PyObject *o_conf, *o_correct, *o_out;
    Py_ssize_t g;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOnO:spread_unit", &o_conf, &o_correct, &g, &o_out)) {
        return NULL;
    }
    Views s = {.n = 0};
    Py_buffer *b_conf, *b_correct, *b_out;
    if (!(b_conf = take(&s, o_conf, "conf", "d", 1, -1, 0))) goto fail;
    const Py_ssize_t n = b_conf->shape[0];
    if (!(b_correct = take(&s, o_correct, "correct", "?d", 1, n, 0))) goto fail;
    if (!(b_out = take(&s, o_out, "out", "d", 1, 2 * g, 1))) goto fail;
    if (g < 2) {
        PyErr_SetString(PyExc_ValueError, "spread_unit: expected g >= 2");
        goto fail;
    }
    const double *restrict conf = (const double *)b_conf->buf, *restrict c64 = (const double *)b_correct->buf;
    const unsigned char *restrict cb = (const unsigned char *)b_correct->buf;
    const int cbool = kind_of(b_correct) == '?';
    double *restrict out = (double *)b_out->buf;
    const double scale = (double)(g - 1);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const double x = conf[i] * scale;
        const Py_ssize_t lo = x >= 1.0 ? (x < scale - 1.0 ? (Py_ssize_t)x : g - 2) : 0;
        const double frac = x - (double)lo, keep = 1.0 - frac;
        const double r = conf[i] - (cbool ? (double)cb[i] : c64[i]);
        out[lo] += keep * r;
        out[lo + 1] += frac * r;
        out[g + lo] += keep;
        out[g + lo + 1] += frac;
    }
    Py_END_ALLOW_THREADS
    release(&s);
    Py_RETURN_NONE;
fail:
    release(&s);
    return NULL;
}

static PyObject *
py_ks_sorted(PyObject *self, PyObject *args)
{
    PyObject *o_conf, *o_correct;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:ks_sorted", &o_conf, &o_correct)) {
        return NULL;
    }
    Views s = {.n = 0};
    Py_buffer *b_conf, *b_correct;
    if (!(b_conf = take(&s, o_conf, "conf", "d", 1, -1, 0))) goto fail;
    const Py_ssize_t n = b_conf->shape[0];
    if (!(b_correct = take(&s, o_correct, "correct", "?", 1, n, 0))) goto fail;
    const double *conf = (const double *)b_conf->buf;
    const unsigned char *correct = (const unsigned char *)b_correct->buf;
    double best = 0.0, acc = 0.0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        acc += conf[i] - (double)correct[i];
        if (i + 1 == n || conf[i] != conf[i + 1]) { /* the last of a run of equal confidences */
            best = fabs(acc) > best ? fabs(acc) : best;
        }
    }
    Py_END_ALLOW_THREADS
    release(&s);
    return PyFloat_FromDouble(best);
fail:
    release(&s);
    return NULL;
}

/* ---------- order statistics by buckets ---------- */

static inline Py_ssize_t
bucket_of(double v, double lo, double scale, Py_ssize_t nb)
{
    const double t = (v - lo) * scale;
    return t < (double)(nb - 1) ? (Py_ssize_t)t : nb - 1;
}

static PyObject *
py_bucket_counts(PyObject *self, PyObject *args)
{
    PyObject *o_values, *o_counts;
    double lo, hi, scale;
    (void)self;
    if (!PyArg_ParseTuple(args, "OdddO:bucket_counts", &o_values, &lo, &hi, &scale, &o_counts)) {
        return NULL;
    }
    Views s = {.n = 0};
    Py_buffer *b_values, *b_counts;
    if (!(b_values = take(&s, o_values, "values", "d", 1, -1, 0))) goto fail;
    if (!(b_counts = take(&s, o_counts, "counts", "q", 1, -1, 1))) goto fail;
    const Py_ssize_t n = b_values->shape[0], nb = b_counts->shape[0];
    if (nb < 1 || !(scale >= 0.0 && scale < INFINITY)) {
        PyErr_SetString(PyExc_ValueError, "bucket_counts: expected buckets and a finite scale >= 0");
        goto fail;
    }
    const double *values = (const double *)b_values->buf;
    int64_t *counts = (int64_t *)b_counts->buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (values[i] >= lo && values[i] <= hi) {
            counts[bucket_of(values[i], lo, scale, nb)] += 1;
        }
    }
    Py_END_ALLOW_THREADS
    release(&s);
    Py_RETURN_NONE;
fail:
    release(&s);
    return NULL;
}

static PyObject *
py_bucket_gather(PyObject *self, PyObject *args)
{
    PyObject *o_values, *o_gather, *o_span, *o_members, *o_low, *o_high;
    double lo, hi, scale;
    (void)self;
    if (!PyArg_ParseTuple(args, "OdddOOOOO:bucket_gather", &o_values, &lo, &hi, &scale, &o_gather, &o_span,
                          &o_members, &o_low, &o_high)) {
        return NULL;
    }
    Views s = {.n = 0};
    Py_buffer *b_values, *b_gather, *b_span, *b_members, *b_low, *b_high;
    if (!(b_values = take(&s, o_values, "values", "d", 1, -1, 0))) goto fail;
    if (!(b_gather = take(&s, o_gather, "gather", "?", 1, -1, 0))) goto fail;
    const Py_ssize_t n = b_values->shape[0], nb = b_gather->shape[0];
    if (!(b_span = take(&s, o_span, "span", "?", 1, nb, 0))) goto fail;
    if (!(b_members = take(&s, o_members, "members", "d", 1, -1, 1))) goto fail;
    if (!(b_low = take(&s, o_low, "low", "d", 1, nb, 1))) goto fail;
    if (!(b_high = take(&s, o_high, "high", "d", 1, nb, 1))) goto fail;
    if (nb < 1 || !(scale >= 0.0 && scale < INFINITY)) {
        PyErr_SetString(PyExc_ValueError, "bucket_gather: expected buckets and a finite scale >= 0");
        goto fail;
    }
    const double *values = (const double *)b_values->buf;
    const unsigned char *gather = (const unsigned char *)b_gather->buf, *span = (const unsigned char *)b_span->buf;
    double *members = (double *)b_members->buf, *low = (double *)b_low->buf, *high = (double *)b_high->buf;
    const Py_ssize_t cap = b_members->shape[0];
    Py_ssize_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const double x = values[i];
        if (!(x >= lo && x <= hi)) {
            continue;
        }
        const Py_ssize_t b = bucket_of(x, lo, scale, nb);
        if (gather[b]) {
            if (count < cap) {
                members[count] = x;
            }
            count++;
        }
        else if (span[b]) {
            low[b] = x < low[b] ? x : low[b];
            high[b] = x > high[b] ? x : high[b];
        }
    }
    Py_END_ALLOW_THREADS
    if (count > cap) {
        PyErr_Format(PyExc_ValueError, "bucket_gather: %zd members, room for %zd", count, cap);
        goto fail;
    }
    release(&s);
    return PyLong_FromSsize_t(count);
fail:
    release(&s);
    return NULL;
}

/* ---------- module ---------- */

static PyMethodDef methods[] = {
    {"fused_rows", py_fused_rows, METH_VARARGS, "One row chunk of the summary pass (see the file's header)."},
    {"nll_rows", py_nll_rows, METH_VARARGS, "Add one chunk's NLL, NLL' and variance sums at beta into out."},
    {"bin_sums_1d", py_bin_sums_1d, METH_VARARGS, "Add per-bin count, sum of values and of targets."},
    {"spread_unit", py_spread_unit, METH_VARARGS, "Spread residuals and ones linearly onto a grid of g nodes."},
    {"ks_sorted", py_ks_sorted, METH_VARARGS, "max |prefix sum of conf - correct| at the ends of runs of ties."},
    {"bucket_counts", py_bucket_counts, METH_VARARGS, "Count the values in [lo, hi] per bucket."},
    {"bucket_gather", py_bucket_gather, METH_VARARGS, "Gather the members of chosen buckets; span others."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ckernel", "calib's compiled CPU engine (calibrate_cli/engine/_ckernel.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__ckernel(void)
{
    return PyModule_Create(&module);
}
