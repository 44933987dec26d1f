/*
 * calibrate_cli._ckernel: the hot loops of calib's summary pass (and SmoothECE's spreading) in plain C99 (no numpy headers).
 *
 *   fused_rows(scores, labels, is_logits, m, edges, want_top5, classwise,
 *              conf, correct, nll, brier, top5, count, sum_p, sum_y)
 *       the fused per-row summary of calibrate_cli/_fused_kernel.py's _fused_rows, operation for
 *       operation (the same float64 operations in the same order: numpy's pairwise sum for
 *       Σ_j exp z_ij, a sequential Σ (p_k − [k = y])² for Brier, the ⌈p·M⌉ − 1 bin candidate and its
 *       two edge corrections, cells accumulated in row order), so every output is bit-identical;
 *       with AVX2: four rows at a time, one per lane, for 2 ≤ K ≤ 128 (fused_cols, logits and
 *       probabilities), logits of more classes in blocks of rows, four classes at a time (fused_avx2);
 *       the same bits.
 *   bin_sums_1d(values, targets, edges, uniform, lowest_closed, count, sum_conf, sum_correct)
 *       the 1-D binning pass of calibrate_cli/_bin_kernel.py (float64 values, bool targets and at most
 *       16 bins: the sums in AVX2 registers, bin_sums_avx2_f64_bool; the same bits).
 *   spread_unit(conf, correct, g, piece, out)
 *       SmoothECE's linear spreading of the samples onto its grid (calibrate_cli/smooth_ece.py,
 *       _Grids.spread_unit): numpy's four np.bincount per piece of samples and their four adds into
 *       out, the same float64 operations in the same order, so the grids are bit-identical.
 *   nll_rows(scores, labels, beta, out, vector=True)
 *       the Newton pass of the exact NLL temperature fit (calibrate_cli/_grid_kernel.py's nll_rows),
 *       with the same polynomial exp (equal to rounding: numba contracts multiply-adds, this does not);
 *       four classes at a time with AVX2 where the CPU has it, bit-identical to the scalar loop.
 *   exp_poly(x, out, vector)
 *       that polynomial exp of an array, by the AVX2 or the scalar loop (for the tests: bit-identical).
 *   top_label_rows(scores, labels, is_logits, conf, correct, vector=True)
 *       the top-label confidence and correctness alone (what ECE, MCE, accuracy read), bit-identical to
 *       fused_rows': the C library's exp, four values at a time by exact_exp4 where the CPU has AVX2 and
 *       FMA (the GNU C library's exp, operation for operation; checked against the C library at import);
 *       four rows at a time for 2 ≤ K ≤ 128 (top_label_cols, logits and probabilities).
 *   exp_exact(x, out)
 *       exact_exp4 over an array (for the tests).
 *   bucket_counts(values, lo, hi, scale, counts), bucket_gather(values, lo, hi, scale, gather, span, members, low, high)
 *       the two passes of calibrate_cli/sorting.py's order_statistics (exact selection by bucket counts),
 *       without its (piece,) temporaries.
 *   ks_sorted(conf, correct)
 *       KS-CE's maximum over samples sorted by confidence (calibrate_cli/sorting.py's ks_from_sorted) in
 *       one pass: the same sequential sum, the same bits.
 *   pack_keys(conf, correct, out)
 *       sort keys (calibrate_cli/sorting.py's pack_keys) made and checked (packable) in one pass.
 *   unpack_keys(keys, correct)
 *       sorted packed keys (calibrate_cli/sorting.py's pack_keys) back to conf's bits and correct, in one pass.
 *   all_finite(values)
 *       whether no value is NaN or ±inf, in one pass (the score check's first look at logits).
 *   probs_plausible(values, high, tol)
 *       whether probabilities surely pass the check (values in [0, high], row sums within tol/2 of 1).
 *
 * Arrays are taken through the buffer protocol (C-contiguous, format and shape checked: TypeError
 * for a wrong dtype, ValueError for a wrong shape or a label out of range); the loops run without
 * the GIL. exp, log and ceil are the C library's, the functions numpy and numba call. Built with
 * -ffp-contract=off (setup.py): no a·b + c contracted into a fused multiply-add, which would change
 * the Brier sums' last bits.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------- buffers ---------- */

enum { K_F32 = 1, K_F64, K_I64, K_BOOL };

/* The element kind of a buffer format ("d", "<f", "=q", "?", ...), or 0 when it is none of ours. */
static int
format_kind(const Py_buffer *view)
{
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=') {
        f++;
    }
#if PY_LITTLE_ENDIAN
    else if (*f == '<') {
        f++;
    }
#else
    else if (*f == '>' || *f == '!') {
        f++;
    }
#endif
    if (f[0] == '\0' || f[1] != '\0') {
        return 0;
    }
    switch (f[0]) {
    case 'f':
        return view->itemsize == 4 ? K_F32 : 0;
    case 'd':
        return view->itemsize == 8 ? K_F64 : 0;
    case 'l':
    case 'q':
        return view->itemsize == 8 ? K_I64 : 0;
    case '?':
        return view->itemsize == 1 ? K_BOOL : 0;
    default:
        return 0;
    }
}

static const char *
kind_name(int kind)
{
    switch (kind) {
    case K_F32:
        return "float32";
    case K_F64:
        return "float64";
    case K_I64:
        return "int64";
    case K_BOOL:
        return "bool";
    default:
        return "?";
    }
}

/* Get a C-contiguous buffer of `obj` with `ndim` dimensions whose kind is one of `kinds` (a 0-ended
 * list); writable when asked. Returns the kind, or 0 with an exception set (view released). */
static int
get_array(PyObject *obj, Py_buffer *view, const char *name, int ndim, const int *kinds, int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        /* numpy: ValueError for a non-contiguous or read-only array; BufferError/TypeError otherwise */
        PyObject *type = PyErr_ExceptionMatches(PyExc_ValueError) ? PyExc_ValueError : PyExc_TypeError;
        if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError) ||
            PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            PyErr_Format(type, "%s: expected a %sC-contiguous array, got %.100s", name,
                         writable ? "writable " : "", Py_TYPE(obj)->tp_name);
        }
        return 0;
    }
    int kind = format_kind(view);
    int ok = 0;
    for (const int *k = kinds; *k; k++) {
        if (*k == kind) {
            ok = 1;
        }
    }
    if (!ok) {
        char want[64] = "";
        for (const int *k = kinds; *k; k++) {
            if (k != kinds) {
                strcat(want, " or ");
            }
            strcat(want, kind_name(*k));
        }
        PyErr_Format(PyExc_TypeError, "%s: expected %s elements, got format %.20s", name, want,
                     view->format ? view->format : "B");
        PyBuffer_Release(view);
        return 0;
    }
    if (view->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: expected %d dimension(s), got %d", name, ndim, view->ndim);
        PyBuffer_Release(view);
        return 0;
    }
    return kind;
}

/* The buffers of one call, released together. */
typedef struct {
    Py_buffer views[16];
    int n;
} Views;

static Py_buffer *
views_next(Views *v)
{
    return &v->views[v->n];
}

static void
views_release(Views *v)
{
    for (int i = 0; i < v->n; i++) {
        PyBuffer_Release(&v->views[i]);
    }
    v->n = 0;
}

#define TAKE(views, obj, name, ndim, kinds, writable, kind_out)                                  \
    do {                                                                                          \
        (kind_out) = get_array((obj), views_next(&(views)), (name), (ndim), (kinds), (writable)); \
        if (!(kind_out)) {                                                                        \
            goto fail;                                                                            \
        }                                                                                         \
        (views).n++;                                                                              \
    } while (0)

static int
check_len(const Py_buffer *view, const char *name, int axis, Py_ssize_t want)
{
    if (view->shape[axis] != want) {
        PyErr_Format(PyExc_ValueError, "%s: expected length %zd along axis %d, got %zd", name, want, axis,
                     view->shape[axis]);
        return 0;
    }
    return 1;
}

/* ---------- AVX2 helpers (x86-64; chosen at import by what the CPU has) ---------- */

/* whether the CPU runs the AVX2 loops (set at import) */
static int avx2_ok = 0;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2 1

/* The four lanes of v as doubles (register moves, no store and reload). */
#define LANES4(v, out)                                                   \
    do {                                                                 \
        const __m128d lo_ = _mm256_castpd256_pd128(v);                   \
        const __m128d hi_ = _mm256_extractf128_pd(v, 1);                 \
        (out)[0] = _mm_cvtsd_f64(lo_);                                   \
        (out)[1] = _mm_cvtsd_f64(_mm_unpackhi_pd(lo_, lo_));             \
        (out)[2] = _mm_cvtsd_f64(hi_);                                   \
        (out)[3] = _mm_cvtsd_f64(_mm_unpackhi_pd(hi_, hi_));             \
    } while (0)

/* lanes l < n of a 4-lane mask (n = 1..3: the last, partial group of a row) */
static const int32_t TAIL_MASK32[4][4] = {{0, 0, 0, 0}, {-1, 0, 0, 0}, {-1, -1, 0, 0}, {-1, -1, -1, 0}};
static const int64_t TAIL_MASK64[4][4] = {{0, 0, 0, 0}, {-1, 0, 0, 0}, {-1, -1, 0, 0}, {-1, -1, -1, 0}};

/* 4 scores of a row from j on as doubles; past the row's end (the last, partial group) 0, by a masked
 * load (nothing past the row is read). */
__attribute__((target("avx2"))) static inline __m256d
load4_f32(const float *row, Py_ssize_t j, Py_ssize_t k)
{
    if (j + 4 <= k) {
        return _mm256_cvtps_pd(_mm_loadu_ps(row + j));
    }
    const __m128i mask = _mm_loadu_si128((const __m128i *)TAIL_MASK32[k - j]);
    return _mm256_cvtps_pd(_mm_maskload_ps(row + j, mask));
}

__attribute__((target("avx2"))) static inline __m256d
load4_f64(const double *row, Py_ssize_t j, Py_ssize_t k)
{
    if (j + 4 <= k) {
        return _mm256_loadu_pd(row + j);
    }
    const __m256i mask = _mm256_loadu_si256((const __m256i *)TAIL_MASK64[k - j]);
    return _mm256_maskload_pd(row + j, mask);
}

#endif

/* ---------- numpy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src) ---------- */

static double
block_sum(const double *a, Py_ssize_t n)
{
    if (n < 8) {
        double res = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {
            res += a[i];
        }
        return res;
    }
    double r0 = a[0], r1 = a[1], r2 = a[2], r3 = a[3];
    double r4 = a[4], r5 = a[5], r6 = a[6], r7 = a[7];
    Py_ssize_t i;
    Py_ssize_t stop = n - (n % 8);
    for (i = 8; i < stop; i += 8) {
        r0 += a[i];
        r1 += a[i + 1];
        r2 += a[i + 2];
        r3 += a[i + 3];
        r4 += a[i + 4];
        r5 += a[i + 5];
        r6 += a[i + 6];
        r7 += a[i + 7];
    }
    double res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
    for (; i < n; i++) {
        res += a[i];
    }
    return res;
}

/* Blocks of ≤ 128 by block_sum; larger ranges split at n2 = ⌊n/2⌋ − (⌊n/2⌋ mod 8), halves added. */
static double
pairwise_sum(const double *a, Py_ssize_t n)
{
    if (n <= 128) {
        return block_sum(a, n);
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

/* ---------- binning ---------- */

/* int64(⌈x⌉) − 1 without C's undefined behaviour: a NaN or an out-of-range ⌈x⌉ converts to
 * INT64_MIN, as numpy's astype(int64) does on x86-64 (cvttsd2si), and the subtraction wraps; so even
 * NaN and ±inf (refused before the kernels in calib) land in binning._assign_uniform's bins. For finite
 * v·M in range this is numba's int64(ceil(v·M)) − 1 exactly. */
static inline int64_t
ceil_index(double x)
{
    int64_t ci = INT64_MIN;
    if (x >= -9223372036854775808.0 && x < 9223372036854775808.0) {
        /* ⌈x⌉ in integers (cheaper than ceil()): the truncation toward zero, plus one when it fell below x (x > 0
         * and not an integer); exact, as ceil(x) is in range exactly when x is */
        ci = (int64_t)x;
        ci += (double)ci < x;
    }
    return (int64_t)((uint64_t)ci - 1u);
}

/* _fused_kernel.uniform_bin_candidate: ⌈v·M⌉ − 1 clamped to [0, M − 1], then the two corrections
 * against the edges (comparisons in double: exact for float32 values and edges too). In [−1, M]. */
#define UNIFORM_BIN_CANDIDATE(v, m, edges, out)                    \
    do {                                                           \
        int64_t b_ = ceil_index((double)(v) * (double)(m));        \
        if (b_ < 0) {                                              \
            b_ = 0;                                                \
        }                                                          \
        if (b_ > (m) - 1) {                                        \
            b_ = (m) - 1;                                          \
        }                                                          \
        if ((double)(v) <= (double)(edges)[b_]) {                  \
            b_ -= 1;                                               \
        }                                                          \
        if (b_ < -1) {                                             \
            b_ = -1;                                               \
        }                                                          \
        if (b_ > (m) - 1) {                                        \
            b_ = (m) - 1;                                          \
        }                                                          \
        int64_t up_ = b_ + 1 < (m) ? b_ + 1 : (m);                 \
        if ((double)(v) > (double)(edges)[up_]) {                  \
            b_ += 1;                                               \
        }                                                          \
        (out) = b_;                                                \
    } while (0)

/* ---------- the C library's exp, four values at a time ---------- */

/* whether exact_exp4 may be used (the CPU has AVX2 and FMA, and the import's self-check passed) */
static int exact_exp_ok = 0;

/* whether the rows-in-lanes loops may run on probabilities (the CPU has AVX2 and FMA; no exp in them) */
static int cols_cpu_ok = 0;

/* exact_exp4: e^x of four values, the GNU C library's exp bit for bit (glibc ≥ 2.28's e_exp.c, its FMA
 * variant, which x86-64 CPUs with FMA and AVX2 run): the same float64 operations in the same order,
 * each multiply-add fused where that variant fuses it, and the same constants (_exp_table.h,
 * scripts/gen_exp_table.py):
 *
 *   kd + S = fma(x, N/ln2, S) (S = 1.5·2^52: its low bits hold k = round(x·N/ln2), N = 128),
 *   r = fma(kd, NEG_LN2_LO_N, fma(kd, NEG_LN2_HI_N, x)),
 *   tmp = fma(r²·r², fma(r, C5, C4), fma(fma(r, C3, C2), r², r + tail)), s = 2^(k/N) from the table,
 *   e^x = fma(s, tmp, s).
 *
 * Those are the C library's steps for 2^-54 ≤ |x| < 512; for |x| < 2^-54 it returns 1 + x, as here.
 * Other lanes (|x| ≥ 512: its special-case scaling; NaN) are flagged in *redo, for the caller to take
 * from the C library's exp. Used only when the import's self-check (exact_exp_selfcheck) found every
 * value equal to this C library's exp. */
#ifdef HAVE_AVX2
#include "_exp_table.h"

__attribute__((target("avx2,fma"), always_inline)) static inline __m256d
exact_exp4(__m256d x, int *redo)
{
    const __m256d shift = _mm256_set1_pd(EXP_TAB_SHIFT);
    const __m256d shifted = _mm256_fmadd_pd(x, _mm256_set1_pd(EXP_INV_LN2_N), shift);
    const __m256i ki = _mm256_castpd_si256(shifted);
    const __m256d kd = _mm256_sub_pd(shifted, shift);
    __m256d r = _mm256_fmadd_pd(kd, _mm256_set1_pd(EXP_NEG_LN2_HI_N), x);
    r = _mm256_fmadd_pd(kd, _mm256_set1_pd(EXP_NEG_LN2_LO_N), r);
    /* (tail_i, bits(T_i) − i·2^45) of each lane, i = k mod N: one 16-byte load a lane, then transposed */
    const __m256i idx = _mm256_slli_epi64(_mm256_and_si256(ki, _mm256_set1_epi64x((1 << EXP_TABLE_BITS) - 1)), 1);
    const __m128i idx_lo = _mm256_castsi256_si128(idx), idx_hi = _mm256_extracti128_si256(idx, 1);
    const double *tab = (const double *)EXP_TAB;
    const __m256d p02 = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_load_pd(tab + _mm_cvtsi128_si64(idx_lo))),
                                             _mm_load_pd(tab + _mm_cvtsi128_si64(idx_hi)), 1);
    const __m256d p13 = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_load_pd(tab + _mm_extract_epi64(idx_lo, 1))),
                                             _mm_load_pd(tab + _mm_extract_epi64(idx_hi, 1)), 1);
    const __m256d tail = _mm256_unpacklo_pd(p02, p13);
    const __m256i sbits = _mm256_add_epi64(_mm256_castpd_si256(_mm256_unpackhi_pd(p02, p13)),
                                           _mm256_slli_epi64(ki, 52 - EXP_TABLE_BITS));
    const __m256d r2 = _mm256_mul_pd(r, r);
    const __m256d c23 = _mm256_fmadd_pd(r, _mm256_set1_pd(EXP_C3), _mm256_set1_pd(EXP_C2));
    const __m256d c45 = _mm256_fmadd_pd(r, _mm256_set1_pd(EXP_C5), _mm256_set1_pd(EXP_C4));
    const __m256d tmp = _mm256_fmadd_pd(_mm256_mul_pd(r2, r2), c45, _mm256_fmadd_pd(c23, r2, _mm256_add_pd(r, tail)));
    const __m256d scale = _mm256_castsi256_pd(sbits);
    const __m256d e = _mm256_fmadd_pd(scale, tmp, scale);
    const __m256d ax = _mm256_and_pd(x, _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL)));
    const __m256d tiny = _mm256_cmp_pd(ax, _mm256_set1_pd(0x1p-54), _CMP_LT_OQ);
    const __m256d in_range = _mm256_cmp_pd(ax, _mm256_set1_pd(512.0), _CMP_LT_OQ); /* false for NaN */
    *redo = 15 & ~_mm256_movemask_pd(in_range);
    return _mm256_blendv_pd(e, _mm256_add_pd(_mm256_set1_pd(1.0), x), tiny);
}
#endif

#ifdef HAVE_AVX2
/* A block of logit rows' exponentials: e_ij = exp(z_ij), z_ij = x_ij − max_j x_ij, the C library's
 * exp bit for bit. (1) per row its maximum (and the first index of it), then z and exact_exp4 four
 * classes at a time, each vector's lanes to redo kept as a 4-bit mask; (2) those lanes from the C
 * library's exp. No call in the vector loop (its constants stay in registers), and the rows are read
 * back after the block (no store forwarding of a wide store into narrow loads). Rows start..stop − 1 go
 * to rows 0.. of the buffers (k_padded doubles a row; the padding lanes hold exp(−max), unused). */
