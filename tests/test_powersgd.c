/* PowerSGD's local math (src/compress/powersgd.c), with 1..8 ranks
 * simulated in one process: each rank has its own compressor, and the sum
 * all-reduces between the phases are done here, in rank order. Checked
 * against a reference written in double: the layout, P before and after
 * orthonormalisation, Q and the result; every rank's result bit for bit;
 * the residual identity; exact rank-r matrices; error feedback; plain
 * tensors; AVG and in-place calls; the warm-start state (initial values,
 * reset, save and restore, untouched without phase 3); zero and dependent
 * columns; and the shapes that create refuses. */
#include "harness.h"

#include "compress/codec.h"
#include "compress/powersgd.h"

#include <cblas.h>

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 8
#define SEED 0x5eed1234abcdull

/* One bucket of every kind: at rank 4, 64x64, 64x10 and 33x17 are
 * compressed; 1x37 and 37x1 (vectors), 3x3 (too small), 1x1 and 5x5
 * (compressed only at rank 1 or 2) are plain. */
static const size_t lay_rows[] = {64, 1, 64, 37, 3, 33, 1, 5};
static const size_t lay_cols[] = {64, 37, 10, 1, 3, 17, 1, 5};
#define NT (sizeof(lay_rows) / sizeof(lay_rows[0]))

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Uniform in [-1, 1). */
static float rng_signed(void)
{
    return (float)(int32_t)(rng_next() >> 40) * 0x1p-23f - 1.0f;
}

static void fill_random(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_signed();
}

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

/* ---- the layout, as the header defines it ---- */

typedef struct {
    size_t rows, cols, r; /* r 0: plain */
    size_t off, off1, off2;
} ref_tensor_t;

typedef struct {
    size_t count, len1, len2;
    ref_tensor_t t[NT];
} ref_layout_t;

static void ref_layout(ref_layout_t *L, unsigned rank)
{
    size_t p_len = 0;
    memset(L, 0, sizeof(*L));
    for (size_t t = 0; t < NT; t++) {
        ref_tensor_t *tt = &L->t[t];
        size_t m = lay_rows[t], n = lay_cols[t];
        size_t r = rank < m ? rank : m;
        r = r < n ? r : n;
        tt->rows = m;
        tt->cols = n;
        tt->off = L->count;
        L->count += m * n;
        if (m > 1 && n > 1 && (m + n) * r < m * n) {
            tt->r = r;
            tt->off1 = p_len;
            tt->off2 = L->len2;
            p_len += m * r;
            L->len2 += n * r;
        }
    }
    L->len1 = p_len;
    for (size_t t = 0; t < NT; t++) {
        if (L->t[t].r == 0) {
            L->t[t].off1 = L->len1;
            L->len1 += lay_rows[t] * lay_cols[t];
        }
    }
}

/* ---- simulated ranks ---- */

typedef struct {
    int n;
    ref_layout_t L;
    shoal_psgd_t *ps[MAX_RANKS];
    float *x[MAX_RANKS], *b1[MAX_RANKS], *b2[MAX_RANKS], *out[MAX_RANKS], *res[MAX_RANKS];
    float *sum1;     /* buf1 summed, before phase 2 */
    float *sum2;     /* buf2 summed */
    float *q_before; /* rank 0's state before the last step */
} sim_t;

static void sim_init(sim_t *s, int n, unsigned rank, uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    s->n = n;
    ref_layout(&s->L, rank);
    for (int r = 0; r < n; r++) {
        assert_int_equal(shoal_psgd_create(NT, lay_rows, lay_cols, rank, seed, &s->ps[r]),
                         SHOAL_OK);
        s->x[r] = calloc(s->L.count, sizeof(float));
        s->b1[r] = harness_alloc_guarded(s->L.len1 * sizeof(float));
        s->b2[r] = harness_alloc_guarded(s->L.len2 * sizeof(float));
        s->out[r] = harness_alloc_guarded(s->L.count * sizeof(float));
        s->res[r] = harness_alloc_guarded(s->L.count * sizeof(float));
        assert_non_null(s->x[r]);
    }
    s->sum1 = malloc(s->L.len1 * sizeof(float));
    s->sum2 = malloc(s->L.len2 * sizeof(float));
    s->q_before = malloc(s->L.len2 * sizeof(float));
    assert_non_null(s->sum1);
    assert_non_null(s->sum2);
    assert_non_null(s->q_before);
}

static void sim_check_guards(const sim_t *s)
{
    for (int r = 0; r < s->n; r++) {
        harness_assert_guard(s->b1[r], s->L.len1 * sizeof(float), "buf1");
        harness_assert_guard(s->b2[r], s->L.len2 * sizeof(float), "buf2");
        harness_assert_guard(s->out[r], s->L.count * sizeof(float), "out");
        harness_assert_guard(s->res[r], s->L.count * sizeof(float), "residual");
    }
}

static void sim_free(sim_t *s)
{
    sim_check_guards(s);
    for (int r = 0; r < s->n; r++) {
        shoal_psgd_destroy(s->ps[r]);
        free(s->x[r]);
        free(s->b1[r]);
        free(s->b2[r]);
        free(s->out[r]);
        free(s->res[r]);
    }
    free(s->sum1);
    free(s->sum2);
    free(s->q_before);
}

/* dst = the sum of bufs[0..n) in rank order, the same on every rank. */
static void sum_ranks(float *dst, float *const *bufs, int n, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        float v = bufs[0][i];
        for (int r = 1; r < n; r++)
            v += bufs[r][i];
        dst[i] = v;
    }
}

static void sim_phases12(sim_t *s)
{
    memcpy(s->q_before, shoal_psgd_state(s->ps[0]), s->L.len2 * sizeof(float));
    for (int r = 0; r < s->n; r++)
        shoal_psgd_phase1(s->ps[r], s->x[r], s->b1[r]);
    sum_ranks(s->sum1, s->b1, s->n, s->L.len1);
    for (int r = 0; r < s->n; r++) {
        memcpy(s->b1[r], s->sum1, s->L.len1 * sizeof(float));
        shoal_psgd_phase2(s->ps[r], s->x[r], s->b1[r], s->b2[r]);
    }
    sum_ranks(s->sum2, s->b2, s->n, s->L.len2);
    for (int r = 0; r < s->n; r++)
        memcpy(s->b2[r], s->sum2, s->L.len2 * sizeof(float));
}

