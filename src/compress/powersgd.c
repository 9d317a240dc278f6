/* PowerSGD's local math (compress/powersgd.h): the bucket's layout, the
 * warm-start state, and the three phases around the caller's all-reduces.
 *
 * Row-major M_t (rows x cols), P_t (rows x r) and Q_t (cols x r) go to
 * cblas_sgemm as they lie: P = M Q is (NoTrans, NoTrans), Q = M^T P is
 * (Trans, NoTrans) and P Q^T is (NoTrans, Trans), so nothing is copied or
 * transposed by hand. */
#include "compress/powersgd.h"

#include "compress/codec.h"
#include "compress/psgd_elem.h"
#include "base/log.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct shoal_psgd {
    size_t ntensors;
    size_t count, len1, len2;
    uint64_t seed;
    shoal_psgd_tensor_t *tensors;
    float *q;       /* the state: len2 floats */
    double *col;    /* phase2's scratch: one column of the tallest P */
};

static pthread_once_t shoal_psgd_blas_once = PTHREAD_ONCE_INIT;

/* OpenBLAS may split a product between threads, and how it splits may
 * depend on the thread count; one thread makes each product a fixed
 * sequence of operations. It is a process-wide setting, made once. */
static void shoal_psgd_blas_setup(void)
{
    openblas_set_num_threads(1);
}

/* Initial value i of Q_t: a standard normal number by Box-Muller. u1 is a
 * multiple of 2^-24 in [0, 1), so log(1 - u1) is finite. */