typedef struct {
    Py_ssize_t k, k_padded, block_rows;
    double *e, *z;         /* block_rows × k_padded */
    unsigned char *masks;  /* block_rows × k_padded/4: the lanes exact_exp4 left to the C library */
    Py_ssize_t *first_max; /* block_rows: each row's first index of its largest logit */
    uint64_t *candidates;  /* block_rows: classes j < 64 whose e_j may be ≥ 1/2 (or were redone) */
} ExpBlock;

/* Row r's predicted class from its block: top_label_of_row's first j with e_j ≥ 1/2 and e_j/Σe == conf
 * (total = Σe, conf = 1/Σe): the row's first largest logit (e = 1), unless a class before it may have
 * e_j ≥ 1/2 (rare: then the check, with its division, for those classes only). */
static inline Py_ssize_t
block_prediction(const ExpBlock *b, Py_ssize_t r, double total, double conf)
{
    const double *e = b->e + r * b->k_padded;
    if (total != total) {
        return 0; /* a NaN among the logits: no e_j/Σe equals conf (NaN), and the search ends at 0 */
    }
    const Py_ssize_t first = b->first_max[r];
    const uint64_t before = first < 64 ? b->candidates[r] & (((uint64_t)1 << first) - 1) : b->candidates[r];
    if (before) {
        for (Py_ssize_t j = 0; j < first; j++) {
            if (e[j] >= 0.5 && e[j] / total == conf) {
                return j;
            }
        }
    }
    return first;
}

/* The buffers of an ExpBlock of rows of K classes (about 1024 doubles each), or 0 (no memory). */
static int
exp_block_alloc(ExpBlock *b, Py_ssize_t k)
{
    b->k = k;
    b->k_padded = (k + 3) / 4 * 4;
    b->block_rows = 1024 / b->k_padded > 1 ? 1024 / b->k_padded : 1;
    const size_t cells = (size_t)b->block_rows * (size_t)b->k_padded, rows = (size_t)b->block_rows;
    b->e = (double *)PyMem_RawMalloc(2 * cells * sizeof(double) + rows * (sizeof(Py_ssize_t) + sizeof(uint64_t))
                                     + cells / 4 + 1);
    if (b->e == NULL) {
        return 0;
    }
    b->z = b->e + cells;
    b->first_max = (Py_ssize_t *)(b->z + cells);
    b->candidates = (uint64_t *)(b->first_max + rows);
    b->masks = (unsigned char *)(b->candidates + rows);
    return 1;
}