/* One compressed all-reduce of the ranks' x. */
static void sim_step(sim_t *s, int with_residual, float scale)
{
    sim_phases12(s);
    for (int r = 0; r < s->n; r++)
        shoal_psgd_phase3(s->ps[r], s->x[r], s->b1[r], s->b2[r], s->out[r],
                          with_residual ? s->res[r] : NULL, s->n, scale);
}

/* ---- the reference, in double ---- */

/* Gram-Schmidt over the columns of p (m x r, row-major), with the
 * header's rule for columns in the span of the earlier ones. */
static void ref_gram_schmidt(double *p, size_t m, size_t r)
{
    for (size_t j = 0; j < r; j++) {
        double len0 = 0, len = 0;
        for (size_t i = 0; i < m; i++)
            len0 += p[i * r + j] * p[i * r + j];
        for (size_t k = 0; k < j; k++) {
            double d = 0;
            for (size_t i = 0; i < m; i++)
                d += p[i * r + j] * p[i * r + k];
            for (size_t i = 0; i < m; i++)
                p[i * r + j] -= d * p[i * r + k];
        }
        for (size_t i = 0; i < m; i++)
            len += p[i * r + j] * p[i * r + j];
        len = sqrt(len);
        for (size_t i = 0; i < m; i++)
            p[i * r + j] = len <= SHOAL_PSGD_NEAR_ZERO * sqrt(len0) ? 0.0 : p[i * r + j] / len;
    }
}

typedef struct {
    double *p_pre, *p, *q, *out; /* len1, len1, len2, count */
    double *m;                   /* the summed bucket, count */
} ref_t;

static void ref_alloc(ref_t *R, const ref_layout_t *L)
{
    R->p_pre = calloc(L->len1 + 1, sizeof(double));
    R->p = calloc(L->len1 + 1, sizeof(double));
    R->q = calloc(L->len2 + 1, sizeof(double));
    R->out = calloc(L->count + 1, sizeof(double));
    R->m = calloc(L->count + 1, sizeof(double));
    assert_true(R->p_pre && R->p && R->q && R->out && R->m);
}

static void ref_free(ref_t *R)
{
    free(R->p_pre);
    free(R->p);
    free(R->q);
    free(R->out);
    free(R->m);
}

/* One call on the ranks' x from the warm start q_in, in double. */
static void ref_step(ref_t *R, const ref_layout_t *L, float *const *x, int n,
                     const float *q_in)
{
    for (size_t i = 0; i < L->count; i++) {
        R->m[i] = 0;
        for (int r = 0; r < n; r++)
            R->m[i] += x[r][i];
    }
    for (size_t t = 0; t < NT; t++) {
        const ref_tensor_t *tt = &L->t[t];
        const double *M = R->m + tt->off;
        size_t m = tt->rows, c = tt->cols, k = tt->r;
        if (k == 0) {
            for (size_t i = 0; i < m * c; i++) {
                R->p_pre[tt->off1 + i] = R->p[tt->off1 + i] = M[i];
                R->out[tt->off + i] = M[i];
            }
            continue;
        }
        double *pp = R->p_pre + tt->off1, *p = R->p + tt->off1, *q = R->q + tt->off2;
        const float *q0 = q_in + tt->off2;
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < k; j++) {
                double v = 0;
                for (size_t l = 0; l < c; l++)
                    v += M[i * c + l] * q0[l * k + j];
                pp[i * k + j] = p[i * k + j] = v;
            }
        ref_gram_schmidt(p, m, k);
        for (size_t l = 0; l < c; l++)
            for (size_t j = 0; j < k; j++) {
                double v = 0;
                for (size_t i = 0; i < m; i++)
                    v += M[i * c + l] * p[i * k + j];
                q[l * k + j] = v;
            }
        for (size_t i = 0; i < m; i++)
            for (size_t l = 0; l < c; l++) {
                double v = 0;
                for (size_t j = 0; j < k; j++)
                    v += p[i * k + j] * q[l * k + j];
                R->out[tt->off + i * c + l] = v;
            }
    }
}

/* max |a - ref| over max |ref| (0 for an all-zero ref equal to a). */
static double rel_err(const float *a, const double *ref, size_t n)
{
    double diff = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        diff = d > diff || isnan(d) ? d : diff;
        top = fabs(ref[i]) > top ? fabs(ref[i]) : top;
    }
    return top > 0 ? diff / top : diff;
}

/* Frobenius ||a - b|| / ||b|| over the compressed tensors. */
static double frob_err(const ref_layout_t *L, const float *a, const double *b)
{
    double num = 0, den = 0;
    for (size_t t = 0; t < NT; t++) {
        if (L->t[t].r == 0)
            continue;
        for (size_t i = L->t[t].off; i < L->t[t].off + L->t[t].rows * L->t[t].cols; i++) {
            num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
            den += b[i] * b[i];
        }
    }
    return sqrt(num / den);
}

/* Tolerance of the comparisons with the reference, relative to the
 * largest value of the tensor: about ten times what fp32's rounding
 * through products of up to 64 terms (summed over up to 8 ranks) and a
 * Gram-Schmidt of well-conditioned columns gives here (3.3e-7), far below
 * any error of the method. */
#define REF_TOL 4e-6