static float shoal_psgd_normal(uint32_t key, uint64_t i)
{
    double u1 = shoal_codec_uniform(key, 2 * i);
    double u2 = shoal_codec_uniform(key, 2 * i + 1);
    return (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}

/* Column j of Q_t (cols x r) in q takes its initial values. */
static void shoal_psgd_draw_column(const shoal_psgd_t *ps, size_t t, size_t j, float *q)
{
    const shoal_psgd_tensor_t *tt = &ps->tensors[t];
    uint32_t key = shoal_codec_key(ps->seed, t);
    for (size_t i = 0; i < tt->cols; i++)
        q[i * tt->rank + j] = shoal_psgd_normal(key, i * tt->rank + j);
}

void shoal_psgd_reset(shoal_psgd_t *ps)
{
    for (size_t t = 0; t < ps->ntensors; t++) {
        const shoal_psgd_tensor_t *tt = &ps->tensors[t];
        for (size_t j = 0; j < tt->rank; j++)
            shoal_psgd_draw_column(ps, t, j, ps->q + tt->off2);
    }
}

/* r_t of a rows x cols tensor at the given rank when it is compressed,
 * 0 when it is plain. With r = min(rank, rows, cols), compressed means
 * (rows + cols) * r < rows * cols, written so that nothing overflows
 * (rows * cols fits, and a * r < n is a <= (n - 1) / r for integers). */
static size_t shoal_psgd_rank_of(size_t rows, size_t cols, unsigned rank)
{
    size_t r = rank < rows ? rank : rows;
    r = r < cols ? r : cols;
    if (rows < 2 || cols < 2 || rows + cols > (rows * cols - 1) / r)
        return 0;
    return r;
}

shoal_status_t shoal_psgd_create(size_t ntensors, const size_t *rows, const size_t *cols,
                                 unsigned rank, uint64_t seed, shoal_psgd_t **ps_p)
{
    shoal_psgd_t *ps;
    size_t count = 0, len1 = 0, len2 = 0, off1 = 0, off2 = 0, plain = 0, tallest = 0;

    if (ps_p == NULL || rank == 0 || (ntensors > 0 && (rows == NULL || cols == NULL))) {
        shoal_error(COMP, "powersgd: invalid argument (ps_p %p, rank %u, %zu tensors, "
                    "rows %p, cols %p)", (void *)ps_p, rank, ntensors,
                    (const void *)rows, (const void *)cols);
        return SHOAL_ERR_INVALID_ARG;
    }
    /* The shapes, and the size of P's part of buf1 (the plain values
     * follow it). */
    for (size_t t = 0; t < ntensors; t++) {
        size_t m = rows[t], n = cols[t];
        if (m == 0 || n == 0 || m > INT_MAX || n > INT_MAX || m > SIZE_MAX / n ||
            count + m * n < count || count + m * n > SIZE_MAX / sizeof(float)) {
            shoal_error(COMP, "powersgd: tensor %zu of %zu x %zu values: no values, a "
                        "dimension above INT_MAX, or a bucket too large", t, m, n);
            return SHOAL_ERR_INVALID_ARG;
        }
        count += m * n;
        len1 += m * shoal_psgd_rank_of(m, n, rank);
        len2 += n * shoal_psgd_rank_of(m, n, rank);
    }

    ps = calloc(1, sizeof(*ps));
    if (ps == NULL)
        goto err_no_memory;
    ps->tensors = calloc(ntensors ? ntensors : 1, sizeof(*ps->tensors));
    if (ps->tensors == NULL)
        goto err_free_ps;
    for (size_t t = 0; t < ntensors; t++) {
        shoal_psgd_tensor_t *tt = &ps->tensors[t];
        tt->rows = rows[t];
        tt->cols = cols[t];
        tt->rank = shoal_psgd_rank_of(rows[t], cols[t], rank);
        tt->off = t ? ps->tensors[t - 1].off + rows[t - 1] * cols[t - 1] : 0;
        if (tt->rank) {
            tt->off1 = off1;
            tt->off2 = off2;
            off1 += rows[t] * tt->rank;
            off2 += cols[t] * tt->rank;
            tallest = rows[t] > tallest ? rows[t] : tallest;
        } else {
            tt->off1 = len1 + plain;
            plain += rows[t] * cols[t];
        }
    }
    ps->ntensors = ntensors;
    ps->count = count;
    ps->len1 = len1 + plain;
    ps->len2 = len2;
    ps->seed = seed;
    ps->q = malloc((len2 ? len2 : 1) * sizeof(float));
    if (ps->q == NULL)
        goto err_free_tensors;
    ps->col = malloc((tallest ? tallest : 1) * sizeof(double));
    if (ps->col == NULL)
        goto err_free_q;
    shoal_psgd_reset(ps);
    pthread_once(&shoal_psgd_blas_once, shoal_psgd_blas_setup);
    *ps_p = ps;
    return SHOAL_OK;

err_free_q:
    free(ps->q);
err_free_tensors:
    free(ps->tensors);
err_free_ps:
    free(ps);
err_no_memory:
    shoal_error(COMP, "powersgd: out of memory for %zu tensors of %zu values", ntensors,
                count);
    return SHOAL_ERR_NO_MEMORY;
}

void shoal_psgd_destroy(shoal_psgd_t *ps)
{
    if (ps == NULL)
        return;
    free(ps->col);
    free(ps->q);
    free(ps->tensors);
    free(ps);
}

size_t shoal_psgd_count(const shoal_psgd_t *ps)
{
    return ps->count;
}

size_t shoal_psgd_len1(const shoal_psgd_t *ps)
{
    return ps->len1;
}

size_t shoal_psgd_len2(const shoal_psgd_t *ps)
{
    return ps->len2;
}

float *shoal_psgd_state(shoal_psgd_t *ps)
{
    return ps->q;
}

/* Rows of a panel: the products that read or write a whole tensor go
 * through it a panel of about SHOAL_PSGD_PANEL_BYTES at a time, so that
 * what one loop writes the next reads from cache. Row i of P = M Q and of
 * P Q^T depends on row i of M or P alone, so a product of a panel gives the
 * rows it would in the product of the whole (the tests check the bits). */
#define SHOAL_PSGD_PANEL_BYTES (128 * 1024)

static size_t shoal_psgd_panel_rows(size_t cols)
{
    size_t h = SHOAL_PSGD_PANEL_BYTES / sizeof(float) / cols;
    return h ? h : 1;
}

void shoal_psgd_phase1(shoal_psgd_t *ps, const float *x, float *buf1)
{
    shoal_psgd_phase1_ef(ps, x, NULL, NULL, buf1);
}

void shoal_psgd_phase1_ef(shoal_psgd_t *ps, const float *m, const float *r, float *x,
                          float *buf1)
{
    for (size_t t = 0; t < ps->ntensors; t++) {
        const shoal_psgd_tensor_t *tt = &ps->tensors[t];
        const float *mt = m + tt->off, *rt = r ? r + tt->off : NULL;
        float *xt = r ? x + tt->off : NULL;
        if (tt->rank == 0) {
            size_t n = tt->rows * tt->cols;
            float *v = buf1 + tt->off1;
            if (!rt) {
                memcpy(v, mt, n * sizeof(float));
                continue;
            }
            for (size_t i = 0; i < n; i++)
                v[i] = xt[i] = mt[i] + rt[i];
            continue;
        }
        if (!rt) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)tt->rows,
                        (int)tt->rank, (int)tt->cols, 1.0f, mt, (int)tt->cols,
                        ps->q + tt->off2, (int)tt->rank, 0.0f, buf1 + tt->off1,
                        (int)tt->rank);
            continue;
        }
        /* Error feedback: x = m + r a panel at a time, and that panel's
         * rows of P = x Q while it is in cache: one pass that reads m and r
         * and writes x, where a separate sum would add a pass. */
        size_t h = shoal_psgd_panel_rows(tt->cols);
        for (size_t i0 = 0; i0 < tt->rows; i0 += h) {
            size_t rows = tt->rows - i0 < h ? tt->rows - i0 : h, n = rows * tt->cols;
            const float *mp = mt + i0 * tt->cols, *rp = rt + i0 * tt->cols;
            float *xp = xt + i0 * tt->cols;
            for (size_t i = 0; i < n; i++)
                xp[i] = mp[i] + rp[i];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)tt->rank,
                        (int)tt->cols, 1.0f, xp, (int)tt->cols, ps->q + tt->off2,
                        (int)tt->rank, 0.0f, buf1 + tt->off1 + i0 * tt->rank, (int)tt->rank);
        }
    }
}