#define DEFINE_EXP_BLOCK(SUFFIX, T)                                                                     \
    __attribute__((target("avx2,fma"))) static void exp_block_##SUFFIX(ExpBlock *b, const T *scores,   \
                                                                      Py_ssize_t start, Py_ssize_t stop) \
    {                                                                                                   \
        const Py_ssize_t k = b->k, kp = b->k_padded, groups = b->k_padded / 4;                         \
        for (Py_ssize_t i = start; i < stop; i++) {                                                     \
            const T *row = scores + i * k;                                                              \
            double mx = (double)row[0];                                                                 \
            Py_ssize_t first = 0;                                                                       \
            for (Py_ssize_t j = 1; j < k; j++) {                                                        \
                double v = (double)row[j];                                                              \
                first = v > mx ? j : first;                                                             \
                mx = v > mx ? v : mx;                                                                   \
            }                                                                                           \
            const __m256d vmx = _mm256_set1_pd(mx), half = _mm256_set1_pd(0.5);                         \
            double *e = b->e + (i - start) * kp, *z = b->z + (i - start) * kp;                          \
            unsigned char *masks = b->masks + (i - start) * groups;                                     \
            uint64_t candidates = groups > 16 ? ~(uint64_t)0 : 0;                                       \
            for (Py_ssize_t g = 0; g < groups; g++) {                                                   \
                const __m256d zv = _mm256_sub_pd(load4_##SUFFIX(row, 4 * g, k), vmx);                  \
                int redo;                                                                               \
                const __m256d ev = exact_exp4(zv, &redo);                                               \
                _mm256_storeu_pd(e + 4 * g, ev);                                                        \
                _mm256_storeu_pd(z + 4 * g, zv);                                                        \
                masks[g] = (unsigned char)redo;                                                         \
                if (g < 16) {                                                                           \
                    const int big = _mm256_movemask_pd(_mm256_cmp_pd(ev, half, _CMP_GE_OQ));           \
                    candidates |= (uint64_t)(big | redo) << (4 * g);                                    \
                }                                                                                       \
            }                                                                                           \
            b->first_max[i - start] = first;                                                            \
            b->candidates[i - start] = candidates;                                                      \
        }                                                                                               \
        _mm256_zeroupper(); /* the C library's exp is SSE code: calls with dirty upper halves are slow */ \
        for (Py_ssize_t i = start; i < stop; i++) {                                                     \
            double *e = b->e + (i - start) * kp, *z = b->z + (i - start) * kp;                          \
            const unsigned char *masks = b->masks + (i - start) * groups;                               \
            for (Py_ssize_t g = 0; g < groups; g++) {                                                   \
                for (unsigned redo = masks[g]; redo; redo &= redo - 1) {                                \
                    const Py_ssize_t j = 4 * g + __builtin_ctz(redo);                                   \
                    if (j < k) {                                                                        \
                        e[j] = exp(z[j]);                                                               \
                    }                                                                                   \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }
DEFINE_EXP_BLOCK(f32, float)
DEFINE_EXP_BLOCK(f64, double)
#endif

#ifdef HAVE_AVX2
/* ---------- rows in lanes: logits or probabilities of few classes, four rows at a time ----------
 *
 * For K ≤ COLS_MAX_K classes a row is too short for vectors across its classes to pay (K = 10: three
 * vectors, two lanes of padding, and per row a call of the pairwise sum, a scalar maximum and the
 * predicted class's search). Here each of four lanes holds one row instead: four rows are loaded
 * four classes at a time and transposed (cols4; gathers were slower on Zen 3), and every step runs on
 * the four rows at once with the scalar loop's operations in its order, so each lane gets that row's
 * bits:
 *
 * - the maximum as the scalar loop takes it (v > mx ? v : mx, and its first index),
 * - z = x − max and exact_exp4 (the C library's exp),
 * - Σe in numpy's pairwise order (block_sum_cols: block_sum's additions, K ≤ 128),
 * - conf = 1/Σe, the predicted class the row's first largest logit (e = 1).
 *
 * Where a class before a row's first maximum has e_j ≥ 1/2, the predicted class is the first such j
 * with e_j/Σe == conf, as top_label_of_row finds it (cols_prediction, vector divisions for those
 * classes only). Rows with a value exact_exp4 left to the C library (|z| ≥ 512, NaN) are done again by
 * the scalar loop. Labels out of range stop the vector loop: the scalar loop takes over at that group
 * and reports the first bad row. */
#define COLS_MAX_K 128

/* Columns 0..k−1 of four rows (row r at base + r·k) as doubles, lane r = row r: 4 × 4 blocks loaded
 * a row at a time and transposed (a row's last, partial block by masked loads: nothing past a row is
 * read). float32 rows are transposed before their conversion: converting first (load4_f32) and
 * transposing doubles, as cols4_f64 does, was as fast at K = 10 but 1.3–1.5× slower at K = 32 and 100. */
__attribute__((target("avx2"), always_inline)) static inline void
cols4_f32(const float *base, Py_ssize_t k, __m256d *xcol)
{
    for (Py_ssize_t g = 0; g < k; g += 4) {
        __m128 r0, r1, r2, r3;
        if (g + 4 <= k) {
            r0 = _mm_loadu_ps(base + g);
            r1 = _mm_loadu_ps(base + k + g);
            r2 = _mm_loadu_ps(base + 2 * k + g);
            r3 = _mm_loadu_ps(base + 3 * k + g);
        }
        else {
            const __m128i mask = _mm_loadu_si128((const __m128i *)TAIL_MASK32[k - g]);
            r0 = _mm_maskload_ps(base + g, mask);
            r1 = _mm_maskload_ps(base + k + g, mask);
            r2 = _mm_maskload_ps(base + 2 * k + g, mask);
            r3 = _mm_maskload_ps(base + 3 * k + g, mask);
        }
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        xcol[g] = _mm256_cvtps_pd(r0);
        if (g + 1 < k) xcol[g + 1] = _mm256_cvtps_pd(r1);
        if (g + 2 < k) xcol[g + 2] = _mm256_cvtps_pd(r2);
        if (g + 3 < k) xcol[g + 3] = _mm256_cvtps_pd(r3);
    }
}

__attribute__((target("avx2"), always_inline)) static inline void
cols4_f64(const double *base, Py_ssize_t k, __m256d *xcol)
{
    for (Py_ssize_t g = 0; g < k; g += 4) {
        __m256d r0, r1, r2, r3;
        if (g + 4 <= k) {
            r0 = _mm256_loadu_pd(base + g);
            r1 = _mm256_loadu_pd(base + k + g);
            r2 = _mm256_loadu_pd(base + 2 * k + g);
            r3 = _mm256_loadu_pd(base + 3 * k + g);
        }
        else {
            const __m256i mask = _mm256_loadu_si256((const __m256i *)TAIL_MASK64[k - g]);
            r0 = _mm256_maskload_pd(base + g, mask);
            r1 = _mm256_maskload_pd(base + k + g, mask);
            r2 = _mm256_maskload_pd(base + 2 * k + g, mask);
            r3 = _mm256_maskload_pd(base + 3 * k + g, mask);
        }
        const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
        const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
        xcol[g] = _mm256_permute2f128_pd(t0, t2, 0x20);
        if (g + 1 < k) xcol[g + 1] = _mm256_permute2f128_pd(t1, t3, 0x20);
        if (g + 2 < k) xcol[g + 2] = _mm256_permute2f128_pd(t0, t2, 0x31);
        if (g + 3 < k) xcol[g + 3] = _mm256_permute2f128_pd(t1, t3, 0x31);
    }
}

/* block_sum of n ≤ 128 values per lane (e: n vectors): the same additions in the same order. */
__attribute__((target("avx2"), always_inline)) static inline __m256d
block_sum_cols(const __m256d *e, Py_ssize_t n)
{
    if (n < 8) {
        __m256d res = _mm256_setzero_pd();
        for (Py_ssize_t i = 0; i < n; i++) {
            res = _mm256_add_pd(res, e[i]);
        }
        return res;
    }
    __m256d r0 = e[0], r1 = e[1], r2 = e[2], r3 = e[3], r4 = e[4], r5 = e[5], r6 = e[6], r7 = e[7];
    Py_ssize_t i;
    const Py_ssize_t stop = n - (n % 8);
    for (i = 8; i < stop; i += 8) {
        r0 = _mm256_add_pd(r0, e[i]);
        r1 = _mm256_add_pd(r1, e[i + 1]);
        r2 = _mm256_add_pd(r2, e[i + 2]);
        r3 = _mm256_add_pd(r3, e[i + 3]);
        r4 = _mm256_add_pd(r4, e[i + 4]);
        r5 = _mm256_add_pd(r5, e[i + 5]);
        r6 = _mm256_add_pd(r6, e[i + 6]);
        r7 = _mm256_add_pd(r7, e[i + 7]);
    }
    __m256d res = _mm256_add_pd(_mm256_add_pd(_mm256_add_pd(r0, r1), _mm256_add_pd(r2, r3)),
                                _mm256_add_pd(_mm256_add_pd(r4, r5), _mm256_add_pd(r6, r7)));
    for (; i < n; i++) {
        res = _mm256_add_pd(res, e[i]);
    }
    return res;
}

/* Whether labels[0..3] all lie in [0, k). */
static inline int
labels4_ok(const int64_t *y, Py_ssize_t k)
{
    return ((uint64_t)y[0] < (uint64_t)k) & ((uint64_t)y[1] < (uint64_t)k) & ((uint64_t)y[2] < (uint64_t)k)
           & ((uint64_t)y[3] < (uint64_t)k);
}

/* The largest of k column vectors in each lane as the scalar loops take it (v > mx ? v : mx, so a NaN
 * is never taken after the first value) and its first index (as doubles, in *first). */
__attribute__((target("avx2"), always_inline)) static inline __m256d
cols_first_max(const __m256d *col, Py_ssize_t k, __m256d *first)
{
    __m256d mx = col[0], at = _mm256_setzero_pd();
    for (Py_ssize_t j = 1; j < k; j++) {
        const __m256d gt = _mm256_cmp_pd(col[j], mx, _CMP_GT_OQ);
        at = _mm256_blendv_pd(at, _mm256_set1_pd((double)j), gt);
        mx = _mm256_blendv_pd(mx, col[j], gt);
    }
    *first = at;
    return mx;
}

/* Four rows' logits (row r at base + r·k): their maximum as the scalar loop takes it and its first index
 * (as doubles), e = exp(x − max) (K vectors, ecol; z = x − max in zcol unless NULL); returns the lanes
 * exact_exp4 left to the C library.
 * before[j]: the lanes whose e_j ≥ 1/2 with j before their first maximum; *any_before: their union. */
#define DEFINE_COLS_EXP(SUFFIX, T)                                                                         \
    __attribute__((target("avx2,fma"), always_inline)) static inline unsigned cols_exp_##SUFFIX(            \
        const T *base, Py_ssize_t k, __m256d *ecol, __m256d *zcol, __m256d *first_out, unsigned char *before, \
        unsigned *any_before)                                                                                \
    {                                                                                                        \
        __m256d xcol[COLS_MAX_K];                                                                            \
        cols4_##SUFFIX(base, k, xcol);                                                                       \
        __m256d first;                                                                                       \
        const __m256d mx = cols_first_max(xcol, k, &first);                                                  \
        int redo_lanes = 0;                                                                                  \
        unsigned any = 0;                                                                                    \
        const __m256d half = _mm256_set1_pd(0.5);                                                            \
        for (Py_ssize_t j = 0; j < k; j++) {                                                                 \
            int redo;                                                                                        \
            const __m256d z = _mm256_sub_pd(xcol[j], mx);                                                    \
            const __m256d e = exact_exp4(z, &redo);                                                          \
            ecol[j] = e;                                                                                     \
            if (zcol != NULL) {                                                                              \
                zcol[j] = z;                                                                                 \
            }                                                                                                \
            redo_lanes |= redo;                                                                              \
            const unsigned cand = (unsigned)_mm256_movemask_pd(_mm256_and_pd(                                \
                _mm256_cmp_pd(e, half, _CMP_GE_OQ), _mm256_cmp_pd(_mm256_set1_pd((double)j), first, _CMP_LT_OQ))); \
            before[j] = (unsigned char)cand;                                                                 \
            any |= cand;                                                                                     \
        }                                                                                                    \
        *first_out = first;                                                                                  \
        *any_before = any;                                                                                   \
        return (unsigned)redo_lanes;                                                                         \
    }
DEFINE_COLS_EXP(f32, float)
DEFINE_COLS_EXP(f64, double)

/* The predicted class of four rows (lanes) from their first maxima: in the lanes of any_before, the first
 * j with e_j/Σe == conf among the candidates before[j] (top_label_of_row's search), else the first
 * maximum. */
__attribute__((target("avx2"), always_inline)) static inline __m256d
cols_prediction(const __m256d *ecol, Py_ssize_t k, __m256d first, __m256d total, __m256d conf,
                const unsigned char *before, unsigned any_before)
{
    __m256d best = first;
    for (Py_ssize_t j = 0; any_before && j < k; j++) {
        const unsigned cand = before[j] & any_before;
        if (cand) {
            const unsigned hit = cand & (unsigned)_mm256_movemask_pd(
                _mm256_cmp_pd(_mm256_div_pd(ecol[j], total), conf, _CMP_EQ_OQ));
            const __m256i lanes = _mm256_cmpgt_epi64(
                _mm256_and_si256(_mm256_set1_epi64x(hit), _mm256_set_epi64x(8, 4, 2, 1)), _mm256_setzero_si256());
            best = _mm256_blendv_pd(best, _mm256_set1_pd((double)j), _mm256_castsi256_pd(lanes));
            any_before &= ~hit;
        }
    }
    return best;
}
#endif

/* ---------- fused_rows ---------- */

typedef struct {
    Py_ssize_t rows, k, m;
    int is_logits, want_top5, classwise;
    const int64_t *labels;
    const double *edges;
    double *conf, *nll, *brier;
    unsigned char *correct, *top5;
    int64_t *count;
    double *sum_p, *sum_y;
    double *p, *z; /* two length-K work rows */
    Py_ssize_t bad_row; /* first row whose label is out of range, or −1 */
} Fused;

/* The top-5 rank of logits, on the scores themselves: the number of classes j with x_j > x_y, or
 * x_j = x_y and j < y. Not on z = x − max: that subtraction rounds, and distinct logits beside a
 * dwarfing one (3e17) or tiny ones beside a large maximum would tie there. */
#define DEFINE_RAW_RANK(SUFFIX, T)                                                      \
    static inline Py_ssize_t raw_rank_##SUFFIX(const T *row, Py_ssize_t k, int64_t y)   \
    {                                                                                   \
        const double s_y = (double)row[y];                                              \
        Py_ssize_t rank = 0;                                                            \
        for (Py_ssize_t j = 0; j < k; j++) {                                            \
            const double v = (double)row[j];                                            \
            rank += (v > s_y) | ((v == s_y) & (j < y));                                 \
        }                                                                               \
        return rank;                                                                    \
    }
DEFINE_RAW_RANK(f32, float)
DEFINE_RAW_RANK(f64, double)

#define DEFINE_FUSED_ROWS(NAME, T)                                                      \
    static void NAME(Fused *f, const T *restrict scores)                                \
    {                                                                                   \
        /* every pointer and size in a local: the stores into the cells cannot then alias \
         * them (Python's CFLAGS include -fno-strict-aliasing), so they stay in registers */ \
        const Py_ssize_t k = f->k, m = f->m, rows = f->rows;                            \
        const int is_logits = f->is_logits, want_top5 = f->want_top5;                   \
        const int classwise = f->classwise;                                             \
        const int64_t *restrict labels = f->labels;                                     \
        const double *restrict edges = f->edges;                                        \
        double *restrict conf = f->conf, *restrict nll = f->nll;                        \
        double *restrict brier = f->brier;                                              \
        unsigned char *restrict correct = f->correct, *restrict top5 = f->top5;         \
        int64_t *restrict count = f->count;                                             \
        double *restrict sum_p = f->sum_p, *restrict sum_y = f->sum_y;                  \
        double *restrict p = f->p, *restrict z = f->z;                                  \
        for (Py_ssize_t i = 0; i < rows; i++) {                                         \
            const T *row = scores + i * k;                                              \
            const int64_t y = labels[i];                                                  \
            if (y < 0 || y >= k) {                                                      \
                f->bad_row = i;                                                         \
                return;                                                                 \
            }                                                                           \
            double logp_y;                                                              \
            const double *ranked;                                                       \
            if (is_logits) {                                                            \
                double mx = (double)row[0];                                             \
                for (Py_ssize_t j = 1; j < k; j++) {                                    \
                    double v = (double)row[j];                                          \
                    if (v > mx) {                                                       \
                        mx = v;                                                         \
                    }                                                                   \
                }                                                                       \
                for (Py_ssize_t j = 0; j < k; j++) {                                    \
                    z[j] = (double)row[j] - mx;                                         \
                    p[j] = exp(z[j]);                                                   \
                }                                                                       \
                double total = pairwise_sum(p, k);                                      \
                for (Py_ssize_t j = 0; j < k; j++) {                                    \
                    p[j] = p[j] / total;                                                \
                }                                                                       \
                logp_y = z[y] - log(total);                                             \
                ranked = z; /* not for the top-5 rank: raw_rank */                      \
            }                                                                           \
            else {                                                                      \
                for (Py_ssize_t j = 0; j < k; j++) {                                    \
                    p[j] = (double)row[j];                                              \
                }                                                                       \
                logp_y = p[y] > 0.0 ? log(p[y]) : -INFINITY;                            \
                ranked = p;                                                             \
            }                                                                           \
            Py_ssize_t best = 0;                                                        \
            for (Py_ssize_t j = 1; j < k; j++) {                                        \
                if (p[j] > p[best]) {                                                   \
                    best = j;                                                           \
                }                                                                       \
            }                                                                           \
            conf[i] = p[best];                                                          \
            correct[i] = best == y;                                                     \
            nll[i] = -logp_y;                                                           \
            double acc = 0.0;                                                           \
            for (Py_ssize_t j = 0; j < k; j++) {                                        \
                double d = j == y ? p[j] - 1.0 : p[j];                                  \
                acc += d * d;                                                           \
            }                                                                           \
            brier[i] = acc;                                                             \
            if (want_top5) {                                                            \
                Py_ssize_t rank = 0;                                                    \
                if (is_logits) {                                                        \
                    rank = sizeof(T) == 4 ? raw_rank_f32((const float *)row, k, y)      \
                                          : raw_rank_f64((const double *)row, k, y);    \
                }                                                                       \
                else {                                                                  \
                    const double s_y = ranked[y];                                       \
                    for (Py_ssize_t j = 0; j < k; j++) {                                \
                        rank += (ranked[j] > s_y) | ((ranked[j] == s_y) & (j < y));     \
                    }                                                                   \
                }                                                                       \
                top5[i] = rank < 5;                                                     \
            }                                                                           \
            if (classwise) {                                                            \
                for (Py_ssize_t j = 0; j < k; j++) {                                    \
                    const double v = p[j];                                              \
                    int64_t b;                                                          \
                    UNIFORM_BIN_CANDIDATE(v, m, edges, b);                              \
                    if (b > m - 1) {                                                    \
                        b = m - 1;                                                      \
                    }                                                                   \
                    if (b < 0) {                                                        \
                        b = 0;                                                          \
                    }                                                                   \
                    const Py_ssize_t cell = j * m + (Py_ssize_t)b;                      \
                    count[cell] += 1;                                                   \
                    sum_p[cell] += v;                                                   \
                    if (j == y) {                                                       \
                        sum_y[cell] += 1.0;                                             \
                    }                                                                   \
                }                                                                       \
            }                                                                           \
        }                                                                               \
    }

DEFINE_FUSED_ROWS(fused_rows_f32, float)
DEFINE_FUSED_ROWS(fused_rows_f64, double)

#ifdef HAVE_AVX2
/* The rows done..done + rows − 1 by the scalar loop (the rest of a vector loop, or a group of four
 * with a value exact_exp4 left to the C library), adding into the same classwise cells. */
#define DEFINE_FUSED_REST(SUFFIX, T)                                                                  \
    static void fused_rest_##SUFFIX(Fused *f, const T *scores, Py_ssize_t done, Py_ssize_t rows)       \
    {                                                                                                 \
        Fused rest = *f;                                                                              \
        rest.rows = rows;                                                                             \
        rest.labels += done;                                                                          \
        rest.conf += done;                                                                            \
        rest.correct += done;                                                                         \
        rest.nll += done;                                                                             \
        rest.brier += done;                                                                           \
        if (f->want_top5) {                                                                           \
            rest.top5 += done;                                                                        \
        }                                                                                             \
        fused_rows_##SUFFIX(&rest, scores + done * f->k);                                             \
        if (rest.bad_row >= 0) {                                                                      \
            f->bad_row = rest.bad_row + done;                                                         \
        }                                                                                             \
    }
DEFINE_FUSED_REST(f32, float)
DEFINE_FUSED_REST(f64, double)

/* fused_rows for logits in blocks of rows, the same numbers bit for bit, four classes at a time:
 *
 * - exp_block: each row's maximum, z = x − max and e = exp(z) (the C library's, exact_exp4);
 * - per row: Σe (pairwise_sum), conf = 1/Σe and the predicted class as top_label_rows finds them
 *   (p = e/Σe is largest at e = 1 and non-decreasing in e), NLL = −(z_y − log Σe);
 * - p = e/Σe by vector division (IEEE: the scalar division's bits), Brier's products (p − [j = y])²
 *   by vector multiplication, added class after class as the scalar loop adds them;
 * - the top-5 rank on the logits themselves (raw_rank);
 * - the classwise bin of every p: t = p·M; where t is more than FUSED_BIN_DELTA from every integer
 *   ≥ 1, p lies strictly inside ((c − 1)/M, c/M) for c = ⌈t⌉ (t's and the edges' rounding errors are
 *   below M·2^-52, far below the margin, for M ≤ FUSED_VECTOR_MAX_BINS), which is the bin
 *   UNIFORM_BIN_CANDIDATE finds: c − 1, clamped to [0, M − 1] (t < 1/2, including p = 0, is bin 0
 *   whatever the edges' comparisons say); the other lanes (t near an edge, NaN) take
 *   UNIFORM_BIN_CANDIDATE itself. Each p is then added into its cell (class, bin) in row order, as the
 *   scalar loop adds it. Used only with the edges b/M (uniform_edges), which the margin assumes. */
#define FUSED_BIN_DELTA 0x1p-30
#define FUSED_VECTOR_MAX_BINS (1 << 20)

typedef struct {
    double *p, *dd;  /* k_padded each: a row's probabilities and Brier's squared terms */
    int32_t *cells;  /* k_padded: each class's classwise cell j·M + b */
} FusedRow;

#define DEFINE_FUSED_AVX2(SUFFIX, T)                                                                     \
    __attribute__((target("avx2,fma"))) static void fused_avx2_##SUFFIX(Fused *f, ExpBlock *blk,        \
                                                                       FusedRow *w, const T *scores)    \
    {                                                                                                    \
        const Py_ssize_t k = f->k, m = f->m, rows = f->rows, kp = blk->k_padded, groups = kp / 4;        \
        const int want_top5 = f->want_top5, classwise = f->classwise;                                    \
        const int64_t *restrict labels = f->labels;                                                      \
        const double *restrict edges = f->edges;                                                         \
        double *restrict conf = f->conf, *restrict nll = f->nll, *restrict brier = f->brier;             \
        unsigned char *restrict correct = f->correct, *restrict top5 = f->top5;                          \
        int64_t *restrict count = f->count;                                                              \
        double *restrict sum_p = f->sum_p, *restrict sum_y = f->sum_y;                                   \
        double *restrict p = w->p, *restrict dd = w->dd;                                                 \
        int32_t *restrict cells = w->cells;                                                              \
        const __m256d one = _mm256_set1_pd(1.0), zero = _mm256_setzero_pd();                             \
        const __m256d vm = _mm256_set1_pd((double)m), top_bin = _mm256_set1_pd((double)(m - 1));         \
        const __m256d delta = _mm256_set1_pd(FUSED_BIN_DELTA), half = _mm256_set1_pd(0.5);               \
        const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));          \
        const __m256i lane = _mm256_set_epi64x(3, 2, 1, 0);                                              \
        const __m128i lane_cells = _mm_mullo_epi32(_mm_set_epi32(3, 2, 1, 0), _mm_set1_epi32((int)m));   \
        const unsigned tail = k % 4 ? (1u << (k % 4)) - 1u : 15u; /* the last group's lanes j < K */     \
        for (Py_ssize_t start = 0; start < rows; start += blk->block_rows) {                            \
            const Py_ssize_t stop = start + blk->block_rows < rows ? start + blk->block_rows : rows;     \
            exp_block_##SUFFIX(blk, scores, start, stop);                                                \
            for (Py_ssize_t i = start; i < stop; i++) {                                                  \
                const int64_t y = labels[i];                                                             \
                if (y < 0 || y >= k) {                                                                   \
                    f->bad_row = i;                                                                      \
                    return;                                                                              \
                }                                                                                        \
                const double *e = blk->e + (i - start) * kp, *z = blk->z + (i - start) * kp;             \
                _mm256_zeroupper(); /* before calling SSE code: 8× slower calls without (measured) */    \
                unsigned redone = 0;                                                                     \
                for (Py_ssize_t g = 0; g < groups; g++) {                                                \
                    redone |= blk->masks[(i - start) * groups + g];                                      \
                }                                                                                        \
                if (redone) { /* a value left to the C library (|z| ≥ 512, NaN): the scalar loop's row */ \
                    fused_rest_##SUFFIX(f, scores, i, 1);                                                \
                    continue;                                                                            \
                }                                                                                        \
                const double total = pairwise_sum(e, k), c = 1.0 / total;                                \
                const Py_ssize_t best = block_prediction(blk, i - start, total, c);                      \
                conf[i] = c;                                                                             \
                correct[i] = best == y;                                                                  \
                nll[i] = -(z[y] - log(total));                                                           \
                const __m256d vt = _mm256_set1_pd(total);                                                \
                const __m256i vy = _mm256_set1_epi64x(y);                                                \
                for (Py_ssize_t g = 0; g < groups; g++) {                                                \
                    const __m256i j = _mm256_add_epi64(lane, _mm256_set1_epi64x(4 * g));                 \
                    const __m256d pv = _mm256_div_pd(_mm256_loadu_pd(e + 4 * g), vt);                    \
                    _mm256_storeu_pd(p + 4 * g, pv);                                                     \
                    const __m256d is_y = _mm256_castsi256_pd(_mm256_cmpeq_epi64(j, vy));                \
                    const __m256d d = _mm256_sub_pd(pv, _mm256_and_pd(is_y, one));                       \
                    _mm256_storeu_pd(dd + 4 * g, _mm256_mul_pd(d, d));                                   \
                    const unsigned lanes = g == groups - 1 ? tail : 15u;                                 \
                    if (classwise) {                                                                     \
                        const __m256d t = _mm256_mul_pd(pv, vm);                                         \
                        const __m256d near = _mm256_round_pd(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); \
                        const __m256d clear = _mm256_or_pd(                                              \
                            _mm256_cmp_pd(_mm256_and_pd(_mm256_sub_pd(t, near), abs_mask), delta, _CMP_GT_OQ), \
                            _mm256_cmp_pd(near, half, _CMP_LT_OQ));                                      \
                        const __m256d bin = _mm256_min_pd(                                               \
                            _mm256_max_pd(_mm256_sub_pd(_mm256_round_pd(t, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC), one), \
                                          zero), top_bin);                                               \
                        const __m128i cell = _mm_add_epi32(                                              \
                            _mm256_cvttpd_epi32(bin),                                                    \
                            _mm_add_epi32(lane_cells, _mm_set1_epi32((int)(4 * g * m))));                \
                        _mm_storeu_si128((__m128i *)(cells + 4 * g), cell);                              \
                        for (unsigned redo = ~(unsigned)_mm256_movemask_pd(clear) & lanes; redo; redo &= redo - 1) { \
                            const Py_ssize_t jj = 4 * g + __builtin_ctz(redo);                           \
                            int64_t b;                                                                   \
                            UNIFORM_BIN_CANDIDATE(p[jj], m, edges, b);                                   \
                            b = b > m - 1 ? m - 1 : (b < 0 ? 0 : b);                                     \
                            cells[jj] = (int32_t)(jj * m + b);                                           \
                        }                                                                                \
                    }                                                                                    \
                }                                                                                        \
                double acc = 0.0;                                                                        \
                for (Py_ssize_t jj = 0; jj < k; jj++) {                                                  \
                    acc += dd[jj];                                                                       \
                }                                                                                        \
                brier[i] = acc;                                                                          \
                if (want_top5) { /* on the logits themselves (raw_rank), not on z */                     \
                    top5[i] = raw_rank_##SUFFIX(scores + i * k, k, y) < 5;                               \
                }                                                                                        \
                if (classwise) {                                                                         \
                    for (Py_ssize_t jj = 0; jj < k; jj++) {                                              \
                        count[cells[jj]] += 1;                                                           \
                        sum_p[cells[jj]] += p[jj];                                                       \
                    }                                                                                    \
                    sum_y[cells[y]] += 1.0;                                                              \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
    }
DEFINE_FUSED_AVX2(f32, float)
DEFINE_FUSED_AVX2(f64, double)

/* ---------- fused_rows with rows in lanes ---------- */

/* Rows whose NLL waits for its logarithm: the C library's log is called after their vector loop. */
#define FUSED_COLS_BLOCK 64

/* fused_rows for logits or probabilities of 2 ≤ K ≤ COLS_MAX_K classes, four rows at a time, one per
 * lane, the scalar loop's numbers bit for bit:
 *
 * - logits: cols_exp, block_sum_cols and cols_prediction as in top_label_cols: e, Σe, conf = 1/Σe and
 *   the predicted class (p = e/Σe is largest at e = 1); probabilities: p itself (Σe taken as 1, and
 *   p/1 = p), conf and the predicted class the first largest p (cols_first_max);
 * - class after class on the four rows: p = e/Σe (vector division), Brier's (p − [j = y])² added in
 *   the scalar loop's order, the top-5 rank by comparisons of the ranked scores (x, or p) against the
 *   label's, and the classwise bin of p as fused_avx2 finds it (FUSED_BIN_DELTA; lanes near an edge
 *   by UNIFORM_BIN_CANDIDATE);
 * - then each p added into its cell row after row, class after class: a row's cells are distinct (no
 *   addition waits for the one before), and each cell, of one class, gets its rows in order;
 * - NLL = −(z_y − log Σe), or −log p_y (+inf for p_y ≤ 0), the logs after each block of
 *   FUSED_COLS_BLOCK rows (no call in the vector loop).
 *
 * A group of four rows with a value exact_exp4 left to the C library (|z| ≥ 512, NaN) is done by the
 * scalar loop in its place; a label out of range stops the vector loop (the scalar loop takes over at
 * that group and reports the first bad row). Used only with the edges b/M (fused_vector_bins_ok). */
#define DEFINE_FUSED_COLS(SUFFIX, T)                                                                       \
    __attribute__((target("avx2,fma"))) static void fused_cols_##SUFFIX(Fused *f, const T *scores)          \
    {                                                                                                      \
        const Py_ssize_t k = f->k, m = f->m, rows = f->rows;                                               \
        const int want_top5 = f->want_top5, classwise = f->classwise, is_logits = f->is_logits;            \
        const int64_t *restrict labels = f->labels;                                                        \
        const double *restrict edges = f->edges;                                                           \
        double *restrict conf = f->conf, *restrict nll = f->nll, *restrict brier = f->brier;               \
        unsigned char *restrict correct = f->correct, *restrict top5 = f->top5;                            \
        int64_t *restrict count = f->count;                                                                \
        double *restrict sum_p = f->sum_p, *restrict sum_y = f->sum_y;                                     \
        __m256d ecol[COLS_MAX_K], zcol[COLS_MAX_K], xcol[COLS_MAX_K];                                      \
        /* the top-5 rank's scores: the logits themselves (not z = x − max, which rounds), or p */         \
        const __m256d *const ranked = is_logits ? xcol : ecol;                                             \
        unsigned char before[COLS_MAX_K];                                                                  \
        int32_t group_cells[4 * COLS_MAX_K]; /* class j of row r: group_cells[4j + r], its p group_p[4j + r] */ \
        double group_p[4 * COLS_MAX_K];                                                                    \
        double z_y[FUSED_COLS_BLOCK];                                                                      \
        unsigned char waiting[FUSED_COLS_BLOCK / 4];                                                       \
        const __m256d one = _mm256_set1_pd(1.0), zero = _mm256_setzero_pd();                               \
        const __m256d vm = _mm256_set1_pd((double)m), top_bin = _mm256_set1_pd((double)(m - 1));           \
        const __m256d delta = _mm256_set1_pd(FUSED_BIN_DELTA), half = _mm256_set1_pd(0.5);                 \
        const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));            \
        Py_ssize_t i = 0;                                                                                  \
        int stopped = 0;                                                                                   \
        while (!stopped && i + 4 <= rows) {                                                                \
            const Py_ssize_t block = i, block_end = i + FUSED_COLS_BLOCK < rows ? i + FUSED_COLS_BLOCK : rows; \
            for (; i + 4 <= block_end; i += 4) {                                                           \
                const int64_t *y = labels + i;                                                             \
                const Py_ssize_t group = (i - block) / 4;                                                  \
                if (!labels4_ok(y, k)) {                                                                   \
                    stopped = 1;                                                                           \
                    break;                                                                                 \
                }                                                                                          \
                __m256d first, total = one;                                                                \
                double bests[4];                                                                           \
                if (is_logits) {                                                                           \
                    unsigned any_before;                                                                   \
                    if (cols_exp_##SUFFIX(scores + i * k, k, ecol, zcol, &first, before, &any_before)) {   \
                        _mm256_zeroupper(); /* the scalar loop calls the C library (SSE code) */           \
                        fused_rest_##SUFFIX(f, scores, i, 4);                                              \
                        waiting[group] = 0;                                                                \
                        continue;                                                                          \
                    }                                                                                      \
                    total = block_sum_cols(ecol, k);                                                       \
                    const __m256d c = _mm256_div_pd(one, total);                                           \
                    _mm256_storeu_pd(conf + i, c);                                                         \
                    _mm256_storeu_pd(nll + i, total); /* its log taken after the block */                  \
                    _mm256_storeu_pd(bests, cols_prediction(ecol, k, first, total, c, before, any_before)); \
                }                                                                                          \
                else { /* probabilities: p itself (p/1 below is p), conf the first largest p */            \
                    cols4_##SUFFIX(scores + i * k, k, ecol);                                               \
                    _mm256_storeu_pd(conf + i, cols_first_max(ecol, k, &first));                           \
                    _mm256_storeu_pd(bests, first);                                                        \
                }                                                                                          \
                waiting[group] = 1;                                                                        \
                double *zy = z_y + (i - block), ry[4];                                                     \
                if (want_top5 && is_logits) {                                                              \
                    cols4_##SUFFIX(scores + i * k, k, xcol);                                               \
                }                                                                                          \
                for (int r = 0; r < 4; r++) { /* the label's z_y (NLL), or p_y; its ranked score */        \
                    correct[i + r] = (int64_t)bests[r] == y[r];                                            \
                    zy[r] = ((const double *)&(is_logits ? zcol : ecol)[y[r]])[r];                         \
                    ry[r] = want_top5 ? ((const double *)&ranked[y[r]])[r] : 0.0;                          \
                }                                                                                          \
                const __m256d yv = _mm256_setr_pd((double)y[0], (double)y[1], (double)y[2], (double)y[3]);  \
                const __m256d zyv = _mm256_loadu_pd(ry);                                                   \
                __m256d acc = zero;                                                                        \
                __m256i rank = _mm256_setzero_si256();                                                     \
                for (Py_ssize_t j = 0; j < k; j++) {                                                       \
                    const __m256d jv = _mm256_set1_pd((double)j);                                          \
                    const __m256d pv = _mm256_div_pd(ecol[j], total);                                      \
                    const __m256d is_y = _mm256_cmp_pd(jv, yv, _CMP_EQ_OQ);                                \
                    const __m256d d = _mm256_sub_pd(pv, _mm256_and_pd(is_y, one));                         \
                    acc = _mm256_add_pd(acc, _mm256_mul_pd(d, d));                                         \
                    if (want_top5) {                                                                       \
                        const __m256d above = _mm256_or_pd(                                                \
                            _mm256_cmp_pd(ranked[j], zyv, _CMP_GT_OQ),                                     \
                            _mm256_and_pd(_mm256_cmp_pd(ranked[j], zyv, _CMP_EQ_OQ),                       \
                                          _mm256_cmp_pd(jv, yv, _CMP_LT_OQ)));                             \
                        rank = _mm256_sub_epi64(rank, _mm256_castpd_si256(above));                         \
                    }                                                                                      \
                    if (classwise) {                                                                       \
                        const __m256d t = _mm256_mul_pd(pv, vm);                                           \
                        const __m256d near = _mm256_round_pd(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); \
                        const __m256d clear = _mm256_or_pd(                                                \
                            _mm256_cmp_pd(_mm256_and_pd(_mm256_sub_pd(t, near), abs_mask), delta, _CMP_GT_OQ), \
                            _mm256_cmp_pd(near, half, _CMP_LT_OQ));                                        \
                        const __m256d bin = _mm256_min_pd(                                                 \
                            _mm256_max_pd(_mm256_sub_pd(_mm256_round_pd(t, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC), one), \
                                          zero), top_bin);                                                 \
                        int32_t *cells = group_cells + 4 * j;                                              \
                        double *p = group_p + 4 * j;                                                       \
                        _mm_storeu_si128((__m128i *)cells, _mm_add_epi32(_mm256_cvttpd_epi32(bin),         \
                                                                         _mm_set1_epi32((int)(j * m))));    \
                        _mm256_storeu_pd(p, pv);                                                           \
                        for (unsigned near_edge = ~(unsigned)_mm256_movemask_pd(clear) & 15u; near_edge;   \
                             near_edge &= near_edge - 1) {                                                 \
                            const int r = __builtin_ctz(near_edge);                                        \
                            int64_t b;                                                                     \
                            UNIFORM_BIN_CANDIDATE(p[r], m, edges, b);                                      \
                            b = b > m - 1 ? m - 1 : (b < 0 ? 0 : b);                                       \
                            cells[r] = (int32_t)(j * m + b);                                               \
                        }                                                                                  \
                    }                                                                                      \
                }                                                                                          \
                if (classwise) {                                                                           \
                    /* row after row, class after class (a row's cells are distinct: no chain through     \
                     * memory from one addition to the next); each cell, of one class, gets its rows in order */ \
                    for (int r = 0; r < 4; r++) {                                                          \
                        for (Py_ssize_t j = 0; j < k; j++) {                                               \
                            count[group_cells[4 * j + r]] += 1;                                            \
                            sum_p[group_cells[4 * j + r]] += group_p[4 * j + r];                           \
                        }                                                                                  \
                        sum_y[group_cells[4 * y[r] + r]] += 1.0;                                           \
                    }                                                                                      \
                }                                                                                          \
                _mm256_storeu_pd(brier + i, acc);                                                          \
                if (want_top5) {                                                                           \
                    int64_t ranks[4];                                                                      \
                    _mm256_storeu_si256((__m256i *)ranks, rank);                                           \
                    for (int r = 0; r < 4; r++) {                                                          \
                        top5[i + r] = ranks[r] < 5;                                                        \
                    }                                                                                      \
                }                                                                                          \
            }                                                                                              \
            _mm256_zeroupper(); /* before the C library's log (SSE code) */                               \
            for (Py_ssize_t g = 0; g < (i - block) / 4; g++) {                                             \
                if (waiting[g] && is_logits) {                                                             \
                    for (Py_ssize_t r = block + 4 * g; r < block + 4 * g + 4; r++) {                       \
                        nll[r] = -(z_y[r - block] - log(nll[r]));                                          \
                    }                                                                                      \
                }                                                                                          \
                else if (waiting[g]) { /* the scalar loop's −log p_y, or +inf for p_y ≤ 0 (and NaN) */     \
                    for (Py_ssize_t r = block + 4 * g; r < block + 4 * g + 4; r++) {                       \
                        const double p_y = z_y[r - block];                                                 \
                        nll[r] = -(p_y > 0.0 ? log(p_y) : -INFINITY);                                      \
                    }                                                                                      \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
        if (i < rows) {                                                                                    \
            fused_rest_##SUFFIX(f, scores, i, rows - i);                                                   \
        }                                                                                                  \
    }
DEFINE_FUSED_COLS(f32, float)
DEFINE_FUSED_COLS(f64, double)

/* Whether fused_avx2 may run on these bins: the edges are b/M (each the float64 nearest to it, as
 * binning.uniform_edges makes them), M ≤ FUSED_VECTOR_MAX_BINS, and every cell index fits an int32. */
static int
fused_vector_bins_ok(const double *edges, Py_ssize_t m, Py_ssize_t k)
{
    if (m > FUSED_VECTOR_MAX_BINS || (double)k * (double)m >= 2147483647.0) {
        return 0;
    }
    for (Py_ssize_t b = 0; b <= m; b++) {
        if (edges[b] != (double)b / (double)m) {
            return 0;
        }
    }
    return 1;
}
#endif

static const int KINDS_FLOAT[] = {K_F32, K_F64, 0};
static const int KINDS_F64[] = {K_F64, 0};
static const int KINDS_I64[] = {K_I64, 0};
static const int KINDS_BOOL[] = {K_BOOL, 0};
static const int KINDS_TARGET[] = {K_BOOL, K_F64, 0};

/* The error of a label outside [0, K) at row ``row``. */
static void
set_bad_label(Py_ssize_t row, int64_t label, Py_ssize_t k)
{
    PyErr_Format(PyExc_ValueError, "labels[%zd] = %lld: expected a class index in [0, %zd)", row, (long long)label, k);
}

/* The end of a row kernel's wrapper (views v released): the error of the first row whose label is out
 * of range (bad_row ≥ 0), else whether the vector loop ran. */
static PyObject *
rows_result(Views *v, Py_ssize_t bad_row, const int64_t *labels, Py_ssize_t k, int use_vector)
{
    if (bad_row >= 0) {
        set_bad_label(bad_row, labels[bad_row], k);
    }
    views_release(v);
    return bad_row >= 0 ? NULL : PyBool_FromLong(use_vector);
}

/* The scores (float32/float64, (N, K), K ≥ 1) and labels (int64, (N,)) of a row kernel, taken into v.
 * Returns 0 with an exception set (the caller releases v). */
static int
take_rows(Views *v, PyObject *o_scores, PyObject *o_labels, int *kind_scores, Py_buffer **scores, Py_buffer **labels)
{
    int kind;
    *scores = views_next(v);
    TAKE(*v, o_scores, "scores", 2, KINDS_FLOAT, 0, *kind_scores);
    if ((*scores)->shape[1] < 1) {
        PyErr_SetString(PyExc_ValueError, "scores: expected at least one column");
        goto fail;
    }
    *labels = views_next(v);
    TAKE(*v, o_labels, "labels", 1, KINDS_I64, 0, kind);
    if (!check_len(*labels, "labels", 0, (*scores)->shape[0])) goto fail;
    return 1;
fail:
    return 0;
}

/* The outputs conf (float64, (rows,)) and correct (bool, (rows,)) of a row kernel, taken into v, writable.
 * Returns 0 with an exception set (the caller releases v). */
static int
take_conf_correct(Views *v, PyObject *o_conf, PyObject *o_correct, Py_ssize_t rows, Py_buffer **conf,
                  Py_buffer **correct)
{
    int kind;
    *conf = views_next(v);
    TAKE(*v, o_conf, "conf", 1, KINDS_F64, 1, kind);
    if (!check_len(*conf, "conf", 0, rows)) goto fail;
    *correct = views_next(v);
    TAKE(*v, o_correct, "correct", 1, KINDS_BOOL, 1, kind);
    if (!check_len(*correct, "correct", 0, rows)) goto fail;
    return 1;
fail:
    return 0;
}

/* Two 1-D arrays of one length N (the first's), e.g. sorted samples' keys or values and their
 * correctness, taken into v: `kinds` and `writable` for each. Returns N, or −1 with an exception set
 * (the caller releases v). */
static Py_ssize_t
take_column_pair(Views *v, PyObject *o_a, const char *a_name, const int *a_kinds, int a_writable, PyObject *o_b,
                 const char *b_name, const int *b_kinds, int b_writable, Py_buffer **a, Py_buffer **b)
{
    int kind;
    *a = views_next(v);
    TAKE(*v, o_a, a_name, 1, a_kinds, a_writable, kind);
    *b = views_next(v);
    TAKE(*v, o_b, b_name, 1, b_kinds, b_writable, kind);
    if (!check_len(*b, b_name, 0, (*a)->shape[0])) goto fail;
    return (*a)->shape[0];
fail:
    return -1;
}

/* x and out of an elementwise test hook: float64 (n,) each, out writable. Returns 0 with an exception set
 * (the caller releases v). */
static int
take_x_out(Views *v, PyObject *o_x, PyObject *o_out, Py_buffer **x, Py_buffer **out)
{
    int kind;
    *x = views_next(v);
    TAKE(*v, o_x, "x", 1, KINDS_F64, 0, kind);
    *out = views_next(v);
    TAKE(*v, o_out, "out", 1, KINDS_F64, 1, kind);
    if (!check_len(*out, "out", 0, (*x)->shape[0])) goto fail;
    return 1;
fail:
    return 0;
}

PyDoc_STRVAR(fused_rows_doc,
"fused_rows(scores, labels, is_logits, m, edges, want_top5, classwise, conf, correct, nll, brier, top5, count, sum_p, sum_y, vector=True)\n"
"--\n\n"
"One row chunk of the summary pass, written into the output arrays (calibrate_cli._fused_kernel._fused_rows).\n\n"
"scores: float32/float64 (N, K); labels: int64 (N,) in [0, K); edges: float64 (m + 1,) = b/m;\n"
"conf, nll, brier: float64 (N,); correct: bool (N,); top5: bool (N,) when want_top5 (else unused);\n"
"count: int64 (K, m), sum_p, sum_y: float64 (K, m) when classwise (added to; else unused).\n"
"vector: the AVX2 loops (the same bits as the scalar loop) where the CPU has AVX2 and FMA and the edges\n"
"are b/m: for 2 <= K <= 128, four rows at a time, one per lane (fused_cols; logits need the import's\n"
"exp self-check to have passed); for logits of more classes, blocks of rows four classes at a time\n"
"(fused_avx2). Else, or with False, the scalar loop. Returns whether a vector loop ran.");

static PyObject *
py_fused_rows(PyObject *self, PyObject *args)
{
    PyObject *o_scores, *o_labels, *o_edges, *o_conf, *o_correct, *o_nll, *o_brier, *o_top5, *o_count, *o_sum_p,
        *o_sum_y;
    int is_logits, want_top5, classwise, vector = 1;
    Py_ssize_t m;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOpnOppOOOOOOOO|p:fused_rows", &o_scores, &o_labels, &is_logits, &m, &o_edges,
                          &want_top5, &classwise, &o_conf, &o_correct, &o_nll, &o_brier, &o_top5, &o_count,
                          &o_sum_p, &o_sum_y, &vector)) {
        return NULL;
    }
    Views v = {.n = 0};
    int kind_scores, kind;
    Py_buffer *b_scores, *b_labels, *b_edges, *b_conf, *b_correct, *b_nll, *b_brier, *b_top5, *b_count, *b_sum_p,
        *b_sum_y;
    if (!take_rows(&v, o_scores, o_labels, &kind_scores, &b_scores, &b_labels)) goto fail;
    const Py_ssize_t rows = b_scores->shape[0], k = b_scores->shape[1];
    if (m < 1) {
        PyErr_SetString(PyExc_ValueError, "m: expected at least one bin");
        goto fail;
    }
    b_edges = views_next(&v);
    TAKE(v, o_edges, "edges", 1, KINDS_F64, 0, kind);
    if (!check_len(b_edges, "edges", 0, m + 1)) goto fail;
    if (!take_conf_correct(&v, o_conf, o_correct, rows, &b_conf, &b_correct)) goto fail;
    b_nll = views_next(&v);
    TAKE(v, o_nll, "nll", 1, KINDS_F64, 1, kind);
    if (!check_len(b_nll, "nll", 0, rows)) goto fail;
    b_brier = views_next(&v);
    TAKE(v, o_brier, "brier", 1, KINDS_F64, 1, kind);
    if (!check_len(b_brier, "brier", 0, rows)) goto fail;
    b_top5 = views_next(&v);
    TAKE(v, o_top5, "top5", 1, KINDS_BOOL, 1, kind);
    if (want_top5 && !check_len(b_top5, "top5", 0, rows)) goto fail;
    b_count = views_next(&v);
    TAKE(v, o_count, "count", 2, KINDS_I64, 1, kind);
    b_sum_p = views_next(&v);
    TAKE(v, o_sum_p, "sum_p", 2, KINDS_F64, 1, kind);
    b_sum_y = views_next(&v);
    TAKE(v, o_sum_y, "sum_y", 2, KINDS_F64, 1, kind);
    if (classwise) {
        if (!check_len(b_count, "count", 0, k) || !check_len(b_count, "count", 1, m)) goto fail;
        if (!check_len(b_sum_p, "sum_p", 0, k) || !check_len(b_sum_p, "sum_p", 1, m)) goto fail;
        if (!check_len(b_sum_y, "sum_y", 0, k) || !check_len(b_sum_y, "sum_y", 1, m)) goto fail;
    }
    Fused f = {
        .rows = rows, .k = k, .m = m,
        .is_logits = is_logits, .want_top5 = want_top5, .classwise = classwise,
        .labels = (const int64_t *)b_labels->buf, .edges = (const double *)b_edges->buf,
        .conf = (double *)b_conf->buf, .nll = (double *)b_nll->buf, .brier = (double *)b_brier->buf,
        .correct = (unsigned char *)b_correct->buf, .top5 = (unsigned char *)b_top5->buf,
        .count = (int64_t *)b_count->buf, .sum_p = (double *)b_sum_p->buf, .sum_y = (double *)b_sum_y->buf,
        .bad_row = -1,
    };
    f.p = (double *)PyMem_RawMalloc(2 * (size_t)k * sizeof(double));
    if (f.p == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    f.z = f.p + k;
    int use_vector = 0;
#ifdef HAVE_AVX2
    ExpBlock block = {.e = NULL};
    FusedRow row = {.p = NULL};
    /* logits: the vector exp where it is the C library's; probabilities: rows in lanes, 2 ≤ K ≤ COLS_MAX_K */
    use_vector = vector && (is_logits ? exact_exp_ok : cols_cpu_ok && k >= 2 && k <= COLS_MAX_K)
                 && (!classwise || fused_vector_bins_ok(f.edges, m, k));
    if (use_vector) {
        const size_t kp = (size_t)(k + 3) / 4 * 4;
        row.p = (double *)PyMem_RawMalloc(kp * (2 * sizeof(double) + sizeof(int32_t)));
        if (row.p == NULL || !exp_block_alloc(&block, k)) {
            PyMem_RawFree(row.p);
            PyMem_RawFree(f.p);
            PyErr_NoMemory();
            goto fail;
        }
        row.dd = row.p + kp;
        row.cells = (int32_t *)(row.dd + kp);
    }
#endif
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2
    if (use_vector && k >= 2 && k <= COLS_MAX_K && kind_scores == K_F32) {
        fused_cols_f32(&f, (const float *)b_scores->buf);
    }
    else if (use_vector && k >= 2 && k <= COLS_MAX_K) {
        fused_cols_f64(&f, (const double *)b_scores->buf);
    }
    else if (use_vector && kind_scores == K_F32) {
        fused_avx2_f32(&f, &block, &row, (const float *)b_scores->buf);
    }
    else if (use_vector) {
        fused_avx2_f64(&f, &block, &row, (const double *)b_scores->buf);
    }
    else
#endif
    if (kind_scores == K_F32) {
        fused_rows_f32(&f, (const float *)b_scores->buf);
    }
    else {
        fused_rows_f64(&f, (const double *)b_scores->buf);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(f.p);
#ifdef HAVE_AVX2
    PyMem_RawFree(row.p);
    PyMem_RawFree(block.e);
#endif
    return rows_result(&v, f.bad_row, f.labels, k, use_vector);
fail:
    views_release(&v);
    return NULL;
}

/* ---------- top_label_rows: confidence and correctness only (ECE, MCE, the reliability diagram) ---------- */



typedef struct {
    Py_ssize_t rows, k;
    int is_logits;
    const int64_t *labels;
    double *conf;
    unsigned char *correct;
    double *e;            /* the scalar loop's row of exponentials (K) */
    Py_ssize_t bad_row;   /* first row whose label is out of range, or −1 */
#ifdef HAVE_AVX2
    ExpBlock block;       /* the vector loop's blocks */
#endif
} TopLabel;

/* One row's confidence and correctness from its exponentials e (= exp(z − max z), the C library's) or,
 * for probabilities, its values: what fused_rows gives. For logits conf = 1/Σe (the largest p = e/Σe
 * has e = exp(0) = 1, and p = e/Σe is non-decreasing in e), and the predicted class is the first j with
 * e_j/Σe == conf (only e_j ≥ 1/2 can be: below, e_j/Σe ≤ (1/2)/Σe < conf). */
static inline void
top_label_of_row(const TopLabel *t, Py_ssize_t i, const double *e, int64_t y)
{
    const Py_ssize_t k = t->k;
    double conf;
    Py_ssize_t best = 0;
    if (t->is_logits) {
        const double total = pairwise_sum(e, k);
        conf = 1.0 / total;
        for (Py_ssize_t j = 0; j < k; j++) {
            if (e[j] >= 0.5 && e[j] / total == conf) {
                best = j;
                break;
            }
        }
    }
    else {
        for (Py_ssize_t j = 1; j < k; j++) {
            if (e[j] > e[best]) {
                best = j;
            }
        }
        conf = e[best];
    }
    t->conf[i] = conf;
    t->correct[i] = best == y;
}

#define DEFINE_TOP_LABEL_SCALAR(NAME, T)                                                    \
    static void NAME(TopLabel *t, const T *scores)                                          \
    {                                                                                       \
        const Py_ssize_t k = t->k;                                                          \
        double *e = t->e;                                                                   \
        for (Py_ssize_t i = 0; i < t->rows; i++) {                                          \
            const T *row = scores + i * k;                                                  \
            const int64_t y = t->labels[i];                                                 \
            if (y < 0 || y >= k) {                                                          \
                t->bad_row = i;                                                             \
                return;                                                                     \
            }                                                                               \
            if (t->is_logits) {                                                             \
                double mx = (double)row[0];                                                 \
                for (Py_ssize_t j = 1; j < k; j++) {                                        \
                    double v = (double)row[j];                                              \
                    if (v > mx) {                                                           \
                        mx = v;                                                             \
                    }                                                                       \
                }                                                                           \
                for (Py_ssize_t j = 0; j < k; j++) {                                        \
                    e[j] = exp((double)row[j] - mx);                                        \
                }                                                                           \
            }                                                                               \
            else {                                                                          \
                for (Py_ssize_t j = 0; j < k; j++) {                                        \
                    e[j] = (double)row[j];                                                  \
                }                                                                           \
            }                                                                               \
            top_label_of_row(t, i, e, y);                                                   \
        }                                                                                   \
    }

DEFINE_TOP_LABEL_SCALAR(top_label_scalar_f32, float)
DEFINE_TOP_LABEL_SCALAR(top_label_scalar_f64, double)

#ifdef HAVE_AVX2
/* Logits in blocks of rows: (1) per row its maximum, then z − max and exact_exp4 four classes at a time
 * into the block's buffers, with each vector's lanes to redo as a 4-bit mask; (2) those lanes from the
 * C library's exp; (3) per row the confidence and correctness. No call in the vector loop (its
 * constants stay in registers), and the buffers are read back a block later (no store forwarding of a
 * wide store into narrow loads). The same numbers as the scalar loop, bit for bit. */

/* Logits in blocks of rows (exp_block), then per row the confidence and correctness: the same
 * numbers as the scalar loop, bit for bit. */
#define DEFINE_TOP_LABEL_AVX2(SUFFIX, T)                                                                \
    static void top_label_avx2_##SUFFIX(TopLabel *t, const T *scores)                                   \
    {                                                                                                   \
        const Py_ssize_t k = t->k;                                                                      \
        ExpBlock *b = &t->block;                                                                        \
        for (Py_ssize_t start = 0; start < t->rows; start += b->block_rows) {                          \
            const Py_ssize_t stop = start + b->block_rows < t->rows ? start + b->block_rows : t->rows; \
            exp_block_##SUFFIX(b, scores, start, stop);                                                 \
            for (Py_ssize_t i = start; i < stop; i++) {                                                 \
                const int64_t y = t->labels[i];                                                         \
                if (y < 0 || y >= k) {                                                                  \
                    t->bad_row = i;                                                                     \
                    return;                                                                             \
                }                                                                                       \
                const double *e = b->e + (i - start) * b->k_padded;                                     \
                const double total = pairwise_sum(e, k), conf = 1.0 / total;                            \
                const Py_ssize_t best = block_prediction(b, i - start, total, conf);                    \
                t->conf[i] = conf;                                                                      \
                t->correct[i] = best == y;                                                              \
            }                                                                                           \
        }                                                                                               \
    }
DEFINE_TOP_LABEL_AVX2(f32, float)
DEFINE_TOP_LABEL_AVX2(f64, double)
#endif

#ifdef HAVE_AVX2
/* The rows from `done` on by the scalar loop (the rest of a vector loop, or one slow row). */
#define DEFINE_TOP_LABEL_REST(SUFFIX, T)                                                           \
    static void top_label_rest_##SUFFIX(TopLabel *t, const T *scores, Py_ssize_t done, Py_ssize_t rows) \
    {                                                                                                  \
        TopLabel rest = *t;                                                                            \
        rest.rows = rows;                                                                              \
        rest.labels += done;                                                                           \
        rest.conf += done;                                                                             \
        rest.correct += done;                                                                          \
        top_label_scalar_##SUFFIX(&rest, scores + done * t->k);                                        \
        if (rest.bad_row >= 0) {                                                                       \
            t->bad_row = rest.bad_row + done;                                                          \
        }                                                                                              \
    }
DEFINE_TOP_LABEL_REST(f32, float)
DEFINE_TOP_LABEL_REST(f64, double)

/* top_label_rows for logits or probabilities of 2 ≤ K ≤ COLS_MAX_K classes, rows in lanes: the scalar
 * loop's bits. */
#define DEFINE_TOP_LABEL_COLS(SUFFIX, T)                                                                 \
    __attribute__((target("avx2,fma"))) static void top_label_cols_##SUFFIX(TopLabel *t, const T *scores) \
    {                                                                                                    \
        const Py_ssize_t k = t->k, rows = t->rows;                                                       \
        __m256d ecol[COLS_MAX_K];                                                                        \
        unsigned char before[COLS_MAX_K];                                                                \
        Py_ssize_t i = 0;                                                                                \
        for (; i + 4 <= rows && labels4_ok(t->labels + i, k); i += 4) {                                  \
            __m256d first;                                                                               \
            const int64_t *y = t->labels + i;                                                            \
            if (!t->is_logits) { /* probabilities: conf the first largest p */                           \
                double firsts[4];                                                                        \
                cols4_##SUFFIX(scores + i * k, k, ecol);                                                 \
                _mm256_storeu_pd(t->conf + i, cols_first_max(ecol, k, &first));                          \
                _mm256_storeu_pd(firsts, first);                                                         \
                for (int r = 0; r < 4; r++) {                                                            \
                    t->correct[i + r] = (int64_t)firsts[r] == y[r];                                      \
                }                                                                                        \
                continue;                                                                                \
            }                                                                                            \
            unsigned any_before;                                                                         \
            const unsigned redo = cols_exp_##SUFFIX(scores + i * k, k, ecol, NULL, &first, before, &any_before); \
            const __m256d total = block_sum_cols(ecol, k);                                               \
            const __m256d conf = _mm256_div_pd(_mm256_set1_pd(1.0), total);                              \
            _mm256_storeu_pd(t->conf + i, conf);                                                         \
            const __m256d best = cols_prediction(ecol, k, first, total, conf, before, any_before);       \
            double bests[4];                                                                             \
            _mm256_storeu_pd(bests, best);                                                               \
            for (int r = 0; r < 4; r++) {                                                                \
                t->correct[i + r] = (int64_t)bests[r] == y[r];                                           \
            }                                                                                            \
            if (redo) {                                                                                  \
                _mm256_zeroupper(); /* the scalar loop calls the C library's exp (SSE code) */           \
                for (int r = 0; r < 4; r++) {                                                            \
                    if (redo >> r & 1) {                                                                 \
                        top_label_rest_##SUFFIX(t, scores, i + r, 1);                                    \
                    }                                                                                    \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
        _mm256_zeroupper();                                                                              \
        if (i < rows) {                                                                                  \
            top_label_rest_##SUFFIX(t, scores, i, rows - i);                                             \
        }                                                                                                \
    }
DEFINE_TOP_LABEL_COLS(f32, float)
DEFINE_TOP_LABEL_COLS(f64, double)
#endif

#ifdef HAVE_AVX2
/* At import (on a CPU with AVX2 and FMA): whether exact_exp4 equals this C library's exp on 65,536
 * values over its whole range (every table entry, both signs, near 0 and beyond ±512). A C library
 * that computes exp otherwise (another algorithm or constants, multiply-adds not fused) differs on
 * values near a rounding boundary, a few in every thousand: it fails, and exact_exp4 is not used. */
__attribute__((target("avx2,fma"))) static int
exact_exp_selfcheck(void)
{
    uint64_t state = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < 65536; i += 4) {
        double x[4], got[4];
        for (int l = 0; l < 4; l++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            const double u = (double)(state >> 11) * 0x1p-53; /* [0, 1) */
            x[l] = l == 0 ? -745.0 * u : (l == 1 ? -20.0 * u : (l == 2 ? 1400.0 * u - 700.0 : ldexp(u - 0.5, -(i % 60))));
        }
        int redo;
        _mm256_storeu_pd(got, exact_exp4(_mm256_loadu_pd(x), &redo));
        for (int l = 0; l < 4; l++) {
            const double want = exp(x[l]);
            if (!((redo >> l) & 1) && memcmp(&want, &got[l], sizeof want) != 0) {
                return 0;
            }
        }
    }
    return 1;
}
#endif

PyDoc_STRVAR(exp_exact_doc,
"exp_exact(x, out)\n"
"--\n\n"
"out = exp(x) (float64 arrays of one length) by exact_exp4 four at a time, its flagged lanes and the\n"
"tail by the C library's exp: equal to the C library's exp bit for bit. Returns whether exact_exp4 ran\n"
"(the CPU has AVX2 and FMA and the import's self-check passed); else every value is the C library's.");

#ifdef HAVE_AVX2
__attribute__((target("avx2,fma"))) static void
exp_exact_avx2(const double *x, double *out, Py_ssize_t n)
{
    Py_ssize_t j = 0;
    for (; j + 4 <= n; j += 4) {
        int redo;
        _mm256_storeu_pd(out + j, exact_exp4(_mm256_loadu_pd(x + j), &redo));
        for (; redo; redo &= redo - 1) {
            out[j + __builtin_ctz(redo)] = exp(x[j + __builtin_ctz(redo)]);
        }
    }
    for (; j < n; j++) {
        out[j] = exp(x[j]);
    }
}
#endif

static PyObject *
py_exp_exact(PyObject *self, PyObject *args)
{
    PyObject *o_x, *o_out;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:exp_exact", &o_x, &o_out)) {
        return NULL;
    }
    Views v = {.n = 0};
    Py_buffer *b_x, *b_out;
    if (!take_x_out(&v, o_x, o_out, &b_x, &b_out)) goto fail;
    const double *x = (const double *)b_x->buf;
    double *out = (double *)b_out->buf;
    const Py_ssize_t n = b_x->shape[0];
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2
    if (exact_exp_ok) {
        exp_exact_avx2(x, out, n);
    }
    else
#endif
    {
        for (Py_ssize_t j = 0; j < n; j++) {
            out[j] = exp(x[j]);
        }
    }
    Py_END_ALLOW_THREADS
    views_release(&v);
    return PyBool_FromLong(exact_exp_ok);
fail:
    views_release(&v);
    return NULL;
}

PyDoc_STRVAR(top_label_rows_doc,
"top_label_rows(scores, labels, is_logits, conf, correct, vector=True)\n"
"--\n\n"
"Each row's top-label confidence and correctness, as fused_rows computes them (bit for bit): for logits\n"
"conf = max softmax (float64, the C library's exp), correct = [first argmax = label].\n\n"
"scores: float32/float64 (N, K); labels: int64 (N,) in [0, K); conf: float64 (N,); correct: bool (N,).\n"
"vector: where the CPU has AVX2 and FMA, for 2 <= K <= 128 four rows at a time, one per lane\n"
"(top_label_cols; logits by exact_exp4, which needs the import's self-check to have passed); for logits\n"
"of more classes exact_exp4 four classes at a time. Else, or with False, the scalar loop (the C library's\n"
"exp one value at a time). Returns whether a vector loop ran.");

static PyObject *
py_top_label_rows(PyObject *self, PyObject *args)
{
    PyObject *o_scores, *o_labels, *o_conf, *o_correct;
    int is_logits, vector = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOpOO|p:top_label_rows", &o_scores, &o_labels, &is_logits, &o_conf, &o_correct,
                          &vector)) {
        return NULL;
    }
    Views v = {.n = 0};
    int kind_scores;
    Py_buffer *b_scores, *b_labels;
    if (!take_rows(&v, o_scores, o_labels, &kind_scores, &b_scores, &b_labels)) goto fail;
    const Py_ssize_t rows = b_scores->shape[0], k = b_scores->shape[1];
    Py_buffer *b_conf, *b_correct;
    if (!take_conf_correct(&v, o_conf, o_correct, rows, &b_conf, &b_correct)) goto fail;
    /* logits: the vector exp where it is the C library's; probabilities: rows in lanes, 2 ≤ K ≤ COLS_MAX_K */
    const int use_vector = vector && (is_logits ? exact_exp_ok : cols_cpu_ok && k >= 2 && k <= COLS_MAX_K);
    TopLabel t = {
        .rows = rows, .k = k, .is_logits = is_logits,
        .labels = (const int64_t *)b_labels->buf, .conf = (double *)b_conf->buf,
        .correct = (unsigned char *)b_correct->buf, .bad_row = -1,
    };
    t.e = (double *)PyMem_RawMalloc((size_t)k * sizeof(double));
    if (t.e == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
#ifdef HAVE_AVX2
    t.block.e = NULL;
    if (use_vector && !exp_block_alloc(&t.block, k)) {
        PyMem_RawFree(t.e);
        PyErr_NoMemory();
        goto fail;
    }
#endif
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2
    if (use_vector && k >= 2 && k <= COLS_MAX_K && kind_scores == K_F32) {
        top_label_cols_f32(&t, (const float *)b_scores->buf);
    }
    else if (use_vector && k >= 2 && k <= COLS_MAX_K) {
        top_label_cols_f64(&t, (const double *)b_scores->buf);
    }
    else if (use_vector && kind_scores == K_F32) {
        top_label_avx2_f32(&t, (const float *)b_scores->buf);
    }
    else if (use_vector) {
        top_label_avx2_f64(&t, (const double *)b_scores->buf);
    }
    else
#endif
    if (kind_scores == K_F32) {
        top_label_scalar_f32(&t, (const float *)b_scores->buf);
    }
    else {
        top_label_scalar_f64(&t, (const double *)b_scores->buf);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(t.e);
#ifdef HAVE_AVX2
    PyMem_RawFree(t.block.e);
#endif
    return rows_result(&v, t.bad_row, t.labels, k, use_vector);
fail:
    views_release(&v);
    return NULL;
}

/* ---------- bin_sums_1d ---------- */

typedef struct {
    Py_ssize_t n, m;
    int uniform, lowest_closed;
    int64_t *count;
    double *sum_conf, *sum_correct;
} Bins;

/* Bins of at most this many edges are found by counting the edges below v (no branch to mispredict);
 * more by a binary search. Both give numpy's searchsorted(edges, v, side="left"). */
#define LINEAR_EDGES 64

#define DEFINE_BIN_SUMS(NAME, T, TT)                                                \
    static void NAME(Bins *s, const T *restrict values, const T *restrict edges,   \
                     const TT *restrict targets)                                    \
    {                                                                               \
        /* fields in restrict locals: the stores into the bins cannot alias them */ \
        const Py_ssize_t m = s->m, n = s->n;                                        \
        const int uniform = s->uniform, lowest_closed = s->lowest_closed;           \
        int64_t *restrict count = s->count;                                         \
        double *restrict sum_conf = s->sum_conf, *restrict sum_correct = s->sum_correct; \
        for (Py_ssize_t i = 0; i < n; i++) {                                        \
            const T v = values[i];                                                  \
            int64_t b;                                                              \
            if (uniform) {                                                          \
                UNIFORM_BIN_CANDIDATE(v, m, edges, b);                              \
            }                                                                       \
            else if (m < LINEAR_EDGES) { /* #{j : edges[j] < v} − 1 */              \
                Py_ssize_t below = 0;                                               \
                for (Py_ssize_t j = 0; j <= m; j++) {                               \
                    below += edges[j] < v;                                          \
                }                                                                   \
                b = below - 1;                                                      \
            }                                                                       \
            else { /* first j with edges[j] >= v (numpy's side="left"), minus one */ \
                Py_ssize_t lo = 0, hi = m + 1;                                      \
                while (lo < hi) {                                                   \
                    Py_ssize_t mid = (lo + hi) >> 1;                                \
                    if (edges[mid] < v) {                                           \
                        lo = mid + 1;                                               \
                    }                                                               \
                    else {                                                          \
                        hi = mid;                                                   \
                    }                                                               \
                }                                                                   \
                b = lo - 1;                                                         \
            }                                                                       \
            if (b > m - 1) {                                                        \
                b = m - 1;                                                          \
            }                                                                       \
            if (b < 0) {                                                            \
                if (!lowest_closed) {                                               \
                    continue;                                                       \
                }                                                                   \
                b = 0;                                                              \
            }                                                                       \
            count[b] += 1;                                                          \
            sum_conf[b] += (double)v;                                               \
            sum_correct[b] += (double)targets[i];                                   \
        }                                                                           \
    }

DEFINE_BIN_SUMS(bin_sums_f32_bool, float, unsigned char)
DEFINE_BIN_SUMS(bin_sums_f32_f64, float, double)
DEFINE_BIN_SUMS(bin_sums_f64_bool, double, unsigned char)
DEFINE_BIN_SUMS(bin_sums_f64_f64, double, double)

#ifdef HAVE_AVX2
/* bin_sums for float64 values, bool targets and at most REGISTER_BINS bins: the same bin as the scalar
 * loop, but the per-bin sums are kept in registers. The count and the number of true targets per bin
 * are int32 lanes (eight bins to a vector, added to the int64 outputs every 2^30 values); Σvalue is four
 * float64 vectors, and each value is added into every bin's lane under its bin's mask (0.0 elsewhere).
 * Adding +0.0 leaves a sum unchanged except −0.0, which a sum started from +0.0 never is (the caller
 * checks the start), so Σvalue gets the scalar loop's additions in its order: the same bits; Σtarget,
 * a sum of 0.0s and 1.0s from a whole number below 2^53, is that number plus the count of 1s exactly.
 * The scalar loop's sums go through memory: one store-to-load forwarding per value when consecutive
 * values share a bin (the confidences mostly do); this loop's chain is one register addition. */
#define REGISTER_BINS 16
#define REGISTER_BINS_BLOCK ((Py_ssize_t)1 << 30)
#define REGISTER_BINS_PIECE 2048

/* Σvalue of four bins (q: 0..3) under hit64 (their lanes of v's bin mask); named registers (vectors
 * in an array indexed in a loop stay on the stack, where each addition goes through memory) */
#define REGISTER_BINS_ADD(q, hit64) conf##q = _mm256_add_pd(conf##q, _mm256_and_pd(_mm256_castsi256_pd(hit64), vv))

/* The bins (int32, −1 for none) of n float64 values as bin_sums' scalar loop finds them, four at a
 * time. Edges b/M (s->uniform, checked by the caller): as fused_avx2's classwise bins, c − 1 for
 * c = ⌈v·M⌉ where v·M is more than FUSED_BIN_DELTA from every whole number and positive, else the
 * scalar candidate. Other edges (at most REGISTER_BINS + 1): the count of edges below v, minus one. */
__attribute__((target("avx2"))) static void
register_bins_of(const Bins *s, const double *restrict values, const double *restrict edges, Py_ssize_t n,
                 int32_t *restrict bins)
{
    const Py_ssize_t m = s->m;
    const int none = s->lowest_closed ? 0 : -1;
    const __m256d vm = _mm256_set1_pd((double)m), one = _mm256_set1_pd(1.0), zero = _mm256_setzero_pd();
    const __m256d top_bin = _mm256_set1_pd((double)(m - 1)), delta = _mm256_set1_pd(FUSED_BIN_DELTA);
    const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
    const __m128i vnone = _mm_set1_epi32(none), top = _mm_set1_epi32((int32_t)(m - 1));
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m256d v = _mm256_loadu_pd(values + i);
        unsigned redo = 0;
        if (s->uniform) {
            const __m256d t = _mm256_mul_pd(v, vm);
            const __m256d near = _mm256_round_pd(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m256d clear = _mm256_and_pd(
                _mm256_cmp_pd(_mm256_and_pd(_mm256_sub_pd(t, near), abs_mask), delta, _CMP_GT_OQ),
                _mm256_cmp_pd(t, zero, _CMP_GT_OQ));
            const __m256d bin = _mm256_min_pd(
                _mm256_max_pd(_mm256_sub_pd(_mm256_round_pd(t, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC), one), zero),
                top_bin);
            _mm_storeu_si128((__m128i *)(bins + i), _mm256_cvttpd_epi32(bin));
            redo = ~(unsigned)_mm256_movemask_pd(clear) & 15u;
        }
        else {
            __m256i below = _mm256_setzero_si256(); /* 64-bit lanes: minus the all-ones masks */
            for (Py_ssize_t j = 0; j <= m; j++) {
                const __m256d lt = _mm256_cmp_pd(_mm256_broadcast_sd(edges + j), v, _CMP_LT_OQ);
                below = _mm256_sub_epi64(below, _mm256_castpd_si256(lt));
            }
            const __m128i below32 = _mm256_castsi256_si128(
                _mm256_permutevar8x32_epi32(below, _mm256_set_epi32(7, 7, 7, 7, 6, 4, 2, 0)));
            __m128i b = _mm_min_epi32(_mm_sub_epi32(below32, _mm_set1_epi32(1)), top);
            b = _mm_blendv_epi8(b, vnone, _mm_cmplt_epi32(b, _mm_setzero_si128()));
            _mm_storeu_si128((__m128i *)(bins + i), b);
        }
        for (; redo; redo &= redo - 1) {
            const Py_ssize_t l = i + __builtin_ctz(redo);
            int64_t b;
            UNIFORM_BIN_CANDIDATE(values[l], m, edges, b);
            b = b > m - 1 ? m - 1 : b;
            bins[l] = (int32_t)(b < 0 ? none : b);
        }
    }
    for (; i < n; i++) {
        const double v = values[i];
        int64_t b;
        if (s->uniform) {
            UNIFORM_BIN_CANDIDATE(v, m, edges, b);
        }
        else {
            Py_ssize_t below = 0;
            for (Py_ssize_t j = 0; j <= m; j++) {
                below += edges[j] < v;
            }
            b = below - 1;
        }
        b = b > m - 1 ? m - 1 : b;
        bins[i] = (int32_t)(b < 0 ? none : b);
    }
}

__attribute__((target("avx2"))) static void
bin_sums_avx2_f64_bool(Bins *s, const double *restrict values, const double *restrict edges,
                       const unsigned char *restrict targets)
{
    const Py_ssize_t m = s->m, n = s->n;
    double sums[REGISTER_BINS] = {0};
    int32_t counts[REGISTER_BINS], trues[REGISTER_BINS], bins[REGISTER_BINS_PIECE];
    memcpy(sums, s->sum_conf, (size_t)m * sizeof(double));
    __m256d conf0 = _mm256_loadu_pd(sums), conf1 = _mm256_loadu_pd(sums + 4);
    __m256d conf2 = _mm256_loadu_pd(sums + 8), conf3 = _mm256_loadu_pd(sums + 12);
    const __m256i lane_lo = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    const __m256i lane_hi = _mm256_set_epi32(15, 14, 13, 12, 11, 10, 9, 8);
    for (Py_ssize_t start = 0; start < n; start += REGISTER_BINS_BLOCK) {
        const Py_ssize_t stop = n - start > REGISTER_BINS_BLOCK ? start + REGISTER_BINS_BLOCK : n;
        __m256i count_lo = _mm256_setzero_si256(), count_hi = _mm256_setzero_si256();
        __m256i true_lo = _mm256_setzero_si256(), true_hi = _mm256_setzero_si256();
        for (Py_ssize_t piece = start; piece < stop; piece += REGISTER_BINS_PIECE) {
            const Py_ssize_t end = stop - piece > REGISTER_BINS_PIECE ? piece + REGISTER_BINS_PIECE : stop;
            register_bins_of(s, values + piece, edges, end - piece, bins); /* no dependence between values */
            for (Py_ssize_t i = piece; i < end; i++) {
                const __m256i vb = _mm256_set1_epi32(bins[i - piece]);
                const __m256i vt = _mm256_set1_epi32(-(int32_t)(targets[i] != 0));
                const __m256d vv = _mm256_set1_pd(values[i]);
                const __m256i hit_lo = _mm256_cmpeq_epi32(lane_lo, vb), hit_hi = _mm256_cmpeq_epi32(lane_hi, vb);
                count_lo = _mm256_sub_epi32(count_lo, hit_lo);
                count_hi = _mm256_sub_epi32(count_hi, hit_hi);
                true_lo = _mm256_sub_epi32(true_lo, _mm256_and_si256(hit_lo, vt));
                true_hi = _mm256_sub_epi32(true_hi, _mm256_and_si256(hit_hi, vt));
                REGISTER_BINS_ADD(0, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(hit_lo)));
                REGISTER_BINS_ADD(1, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(hit_lo, 1)));
                REGISTER_BINS_ADD(2, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(hit_hi)));
                REGISTER_BINS_ADD(3, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(hit_hi, 1)));
            }
        }
        _mm256_storeu_si256((__m256i *)counts, count_lo);
        _mm256_storeu_si256((__m256i *)(counts + 8), count_hi);
        _mm256_storeu_si256((__m256i *)trues, true_lo);
        _mm256_storeu_si256((__m256i *)(trues + 8), true_hi);
        for (Py_ssize_t b = 0; b < m; b++) {
            s->count[b] += counts[b];
            s->sum_correct[b] += (double)trues[b];
        }
    }
    _mm256_storeu_pd(sums, conf0);
    _mm256_storeu_pd(sums + 4, conf1);
    _mm256_storeu_pd(sums + 8, conf2);
    _mm256_storeu_pd(sums + 12, conf3);
    memcpy(s->sum_conf, sums, (size_t)m * sizeof(double));
}

/* Whether bin_sums_avx2 may add into these sums: at most REGISTER_BINS bins, no Σvalue −0.0 (to which
 * a masked +0.0 would not be a no-op) and each Σtarget a whole number in [+0, 2^52) (adding the 0/1
 * targets then keeps it an exact whole number). */
static int
register_bins_ok(const Bins *s, const double *edges)
{
    if (s->m > REGISTER_BINS) {
        return 0;
    }
    if (s->uniform && !fused_vector_bins_ok(edges, s->m, 1)) {
        return 0;
    }
    for (Py_ssize_t b = 0; b < s->m; b++) {
        const double t = s->sum_correct[b];
        if (signbit(s->sum_conf[b]) && s->sum_conf[b] == 0.0) {
            return 0;
        }
        if (signbit(t) || !(t < 0x1p52 && t == floor(t))) {
            return 0;
        }
    }
    return 1;
}
#endif

PyDoc_STRVAR(bin_sums_1d_doc,
"bin_sums_1d(values, targets, edges, uniform, lowest_closed, count, sum_conf, sum_correct)\n"
"--\n\n"
"Per-bin count, Σvalue and Σtarget of the 1-D values, added into the outputs (calibrate_cli._bin_kernel).\n\n"
"values: float32/float64 (N,); targets: bool/float64 (N,); edges: (m + 1,) of the values' dtype;\n"
"uniform: the edges are b/m; count: int64 (m,), sum_conf, sum_correct: float64 (m,).\n"
"vector: float64 values with bool targets in at most 16 bins keep their sums in AVX2 registers (the same\n"
"bits) where the CPU has AVX2 (else, or with False, the scalar loop). Returns whether the vector loop ran.");

static PyObject *
py_bin_sums_1d(PyObject *self, PyObject *args)
{
    PyObject *o_values, *o_targets, *o_edges, *o_count, *o_sum_conf, *o_sum_correct;
    int uniform, lowest_closed, vector = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOppOOO|p:bin_sums_1d", &o_values, &o_targets, &o_edges, &uniform, &lowest_closed,
                          &o_count, &o_sum_conf, &o_sum_correct, &vector)) {
        return NULL;
    }
    Views v = {.n = 0};
    int kind_values, kind_targets, kind_edges, kind;
    Py_buffer *b_values = views_next(&v);
    TAKE(v, o_values, "values", 1, KINDS_FLOAT, 0, kind_values);
    const Py_ssize_t n = b_values->shape[0];
    Py_buffer *b_targets = views_next(&v);
    TAKE(v, o_targets, "targets", 1, KINDS_TARGET, 0, kind_targets);
    if (!check_len(b_targets, "targets", 0, n)) goto fail;
    Py_buffer *b_edges = views_next(&v);
    TAKE(v, o_edges, "edges", 1, KINDS_FLOAT, 0, kind_edges);
    if (kind_edges != kind_values) {
        PyErr_Format(PyExc_TypeError, "edges: expected the values' dtype %s, got %s", kind_name(kind_values),
                     kind_name(kind_edges));
        goto fail;
    }
    const Py_ssize_t m = b_edges->shape[0] - 1;
    if (m < 1) {
        PyErr_SetString(PyExc_ValueError, "edges: expected at least two edges");
        goto fail;
    }
    Py_buffer *b_count = views_next(&v);
    TAKE(v, o_count, "count", 1, KINDS_I64, 1, kind);
    if (!check_len(b_count, "count", 0, m)) goto fail;
    Py_buffer *b_sum_conf = views_next(&v);
    TAKE(v, o_sum_conf, "sum_conf", 1, KINDS_F64, 1, kind);
    if (!check_len(b_sum_conf, "sum_conf", 0, m)) goto fail;
    Py_buffer *b_sum_correct = views_next(&v);
    TAKE(v, o_sum_correct, "sum_correct", 1, KINDS_F64, 1, kind);
    if (!check_len(b_sum_correct, "sum_correct", 0, m)) goto fail;
    Bins s = {
        .n = n, .m = m, .uniform = uniform, .lowest_closed = lowest_closed,
        .count = (int64_t *)b_count->buf, .sum_conf = (double *)b_sum_conf->buf,
        .sum_correct = (double *)b_sum_correct->buf,
    };
    const void *vals = b_values->buf, *edges = b_edges->buf, *targets = b_targets->buf;
    int use_vector = 0;