/* Every checks that one step on s (already run) must pass, against R. */
static void check_step(const sim_t *s, const ref_t *R, const char *what)
{
    const ref_layout_t *L = &s->L;
    for (size_t t = 0; t < NT; t++) {
        const ref_tensor_t *tt = &L->t[t];
        size_t n = tt->rows * tt->cols;
        double e;
        if (tt->r == 0) {
            /* Plain: the sum in rank order, bit for bit. */
            for (size_t i = 0; i < n; i++) {
                float v = s->x[0][tt->off + i];
                for (int r = 1; r < s->n; r++)
                    v += s->x[r][tt->off + i];
                if (bits_of(s->out[0][tt->off + i]) != bits_of(v))
                    fail_msg("%s: plain tensor %zu value %zu: %a, want the sum %a", what, t,
                             i, (double)s->out[0][tt->off + i], (double)v);
            }
            continue;
        }
        size_t lp = tt->rows * tt->r, lq = tt->cols * tt->r;
        if ((e = rel_err(s->sum1 + tt->off1, R->p_pre + tt->off1, lp)) > REF_TOL)
            fail_msg("%s: tensor %zu: P = M Q off by %g", what, t, e);
        if ((e = rel_err(s->b1[0] + tt->off1, R->p + tt->off1, lp)) > REF_TOL)
            fail_msg("%s: tensor %zu: orthonormal P off by %g", what, t, e);
        if ((e = rel_err(s->sum2 + tt->off2, R->q + tt->off2, lq)) > REF_TOL)
            fail_msg("%s: tensor %zu: Q = M^T P off by %g", what, t, e);
        if ((e = rel_err(s->out[0] + tt->off, R->out + tt->off, n)) > REF_TOL)
            fail_msg("%s: tensor %zu: P Q^T off by %g", what, t, e);
        /* The columns of P are orthonormal to fp32's precision. */
        const float *p = s->b1[0] + tt->off1;
        for (size_t a = 0; a < tt->r; a++)
            for (size_t b = 0; b < tt->r; b++) {
                double d = 0;
                for (size_t i = 0; i < tt->rows; i++)
                    d += (double)p[i * tt->r + a] * p[i * tt->r + b];
                if (fabs(d - (a == b)) > 1e-6)
                    fail_msg("%s: tensor %zu: P^T P [%zu][%zu] = %g", what, t, a, b, d);
            }
    }
    /* Every rank orthonormalised to the same bits and got the same out. */
    for (int r = 1; r < s->n; r++) {
        if (memcmp(s->b1[r], s->b1[0], L->len1 * sizeof(float)) != 0)
            fail_msg("%s: rank %d's orthonormal P differs from rank 0's", what, r);
        if (memcmp(s->out[r], s->out[0], L->count * sizeof(float)) != 0)
            fail_msg("%s: rank %d's result differs from rank 0's", what, r);
    }
}

/* Summed over the ranks, the residuals are the exact sum minus the result
 * (out unscaled: SUM), within the rounding of each residual: that of
 * x - o / n, and of a product P Q^T computed a second time (its
 * accumulation may round differently, up to k ulps of sum |P||Q|). */
static void check_residuals(const sim_t *s, const char *what)
{
    const ref_layout_t *L = &s->L;
    for (size_t t = 0; t < NT; t++) {
        const ref_tensor_t *tt = &L->t[t];
        for (size_t i = 0; i < tt->rows; i++)
            for (size_t c = 0; c < tt->cols; c++) {
                size_t at = tt->off + i * tt->cols + c;
                double lhs = 0, exact = 0, mag = 0, pq = 0;
                double o = s->out[0][at];
                for (int r = 0; r < s->n; r++) {
                    lhs += s->res[r][at];
                    exact += s->x[r][at];
                    mag += fabs(s->x[r][at]) + fabs(s->res[r][at]);
                }
                for (size_t j = 0; j < tt->r; j++)
                    pq += fabs((double)s->b1[0][tt->off1 + i * tt->r + j] *
                               s->b2[0][tt->off2 + c * tt->r + j]);
                double tol = FLT_EPSILON * (mag + 2 * fabs(o) + 2.0 * (double)tt->r * pq);
                if (!(fabs(lhs - (exact - o)) <= tol))
                    fail_msg("%s: tensor %zu value %zu: residuals sum to %g, want %g - %g "
                             "(tolerance %g)", what, t, at - tt->off, lhs, exact, o, tol);
            }
    }
}

/* ---- tests ---- */

/* count, len1 and len2 as the header defines them, for several ranks, and
 * the numbers worked out by hand at rank 4. */
static void test_layout(void **state)
{
    (void)state;
    static const unsigned ranks[] = {1, 2, 3, 4, 8, 16, 100};
    for (size_t k = 0; k < sizeof(ranks) / sizeof(ranks[0]); k++) {
        ref_layout_t L;
        shoal_psgd_t *ps;
        ref_layout(&L, ranks[k]);
        assert_int_equal(shoal_psgd_create(NT, lay_rows, lay_cols, ranks[k], 1, &ps),
                         SHOAL_OK);
        assert_int_equal(shoal_psgd_count(ps), L.count);
        assert_int_equal(shoal_psgd_len1(ps), L.len1);
        assert_int_equal(shoal_psgd_len2(ps), L.len2);
        shoal_psgd_destroy(ps);
        if (ranks[k] == 4) {
            assert_int_equal(L.count, 4096 + 37 + 640 + 37 + 9 + 561 + 1 + 25);
            assert_int_equal(L.len1, 64 * 4 + 64 * 4 + 33 * 4 + 37 + 37 + 9 + 1 + 25);
            assert_int_equal(L.len2, 64 * 4 + 10 * 4 + 17 * 4);
        }
    }
    /* At the boundary: (rows + cols) * r equal to rows * cols is plain. */
    shoal_psgd_t *ps;
    size_t rows[] = {8, 9, 6, 12}, cols[] = {8, 9, 12, 6};
    assert_int_equal(shoal_psgd_create(4, rows, cols, 4, 1, &ps), SHOAL_OK);
    assert_int_equal(shoal_psgd_len1(ps), 9 * 4 + 64 + 72 + 72);
    assert_int_equal(shoal_psgd_len2(ps), 9 * 4);
    shoal_psgd_destroy(ps);
    assert_int_equal(shoal_psgd_create(4, rows, cols, 3, 1, &ps), SHOAL_OK);
    assert_int_equal(shoal_psgd_len2(ps), (8 + 9 + 12 + 6) * 3);
    shoal_psgd_destroy(ps);
    /* An empty bucket: nothing to do, no buffers needed. */
    assert_int_equal(shoal_psgd_create(0, NULL, NULL, 4, 1, &ps), SHOAL_OK);
    assert_int_equal(shoal_psgd_count(ps), 0);
    assert_int_equal(shoal_psgd_len1(ps), 0);
    assert_int_equal(shoal_psgd_len2(ps), 0);
    shoal_psgd_phase1(ps, NULL, NULL);
    shoal_psgd_phase2(ps, NULL, NULL, NULL);
    shoal_psgd_phase3(ps, NULL, NULL, NULL, NULL, NULL, 1, 1.0f);
    shoal_psgd_reset(ps);
    shoal_psgd_destroy(ps);
    shoal_psgd_destroy(NULL);
}

