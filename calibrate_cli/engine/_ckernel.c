/*
 * calibrate_cli.engine._ckernel: the compiled CPU engine ("fused") in plain C99 (Python C API and the
 * buffer protocol, no numpy headers). No intrinsics and no per-CPU code: plain loops the compiler
 * vectorises (`#pragma omp simd`, setup.py's -fopenmp-simd; a row's exps by glibc's vector exp where GCC
 * builds on glibc, the row loop then compiled for AVX2 and for the baseline: ROW_LOOP), the C library's
 * log. Imported by calibrate_cli/engine/kernels.py only, whose wrappers say what each function computes
 * and make the arrays these loops read: fused_rows (the summary pass's rows, rows.row_stats' definition),
 * nll_rows (the exact NLL temperature fit's Newton pass), bin_sums_1d (1-D per-bin sums), spread_unit
 * (SmoothECE's spreading), ks_sorted (KS-CE's prefix sum), half_to_float (float16 widened exactly).
 *
 * Sums are float64; a row's sums are in an order fixed by the row's length (the lanes of a vector
 * loop), the sums over samples and the cells' sums in sample order: results are the same for any
 * chunking of the rows, and agree with the numpy definition within docs/conventions.md's contract.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---------- the row loops' building blocks ---------- */

/* The row loops are written once for float32 and float64 scores: `score` reads element j of either, and
 * each loop is an always-inlined function called with constant flags (`f32`, ...), so the compiler makes
 * one plain loop per score type (and flag) from one source.
 *
 * exp: with GCC on x86-64 glibc, the `#pragma omp simd` loops (setup.py's -fopenmp-simd) call glibc's own
 * vector exp (libmvec's _ZGVbN2v_exp, two lanes, SSE2, within 4 ulps of exp, documented by glibc);
 * elsewhere the scalar exp. The sums of those loops are reductions in the vector's lanes (`omp simd
 * reduction`): their order is fixed by the compiled loop and the row's length, not by the chunking. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && defined(CALIB_VECTOR_EXP)
#pragma omp declare simd notinbranch
extern double exp(double);
#endif

#if defined(__GNUC__)
#define INLINE static inline __attribute__((always_inline))
#else
#define INLINE static inline
#endif

/* There too, the summary pass's row loop (fused_loop) is compiled twice from its one source, for AVX2
 * (glibc's four-lane vector exp) and for the baseline x86-64 (two lanes): GCC's function multiversioning,
 * one chosen per process by the CPU it runs on, so the bits never depend on threads or chunks. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && defined(CALIB_VECTOR_EXP)
#define ROW_LOOP __attribute__((target_clones("avx2", "default"))) static void
#else
#define ROW_LOOP static void
#endif

/* Element j of float32 (`f32`) or float64 scores, as float64 (exact). */
INLINE double
score(const void *x, int f32, Py_ssize_t j)
{
    return f32 ? (double)((const float *)x)[j] : ((const double *)x)[j];
}

/* Row i of (rows, k) scores. */
INLINE const void *
row_of(const void *scores, int f32, Py_ssize_t i, Py_ssize_t k)
{
    return f32 ? (const void *)((const float *)scores + i * k) : (const void *)((const double *)scores + i * k);
}

/* max_j x_j (exact in any order). */
INLINE double
row_max(const void *x, int f32, Py_ssize_t k)
{
    double mx = score(x, f32, 0);
#pragma omp simd reduction(max : mx)
    for (Py_ssize_t j = 0; j < k; j++) {
        const double v = score(x, f32, j);
        mx = v > mx ? v : mx;
    }
    return mx;
}

/* min_j x_j. */
INLINE double
row_min(const void *x, int f32, Py_ssize_t k)
{
    double mn = score(x, f32, 0);
#pragma omp simd reduction(min : mn)
    for (Py_ssize_t j = 0; j < k; j++) {
        const double v = score(x, f32, j);
        mn = v < mn ? v : mn;
    }
    return mn;
}