#ifdef HAVE_AVX2
    use_vector = vector && avx2_ok && kind_values == K_F64 && kind_targets == K_BOOL && register_bins_ok(&s, (const double *)edges);
#endif
    Py_BEGIN_ALLOW_THREADS
    if (kind_values == K_F32) {
        if (kind_targets == K_BOOL) {
            bin_sums_f32_bool(&s, (const float *)vals, (const float *)edges, (const unsigned char *)targets);
        }
        else {
            bin_sums_f32_f64(&s, (const float *)vals, (const float *)edges, (const double *)targets);
        }
    }
#ifdef HAVE_AVX2
    else if (use_vector) {
        bin_sums_avx2_f64_bool(&s, (const double *)vals, (const double *)edges, (const unsigned char *)targets);
    }
#endif
    else {
        if (kind_targets == K_BOOL) {
            bin_sums_f64_bool(&s, (const double *)vals, (const double *)edges, (const unsigned char *)targets);
        }
        else {
            bin_sums_f64_f64(&s, (const double *)vals, (const double *)edges, (const double *)targets);
        }
    }
    Py_END_ALLOW_THREADS
    views_release(&v);
    return PyBool_FromLong(use_vector);
fail:
    views_release(&v);
    return NULL;
}

/* ---------- bucket_counts, bucket_gather: the passes of sorting.order_statistics ---------- */