/* Refused shapes leave *ps_p as it was. */
static void test_bad_shapes(void **state)
{
    (void)state;
    shoal_psgd_t *const sentinel = (shoal_psgd_t *)&rng_state;
    shoal_psgd_t *ps = sentinel;
    const size_t big = (size_t)INT_MAX + 1, huge = (size_t)1 << 30;
    struct {
        size_t nt;
        size_t rows[3], cols[3];
        unsigned rank;
    } bad[] = {
        {1, {0}, {5}, 2},                              /* no rows */
        {1, {5}, {0}, 2},                              /* no columns */
        {3, {4, 0, 4}, {4, 4, 4}, 2},                  /* one empty tensor */
        {1, {8}, {8}, 0},                              /* rank 0 */
        {1, {big}, {1}, 2},                            /* rows beyond a BLAS int */
        {1, {1}, {big}, 2},                            /* columns beyond a BLAS int */
        {2, {INT_MAX, INT_MAX}, {INT_MAX, INT_MAX}, 2}, /* more bytes than size_t */
        {3, {INT_MAX, INT_MAX, INT_MAX}, {huge, huge, huge}, 2}, /* at the third */
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        assert_int_equal(shoal_psgd_create(bad[k].nt, bad[k].rows, bad[k].cols, bad[k].rank,
                                           1, &ps),
                         SHOAL_ERR_INVALID_ARG);
        assert_ptr_equal(ps, sentinel);
    }
    size_t one = 4;
    assert_int_equal(shoal_psgd_create(1, NULL, &one, 2, 1, &ps), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_psgd_create(1, &one, NULL, 2, 1, &ps), SHOAL_ERR_INVALID_ARG);
    assert_ptr_equal(ps, sentinel);
    assert_int_equal(shoal_psgd_create(1, &one, &one, 2, 1, NULL), SHOAL_ERR_INVALID_ARG);
    /* The largest shapes that are fine are accepted (nothing that size is
     * allocated: they are plain vectors, so the state is empty). */
    size_t r1 = 1, cmax = INT_MAX;
    assert_int_equal(shoal_psgd_create(1, &r1, &cmax, 2, 1, &ps), SHOAL_OK);
    assert_int_equal(shoal_psgd_count(ps), (size_t)INT_MAX);
    assert_int_equal(shoal_psgd_len2(ps), 0);
    shoal_psgd_destroy(ps);
}

/* Initial value i of Q_t, as the header defines it. */
static float initial_q(uint64_t seed, size_t t, uint64_t i)
{
    uint32_t key = shoal_codec_key(seed, t);
    double u1 = shoal_codec_uniform(key, 2 * i), u2 = shoal_codec_uniform(key, 2 * i + 1);
    return (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2));
}

/* The initial Q follows its definition bit for bit, is standard normal,
 * differs between tensors and seeds, and reset brings it back. */
static void test_initial_q(void **state)
{
    (void)state;
    ref_layout_t L;
    shoal_psgd_t *ps, *other;
    ref_layout(&L, 4);
    assert_int_equal(shoal_psgd_create(NT, lay_rows, lay_cols, 4, SEED, &ps), SHOAL_OK);
    const float *q = shoal_psgd_state(ps);
    for (size_t t = 0; t < NT; t++)
        for (size_t i = 0; i < L.t[t].cols * L.t[t].r; i++)
            if (bits_of(q[L.t[t].off2 + i]) != bits_of(initial_q(SEED, t, i)))
                fail_msg("tensor %zu: Q[%zu] = %a, want %a", t, i, (double)q[L.t[t].off2 + i],
                         (double)initial_q(SEED, t, i));
    assert_int_equal(shoal_psgd_create(NT, lay_rows, lay_cols, 4, SEED + 1, &other), SHOAL_OK);
    assert_memory_not_equal(shoal_psgd_state(other), q, L.len2 * sizeof(float));
    shoal_psgd_destroy(other);

    /* Two tensors of the same shape start from different Q; the values
     * of a larger one have mean 0 and variance 1. */
    size_t rows[] = {600, 600}, cols[] = {500, 500};
    const size_t k = 16, n = 500 * k;
    assert_int_equal(shoal_psgd_create(2, rows, cols, (unsigned)k, SEED, &other), SHOAL_OK);
    assert_int_equal(shoal_psgd_len2(other), 2 * n);
    const float *q2 = shoal_psgd_state(other);
    assert_memory_not_equal(q2, q2 + n, n * sizeof(float));
    double mean = 0, var = 0;
    for (size_t i = 0; i < n; i++)
        mean += q2[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++)
        var += (q2[i] - mean) * (q2[i] - mean);
    var /= (double)n;
    if (fabs(mean) > 0.05 || fabs(var - 1) > 0.06)
        fail_msg("initial Q: mean %g, variance %g", mean, var);
    shoal_psgd_destroy(other);

    /* reset after steps gives a new object's Q. */
    sim_t s;
    sim_init(&s, 2, 4, SEED);
    for (int step = 0; step < 2; step++) {
        for (int r = 0; r < s.n; r++)
            fill_random(s.x[r], s.L.count);
        sim_step(&s, 1, 1.0f);
    }
    assert_memory_not_equal(shoal_psgd_state(s.ps[0]), q, L.len2 * sizeof(float));
    shoal_psgd_reset(s.ps[0]);
    assert_memory_equal(shoal_psgd_state(s.ps[0]), q, L.len2 * sizeof(float));
    sim_free(&s);
    shoal_psgd_destroy(ps);
}