size_t shoal_psgd_ntensors(const shoal_psgd_t *ps)
{
    return ps->ntensors;
}

const shoal_psgd_tensor_t *shoal_psgd_tensor(const shoal_psgd_t *ps, size_t t)
{
    return &ps->tensors[t];
}

void shoal_psgd_phase2(shoal_psgd_t *ps, const float *x, float *buf1, float *buf2)
{
    for (size_t t = 0; t < ps->ntensors; t++) {
        const shoal_psgd_tensor_t *tt = &ps->tensors[t];
        if (tt->rank == 0)
            continue;
        shoal_psgd_orthonormalise(buf1 + tt->off1, tt->rows, tt->rank, ps->col);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)tt->cols, (int)tt->rank,
                    (int)tt->rows, 1.0f, x + tt->off, (int)tt->cols, buf1 + tt->off1,
                    (int)tt->rank, 0.0f, buf2 + tt->off2, (int)tt->rank);
    }
}

/* The state takes the summed Q_t; a column that is all zero takes its
 * initial values instead (powersgd.h: a zero start would stay zero). */
void shoal_psgd_keep_q(shoal_psgd_t *ps, const float *buf2)
{
    if (ps->len2 == 0)
        return;
    memcpy(ps->q, buf2, ps->len2 * sizeof(float));
    for (size_t t = 0; t < ps->ntensors; t++) {
        const shoal_psgd_tensor_t *tt = &ps->tensors[t];
        float *q = ps->q + tt->off2;
        for (size_t j = 0; j < tt->rank; j++) {
            size_t i = 0;
            while (i < tt->cols && q[i * tt->rank + j] == 0.0f)
                i++;
            if (i == tt->cols)
                shoal_psgd_draw_column(ps, t, j, q);
        }
    }
}

void shoal_psgd_phase3(shoal_psgd_t *ps, const float *x, const float *buf1, const float *buf2,
                       float *out, float *residual, int nranks, float scale)
{
    for (size_t t = 0; t < ps->ntensors; t++) {
        const shoal_psgd_tensor_t *tt = &ps->tensors[t];
        size_t n = tt->rows * tt->cols;
        const float *xt = x + tt->off;
        float *ot = out + tt->off;
        float *rt = residual ? residual + tt->off : NULL;
        if (tt->rank == 0) {
            /* Element by element, x read before out or residual is
             * written: either may be x. */
            const float *v = buf1 + tt->off1;
            for (size_t i = 0; i < n; i++) {
                if (rt)
                    rt[i] = xt[i] - v[i] / (float)nranks;
                ot[i] = v[i] * scale;
            }
            continue;
        }
        const float *q = buf2 + tt->off2;
        int k = (int)tt->rank, c = (int)tt->cols;
        /* A panel of rows at a time, so that the products' passes over
         * their outputs stay in cache: the residual first, while x is
         * intact (out may be x): x, then minus P Q^T / nranks added by the
         * product itself; then the result, which reads only P and Q. */
        size_t h = shoal_psgd_panel_rows(tt->cols);
        for (size_t i0 = 0; i0 < tt->rows; i0 += h) {
            size_t rows = tt->rows - i0 < h ? tt->rows - i0 : h, off = i0 * tt->cols;
            const float *p = buf1 + tt->off1 + i0 * tt->rank;
            if (rt) {
                if (rt != xt)
                    memcpy(rt + off, xt + off, rows * tt->cols * sizeof(float));
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, c, k,
                            -1.0f / (float)nranks, p, k, q, k, 1.0f, rt + off, c);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, c, k, scale, p, k,
                        q, k, 0.0f, ot + off, c);
        }
    }
    shoal_psgd_keep_q(ps, buf2);
}