/* sorting._bucket: ⌊(v − lo)·scale⌋ for v in [lo, hi] (non-negative, finite: the C cast is numpy's
 * astype(int64)), clipped to the last of nb buckets */
static inline Py_ssize_t
bucket_of(double v, double lo, double scale, Py_ssize_t nb)
{
    const double t = (v - lo) * scale;
    return t < (double)(nb - 1) ? (Py_ssize_t)t : nb - 1;
}

/* Whether nb buckets of width 1/scale are usable (else 0 with a ValueError naming fn). */
static int
check_buckets(Py_ssize_t nb, double scale, const char *fn)
{
    if (nb < 1 || !(scale >= 0.0 && scale < INFINITY)) {
        PyErr_Format(PyExc_ValueError, "%s: expected at least one bucket and a finite scale >= 0", fn);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(bucket_counts_doc,
"bucket_counts(values, lo, hi, scale, counts)\n"
"--\n\n"
"Add to counts[b] the number of values v in [lo, hi] with bucket b = min(int((v - lo) * scale), B - 1)\n"
"(calibrate_cli.sorting._bucket; B = len(counts)). values: float64 (N,); counts: int64 (B,).");

static PyObject *
py_bucket_counts(PyObject *self, PyObject *args)
{
    PyObject *o_values, *o_counts;
    double lo, hi, scale;
    (void)self;
    if (!PyArg_ParseTuple(args, "OdddO:bucket_counts", &o_values, &lo, &hi, &scale, &o_counts)) {
        return NULL;
    }
    Views v = {.n = 0};
    int kind;
    Py_buffer *b_values = views_next(&v);
    TAKE(v, o_values, "values", 1, KINDS_F64, 0, kind);
    Py_buffer *b_counts = views_next(&v);
    TAKE(v, o_counts, "counts", 1, KINDS_I64, 1, kind);
    const Py_ssize_t n = b_values->shape[0], nb = b_counts->shape[0];
    if (!check_buckets(nb, scale, "bucket_counts")) goto fail;
    const double *values = (const double *)b_values->buf;
    int64_t *counts = (int64_t *)b_counts->buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const double x = values[i];
        if (x >= lo && x <= hi) {
            counts[bucket_of(x, lo, scale, nb)] += 1;
        }
    }
    Py_END_ALLOW_THREADS
    views_release(&v);
    Py_RETURN_NONE;
fail:
    views_release(&v);
    return NULL;
}

PyDoc_STRVAR(bucket_gather_doc,
"bucket_gather(values, lo, hi, scale, gather, span, members, low, high)\n"
"--\n\n"
"One pass over the values v in [lo, hi] (buckets b as bucket_counts'): v goes to members (in order) when\n"
"gather[b]; else low[b] = min(low[b], v), high[b] = max(high[b], v) when span[b]. Returns the number of\n"
"members written (ValueError when more than len(members) would be). values: float64 (N,); gather, span:\n"
"bool (B,); members: float64; low, high: float64 (B,).");

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
    Views v = {.n = 0};
    int kind_;
    Py_buffer *b_values = views_next(&v);
    TAKE(v, o_values, "values", 1, KINDS_F64, 0, kind_);
    Py_buffer *b_gather = views_next(&v);
    TAKE(v, o_gather, "gather", 1, KINDS_BOOL, 0, kind_);
    Py_buffer *b_span = views_next(&v);
    TAKE(v, o_span, "span", 1, KINDS_BOOL, 0, kind_);
    Py_buffer *b_members = views_next(&v);
    TAKE(v, o_members, "members", 1, KINDS_F64, 1, kind_);
    Py_buffer *b_low = views_next(&v);
    TAKE(v, o_low, "low", 1, KINDS_F64, 1, kind_);
    Py_buffer *b_high = views_next(&v);
    TAKE(v, o_high, "high", 1, KINDS_F64, 1, kind_);
    const Py_ssize_t n = b_values->shape[0], nb = b_gather->shape[0], cap = b_members->shape[0];
    if (!check_len(b_span, "span", 0, nb) || !check_len(b_low, "low", 0, nb) || !check_len(b_high, "high", 0, nb)) goto fail;
    if (!check_buckets(nb, scale, "bucket_gather")) goto fail;
    const double *values = (const double *)b_values->buf;
    const unsigned char *gather = (const unsigned char *)b_gather->buf, *span = (const unsigned char *)b_span->buf;
    double *members = (double *)b_members->buf, *low = (double *)b_low->buf, *high = (double *)b_high->buf;
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
    views_release(&v);
    return PyLong_FromSsize_t(count);
fail:
    views_release(&v);
    return NULL;
}