/* 1..8 ranks, ranks 1, 2 and 4, two warm-started calls each: P, Q and the
 * result against the reference in double, every rank's bits, the plain
 * tensors, and the residual identity. */
static void test_reference(void **state)
{
    (void)state;
    static const unsigned ranks[] = {1, 2, 4};
    for (size_t k = 0; k < sizeof(ranks) / sizeof(ranks[0]); k++)
        for (int n = 1; n <= MAX_RANKS; n++) {
            sim_t s;
            ref_t R;
            char what[96];
            sim_init(&s, n, ranks[k], SEED + (uint64_t)n);
            ref_alloc(&R, &s.L);
            for (int step = 0; step < 2; step++) {
                snprintf(what, sizeof(what), "rank %u, %d ranks, call %d", ranks[k], n, step);
                for (int r = 0; r < n; r++)
                    fill_random(s.x[r], s.L.count);
                sim_step(&s, 1, 1.0f);
                ref_step(&R, &s.L, s.x, n, s.q_before);
                check_step(&s, &R, what);
                check_residuals(&s, what);
                /* The state took the summed Q (no column is zero here). */
                assert_memory_equal(shoal_psgd_state(s.ps[0]), s.sum2,
                                    s.L.len2 * sizeof(float));
            }
            ref_free(&R);
            sim_free(&s);
        }
}

/* AVG scales the result and nothing else, and out or residual may be x:
 * the same bits as separate buffers. */
static void test_avg_and_in_place(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_RANKS; n += 2) {
        sim_t s;
        sim_init(&s, n, 4, SEED);
        for (int r = 0; r < n; r++)
            fill_random(s.x[r], s.L.count);
        sim_phases12(&s);
        size_t bytes = s.L.count * sizeof(float);
        float *sum = malloc(bytes), *sum_res = malloc(bytes), *xc = malloc(bytes);
        float *q_sum = malloc(s.L.len2 * sizeof(float));
        assert_true(sum && sum_res && xc && q_sum);
        float scale = 1.0f / (float)n;
        shoal_psgd_t *ps = s.ps[0];
        float *q = shoal_psgd_state(ps);
        const float *q0 = s.q_before;

        shoal_psgd_phase3(ps, s.x[0], s.b1[0], s.b2[0], sum, sum_res, n, 1.0f);
        memcpy(q_sum, q, s.L.len2 * sizeof(float));
        /* Phase 3 again from the same state, as an AVG. */
        memcpy(q, q0, s.L.len2 * sizeof(float));
        shoal_psgd_phase3(ps, s.x[0], s.b1[0], s.b2[0], s.out[0], s.res[0], n, scale);
        assert_memory_equal(s.res[0], sum_res, bytes);
        assert_memory_equal(q, q_sum, s.L.len2 * sizeof(float));
        for (size_t i = 0; i < s.L.count; i++) {
            float want = sum[i] * scale;
            if (!(fabsf(s.out[0][i] - want) <= 2 * FLT_EPSILON * fabsf(want)))
                fail_msg("%d ranks: AVG value %zu: %a, want %a", n, i, (double)s.out[0][i],
                         (double)want);
        }
        /* out == x */
        memcpy(xc, s.x[0], bytes);
        memcpy(q, q0, s.L.len2 * sizeof(float));
        shoal_psgd_phase3(ps, xc, s.b1[0], s.b2[0], xc, s.res[0], n, 1.0f);
        assert_memory_equal(xc, sum, bytes);
        assert_memory_equal(s.res[0], sum_res, bytes);
        /* residual == x */
        memcpy(xc, s.x[0], bytes);
        memcpy(q, q0, s.L.len2 * sizeof(float));
        shoal_psgd_phase3(ps, xc, s.b1[0], s.b2[0], s.out[0], xc, n, 1.0f);
        assert_memory_equal(s.out[0], sum, bytes);
        assert_memory_equal(xc, sum_res, bytes);
        /* No residual: the same result. */
        memcpy(q, q0, s.L.len2 * sizeof(float));
        shoal_psgd_phase3(ps, s.x[0], s.b1[0], s.b2[0], s.out[0], NULL, n, 1.0f);
        assert_memory_equal(s.out[0], sum, bytes);
        free(sum);
        free(sum_res);
        free(xc);
        free(q_sum);
        sim_free(&s);
    }
}

/* Sums of rank-r matrices A B_rank^T with a common A are rank r: the first
 * call finds A's column space, and the second (warm-started) call gives
 * the matrix back to fp32's precision. */
static void test_exact_low_rank(void **state)
{
    (void)state;
    static const unsigned ranks[] = {1, 2, 4};
    for (size_t kk = 0; kk < sizeof(ranks) / sizeof(ranks[0]); kk++)
        for (int n = 1; n <= MAX_RANKS; n += 3) {
            sim_t s;
            ref_t R;
            sim_init(&s, n, ranks[kk], SEED);
            ref_alloc(&R, &s.L);
            for (size_t t = 0; t < NT; t++) {
                const ref_tensor_t *tt = &s.L.t[t];
                size_t k = tt->r, m = tt->rows, c = tt->cols;
                float a[64 * 4], b[64 * 4];
                if (k == 0) {
                    for (int r = 0; r < n; r++)
                        fill_random(s.x[r] + tt->off, m * c);
                    continue;
                }
                fill_random(a, m * k);
                for (int r = 0; r < n; r++) {
                    fill_random(b, c * k);
                    for (size_t i = 0; i < m; i++)
                        for (size_t l = 0; l < c; l++) {
                            double v = 0;
                            for (size_t j = 0; j < k; j++)
                                v += (double)a[i * k + j] * b[l * k + j];
                            s.x[r][tt->off + i * c + l] = (float)v;
                        }
                }
            }
            ref_step(&R, &s.L, s.x, n, shoal_psgd_state(s.ps[0]));
            double err[2];
            for (int step = 0; step < 2; step++) {
                sim_step(&s, 1, 1.0f);
                err[step] = frob_err(&s.L, s.out[0], R.m);
            }
            if (err[1] > 1e-5)
                fail_msg("rank %u, %d ranks: rank-%u matrices come back with error %g, %g",
                         ranks[kk], n, ranks[kk], err[0], err[1]);
            ref_free(&R);
            sim_free(&s);
        }
}