/* sq += Σ_{a ≤ j < b} x_j² (probabilities), x_j kept in e[j] when `keep`. */
INLINE void
prob_sums(const void *x, int f32, Py_ssize_t a, Py_ssize_t b, double *restrict e, int keep, double *sq)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (Py_ssize_t j = a; j < b; j++) {
        const double v = score(x, f32, j);
        if (keep) {
            e[j] = v;
        }
        s += v * v;
    }
    *sq += s;
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

/* 'f' float32, 'd' float64, 'q' int64, '?' bool, 'H' uint16, or 0. */
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
    case 'H':
        return b->itemsize == 2 ? 'H' : 0;
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

/* The bin (b/M, (b+1)/M] of v for the edges b/M: ⌊v·M⌋ within [0, M − 1], moved down by one where v is
 * at or below its lower edge (or up where above its upper edge: the edges decide, as binning.assign_bins
 * compares with them); −1 is below the lowest edge (or v = edges[0]). No branch and no conversion back
 * to float64: the loops over rows stall on neither. NaN lands in bin M − 1 (refused before). */
static inline Py_ssize_t
uniform_bin(double v, Py_ssize_t m, const double *edges)
{
    double t = v * (double)m;
    t = t < (double)(m - 1) ? t : (double)(m - 1);
    Py_ssize_t b = t > 0.0 ? (Py_ssize_t)t : 0;
    b -= v <= edges[b];
    b += (b + 1 < m) & (v > edges[b + 1]);
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

/* logits rows shorter than this run in fused_cols, and nll_typed makes their exps in one loop and sums
 * them in a second */
#define SHORT_K 64
/* from this many classes the lowest bin's cells are kept apart (fused_typed) */
#define SPLIT_K 32
/* the exps of a row a tile of this many classes at a time (fused_typed: the tile read twice from L1) */
#define TILE 1024

typedef struct {
    Py_ssize_t rows, k, m;
    int f32, is_logits, want_top5, classwise, top_label_only;
    const void *scores;
    const int64_t *labels;
    const double *edges;
    double *conf, *nll, *brier, *sum_p, *sum_y;
    unsigned char *correct, *top5;
    int64_t *count;
    double *e;       /* scratch of K: a row's exps (its probabilities given, for the classwise cells) */
    double *low_sum; /* scratch of K: the cells (j, 0) of Σp, contiguous in j */
    int64_t *above;  /* scratch of K: per class, this call's values in the bins b ≥ 1 */
} Fused;

/* The rows of one call (rows.row_stats' definition), each read in two or three passes:
 *   1. max_j x_j (logits) or the top label's probability, and with top-5 the rank of x_y;
 *   2. (logits) e_j = exp(x_j − max) into `e` and Σe in one loop, then Σ_{j≠y} e_j² (e_y set apart);
 *      the same sums, so the same bits, whatever else is asked;
 *      p = e/Σe is never written: conf = 1/Σe (e = exp 0 = 1 at the max), nll = log Σe − (x_y − max),
 *      brier = Σ_{j≠y} p_j² + (1 − p_y)² with p = e·(1/Σe);
 *   3. (classwise) the (class, bin) cells of p.
 * `f32`, `is_logits`, `keep` (the classwise cells) are constants at each call (fused_loop). */
INLINE void
fused_typed(const Fused *f, const int f32, const int is_logits, const int keep)
{
    /* every field in a local: stores into the outputs cannot then alias them (Python builds with
     * -fno-strict-aliasing), so they stay in registers */
    const Py_ssize_t k = f->k, m = f->m, rows = f->rows;
    const int want_top5 = f->want_top5, top_label_only = f->top_label_only;
    const void *scores = f->scores;
    const int64_t *restrict labels = f->labels;
    const double *restrict edges = f->edges;
    double *restrict conf_out = f->conf, *restrict nll = f->nll, *restrict brier = f->brier;
    double *restrict sum_p = f->sum_p, *restrict sum_y = f->sum_y, *restrict e = f->e;
    unsigned char *restrict correct = f->correct, *restrict top5 = f->top5;
    int64_t *restrict count = f->count, *restrict above = f->above;
    double *restrict low_sum = f->low_sum;
    /* most probabilities fall in the lowest bin [0, edges[1]): its Σp cells are kept contiguous in j
     * (one vectorised pass a row) and its counts are the rest of the rows (`above` counts the others);
     * the same additions in the same order as adding each p into its cell */
    const double low_edge = m > 1 ? edges[1] : 2.0;
    const int split_low = keep && k >= SPLIT_K; /* few classes: each into its cell */
    if (split_low) {
        for (Py_ssize_t j = 0; j < k; j++) {
            low_sum[j] = sum_p[j * m];
            above[j] = 0;
        }
    }
    for (Py_ssize_t i = 0; i < rows; i++) {
        const void *x = row_of(scores, f32, i, k);
        const Py_ssize_t y = (Py_ssize_t)labels[i];
        const double s_y = score(x, f32, y);
        /* pass 1 */
        double mx = score(x, f32, 0);
        if (want_top5 && !top_label_only) { /* the rank on the scores themselves (x − max rounds) */
            Py_ssize_t rank = 0;
#pragma omp simd reduction(max : mx) reduction(+ : rank)
            for (Py_ssize_t j = 0; j < k; j++) {
                const double v = score(x, f32, j);
                mx = v > mx ? v : mx;
                rank += (v > s_y) | ((v == s_y) & (j < y));
            }
            top5[i] = rank < 5;
        }
        else {
            mx = row_max(x, f32, k);
        }
        /* pass 2: probabilities given: total = 1, e_y = x_y, e = x (p = e·1) */
        double total = 1.0, sq = 0.0, ey = s_y;
        if (is_logits) { /* a tile at a time (in L1): its exps into `e` with Σe, then Σ_{j≠y} e_j² (e_y set
                          * apart: no cancellation); no choice in these loops, or GCC 12 leaves them scalar */
            total = 0.0;
            for (Py_ssize_t a = 0; a < k; a += TILE) {
                const Py_ssize_t b = k - a < TILE ? k : a + TILE;
#pragma omp simd reduction(+ : total)
                for (Py_ssize_t j = a; j < b; j++) {
                    const double v = exp(score(x, f32, j) - mx);
                    e[j] = v;
                    total += v;
                }
                if (top_label_only) {
                    continue;
                }
                const int here = a <= y && y < b;
                const double kept = e[y];
                e[y] = here ? 0.0 : kept;
#pragma omp simd reduction(+ : sq)
                for (Py_ssize_t j = a; j < b; j++) {
                    sq += e[j] * e[j];
                }
                e[y] = kept;
            }
            ey = e[y];
        }
        else if (!top_label_only) {
            prob_sums(x, f32, 0, y, e, keep, &sq);
            prob_sums(x, f32, y + 1, k, e, keep, &sq);
            if (keep) {
                e[y] = s_y;
            }
        }
        /* the top label: argmax p (lowest index on ties) */
        double conf = mx;
        Py_ssize_t best = 0;
        if (is_logits) {
            /* the first x_j = max (e_j = exp 0 = 1, p_j = 1/Σe), unless an earlier x_j within 2^-40 of
             * it has an e_j/Σe that rounds to 1/Σe too (e_j < 1 by an ulp or two) */
            conf = 1.0 / total;
            for (;; best++) {
                const double d = score(x, f32, best) - mx;
                if (d == 0.0 || (d > -0x1p-40 && exp(d) / total == conf)) {
                    break;
                }
            }
        }
        else {
            while (score(x, f32, best) != mx) {
                best++;
            }
        }
        conf_out[i] = conf;
        correct[i] = best == y;
        if (top_label_only) {
            continue;
        }
        /* p = e·(1/Σe): within an ulp of e/Σe, a multiplication cheaper than a division */
        const double inv = is_logits ? 1.0 / total : 1.0, r = 1.0 - ey * inv;
        nll[i] = is_logits ? log(total) - (s_y - mx) : -log(s_y);
        brier[i] = sq * inv * inv + r * r;
        if (!keep) {
            continue;
        }
        /* pass 3: the classwise cells */
        if (split_low) {
            Py_ssize_t high = 0;
#pragma omp simd reduction(+ : high)
            for (Py_ssize_t j = 0; j < k; j++) { /* + 0·p is + 0: the other classes' cells are unchanged */
                const double p = e[j] * inv, low = (double)(p < low_edge);
                low_sum[j] += low * p;
                high += p >= low_edge;
            }
            for (Py_ssize_t j = 0; high > 0 && j < k; j++) {
                const double p = e[j] * inv;
                if (p >= low_edge) {
                    const Py_ssize_t b = uniform_bin(p, m, edges);
                    if (b <= 0) { /* p = edges[1]: bin 0 (its upper edge) */
                        low_sum[j] += p;
                    }
                    else {
                        count[j * m + b] += 1;
                        sum_p[j * m + b] += p;
                        above[j] += 1;
                    }
                    high--;
                }
            }
        }
        else {
            for (Py_ssize_t j = 0; j < k; j++) {
                const double p = e[j] * inv;
                const Py_ssize_t b = uniform_bin(p, m, edges), cell = j * m + (b < 0 ? 0 : b);
                count[cell] += 1;
                sum_p[cell] += p;
            }
        }
        const Py_ssize_t b = uniform_bin(e[y] * inv, m, edges);
        sum_y[y * m + (b < 0 ? 0 : b)] += 1.0;
    }
    if (split_low) {
        for (Py_ssize_t j = 0; j < k; j++) {
            sum_p[j * m] = low_sum[j];
            count[j * m] += rows - above[j];
        }
    }
}

/* Logits of fewer classes than COLS_K: BLOCK rows at a time, one row per vector lane. The block is
 * copied class by class (t[j][i] = x_ij), so every loop below runs over the rows (no tail within a
 * row, the log too in the vector), and a row's sums add its classes in order j = 0, 1, ...; each row
 * depends on itself only, and each (class, bin) cell adds its rows in sample order, as fused_typed. */
#define COLS_K SHORT_K
#define BLOCK 64
/* the classwise bins of fused_cols: ⌊p·M⌋ is the bin where p·M is farther than NEAR_EDGE from an integer
 * (p·M and the edges·M are within M·2^-52 of exact), for M ≤ COLS_M */
#define NEAR_EDGE 0x1p-30
#define COLS_M (1 << 20)

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && defined(CALIB_VECTOR_EXP)
#pragma omp declare simd notinbranch
extern double log(double);
#endif

INLINE void
fused_cols(const Fused *f, const int f32, const int keep)
{
    const Py_ssize_t k = f->k, m = f->m, rows = f->rows;
    const int want_top5 = f->want_top5 && !f->top_label_only, full = !f->top_label_only;
    const int64_t *restrict labels = f->labels;
    const double *restrict edges = f->edges;
    double t[COLS_K][BLOCK], e[COLS_K][BLOCK], mx[BLOCK], s_y[BLOCK], total[BLOCK], sq[BLOCK], inv[BLOCK], e_y[BLOCK],
        nll[BLOCK], brier[BLOCK];
    int64_t y[BLOCK], best[BLOCK], rank[BLOCK];
    int bin[COLS_K][BLOCK];
    for (Py_ssize_t i0 = 0; i0 < rows; i0 += BLOCK) {
        const Py_ssize_t nb = rows - i0 < BLOCK ? rows - i0 : BLOCK;
        for (Py_ssize_t i = 0; i < nb; i++) {
            const void *x = row_of(f->scores, f32, i0 + i, k);
            for (Py_ssize_t j = 0; j < k; j++) {
                t[j][i] = score(x, f32, j);
            }
            y[i] = labels[i0 + i];
            s_y[i] = t[y[i]][i];
        }
        for (Py_ssize_t i = nb; i < BLOCK; i++) { /* a last block's other lanes: zeros, never read */
            for (Py_ssize_t j = 0; j < k; j++) {
                t[j][i] = 0.0;
            }
            y[i] = 0;
            s_y[i] = 0.0;
        }
        for (Py_ssize_t i = 0; i < BLOCK; i++) {
            mx[i] = t[0][i];
            rank[i] = 0;
            total[i] = 0.0;
            sq[i] = 0.0;
            best[i] = k;
        }
        for (Py_ssize_t j = 0; j < k; j++) {
#pragma omp simd
            for (Py_ssize_t i = 0; i < BLOCK; i++) {
                const double v = t[j][i];
                mx[i] = v > mx[i] ? v : mx[i];
                rank[i] += (v > s_y[i]) | ((v == s_y[i]) & (j < y[i])); /* on the scores themselves */
            }
        }
        for (Py_ssize_t j = 0; j < k; j++) {
#pragma omp simd
            for (Py_ssize_t i = 0; i < BLOCK; i++) {
                e[j][i] = exp(t[j][i] - mx[i]);
            }
        }
        for (Py_ssize_t i = 0; i < BLOCK; i++) { /* e_y apart: Σ_{j≠y} e_j² without cancellation */
            e_y[i] = e[y[i]][i];
            e[y[i]][i] = 0.0;
        }
        for (Py_ssize_t j = 0; j < k; j++) { /* no choice in this loop: GCC 12 would not vectorise it */
#pragma omp simd
            for (Py_ssize_t i = 0; i < BLOCK; i++) {
                total[i] += e[j][i];
                sq[i] += e[j][i] * e[j][i];
            }
        }
        for (Py_ssize_t i = 0; i < BLOCK; i++) {
            total[i] += e_y[i];
            e[y[i]][i] = e_y[i];
        }
        /* argmax p, the lowest index on ties: the first e_j/Σe = 1/Σe, that is the first e_j = 1 (the max's
         * exp 0) unless an e_j ≠ 1 lies within 2^-40 of 1 (e_j/Σe may then round to 1/Σe too) */
        int near = 0;
        for (Py_ssize_t j = k - 1; j >= 0; j--) {
#pragma omp simd reduction(+ : near)
            for (Py_ssize_t i = 0; i < BLOCK; i++) {
                best[i] = e[j][i] == 1.0 ? j : best[i];
                near += (e[j][i] != 1.0) & (e[j][i] > 1.0 - 0x1p-40);
            }
        }
        for (Py_ssize_t i = 0; near > 0 && i < nb; i++) {
            for (best[i] = 0; e[best[i]][i] / total[i] != 1.0 / total[i]; best[i]++) {
            }
        }
        double *restrict conf = f->conf + i0;
        unsigned char *restrict correct = f->correct + i0;
        for (Py_ssize_t i = 0; i < nb; i++) {
            conf[i] = 1.0 / total[i];
            correct[i] = best[i] == y[i];
        }
        if (!full) {
            continue;
        }
#pragma omp simd
        for (Py_ssize_t i = 0; i < BLOCK; i++) {
            inv[i] = 1.0 / total[i];
            const double r = 1.0 - e_y[i] * inv[i];
            nll[i] = log(total[i]) - (s_y[i] - mx[i]);
            brier[i] = sq[i] * inv[i] * inv[i] + r * r;
        }
        for (Py_ssize_t i = 0; i < nb; i++) {
            f->nll[i0 + i] = nll[i];
            f->brier[i0 + i] = brier[i];
            if (want_top5) {
                f->top5[i0 + i] = rank[i] < 5;
            }
        }
        if (!keep) {
            continue;
        }
        /* the classwise cells: p and its bin for every class, ⌊p·M⌋ where p·M is farther than NEAR_EDGE
         * from an integer (so from the edges b/M, for M ≤ COLS_M), else uniform_bin's; then added row
         * after row, class after class (a row's cells are distinct: no chain through memory from one
         * addition to the next), each cell, of one class, getting its rows in order */
        const int fast = m <= COLS_M;
        for (Py_ssize_t j = 0; j < k; j++) {
            int near = fast ? 0 : BLOCK;
            if (fast) {
#pragma omp simd reduction(+ : near)
                for (Py_ssize_t i = 0; i < BLOCK; i++) {
                    const double p = e[j][i] * inv[i], t = p * (double)m, frac = t - (double)(int)t;
                    e[j][i] = p;
                    bin[j][i] = (int)t;
                    near += (frac < NEAR_EDGE) | (frac > 1.0 - NEAR_EDGE);
                }
            }
            for (Py_ssize_t i = 0; !fast && i < BLOCK; i++) {
                e[j][i] *= inv[i];
            }
            for (Py_ssize_t i = 0; near > 0 && i < nb; i++) {
                const double t = e[j][i] * (double)m, frac = fast ? t - (double)(int)t : 0.0;
                if ((frac < NEAR_EDGE) | (frac > 1.0 - NEAR_EDGE)) {
                    const Py_ssize_t b = uniform_bin(e[j][i], m, edges);
                    bin[j][i] = (int)(b < 0 ? 0 : b);
                    near--;
                }
            }
        }
        int64_t *restrict count = f->count;
        double *restrict sum_p = f->sum_p, *restrict sum_y = f->sum_y;
        for (Py_ssize_t i = 0; i < nb; i++) {
            for (Py_ssize_t j = 0; j < k; j++) {
                count[j * m + bin[j][i]] += 1;
                sum_p[j * m + bin[j][i]] += e[j][i];
            }
            sum_y[y[i] * m + bin[y[i]][i]] += 1.0;
        }
    }
}

ROW_LOOP
fused_loop(const Fused *f)
{
    const int keep = f->classwise && !f->top_label_only;
    if (f->is_logits && f->k < COLS_K) {
        f->f32 ? (keep ? fused_cols(f, 1, 1) : fused_cols(f, 1, 0)) : (keep ? fused_cols(f, 0, 1) : fused_cols(f, 0, 0));
        return;
    }
    if (f->f32) {
        if (f->is_logits) {
            keep ? fused_typed(f, 1, 1, 1) : fused_typed(f, 1, 1, 0);
        }
        else {
            keep ? fused_typed(f, 1, 0, 1) : fused_typed(f, 1, 0, 0);
        }
    }
    else if (f->is_logits) {
        keep ? fused_typed(f, 0, 1, 1) : fused_typed(f, 0, 1, 0);
    }
    else {
        keep ? fused_typed(f, 0, 0, 1) : fused_typed(f, 0, 0, 0);
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
    double *scratch = (double *)PyMem_RawMalloc(3 * (size_t)f.k * sizeof(double)); /* e, low_sum, above */
    if (scratch == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    f.e = scratch;
    f.low_sum = scratch + f.k;
    f.above = (int64_t *)(scratch + 2 * f.k);
    Py_BEGIN_ALLOW_THREADS
    fused_loop(&f);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(scratch);
    release(&s);
    Py_RETURN_NONE;
fail:
    release(&s);
    return NULL;
}

/* ---------- nll_rows ---------- */

/* Σ_i (log Σe − β d_iy, E[d_i] − d_iy, Var[d_i]) over the rows, e = exp(β d), d = x − max; a d of −inf
 * (a log-probability 0: e = 0) adds nothing (0 · (−inf) counts as 0). `f32` a constant at each call. */
INLINE void
nll_typed(const void *scores, const int f32, const int64_t *labels, Py_ssize_t rows, Py_ssize_t k, double beta,
          double out[3])
{
    double total = 0.0, grad = 0.0, var = 0.0, short_row[SHORT_K];
    for (Py_ssize_t i = 0; i < rows; i++) {
        const void *x = row_of(scores, f32, i, k);
        const double mx = row_max(x, f32, k);
        double sum = 0.0, s1 = 0.0, s2 = 0.0;
        if (k < SHORT_K) { /* a loop of exps, then the sums (a log-probability 0: d = −inf, e = 0, counted as 0) */
#pragma omp simd
            for (Py_ssize_t j = 0; j < k; j++) {
                short_row[j] = exp(beta * (score(x, f32, j) - mx));
            }
            for (Py_ssize_t j = 0; j < k; j++) {
                const double d = score(x, f32, j) - mx, e = short_row[j];
                if (d != -INFINITY) {
                    sum += e;
                    s1 += e * d;
                    s2 += e * d * d;
                }
            }
        }
        else if (row_min(x, f32, k) > -INFINITY) {
#pragma omp simd reduction(+ : sum, s1, s2)
            for (Py_ssize_t j = 0; j < k; j++) {
                const double d = score(x, f32, j) - mx, e = exp(beta * d);
                sum += e;
                s1 += e * d;
                s2 += e * d * d;
            }
        }
        else { /* a log-probability 0 (d = −inf): e = 0, and 0 · (−inf) counts as 0 */
            for (Py_ssize_t j = 0; j < k; j++) {
                const double d = score(x, f32, j) - mx;
                if (d != -INFINITY) {
                    const double e = exp(beta * d);
                    sum += e;
                    s1 += e * d;
                    s2 += e * d * d;
                }
            }
        }
        const double d_y = score(x, f32, labels[i]) - mx, m1 = s1 / sum, v = s2 / sum - m1 * m1;
        total += log(sum) - beta * d_y;
        grad += m1 - d_y;
        var += v > 0.0 ? v : 0.0;
    }
    out[0] = total;
    out[1] = grad;
    out[2] = var;
}

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
    double sums[3];
    Py_BEGIN_ALLOW_THREADS
    if (f32) {
        nll_typed(scores, 1, labels, rows, k, beta, sums);
    }
    else {
        nll_typed(scores, 0, labels, rows, k, beta, sums);
    }
    Py_END_ALLOW_THREADS
    double *out = (double *)b_out->buf;
    out[0] += sums[0];
    out[1] += sums[1];
    out[2] += sums[2];
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
    double slack;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOd:ks_sorted", &o_conf, &o_correct, &slack)) {
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
        if (i + 1 == n || conf[i + 1] > conf[i] + fabs(conf[i]) * slack) { /* the last of a run of ties */
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

/* ---------- float16 → float32 ---------- */

/* The float32 of the float16 pattern h, exactly: sign, exponent and mantissa moved into place; a
 * subnormal (or zero) m·2^-24; infinity and NaN (payload kept) to their float32 own. Integer operations
 * and selects only: the loop over a chunk is vectorised. */
INLINE float
half_to_float_one(uint16_t h)
{
    const uint32_t e = h & 0x7c00u, m = h & 0x03ffu, sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t normal = sign | ((e + 0x1c000u) << 13) | (m << 13), special = sign | 0x7f800000u | (m << 13);
    uint32_t bits = e == 0x7c00u ? special : normal;
    float v, sub = (float)(int32_t)m * 0x1p-24f;
    memcpy(&v, &bits, sizeof v);
    sub = sign ? -sub : sub;
    return e == 0 ? sub : v;
}

static PyObject *
py_half_to_float(PyObject *self, PyObject *args)
{
    PyObject *o_in, *o_out;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:half_to_float", &o_in, &o_out)) {
        return NULL;
    }
    Views s = {.n = 0};
    Py_buffer *b_in, *b_out;
    if (!(b_in = take(&s, o_in, "halves", "H", 1, -1, 0))) goto fail;
    if (!(b_out = take(&s, o_out, "out", "f", 1, b_in->shape[0], 1))) goto fail;
    const uint16_t *restrict in = (const uint16_t *)b_in->buf;
    float *restrict out = (float *)b_out->buf;
    const Py_ssize_t n = b_in->shape[0];
    Py_BEGIN_ALLOW_THREADS
#pragma omp simd
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = half_to_float_one(in[i]);
    }
    Py_END_ALLOW_THREADS
    release(&s);
    Py_RETURN_NONE;
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
    {"ks_sorted", py_ks_sorted, METH_VARARGS, "max |prefix sum of conf - correct| at the ends of runs of ties (within a relative slack)."},
    {"half_to_float", py_half_to_float, METH_VARARGS, "float16 patterns (uint16) as float32, exactly, into out."},
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