/* ---------- spread_unit ---------- */

/* numpy's float64 → int32 astype on x86-64 (cvttsd2si): truncation toward zero, and INT32_MIN for NaN
 * and values outside the int32 range (without C's undefined behaviour). */
static inline int32_t
trunc_int32(double x)
{
    if (x > -2147483649.0 && x < 2147483648.0) {
        return (int32_t)x;
    }
    return INT32_MIN;
}

typedef struct {
    Py_ssize_t n, g, piece;
    const double *conf;
    double *out;
    double *acc;   /* 4·g work: the piece's four bincounts */
    double *parts; /* or NULL; else (pieces, 4·g): each piece's four bincounts, kept instead of added into out */
} Spread;

/* For each piece of `piece` samples (from the start), calibrate_cli.smooth_ece._Grids.spread_unit's
 *     x = conf·(g − 1); lo = clip(int32(x), 0, g − 2); frac = x − lo; r = conf − correct; keep = 1 − frac
 *     A = bincount(lo, keep·r); B = bincount(lo + 1, frac·r); C = bincount(lo, keep); D = bincount(lo + 1, frac)
 *     out[:g] += A; out[:g] += B; out[g:] += C; out[g:] += D
 * with the same float64 operations: each bincount starts from +0.0 and adds the piece's samples in
 * index order (one pass fills the four, each in its own order), then the four element-wise adds. */