/* A random matrix with a decaying spectrum, the same input every call:
 * warm-started power iteration lowers the error of each call; with error
 * feedback the mean of the results converges to the exact sum (the
 * residuals stay bounded), whereas without it it keeps the rank-r error. */
static void test_error_feedback(void **state)
{
    (void)state;
    enum { STEPS = 64 };
    const int n = 3;
    sim_t s, ef;
    ref_t R;
    sim_init(&s, n, 2, SEED);
    sim_init(&ef, n, 2, SEED);
    ref_alloc(&R, &s.L);
    float *g[MAX_RANKS];
    double *acc = calloc(s.L.count, sizeof(double));
    float *mean = malloc(s.L.count * sizeof(float));
    assert_true(acc && mean);
    for (int r = 0; r < n; r++) {
        g[r] = malloc(s.L.count * sizeof(float));
        assert_non_null(g[r]);
        fill_random(g[r], s.L.count);
        /* Column l scaled by 0.9^l: singular values far apart. */
        for (size_t t = 0; t < NT; t++)
            for (size_t i = 0; i < s.L.t[t].rows; i++)
                for (size_t l = 0; l < s.L.t[t].cols; l++)
                    g[r][s.L.t[t].off + i * s.L.t[t].cols + l] *= (float)pow(0.9, (double)l);
        memcpy(s.x[r], g[r], s.L.count * sizeof(float));
        memset(ef.res[r], 0, s.L.count * sizeof(float));
    }
    ref_step(&R, &s.L, g, n, shoal_psgd_state(s.ps[0])); /* R.m = the exact sum */
    double plain_err[STEPS], ef_err[STEPS], noef_err[STEPS];
    double *acc_noef = calloc(s.L.count, sizeof(double));
    assert_non_null(acc_noef);
    for (int step = 0; step < STEPS; step++) {
        sim_step(&s, 0, 1.0f);
        plain_err[step] = frob_err(&s.L, s.out[0], R.m);
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < s.L.count; i++)
                ef.x[r][i] = g[r][i] + ef.res[r][i];
        sim_step(&ef, 1, 1.0f);
        for (size_t i = 0; i < s.L.count; i++) {
            acc[i] += ef.out[0][i];
            acc_noef[i] += s.out[0][i];
        }
        for (size_t i = 0; i < s.L.count; i++)
            mean[i] = (float)(acc[i] / (step + 1));
        ef_err[step] = frob_err(&s.L, mean, R.m);
        for (size_t i = 0; i < s.L.count; i++)
            mean[i] = (float)(acc_noef[i] / (step + 1));
        noef_err[step] = frob_err(&s.L, mean, R.m);
    }
    for (int step = 1; step < STEPS; step++)
        if (plain_err[step] > plain_err[step - 1] * (1 + 1e-6))
            fail_msg("call %d: error %g, after %g", step, plain_err[step], plain_err[step - 1]);
    if (!(plain_err[STEPS - 1] < 0.95 * plain_err[0]))
        fail_msg("warm start: error %g after %d calls, %g after one", plain_err[STEPS - 1],
                 STEPS, plain_err[0]);
    for (int step = 4; step < STEPS; step *= 2)
        if (!(ef_err[2 * step - 1] < 0.8 * ef_err[step - 1]))
            fail_msg("error feedback: mean error %g after %d calls, %g after %d",
                     ef_err[2 * step - 1], 2 * step, ef_err[step - 1], step);
    if (!(ef_err[STEPS - 1] < 0.2 * noef_err[STEPS - 1]))
        fail_msg("error feedback: mean error %g after %d calls, %g without", ef_err[STEPS - 1],
                 STEPS, noef_err[STEPS - 1]);
    for (int r = 0; r < n; r++)
        free(g[r]);
    free(acc);
    free(acc_noef);
    free(mean);
    ref_free(&R);
    sim_free(&s);
    sim_free(&ef);
}

/* Zero input gives zeros everywhere (no NaN), leaves the initial Q in the
 * state instead of a zero one, so the next call is a fresh object's. */
static void test_zero_input(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_RANKS; n += 2) {
        sim_t s, fresh;
        sim_init(&s, n, 4, SEED);
        sim_init(&fresh, n, 4, SEED);
        sim_step(&s, 1, 1.0f / (float)n);
        for (int r = 0; r < n; r++) {
            for (size_t i = 0; i < s.L.count; i++)
                if (bits_of(s.out[r][i]) != 0 || bits_of(s.res[r][i]) != 0)
                    fail_msg("%d ranks: rank %d value %zu: out %a, residual %a", n, r, i,
                             (double)s.out[r][i], (double)s.res[r][i]);
            for (size_t i = 0; i < s.L.len1; i++)
                assert_true(s.b1[r][i] == 0.0f);
            for (size_t i = 0; i < s.L.len2; i++)
                assert_true(s.b2[r][i] == 0.0f);
            assert_memory_equal(shoal_psgd_state(s.ps[r]), shoal_psgd_state(fresh.ps[r]),
                                s.L.len2 * sizeof(float));
        }
        for (int r = 0; r < n; r++) {
            fill_random(s.x[r], s.L.count);
            memcpy(fresh.x[r], s.x[r], s.L.count * sizeof(float));
        }
        sim_step(&s, 1, 1.0f);
        sim_step(&fresh, 1, 1.0f);
        assert_memory_equal(s.out[0], fresh.out[0], s.L.count * sizeof(float));
        sim_free(&s);
        sim_free(&fresh);
    }
}