#define DEFINE_SPREAD(NAME, TT)                                                          \
    static void NAME(Spread *s, const TT *correct)                                       \
    {                                                                                    \
        const Py_ssize_t g = s->g, n = s->n;                                             \
        const double scale = (double)(g - 1);                                            \
        const int32_t top = (int32_t)(g - 2);                                            \
        double *const out = s->out;                                                      \
        for (Py_ssize_t start = 0, p = 0; start < n; start += s->piece, p++) {           \
            const Py_ssize_t stop = n - start > s->piece ? start + s->piece : n;         \
            double *const a = s->parts != NULL ? s->parts + p * 4 * g : s->acc;          \
            double *const b = a + g, *const c = b + g, *const d = c + g;                 \
            memset(a, 0, 4 * (size_t)g * sizeof(double));                                \
            for (Py_ssize_t i = start; i < stop; i++) {                                  \
                const double v = s->conf[i];                                             \
                const double x = v * scale;                                              \
                int32_t lo = trunc_int32(x);                                             \
                if (lo < 0) {                                                            \
                    lo = 0;                                                              \
                }                                                                        \
                if (lo > top) {                                                          \
                    lo = top;                                                            \
                }                                                                        \
                const double frac = x - (double)lo;                                      \
                const double residual = v - (double)correct[i];                          \
                const double keep = 1.0 - frac;                                          \
                const double wa = keep * residual, wb = frac * residual;                 \
                a[lo] += wa;                                                             \
                b[lo + 1] += wb;                                                         \
                c[lo] += keep;                                                           \
                d[lo + 1] += frac;                                                       \
            }                                                                            \
            if (s->parts != NULL) {                                                      \
                continue;                                                                \
            }                                                                            \
            for (Py_ssize_t j = 0; j < g; j++) {                                         \
                out[j] += a[j];                                                          \
            }                                                                            \
            for (Py_ssize_t j = 0; j < g; j++) {                                         \
                out[j] += b[j];                                                          \
            }                                                                            \
            for (Py_ssize_t j = 0; j < g; j++) {                                         \
                out[g + j] += c[j];                                                      \
            }                                                                            \
            for (Py_ssize_t j = 0; j < g; j++) {                                         \
                out[g + j] += d[j];                                                      \
            }                                                                            \
        }                                                                                \
    }

DEFINE_SPREAD(spread_bool, unsigned char)
DEFINE_SPREAD(spread_f64, double)

PyDoc_STRVAR(spread_unit_doc,
"spread_unit(conf, correct, g, piece, out, parts=None)\n"
"--\n\n"
"The residuals conf − correct (out[:g]) and ones (out[g:]) spread linearly onto the grid j/(g − 1),\n"
"added into out in pieces of `piece` samples (calibrate_cli.smooth_ece._Grids.spread_unit). With\n"
"parts, each piece's four bincounts (A, B, C, D) are written to parts[p] instead, and out is left alone:\n"
"added into out in piece order (out[:g] += A; out[:g] += B; out[g:] += C; out[g:] += D), they give the\n"
"same grid bit for bit.\n\n"
"conf: float64 (N,); correct: bool/float64 (N,); g >= 2; piece >= 1; out: float64 (2g,);\n"
"parts: float64 (ceil(N / piece), 4g).");

static PyObject *
py_spread_unit(PyObject *self, PyObject *args)
{
    PyObject *o_conf, *o_correct, *o_out, *o_parts = Py_None;
    Py_ssize_t g, piece;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOnnO|O:spread_unit", &o_conf, &o_correct, &g, &piece, &o_out, &o_parts)) {
        return NULL;
    }
    if (g < 2 || g > (Py_ssize_t)INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "g: expected a grid size in [2, 2**31 - 1], got %zd", g);
        return NULL;
    }
    if (piece < 1) {
        PyErr_Format(PyExc_ValueError, "piece: expected at least one sample, got %zd", piece);
        return NULL;
    }
    Views v = {.n = 0};
    int kind_correct, kind;
    Py_buffer *b_conf = views_next(&v);
    TAKE(v, o_conf, "conf", 1, KINDS_F64, 0, kind);
    const Py_ssize_t n = b_conf->shape[0];
    Py_buffer *b_correct = views_next(&v);
    TAKE(v, o_correct, "correct", 1, KINDS_TARGET, 0, kind_correct);
    if (!check_len(b_correct, "correct", 0, n)) goto fail;
    Py_buffer *b_out = views_next(&v);
    TAKE(v, o_out, "out", 1, KINDS_F64, 1, kind);
    if (!check_len(b_out, "out", 0, 2 * g)) goto fail;
    Spread s = {.n = n, .g = g, .piece = piece, .conf = (const double *)b_conf->buf, .out = (double *)b_out->buf,
                .parts = NULL};
    if (o_parts != Py_None) {
        Py_buffer *b_parts = views_next(&v);
        TAKE(v, o_parts, "parts", 2, KINDS_F64, 1, kind);
        if (!check_len(b_parts, "parts", 0, (n + piece - 1) / piece) || !check_len(b_parts, "parts", 1, 4 * g)) {
            goto fail;
        }
        s.parts = (double *)b_parts->buf;
    }
    s.acc = (double *)PyMem_RawMalloc(4 * (size_t)g * sizeof(double));
    if (s.acc == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    const void *correct = b_correct->buf;
    Py_BEGIN_ALLOW_THREADS
    if (kind_correct == K_BOOL) {
        spread_bool(&s, (const unsigned char *)correct);
    }
    else {
        spread_f64(&s, (const double *)correct);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(s.acc);
    views_release(&v);
    Py_RETURN_NONE;
fail:
    views_release(&v);
    return NULL;
}

/* ---------- nll_rows ---------- */

/* exp(x) of the temperature kernels (calibrate_cli/_grid_kernel.py, _exp_into; exp_row below): x clamped at −708,
 * k = round(x / ln 2) through the 1.5·2^52 shift, r = x − k·ln 2 in two parts, e^r by its Taylor
 * polynomial of degree 13, 2^k from the bits of k. Within 2 ulps of the correctly rounded value; ~3×
 * faster than the C library's exp here. Without contraction (-ffp-contract=off) its last bit can
 * differ from numba's, which contracts: the NLL sums agree to rounding. */
static const double EXP_LOG2E = 1.4426950408889634;
static const double EXP_SHIFT = 6755399441055744.0; /* 1.5 · 2^52 */
static const double EXP_LN2_HI = 6.93147180369123816490e-01; /* fdlibm's split of ln 2 */
static const double EXP_LN2_LO = 1.90821492927058770002e-10;

typedef struct {
    Py_ssize_t rows, k;
    double beta;
    const int64_t *labels;
    double *d, *x, *e; /* (K,) each */
    double total, grad, var;
} NllPass;

/* e[j] = exp(x[j]) for j < k: poly_exp with its steps in separate loops over j (no dependency from one
 * j to the next, so the processor overlaps the polynomials of several classes; the compiler may
 * vectorise them), operation for operation the same as poly_exp. */
static void
exp_row_scalar(const double *restrict x, double *restrict e, Py_ssize_t k)
{
    int64_t shift_bits;
    memcpy(&shift_bits, &EXP_SHIFT, sizeof shift_bits);
    for (Py_ssize_t j = 0; j < k; j++) {
        double xj = x[j] > -708.0 ? x[j] : -708.0;
        double kf = xj * EXP_LOG2E + EXP_SHIFT;
        double kk = kf - EXP_SHIFT;
        double r = (xj - kk * EXP_LN2_HI) - kk * EXP_LN2_LO;
        double p = 1.0 / 6227020800.0;
        p = p * r + 1.0 / 479001600.0;
        p = p * r + 1.0 / 39916800.0;
        p = p * r + 1.0 / 3628800.0;
        p = p * r + 1.0 / 362880.0;
        p = p * r + 1.0 / 40320.0;
        p = p * r + 1.0 / 5040.0;
        p = p * r + 1.0 / 720.0;
        p = p * r + 1.0 / 120.0;
        p = p * r + 1.0 / 24.0;
        p = p * r + 1.0 / 6.0;
        p = p * r + 0.5;
        p = p * r + 1.0;
        p = p * r + 1.0;
        int64_t kbits;
        memcpy(&kbits, &kf, sizeof kbits);
        int64_t sbits = (int64_t)((uint64_t)(kbits - shift_bits + 1023) << 52); /* 2^k */
        double scale;
        memcpy(&scale, &sbits, sizeof scale);
        e[j] = p * scale;
    }
}

#ifdef HAVE_AVX2

/* exp_row_scalar's exp of four values (AVX2), into out[0..3] (register moves) */
__attribute__((target("avx2"), always_inline)) static inline __m256d
exp4_vec(__m256d x)
{
    int64_t shift_bits;
    memcpy(&shift_bits, &EXP_SHIFT, sizeof shift_bits);
    static const double c[13] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
                                 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0,
                                 1.0 / 6.0, 0.5, 1.0, 1.0};
    const __m256d shift = _mm256_set1_pd(EXP_SHIFT);
    const __m256d xj = _mm256_max_pd(x, _mm256_set1_pd(-708.0));
    const __m256d kf = _mm256_add_pd(_mm256_mul_pd(xj, _mm256_set1_pd(EXP_LOG2E)), shift);
    const __m256d kk = _mm256_sub_pd(kf, shift);
    const __m256d r = _mm256_sub_pd(_mm256_sub_pd(xj, _mm256_mul_pd(kk, _mm256_set1_pd(EXP_LN2_HI))),
                                    _mm256_mul_pd(kk, _mm256_set1_pd(EXP_LN2_LO)));
    __m256d p = _mm256_set1_pd(1.0 / 6227020800.0);
    for (int i = 0; i < 13; i++) {
        p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(c[i]));
    }
    const __m256i sbits = _mm256_slli_epi64(_mm256_add_epi64(_mm256_castpd_si256(kf),
                                                             _mm256_set1_epi64x(1023 - shift_bits)), 52);
    return _mm256_mul_pd(p, _mm256_castsi256_pd(sbits));
}


/* exp_row_scalar four values at a time (AVX2): the same operations in the same order, each multiply and
 * add rounded separately (no fused multiply-add), so every value is bit-identical to the scalar loop's
 * (tests/test_ckernel.py). max(x, −708) keeps −708 for NaN, as the scalar comparison does. */
__attribute__((target("avx2"))) static void
exp_row_avx2(const double *restrict x, double *restrict e, Py_ssize_t k)
{
    Py_ssize_t j = 0;
    for (; j + 4 <= k; j += 4) {
        _mm256_storeu_pd(e + j, exp4_vec(_mm256_loadu_pd(x + j)));
    }
    exp_row_scalar(x + j, e + j, k - j);
}
#endif


PyDoc_STRVAR(exp_poly_doc,
"exp_poly(x, out, vector)\n"
"--\n\n"
"out = the temperature kernels' polynomial exp of x (float64 arrays of one length), by the AVX2 loop\n"
"when vector is true and the CPU has AVX2, else by the scalar loop: the two are bit-identical.\n"
"Returns whether the AVX2 loop ran.");

static PyObject *
py_exp_poly(PyObject *self, PyObject *args)
{
    PyObject *o_x, *o_out;
    int vector;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOp:exp_poly", &o_x, &o_out, &vector)) {
        return NULL;
    }
    Views v = {.n = 0};
    Py_buffer *b_x, *b_out;
    if (!take_x_out(&v, o_x, o_out, &b_x, &b_out)) goto fail;
    const int used = vector && avx2_ok;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2
    if (used) {
        exp_row_avx2((const double *)b_x->buf, (double *)b_out->buf, b_x->shape[0]);
    }
    else
#endif
    {
        exp_row_scalar((const double *)b_x->buf, (double *)b_out->buf, b_x->shape[0]);
    }
    Py_END_ALLOW_THREADS
    views_release(&v);
    return PyBool_FromLong(used);
fail:
    views_release(&v);
    return NULL;
}

#define NLL_ROWS(SUFFIX, T)                                                                        \
    static void nll_rows_##SUFFIX(NllPass *s, const T *scores)                                     \
    {                                                                                              \
        const Py_ssize_t k = s->k;                                                                 \
        double *d = s->d, *x = s->x, *e = s->e;                                                    \
        for (Py_ssize_t i = 0; i < s->rows; i++) {                                                 \
            const T *row = scores + i * k;                                                         \
            double zmax = (double)row[0];                                                          \
            for (Py_ssize_t j = 1; j < k; j++) {                                                   \
                double v = (double)row[j];                                                         \
                zmax = v > zmax ? v : zmax;                                                        \
            }                                                                                      \
            for (Py_ssize_t j = 0; j < k; j++) {                                                   \
                d[j] = (double)row[j] - zmax;                                                      \
                x[j] = s->beta * d[j];                                                             \
            }                                                                                      \
            exp_row_scalar(x, e, k);                                                               \
            double sum = 0.0, s1 = 0.0, s2 = 0.0;                                                  \
            for (Py_ssize_t j = 0; j < k; j++) {                                                   \
                if (d[j] == -INFINITY) {                                                           \
                    continue; /* a log-probability of 0: e = 0, and 0 · (−inf) counts as 0 */     \
                }                                                                                  \
                sum += e[j];                                                                       \
                s1 += e[j] * d[j];                                                                 \
                s2 += e[j] * d[j] * d[j];                                                          \
            }                                                                                      \
            double d_y = d[s->labels[i]];                                                          \
            double m1 = s1 / sum;                                                                  \
            double v = s2 / sum - m1 * m1;                                                         \
            s->total += log(sum) - s->beta * d_y;                                                  \
            s->grad += m1 - d_y;                                                                   \
            s->var += v > 0.0 ? v : 0.0;                                                           \
        }                                                                                          \
    }
NLL_ROWS(f32, float)
NLL_ROWS(f64, double)

#ifdef HAVE_AVX2
#define exp4_avx2(x, out) LANES4(exp4_vec(x), out)
/* nll_rows_f32/f64 with d, β·d and the exponentials four classes at a time (AVX2): the same operations
 * as the scalar loop (exp_row_avx2's bit-identical exp; no fused multiply-add), and the three sums
 * still added one class after the other, so every sum is bit-identical to the scalar pass's. The
 * vectors never go through memory between the loops (the scalar loop's d, x and e rows did: a row
 * written one double at a time and read back four at a time stalls the store forwarding). */
#define NLL_ROWS_AVX2(SUFFIX, T)                                                                   \
    __attribute__((target("avx2"))) static void nll_rows_avx2_##SUFFIX(NllPass *s, const T *scores) \
    {                                                                                              \
        const Py_ssize_t k = s->k;                                                                 \
        const __m256d beta = _mm256_set1_pd(s->beta);                                              \
        for (Py_ssize_t i = 0; i < s->rows; i++) {                                                 \
            const T *row = scores + i * k;                                                         \
            double zmax = (double)row[0];                                                          \
            for (Py_ssize_t j = 1; j < k; j++) {                                                   \
                double v = (double)row[j];                                                         \
                zmax = v > zmax ? v : zmax;                                                        \
            }                                                                                      \
            const __m256d vmax = _mm256_set1_pd(zmax);                                             \
            double sum = 0.0, s1 = 0.0, s2 = 0.0;                                                  \
            for (Py_ssize_t j = 0; j < k; j += 4) {                                                \
                const __m256d dv = _mm256_sub_pd(load4_##SUFFIX(row, j, k), vmax);             \
                double d4[4], e4[4];                                                               \
                LANES4(dv, d4);                                                                    \
                exp4_avx2(_mm256_mul_pd(beta, dv), e4);                                            \
                const int lanes = k - j < 4 ? (int)(k - j) : 4;                                    \
                for (int l = 0; l < lanes; l++) {                                                  \
                    if (d4[l] == -INFINITY) {                                                      \
                        continue; /* a log-probability of 0: e = 0, and 0 · (−inf) counts as 0 */ \
                    }                                                                              \
                    sum += e4[l];                                                                  \
                    s1 += e4[l] * d4[l];                                                           \
                    s2 += e4[l] * d4[l] * d4[l];                                                   \
                }                                                                                  \
            }                                                                                      \
            double d_y = (double)row[s->labels[i]] - zmax;                                         \
            double m1 = s1 / sum;                                                                  \
            double v = s2 / sum - m1 * m1;                                                         \
            s->total += log(sum) - s->beta * d_y;                                                  \
            s->grad += m1 - d_y;                                                                   \
            s->var += v > 0.0 ? v : 0.0;                                                           \
        }                                                                                          \
    }
NLL_ROWS_AVX2(f32, float)
NLL_ROWS_AVX2(f64, double)
#endif

PyDoc_STRVAR(nll_rows_doc,
"nll_rows(scores, labels, beta, out, vector=True)\n"
"--\n\n"
"Add one chunk's sum of NLL, of (E_p[d] - d_y) and of Var_p[d] at beta (d = z - max z, p = softmax(beta d))\n"
"to out[0..2]: calibrate_cli/_grid_kernel.py's nll_rows, the Newton pass of the exact NLL fit.\n\n"
"scores: float32/float64 (rows, K); labels: int64 (rows,) in [0, K); out: float64 (3,).\n"
"vector: the AVX2 loop where the CPU has AVX2 (bit-identical to the scalar loop, which False forces).");

static PyObject *
py_nll_rows(PyObject *self, PyObject *args)
{
    PyObject *o_scores, *o_labels, *o_out;
    double beta;
    int vector = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOdO|p:nll_rows", &o_scores, &o_labels, &beta, &o_out, &vector)) {
        return NULL;
    }
    Views v = {.n = 0};
    int kind_scores, kind;
    Py_buffer *b_scores, *b_labels;
    if (!take_rows(&v, o_scores, o_labels, &kind_scores, &b_scores, &b_labels)) goto fail;
    const Py_ssize_t rows = b_scores->shape[0], k = b_scores->shape[1];
    Py_buffer *b_out = views_next(&v);
    TAKE(v, o_out, "out", 1, KINDS_F64, 1, kind);
    if (!check_len(b_out, "out", 0, 3)) goto fail;
    const int64_t *labels = (const int64_t *)b_labels->buf;
    for (Py_ssize_t i = 0; i < rows; i++) {
        if (labels[i] < 0 || labels[i] >= k) {
            PyErr_Format(PyExc_ValueError, "labels: %lld at row %zd is outside [0, %zd)", (long long)labels[i], i, k);
            goto fail;
        }
    }
    NllPass s = {.rows = rows, .k = k, .beta = beta, .labels = labels};
    s.d = (double *)PyMem_RawMalloc(3 * (size_t)k * sizeof(double));
    if (s.d == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    s.x = s.d + k;
    s.e = s.d + 2 * k;
    const void *scores = b_scores->buf;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2
    if (vector && avx2_ok && kind_scores == K_F32) {
        nll_rows_avx2_f32(&s, (const float *)scores);
    }
    else if (vector && avx2_ok) {
        nll_rows_avx2_f64(&s, (const double *)scores);
    }
    else
#endif
    if (kind_scores == K_F32) {
        nll_rows_f32(&s, (const float *)scores);
    }
    else {
        nll_rows_f64(&s, (const double *)scores);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(s.d);
    double *out = (double *)b_out->buf;
    out[0] += s.total;
    out[1] += s.grad;
    out[2] += s.var;
    views_release(&v);
    Py_RETURN_NONE;
fail:
    views_release(&v);
    return NULL;
}

/* ---------- KS-CE over sorted samples ---------- */

PyDoc_STRVAR(ks_sorted_doc,
"ks_sorted(conf, correct)\n"
"--\n\n"
"max over the ends of runs of equal confidences of |Σ_{j ≤ i} (conf_j − correct_j)| (the sum sequential,\n"
"in sample order: np.cumsum's), over samples sorted by confidence (calibrate_cli.sorting.ks_from_sorted\n"
"before its division by N; 0.0 for N = 0). conf: float64 (N,); correct: bool (N,).");

static PyObject *
py_ks_sorted(PyObject *self, PyObject *args)
{
    PyObject *o_conf, *o_correct;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:ks_sorted", &o_conf, &o_correct)) {
        return NULL;
    }
    Views v = {.n = 0};
    Py_buffer *b_conf, *b_correct;
    const Py_ssize_t n = take_column_pair(&v, o_conf, "conf", KINDS_F64, 0, o_correct, "correct", KINDS_BOOL, 0,
                                          &b_conf, &b_correct);
    if (n < 0) goto fail;
    const double *conf = (const double *)b_conf->buf;
    const unsigned char *correct = (const unsigned char *)b_correct->buf;
    double best = 0.0, acc = 0.0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        acc += conf[i] - (double)correct[i];
        if (i + 1 == n || conf[i] != conf[i + 1]) { /* the last of a run of equal confidences */
            const double a = fabs(acc);
            best = a > best ? a : best;
        }
    }
    Py_END_ALLOW_THREADS
    views_release(&v);
    return PyFloat_FromDouble(best);
fail:
    views_release(&v);
    return NULL;
}

/* ---------- all_finite: the score check's first look ---------- */

PyDoc_STRVAR(all_finite_doc,
"all_finite(values)\n"
"--\n\n"
"Whether no value is NaN or ±inf (every exponent field short of all ones), in one pass; the score\n"
"check's first look at a chunk of logits (calibrate_cli.predictions.ScoreCheck: numpy's min and max\n"
"are two). values: float32 or float64 (N,).");

#define DEFINE_ALL_FINITE(NAME, U, EXP)                                                 \
    static int NAME(const U *restrict bits, Py_ssize_t n)                              \
    {                                                                                   \
        U bad = 0;                                                                      \
        for (Py_ssize_t start = 0; start < n; start += 4096) {                          \
            const Py_ssize_t stop = start + 4096 < n ? start + 4096 : n;                \
            for (Py_ssize_t i = start; i < stop; i++) {                                 \
                bad |= (U)((bits[i] & (EXP)) == (EXP));                                 \
            }                                                                           \
            if (bad) {                                                                  \
                return 0;                                                               \
            }                                                                           \
        }                                                                               \
        return 1;                                                                       \
    }
DEFINE_ALL_FINITE(all_finite_32, uint32_t, (uint32_t)0x7f800000u)
DEFINE_ALL_FINITE(all_finite_64, uint64_t, (uint64_t)0x7ff0000000000000ull)
#ifdef HAVE_AVX2
/* 32 float32 (or 16 float64) values a step: exponent fields equal to all ones OR-ed into one vector,
 * tested once a block. */
#define DEFINE_ALL_FINITE_AVX2(NAME, U, LANES, SET1, CMPEQ, EXP)                                      \
    __attribute__((target("avx2"))) static int NAME(const U *restrict bits, Py_ssize_t n)              \
    {                                                                                                 \
        const __m256i exp = SET1(EXP);                                                                \
        Py_ssize_t i = 0;                                                                             \
        while (i + 4 * LANES <= n) {                                                                  \
            __m256i bad = _mm256_setzero_si256();                                                     \
            const Py_ssize_t stop = i + 4096 < n ? i + 4096 : n;                                      \
            for (; i + 4 * LANES <= stop; i += 4 * LANES) {                                           \
                const __m256i a = _mm256_loadu_si256((const __m256i *)(bits + i));                    \
                const __m256i b = _mm256_loadu_si256((const __m256i *)(bits + i + LANES));            \
                const __m256i c = _mm256_loadu_si256((const __m256i *)(bits + i + 2 * LANES));        \
                const __m256i d = _mm256_loadu_si256((const __m256i *)(bits + i + 3 * LANES));        \
                bad = _mm256_or_si256(bad, _mm256_or_si256(                                           \
                    _mm256_or_si256(CMPEQ(_mm256_and_si256(a, exp), exp), CMPEQ(_mm256_and_si256(b, exp), exp)), \
                    _mm256_or_si256(CMPEQ(_mm256_and_si256(c, exp), exp), CMPEQ(_mm256_and_si256(d, exp), exp)))); \
            }                                                                                         \
            if (!_mm256_testz_si256(bad, bad)) {                                                      \
                return 0;                                                                             \
            }                                                                                         \
        }                                                                                             \
        return NAME##_rest(bits + i, n - i);                                                          \
    }
#define all_finite_32_avx2_rest all_finite_32
#define all_finite_64_avx2_rest all_finite_64
DEFINE_ALL_FINITE_AVX2(all_finite_32_avx2, uint32_t, 8, _mm256_set1_epi32, _mm256_cmpeq_epi32, 0x7f800000)
DEFINE_ALL_FINITE_AVX2(all_finite_64_avx2, uint64_t, 4, _mm256_set1_epi64x, _mm256_cmpeq_epi64, 0x7ff0000000000000LL)
#endif

static PyObject *
py_all_finite(PyObject *self, PyObject *args)
{
    PyObject *o_values;
    (void)self;
    if (!PyArg_ParseTuple(args, "O:all_finite", &o_values)) {
        return NULL;
    }
    Views v = {.n = 0};
    int kind;
    Py_buffer *b_values = views_next(&v);
    TAKE(v, o_values, "values", 1, KINDS_FLOAT, 0, kind);
    const Py_ssize_t n = b_values->shape[0];
    int finite;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2
    if (avx2_ok) {
        finite = kind == K_F32 ? all_finite_32_avx2((const uint32_t *)b_values->buf, n)
                               : all_finite_64_avx2((const uint64_t *)b_values->buf, n);
    }
    else
#endif
    {
        finite = kind == K_F32 ? all_finite_32((const uint32_t *)b_values->buf, n)
                               : all_finite_64((const uint64_t *)b_values->buf, n);
    }
    Py_END_ALLOW_THREADS
    views_release(&v);
    return PyBool_FromLong(finite);
fail:
    views_release(&v);
    return NULL;
}

/* ---------- probs_plausible: the probability check's first look ---------- */

PyDoc_STRVAR(probs_plausible_doc,
"probs_plausible(values, high, tol)\n"
"--\n\n"
"Whether every value lies in [0, high] (none NaN) and every row sums to within tol/2 of 1 (the sum in\n"
"float64): then numpy's exact checks (calibrate_cli.predictions.ScoreCheck: values in [0, high], row\n"
"sums within tol of 1) pass too, whatever the order of their additions. False means only that they\n"
"must be made. values: float32 or float64 (N, K).");

#define DEFINE_PROBS_PLAUSIBLE(SUFFIX, T)                                                               \
    static int probs_plausible_rows_##SUFFIX(const T *x, Py_ssize_t rows, Py_ssize_t k, double high,    \
                                             double half_tol)                                           \
    {                                                                                                   \
        for (Py_ssize_t i = 0; i < rows; i++) {                                                         \
            double sum = 0.0;                                                                           \
            for (Py_ssize_t j = 0; j < k; j++) {                                                        \
                const double v = (double)x[i * k + j];                                                  \
                if (!(v >= 0.0 && v <= high)) {                                                         \
                    return 0;                                                                           \
                }                                                                                       \
                sum += v;                                                                               \
            }                                                                                           \
            if (!(fabs(sum - 1.0) <= half_tol)) {                                                       \
                return 0;                                                                               \
            }                                                                                           \
        }                                                                                               \
        return 1;                                                                                       \
    }
DEFINE_PROBS_PLAUSIBLE(f32, float)
DEFINE_PROBS_PLAUSIBLE(f64, double)

#ifdef HAVE_AVX2
/* Four rows at a time, one per lane (cols4), for K ≤ COLS_MAX_K; the rest by the scalar loop. */
#define DEFINE_PROBS_PLAUSIBLE_COLS(SUFFIX, T)                                                              \
    __attribute__((target("avx2,fma"))) static int probs_plausible_cols_##SUFFIX(                           \
        const T *x, Py_ssize_t rows, Py_ssize_t k, double high, double half_tol)                            \
    {                                                                                                       \
        __m256d xcol[COLS_MAX_K];                                                                           \
        const __m256d zero = _mm256_setzero_pd(), vhigh = _mm256_set1_pd(high);                            \
        const __m256d one = _mm256_set1_pd(1.0), vtol = _mm256_set1_pd(half_tol);                          \
        const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));             \
        Py_ssize_t i = 0;                                                                                   \
        for (; i + 4 <= rows; i += 4) {                                                                     \
            cols4_##SUFFIX(x + i * k, k, xcol);                                                             \
            __m256d sum = zero, ok = _mm256_cmp_pd(zero, zero, _CMP_EQ_OQ);                                 \
            for (Py_ssize_t j = 0; j < k; j++) {                                                            \
                ok = _mm256_and_pd(ok, _mm256_and_pd(_mm256_cmp_pd(xcol[j], zero, _CMP_GE_OQ),             \
                                                     _mm256_cmp_pd(xcol[j], vhigh, _CMP_LE_OQ)));          \
                sum = _mm256_add_pd(sum, xcol[j]);                                                          \
            }                                                                                               \
            ok = _mm256_and_pd(ok, _mm256_cmp_pd(_mm256_and_pd(_mm256_sub_pd(sum, one), abs_mask), vtol,    \
                                                 _CMP_LE_OQ));                                              \
            if (_mm256_movemask_pd(ok) != 15) {                                                             \
                return 0;                                                                                   \
            }                                                                                               \
        }                                                                                                   \
        return probs_plausible_rows_##SUFFIX(x + i * k, rows - i, k, high, half_tol);                       \
    }
DEFINE_PROBS_PLAUSIBLE_COLS(f32, float)
DEFINE_PROBS_PLAUSIBLE_COLS(f64, double)
#endif

static PyObject *
py_probs_plausible(PyObject *self, PyObject *args)
{
    PyObject *o_values;
    double high, tol;
    (void)self;
    if (!PyArg_ParseTuple(args, "Odd:probs_plausible", &o_values, &high, &tol)) {
        return NULL;
    }
    Views v = {.n = 0};
    int kind;
    Py_buffer *b_values = views_next(&v);
    TAKE(v, o_values, "values", 2, KINDS_FLOAT, 0, kind);
    const Py_ssize_t rows = b_values->shape[0], k = b_values->shape[1];
    int plausible;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2
    if (cols_cpu_ok && k >= 1 && k <= COLS_MAX_K) {
        plausible = kind == K_F32 ? probs_plausible_cols_f32((const float *)b_values->buf, rows, k, high, tol / 2)
                                  : probs_plausible_cols_f64((const double *)b_values->buf, rows, k, high, tol / 2);
    }
    else
#endif
    {
        plausible = kind == K_F32 ? probs_plausible_rows_f32((const float *)b_values->buf, rows, k, high, tol / 2)
                                  : probs_plausible_rows_f64((const double *)b_values->buf, rows, k, high, tol / 2);
    }
    Py_END_ALLOW_THREADS
    views_release(&v);
    return PyBool_FromLong(plausible);
fail:
    views_release(&v);
    return NULL;
}

/* ---------- pack_keys: (conf, correct) into sort keys, checked ---------- */

PyDoc_STRVAR(pack_keys_doc,
"pack_keys(conf, correct, out)\n"
"--\n\n"
"out = bits(conf) << 1 | correct (calibrate_cli.sorting.pack_keys) in one pass, if every confidence\n"
"lies in [0, 2) (sorting.packable): True; else False, out partly written. conf: float64 (N,);\n"
"correct: bool (N,); out: int64 (N,), writeable.");

static PyObject *
py_pack_keys(PyObject *self, PyObject *args)
{
    PyObject *o_conf, *o_correct, *o_out;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO:pack_keys", &o_conf, &o_correct, &o_out)) {
        return NULL;
    }
    Views v = {.n = 0};
    int kind;
    Py_buffer *b_conf, *b_correct;
    const Py_ssize_t n = take_column_pair(&v, o_conf, "conf", KINDS_F64, 0, o_correct, "correct", KINDS_BOOL, 0,
                                          &b_conf, &b_correct);
    if (n < 0) goto fail;
    Py_buffer *b_out = views_next(&v);
    TAKE(v, o_out, "out", 1, KINDS_I64, 1, kind);
    if (!check_len(b_out, "out", 0, n)) goto fail;
    const double *restrict conf = (const double *)b_conf->buf;
    const unsigned char *restrict correct = (const unsigned char *)b_correct->buf;
    int64_t *restrict out = (int64_t *)b_out->buf;
    int packable = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const double c = conf[i];
        if (!(c >= 0.0 && c < 2.0)) {
            packable = 0;
            break;
        }
        uint64_t bits;
        memcpy(&bits, &c, sizeof bits);
        out[i] = (int64_t)((bits << 1) | (uint64_t)(correct[i] & 1));
    }
    Py_END_ALLOW_THREADS
    views_release(&v);
    return PyBool_FromLong(packable);
fail:
    views_release(&v);
    return NULL;
}

/* ---------- unpack_keys: sorted packed keys back to (conf, correct) ---------- */

PyDoc_STRVAR(unpack_keys_doc,
"unpack_keys(keys, correct)\n"
"--\n\n"
"keys >>= 1 in place and correct = keys & 1 (before the shift), in one pass: the keys of\n"
"calibrate_cli.sorting.pack_keys (bits(conf) << 1 | correct, non-negative) back to the bits of conf\n"
"and its correctness; numpy's two passes (a right shift and a strided bitwise and) give the same.\n"
"keys: int64 (N,), writeable; correct: bool (N,), writeable.");

static PyObject *
py_unpack_keys(PyObject *self, PyObject *args)
{
    PyObject *o_keys, *o_correct;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:unpack_keys", &o_keys, &o_correct)) {
        return NULL;
    }
    Views v = {.n = 0};
    Py_buffer *b_keys, *b_correct;
    const Py_ssize_t n = take_column_pair(&v, o_keys, "keys", KINDS_I64, 1, o_correct, "correct", KINDS_BOOL, 1,
                                          &b_keys, &b_correct);
    if (n < 0) goto fail;
    int64_t *restrict keys = (int64_t *)b_keys->buf;
    unsigned char *restrict correct = (unsigned char *)b_correct->buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t key = keys[i];
        correct[i] = (unsigned char)(key & 1);
        keys[i] = key >> 1;
    }
    Py_END_ALLOW_THREADS
    views_release(&v);
    Py_RETURN_NONE;
fail:
    views_release(&v);
    return NULL;
}

/* ---------- module ---------- */

static PyMethodDef methods[] = {
    {"fused_rows", py_fused_rows, METH_VARARGS, fused_rows_doc},
    {"bin_sums_1d", py_bin_sums_1d, METH_VARARGS, bin_sums_1d_doc},
    {"spread_unit", py_spread_unit, METH_VARARGS, spread_unit_doc},
    {"nll_rows", py_nll_rows, METH_VARARGS, nll_rows_doc},
    {"exp_poly", py_exp_poly, METH_VARARGS, exp_poly_doc},
    {"top_label_rows", py_top_label_rows, METH_VARARGS, top_label_rows_doc},
    {"exp_exact", py_exp_exact, METH_VARARGS, exp_exact_doc},
    {"bucket_counts", py_bucket_counts, METH_VARARGS, bucket_counts_doc},
    {"bucket_gather", py_bucket_gather, METH_VARARGS, bucket_gather_doc},
    {"ks_sorted", py_ks_sorted, METH_VARARGS, ks_sorted_doc},
    {"unpack_keys", py_unpack_keys, METH_VARARGS, unpack_keys_doc},
    {"pack_keys", py_pack_keys, METH_VARARGS, pack_keys_doc},
    {"all_finite", py_all_finite, METH_VARARGS, all_finite_doc},
    {"probs_plausible", py_probs_plausible, METH_VARARGS, probs_plausible_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "calibrate_cli._ckernel",
    "The summary pass's two hot loops in C (fused_rows, bin_sums_1d): bit-identical to the numba kernels\n"
    "of calibrate_cli._fused_kernel and calibrate_cli._bin_kernel, without numba's import and cache-load cost;\n"
    "and SmoothECE's grid spreading (spread_unit), bit-identical to calibrate_cli.smooth_ece's np.bincount passes.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__ckernel(void)
{
#ifdef HAVE_AVX2
    __builtin_cpu_init();
    avx2_ok = __builtin_cpu_supports("avx2");
    cols_cpu_ok = avx2_ok && __builtin_cpu_supports("fma");
    exact_exp_ok = cols_cpu_ok && exact_exp_selfcheck();
#endif
    return PyModule_Create(&module);
}