/* Columns in the span of the earlier ones: a zero column of Q and two
 * equal columns give columns of P that are zero (not NaN); the result is
 * what the other columns give, and those columns of the state take their
 * initial values. */
static void test_dependent_columns(void **state)
{
    (void)state;
    sim_t s, two;
    ref_t R;
    sim_init(&s, 2, 4, SEED);
    ref_alloc(&R, &s.L);
    for (int r = 0; r < s.n; r++)
        fill_random(s.x[r], s.L.count);
    float *q = shoal_psgd_state(s.ps[0]);
    float *q_init = malloc(s.L.len2 * sizeof(float));
    assert_non_null(q_init);
    memcpy(q_init, q, s.L.len2 * sizeof(float));
    for (int r = 0; r < s.n; r++) {
        float *qr = shoal_psgd_state(s.ps[r]);
        for (size_t t = 0; t < NT; t++) {
            const ref_tensor_t *tt = &s.L.t[t];
            for (size_t l = 0; l < tt->cols && tt->r; l++) {
                qr[tt->off2 + l * tt->r + 1] = 0.0f;                       /* zero */
                qr[tt->off2 + l * tt->r + 3] = qr[tt->off2 + l * tt->r + 2]; /* equal */
            }
        }
    }
    sim_step(&s, 1, 1.0f);
    ref_step(&R, &s.L, s.x, s.n, s.q_before);
    for (size_t t = 0; t < NT; t++) {
        const ref_tensor_t *tt = &s.L.t[t];
        if (tt->r == 0)
            continue;
        for (size_t i = 0; i < tt->rows; i++) {
            const float *p = s.b1[0] + tt->off1 + i * tt->r;
            if (p[1] != 0.0f || p[3] != 0.0f || isnan(p[0]) || isnan(p[2]))
                fail_msg("tensor %zu row %zu of P: %a %a %a %a", t, i, (double)p[0],
                         (double)p[1], (double)p[2], (double)p[3]);
        }
        for (size_t l = 0; l < tt->cols; l++) {
            const float *ql = q + tt->off2 + l * tt->r, *q0 = q_init + tt->off2 + l * tt->r;
            if (bits_of(ql[1]) != bits_of(q0[1]) || bits_of(ql[3]) != bits_of(q0[3]))
                fail_msg("tensor %zu row %zu of the state: %a %a, want the initial %a %a", t,
                         l, (double)ql[1], (double)ql[3], (double)q0[1], (double)q0[3]);
            if (ql[0] != s.sum2[tt->off2 + l * tt->r] ||
                ql[2] != s.sum2[tt->off2 + l * tt->r + 2])
                fail_msg("tensor %zu row %zu of the state: not the summed Q", t, l);
        }
    }
    /* The result is that of rank 2, from Q's columns 0 and 2. */
    sim_init(&two, 2, 2, SEED);
    for (int r = 0; r < s.n; r++) {
        memcpy(two.x[r], s.x[r], s.L.count * sizeof(float));
        float *q2 = shoal_psgd_state(two.ps[r]);
        for (size_t t = 0; t < NT; t++) {
            const ref_tensor_t *t4 = &s.L.t[t], *t2 = &two.L.t[t];
            for (size_t l = 0; l < t2->cols && t2->r; l++) {
                q2[t2->off2 + l * 2] = s.q_before[t4->off2 + l * 4];
                q2[t2->off2 + l * 2 + 1] = s.q_before[t4->off2 + l * 4 + 2];
            }
        }
    }
    sim_step(&two, 1, 1.0f);
    for (size_t t = 0; t < NT; t++) {
        const ref_tensor_t *tt = &s.L.t[t];
        double e;
        if (tt->r && (e = rel_err(s.out[0] + tt->off, R.out + tt->off,
                                  tt->rows * tt->cols)) > REF_TOL)
            fail_msg("tensor %zu: result off the reference by %g", t, e);
        for (size_t i = 0; i < tt->rows * tt->cols && tt->r; i++)
            if (fabsf(s.out[0][tt->off + i] - two.out[0][tt->off + i]) >
                1e-5f * (1 + fabsf(two.out[0][tt->off + i])))
                fail_msg("tensor %zu value %zu: %a, at rank 2 %a", t, i,
                         (double)s.out[0][tt->off + i], (double)two.out[0][tt->off + i]);
    }
    free(q_init);
    ref_free(&R);
    sim_free(&s);
    sim_free(&two);
}

/* The state: phases 1 and 2 without phase 3 (a failed all-reduce) leave it
 * as it was; what is read from the pointer and written back into another
 * object's makes that object continue exactly as the first. */
static void test_state(void **state)
{
    (void)state;
    sim_t a, b;
    const int n = 3;
    sim_init(&a, n, 4, SEED);
    sim_init(&b, n, 4, SEED ^ 77);
    size_t qbytes = a.L.len2 * sizeof(float);
    float *saved = malloc(qbytes);
    assert_non_null(saved);
    for (int step = 0; step < 3; step++) {
        for (int r = 0; r < n; r++)
            fill_random(a.x[r], a.L.count);
        sim_step(&a, 1, 1.0f);
    }
    /* A call that fails between the phases. */
    memcpy(saved, shoal_psgd_state(a.ps[1]), qbytes);
    for (int r = 0; r < n; r++)
        fill_random(a.x[r], a.L.count);
    sim_phases12(&a);
    assert_memory_equal(shoal_psgd_state(a.ps[1]), saved, qbytes);
    /* Restore a's state into b (another seed) and run both. */
    for (int r = 0; r < n; r++) {
        memcpy(shoal_psgd_state(b.ps[r]), shoal_psgd_state(a.ps[r]), qbytes);
        memcpy(b.x[r], a.x[r], a.L.count * sizeof(float));
    }
    sim_step(&a, 1, 1.0f);
    sim_step(&b, 1, 1.0f);
    assert_memory_equal(a.out[0], b.out[0], a.L.count * sizeof(float));
    assert_memory_equal(a.res[2], b.res[2], a.L.count * sizeof(float));
    assert_memory_equal(shoal_psgd_state(a.ps[0]), shoal_psgd_state(b.ps[0]), qbytes);
    assert_memory_not_equal(shoal_psgd_state(a.ps[0]), saved, qbytes);
    free(saved);
    sim_free(&a);
    sim_free(&b);
}

/* ---- error feedback fused, and the panels ---- */

/* A bucket whose matrices span one panel, several with a short last one
 * (1100 rows of 64), one row per panel (40000 columns), with a vector and a
 * matrix too small to shrink among them. */
static const size_t pan_rows[] = {1100, 1, 3, 517, 5};
static const size_t pan_cols[] = {64, 13, 40000, 33, 3};
#define PAN_NT (sizeof(pan_rows) / sizeof(pan_rows[0]))
#define PAN_RANK 4

/* phase1_ef(m, r) gives phase1's bits of the fp32 sums m + r, and writes
 * the sums to x (also in place over m); phase3, which goes by panels, gives
 * the bits of the products over whole tensors that it made before (the
 * residual: x plus -1/n P Q^T by one product; the result: scale P Q^T by
 * another), computed here with cblas over each tensor at once. */
static void test_fused_panels(void **state)
{
    (void)state;
    shoal_psgd_t *ps, *ps2;
    assert_int_equal(shoal_psgd_create(PAN_NT, pan_rows, pan_cols, PAN_RANK, 3, &ps), SHOAL_OK);
    assert_int_equal(shoal_psgd_create(PAN_NT, pan_rows, pan_cols, PAN_RANK, 3, &ps2),
                     SHOAL_OK);
    size_t count = shoal_psgd_count(ps), len1 = shoal_psgd_len1(ps), len2 = shoal_psgd_len2(ps);
    size_t fb = count * sizeof(float);
    float *m = malloc(fb), *r = malloc(fb), *sum = malloc(fb), *x = malloc(fb);
    float *mx = malloc(fb), *out = malloc(fb), *res = malloc(fb), *out_ref = malloc(fb);
    float *res_ref = malloc(fb), *b1 = malloc(len1 * 4), *b1_ref = malloc(len1 * 4);
    float *b2 = malloc(len2 * 4);
    assert_true(m && r && sum && x && mx && out && res && out_ref && res_ref && b1 && b1_ref &&
                b2);
    fill_random(m, count);
    fill_random(r, count);
    for (size_t i = 0; i < count; i++) {
        r[i] *= 0.125f;
        sum[i] = m[i] + r[i];
    }
    shoal_psgd_phase1_ef(ps, m, r, x, b1);
    shoal_psgd_phase1(ps2, sum, b1_ref);
    assert_memory_equal(x, sum, fb);
    assert_memory_equal(b1, b1_ref, len1 * sizeof(float));
    memcpy(mx, m, fb);
    shoal_psgd_phase1_ef(ps, mx, r, mx, b1);
    assert_memory_equal(mx, sum, fb);
    assert_memory_equal(b1, b1_ref, len1 * sizeof(float));
    /* Without r: phase1 itself, x untouched. */
    shoal_psgd_phase1_ef(ps, sum, NULL, NULL, b1);
    assert_memory_equal(b1, b1_ref, len1 * sizeof(float));

    /* One rank's buffers stand for the sums. */
    shoal_psgd_phase2(ps, x, b1, b2);
    const int n = 3;
    const float scale = 0.5f;
    shoal_psgd_phase3(ps, x, b1, b2, out, res, n, scale);
    size_t off = 0, off1 = 0, off2 = 0, plain1 = 0;
    for (size_t t = 0; t < PAN_NT; t++) {
        size_t rows = pan_rows[t], cols = pan_cols[t], k = PAN_RANK;
        k = k < rows ? k : rows;
        k = k < cols ? k : cols;
        if (rows > 1 && cols > 1 && (rows + cols) * k < rows * cols)
            plain1 += rows * k;
    }
    for (size_t t = 0; t < PAN_NT; t++) {
        size_t rows = pan_rows[t], cols = pan_cols[t], k = PAN_RANK, len = rows * cols;
        k = k < rows ? k : rows;
        k = k < cols ? k : cols;
        if (rows > 1 && cols > 1 && (rows + cols) * k < rows * cols) {
            const float *p = b1 + off1, *q = b2 + off2;
            memcpy(res_ref + off, x + off, len * sizeof(float));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)k,
                        -1.0f / (float)n, p, (int)k, q, (int)k, 1.0f, res_ref + off, (int)cols);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)k,
                        scale, p, (int)k, q, (int)k, 0.0f, out_ref + off, (int)cols);
            off1 += rows * k;
            off2 += cols * k;
        } else {
            const float *v = b1 + plain1;
            for (size_t i = 0; i < len; i++) {
                res_ref[off + i] = x[off + i] - v[i] / (float)n;
                out_ref[off + i] = v[i] * scale;
            }
            plain1 += len;
        }
        off += len;
    }
    assert_memory_equal(out, out_ref, fb);
    assert_memory_equal(res, res_ref, fb);
    shoal_psgd_destroy(ps);
    shoal_psgd_destroy(ps2);
    free(m);
    free(r);
    free(sum);
    free(x);
    free(mx);
    free(out);
    free(res);
    free(out_ref);
    free(res_ref);
    free(b1);
    free(b1_ref);
    free(b2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test(test_initial_q),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_avg_and_in_place),
        cmocka_unit_test(test_exact_low_rank),
        cmocka_unit_test(test_error_feedback),
        cmocka_unit_test(test_zero_input),
        cmocka_unit_test(test_dependent_columns),
        cmocka_unit_test(test_state),
        cmocka_unit_test(test_fused_panels),
    };
    return cmocka_run_group_tests_name("powersgd", tests, NULL, NULL);
}
