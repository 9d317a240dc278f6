/* The CUDA module's table (base/dev_ops.h) entry by entry, loaded the way
 * libshoal loads it (base/dev.h): pointer kinds, memory, copies, the
 * reduction and AVG kernels for every dtype x op against the scalar
 * references, the convert kernel between every pair of its types against
 * base/dtype.h's conversions, PowerSGD's orthonormalisation against the
 * host's, the stream flags (and the wait kernel used where a device
 * has no stream memory operations), memory handles opened by another
 * process, and the row-major matrix product through cuBLAS against a
 * reference. In make test the driver is the CPU stand-in of tests/cuda/
 * (its kernels run the very range functions of cuda/kern.h) and cuBLAS
 * its stand-in there; make test-gpu runs this binary on the real driver
 * and cuBLAS. */
#include "cuda_user.h"
#include "harness.h"

#include "algos/reduce.h"
#include "base/dev.h"
#include "base/dtype.h"
#include "cuda/kern.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const shoal_dev_ops_t *ops;

static void open_module(void)
{
    char why[256];
    if (cu_user_open(0, why, sizeof(why)) != 0)
        fail_msg("%s", why);
    ops = shoal_dev_get();
    if (!ops)
        fail_msg("%s", shoal_dev_why());
}

static void test_kinds(void **state)
{
    (void)state;
    open_module();
    assert_string_equal(ops->name, "cuda");
    assert_true(ops->device_count() >= 1);
    void *dev = cu_user_alloc(4096), *pinned = cu_user_alloc_pinned(4096),
         *managed = cu_user_alloc_managed(4096), *host = malloc(4096);
    shoal_dev_mem_t kind;
    int d;
    assert_int_equal(ops->classify(dev, &kind, &d), SHOAL_OK);
    assert_int_equal(kind, SHOAL_DEV_MEM_DEVICE);
    assert_int_equal(d, 0);
    assert_int_equal(ops->classify((char *)dev + 100, &kind, &d), SHOAL_OK);
    assert_int_equal(kind, SHOAL_DEV_MEM_DEVICE);
    assert_int_equal(ops->classify(pinned, &kind, &d), SHOAL_OK);
    assert_int_equal(kind, SHOAL_DEV_MEM_PINNED);
    assert_int_equal(ops->classify(managed, &kind, &d), SHOAL_OK);
    assert_int_equal(kind, SHOAL_DEV_MEM_MANAGED);
    assert_int_equal(ops->classify(host, &kind, &d), SHOAL_OK);
    assert_int_equal(kind, SHOAL_DEV_MEM_HOST);
    assert_int_equal(shoal_dev_kind(dev), SHOAL_DEV_MEM_DEVICE);
    size_t ext = 0;
    assert_int_equal(ops->extent((char *)dev + 96, &ext), SHOAL_OK);
    assert_int_equal(ext, 4096 - 96);
    assert_int_equal(ops->device_of(NULL, &d), SHOAL_OK);
    assert_int_equal(d, 0);
    void *mine = NULL;
    assert_int_equal(ops->mem_alloc(0, 1000, &mine), SHOAL_OK);
    assert_int_equal(shoal_dev_kind(mine), SHOAL_DEV_MEM_DEVICE);
    assert_int_equal(ops->mem_free(mine), SHOAL_OK);
    assert_int_equal(ops->host_alloc(1000, &mine), SHOAL_OK);
    assert_int_equal(shoal_dev_kind(mine), SHOAL_DEV_MEM_PINNED);
    assert_int_equal(ops->host_free(mine), SHOAL_OK);
    cu_user_free(dev);
    cu_user_free_pinned(pinned);
    cu_user_free(managed);
    free(host);
}

/* Every dtype x op through the device kernels, against the reference. */
/* Element i of got and want equal, or (nan_ok) both NaN: a GPU's float
 * arithmetic gives its own NaN, not the operand's payload. */
static int elem_equal(const unsigned char *got, const unsigned char *want, size_t i,
                      shoal_dtype_t dt, int nan_ok)
{
    size_t es = shoal_dtype_bytes(dt);
    if (memcmp(got + i * es, want + i * es, es) == 0)
        return 1;
    if (!nan_ok)
        return 0;
    double g = 0, w = 0;
    if (dt == SHOAL_FLOAT32) {
        g = ((const float *)got)[i];
        w = ((const float *)want)[i];
    } else if (dt == SHOAL_FLOAT64) {
        g = ((const double *)got)[i];
        w = ((const double *)want)[i];
    } else if (dt == SHOAL_FLOAT16) {
        g = shoal_f16_to_f32(((const uint16_t *)got)[i]);
        w = shoal_f16_to_f32(((const uint16_t *)want)[i]);
    } else if (dt == SHOAL_BFLOAT16) {
        g = shoal_bf16_to_f32(((const uint16_t *)got)[i]);
        w = shoal_bf16_to_f32(((const uint16_t *)want)[i]);
    } else if (dt == SHOAL_FP8_E4M3) {
        g = shoal_e4m3_to_f32(got[i]);
        w = shoal_e4m3_to_f32(want[i]);
    } else if (dt == SHOAL_FP8_E5M2) {
        g = shoal_e5m2_to_f32(got[i]);
        w = shoal_e5m2_to_f32(want[i]);
    }
    return isnan(g) && isnan(w);
}

static void test_reduce_kernels(void **state)
{
    (void)state;
    open_module();
    const size_t count = 3001, max_bytes = count * 8;
    unsigned char *a = malloc(max_bytes), *b = malloc(max_bytes), *want = malloc(max_bytes),
                  *got = malloc(max_bytes);
    void *da = cu_user_alloc(max_bytes), *db = cu_user_alloc(max_bytes),
         *dd = cu_user_alloc(max_bytes);
    void *stream = NULL;
    assert_int_equal(ops->stream_create(0, &stream), SHOAL_OK);
    unsigned long before = cu_user_launches(SHOAL_K_REDUCE);
    uint32_t seed = 1;
    for (int dt = 0; dt < SHOAL_DTYPE_COUNT; dt++) {
        size_t es = shoal_dtype_bytes((shoal_dtype_t)dt), bytes = count * es;
        for (size_t i = 0; i < bytes; i++) {
            a[i] = (unsigned char)harness_mix(seed++);
            b[i] = (unsigned char)harness_mix(seed++);
        }
        cu_user_htod(da, a, bytes);
        cu_user_htod(db, b, bytes);
        for (int op = 0; op < SHOAL_OP_COUNT; op++) {
            shoal_reduce_ref(want, a, b, count, (shoal_dtype_t)dt, (shoal_op_t)op);
            assert_int_equal(ops->reduce(dd, da, db, count, (shoal_dtype_t)dt, (shoal_op_t)op,
                                         stream), SHOAL_OK);
            assert_int_equal(ops->stream_sync(stream), SHOAL_OK);
            cu_user_dtoh(got, dd, bytes);
            /* Two NaN operands of + or * may give either NaN. */
            int nan_ok = op != SHOAL_MAX && op != SHOAL_MIN && dt >= SHOAL_FLOAT16;
            for (size_t i = 0; i < count; i++) {
                if (!elem_equal(got, want, i, (shoal_dtype_t)dt, nan_ok))
                    fail_msg("%s %s element %zu differs from the reference",
                             shoal_dtype_name((shoal_dtype_t)dt), shoal_op_name((shoal_op_t)op),
                             i);
            }
        }
        for (int n = 1; n <= 7; n += 3) {
            shoal_avg_finish_ref(want, a, count, (shoal_dtype_t)dt, n);
            assert_int_equal(ops->avg(dd, da, count, (shoal_dtype_t)dt, n, stream), SHOAL_OK);
            assert_int_equal(ops->stream_sync(stream), SHOAL_OK);
            cu_user_dtoh(got, dd, bytes);
            /* Bitwise, but for NaN payloads on a GPU. */
            for (size_t i = 0; i < count; i++) {
                if (!elem_equal(got, want, i, (shoal_dtype_t)dt, !cu_user_is_standin() &&
                                dt >= SHOAL_FLOAT16))
                    fail_msg("%s avg over %d: element %zu differs from the reference",
                             shoal_dtype_name((shoal_dtype_t)dt), n, i);
            }
        }
    }
    /* Nothing to do for zero elements; the rest ran on the device. */
    assert_int_equal(ops->reduce(dd, da, db, 0, SHOAL_FLOAT32, SHOAL_SUM, stream), SHOAL_OK);
    if (cu_user_is_standin())
        assert_int_equal(cu_user_launches(SHOAL_K_REDUCE) - before,
                         (unsigned long)SHOAL_DTYPE_COUNT * SHOAL_OP_COUNT);
    assert_int_equal(ops->stream_destroy(stream), SHOAL_OK);
    cu_user_free(da);
    cu_user_free(db);
    cu_user_free(dd);
    free(a);
    free(b);
    free(want);
    free(got);
}

/* One element of a convert type, decoded to float32 and encoded from it
 * with base/dtype.h's conversions: the host's side of convert. */
static float convert_decode(const unsigned char *buf, shoal_dtype_t dt, size_t i)
{
    uint16_t h;
    uint32_t u;
    switch (dt) {
    case SHOAL_FLOAT16: memcpy(&h, buf + 2 * i, 2); return shoal_f16_to_f32(h);
    case SHOAL_BFLOAT16: memcpy(&h, buf + 2 * i, 2); return shoal_bf16_to_f32(h);
    case SHOAL_FP8_E4M3: return shoal_e4m3_to_f32(buf[i]);
    case SHOAL_FP8_E5M2: return shoal_e5m2_to_f32(buf[i]);
    default: memcpy(&u, buf + 4 * i, 4); return shoal_bits_f32(u);
    }
}

static void convert_encode(unsigned char *buf, shoal_dtype_t dt, size_t i, float f)
{
    uint16_t h;
    uint32_t u;
    switch (dt) {
    case SHOAL_FLOAT16: h = shoal_f32_to_f16(f); memcpy(buf + 2 * i, &h, 2); break;
    case SHOAL_BFLOAT16: h = shoal_f32_to_bf16(f); memcpy(buf + 2 * i, &h, 2); break;
    case SHOAL_FP8_E4M3: buf[i] = shoal_f32_to_e4m3(f); break;
    case SHOAL_FP8_E5M2: buf[i] = shoal_f32_to_e5m2(f); break;
    default: u = shoal_f32_bits(f); memcpy(buf + 4 * i, &u, 4); break;
    }
}

static uint32_t convert_bits(const unsigned char *buf, size_t es, size_t i)
{
    uint32_t v = 0;
    for (size_t b = 0; b < es; b++)
        v |= (uint32_t)buf[i * es + b] << (8 * b);
    return v;
}

/* float32 bit patterns (each also taken negative) where the conversions
 * have edges: zero, float32 subnormals (bf16 keeps them, rounding at its
 * ties), the ties of each narrow type's rounding, normal and subnormal,
 * its smallest normal, its largest finite value and the tie above it
 * (infinity, or saturation for fp8), infinity and NaNs with small and
 * large payloads. */
static const uint32_t convert_specials[] = {
    0x00000000, 0x00000001, 0x00008000, 0x00018000, 0x007fffff, 0x00800000,
    0x3f800000, 0x40490fdb, 0x3dcccccd,
    /* ties at 1: fp16, bf16, e4m3, e5m2 (down to even, then up) */
    0x3f801000, 0x3f803000, 0x3f808000, 0x3f818000, 0x3f880000, 0x3f980000,
    0x3f900000, 0x3fb00000,
    /* fp16: subnormal ties, smallest subnormal and normal, max, the tie
     * above it, just under that tie */
    0x33000000, 0x33c00000, 0x33800000, 0x38800000, 0x477fe000, 0x477ff000, 0x477fefff,
    /* e4m3: subnormal ties, smallest normal, max 448, 464, far above */
    0x3a800000, 0x3b400000, 0x3c800000, 0x43e00000, 0x43e80000, 0x49742400,
    /* e5m2 (whose smallest normal is fp16's): subnormal ties, max 57344,
     * 61440 */
    0x37000000, 0x37c00000, 0x47600000, 0x47700000,
    /* bf16: max, the tie above it, float32's max */
    0x7f7f0000, 0x7f7f8000, 0x7f7fffff,
    /* infinity; NaNs: quiet, signalling with a small payload, others */
    0x7f800000, 0x7fc00000, 0x7f800001, 0x7fa00000, 0x7fffffff, 0x7f802000,
};

/* convert between every pair of its five types, on device memory, bitwise
 * against the host's conversions; then what it refuses. */
static void test_convert(void **state)
{
    (void)state;
    open_module();
    static const shoal_dtype_t types[] = {SHOAL_FLOAT32, SHOAL_FLOAT16, SHOAL_BFLOAT16,
                                          SHOAL_FP8_E4M3, SHOAL_FP8_E5M2};
    const int ntypes = (int)(sizeof(types) / sizeof(types[0]));
    const size_t nspecial = sizeof(convert_specials) / sizeof(convert_specials[0]);
    const size_t count = 4099, max_bytes = count * 4;
    unsigned char *src = malloc(max_bytes), *want = malloc(max_bytes), *got = malloc(max_bytes);
    void *ds = cu_user_alloc(max_bytes), *dd = cu_user_alloc(max_bytes);
    void *stream = NULL;
    assert_int_equal(ops->stream_create(0, &stream), SHOAL_OK);
    unsigned long before = cu_user_launches(SHOAL_K_CONVERT);
    uint32_t seed = 7;
    for (int si = 0; si < ntypes; si++) {
        shoal_dtype_t st = types[si];
        size_t ses = shoal_dtype_bytes(st);
        /* The specials as this type holds them, then a pattern of codes
         * (every code of the 8-bit types), then float32 values of
         * moderate size as this type holds them, then random bits. */
        for (size_t i = 0; i < count * ses; i++)
            src[i] = (unsigned char)harness_mix(seed++);
        size_t i = 0;
        for (size_t j = 0; j < 2 * nspecial; j++, i++)
            convert_encode(src, st, i,
                           shoal_bits_f32(convert_specials[j / 2] | (uint32_t)(j & 1) << 31));
        for (uint32_t j = 0; j < 256; j++, i++)
            for (size_t b = 0; b < ses; b++)
                src[i * ses + b] = (unsigned char)j;
        for (; i < 3 * count / 4; i++) {
            uint32_t r = harness_mix(seed++);
            uint32_t exp = 127 - 30 + (harness_mix(seed++) % 51);
            convert_encode(src, st, i, shoal_bits_f32((r & 0x807fffffu) | exp << 23));
        }
        cu_user_htod(ds, src, count * ses);
        for (int di = 0; di < ntypes; di++) {
            shoal_dtype_t dt = types[di];
            size_t des = shoal_dtype_bytes(dt);
            for (size_t e = 0; e < count; e++) {
                if (dt == st)
                    memcpy(want + e * des, src + e * ses, des);
                else
                    convert_encode(want, dt, e, convert_decode(src, st, e));
            }
            memset(got, 0, count * des);
            cu_user_htod(dd, got, count * des);
            assert_int_equal(ops->convert(dd, dt, ds, st, count, stream), SHOAL_OK);
            assert_int_equal(ops->stream_sync(stream), SHOAL_OK);
            cu_user_dtoh(got, dd, count * des);
            for (size_t e = 0; e < count; e++)
                if (memcmp(got + e * des, want + e * des, des) != 0)
                    fail_msg("%s to %s: element %zu (%#x) gives %#x, the host %#x",
                             shoal_dtype_name(st), shoal_dtype_name(dt), e,
                             (unsigned)convert_bits(src, ses, e),
                             (unsigned)convert_bits(got, des, e),
                             (unsigned)convert_bits(want, des, e));
        }
    }
    if (cu_user_is_standin())
        assert_int_equal(cu_user_launches(SHOAL_K_CONVERT) - before,
                         (unsigned long)(ntypes * ntypes));

    /* Refused with the type named; nothing queued for them or for zero
     * elements, whose buffers are not looked at. */
    before = cu_user_launches(SHOAL_K_CONVERT);
    assert_int_equal(ops->convert(dd, SHOAL_FLOAT64, ds, SHOAL_FLOAT32, count, stream),
                     SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(ops->why(), "SHOAL_FLOAT64"));
    assert_int_equal(ops->convert(dd, SHOAL_FLOAT16, ds, SHOAL_FLOAT64, count, stream),
                     SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(ops->why(), "SHOAL_FLOAT64"));
    assert_int_equal(ops->convert(dd, SHOAL_FLOAT32, ds, SHOAL_INT32, count, stream),
                     SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(ops->why(), "SHOAL_INT32"));
    assert_int_equal(ops->convert(dd, SHOAL_INT32, ds, SHOAL_INT32, count, stream),
                     SHOAL_ERR_INVALID_ARG);
    assert_int_equal(ops->convert(dd, SHOAL_DTYPE_COUNT, ds, SHOAL_FLOAT32, count, stream),
                     SHOAL_ERR_INVALID_ARG);
    assert_int_equal(ops->convert(NULL, SHOAL_FLOAT16, ds, SHOAL_FLOAT32, count, stream),
                     SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(ops->why(), "NULL"));
    assert_int_equal(ops->convert(dd, SHOAL_FLOAT16, NULL, SHOAL_FLOAT32, count, stream),
                     SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(ops->why(), "NULL"));
    assert_int_equal(ops->convert(NULL, SHOAL_FLOAT16, NULL, SHOAL_FLOAT32, 0, stream),
                     SHOAL_OK);
    assert_int_equal(ops->stream_sync(stream), SHOAL_OK);
    if (cu_user_is_standin())
        assert_int_equal(cu_user_launches(SHOAL_K_CONVERT) - before, 0);
    assert_int_equal(ops->stream_destroy(stream), SHOAL_OK);
    cu_user_free(ds);
    cu_user_free(dd);
    free(src);
    free(want);
    free(got);
}

/* PowerSGD's orthonormalisation of several factors at once, on device
 * memory, bitwise against the host's (compress/psgd_elem.h): tall and
 * small factors, a zero column, a column in the span of the earlier ones,
 * a NaN, tiny values; nothing queued for none, NULL refused. */
static void test_orthonormalise(void **state)
{
    (void)state;
    open_module();
    static const size_t shapes[][2] = {{1, 1}, {5, 3}, {200, 4}, {4099, 2}, {9, 4}, {7, 3},
                                       {6, 2}, {33, 5}};
    enum { NT = sizeof(shapes) / sizeof(shapes[0]) };
    shoal_dev_psgd_desc_t desc[NT];
    size_t floats = 0, cols = 0;
    for (size_t t = 0; t < NT; t++) {
        /* Records in another order than the buffer's, with a gap. */
        desc[t] = (shoal_dev_psgd_desc_t){.off = floats + 3, .rows = shapes[t][0],
                                          .rank = shapes[t][1], .col = cols};
        floats += 3 + shapes[t][0] * shapes[t][1];
        cols += shapes[t][0];
    }
    float *p = malloc(floats * sizeof(float)), *want = malloc(floats * sizeof(float));
    float *got = malloc(floats * sizeof(float));
    double *col = malloc(cols * sizeof(double));
    assert_true(p && want && got && col);
    uint32_t seed = 5;
    for (size_t i = 0; i < floats; i++)
        p[i] = (float)harness_mix(seed++) / 4294967296.0f - 0.5f;
    /* Tensor 4: column 2 zero; tensor 5: column 1 twice column 0; tensor
     * 6: a NaN in column 1; tensor 7: values near the smallest normal. */
    for (size_t i = 0; i < shapes[4][0]; i++)
        p[desc[4].off + i * 4 + 2] = 0.0f;
    for (size_t i = 0; i < shapes[5][0]; i++)
        p[desc[5].off + i * 3 + 1] = 2.0f * p[desc[5].off + i * 3];
    p[desc[6].off + 3 * 2 + 1] = NAN;
    for (size_t i = 0; i < shapes[7][0] * shapes[7][1]; i++)
        p[desc[7].off + i] *= 0x1p-120f;
    memcpy(want, p, floats * sizeof(float));
    for (size_t t = 0; t < NT; t++)
        shoal_psgd_orthonormalise(want + desc[t].off, desc[t].rows, desc[t].rank,
                                  col + desc[t].col);
    float *dp = cu_user_alloc(floats * sizeof(float));
    double *dcol = cu_user_alloc(cols * sizeof(double));
    shoal_dev_psgd_desc_t *ddesc = cu_user_alloc(sizeof(desc));
    shoal_dev_psgd_desc_t rev[NT];
    for (size_t t = 0; t < NT; t++)
        rev[t] = desc[NT - 1 - t];
    cu_user_htod(dp, p, floats * sizeof(float));
    cu_user_htod(ddesc, rev, sizeof(rev));
    void *stream = NULL;
    assert_int_equal(ops->stream_create(0, &stream), SHOAL_OK);
    unsigned long before = cu_user_launches(SHOAL_K_ORTHO);
    assert_int_equal(ops->orthonormalise(dp, ddesc, NT, dcol, stream), SHOAL_OK);
    assert_int_equal(ops->stream_sync(stream), SHOAL_OK);
    cu_user_dtoh(got, dp, floats * sizeof(float));
    for (size_t i = 0; i < floats; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("float %zu of the factors is %a on the device, %a on the host", i,
                     (double)got[i], (double)want[i]);
    /* What the cases are there for: zeroed, normalised, NaN. */
    assert_true(want[desc[4].off + 2] == 0.0f && want[desc[5].off + 1] == 0.0f);
    assert_true(isnan(want[desc[6].off + 1]) && !isnan(want[desc[6].off]));
    assert_true(want[desc[7].off] != 0.0f && fabsf(want[desc[7].off]) < 1.0f);
    if (cu_user_is_standin())
        assert_int_equal(cu_user_launches(SHOAL_K_ORTHO) - before, 1);

    before = cu_user_launches(SHOAL_K_ORTHO);
    assert_int_equal(ops->orthonormalise(NULL, NULL, 0, NULL, stream), SHOAL_OK);
    assert_int_equal(ops->orthonormalise(dp, NULL, 1, dcol, stream), SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(ops->why(), "NULL"));
    assert_int_equal(ops->orthonormalise(dp, ddesc, 1, NULL, stream), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(ops->stream_sync(stream), SHOAL_OK);
    if (cu_user_is_standin())
        assert_int_equal(cu_user_launches(SHOAL_K_ORTHO) - before, 0);
    assert_int_equal(ops->stream_destroy(stream), SHOAL_OK);
    cu_user_free(dp);
    cu_user_free(dcol);
    cu_user_free(ddesc);
    free(p);
    free(want);
    free(got);
    free(col);
}

/* The stream holds at flag_wait until the host's store, then writes its
 * own flag after the work before it. */
static int rank_flags(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)nranks;
    (void)id;
    (void)arg;
    char why[256];
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "%s", why);
    ops = shoal_dev_get();
    RANK_CHECK(ops, fail, "%s", shoal_dev_why());
    uint32_t *flags = NULL;
    void *stream = NULL;
    RANK_CHECK(ops->host_alloc(256, (void **)&flags) == SHOAL_OK, fail, "host_alloc");
    memset(flags, 0, 256);
    RANK_CHECK(ops->stream_create(0, &stream) == SHOAL_OK, fail, "stream");
    /* Pinned: a copy from or to pageable memory may wait for the stream,
     * which waits for the flag that this thread sets after. */
    int *src = cu_user_alloc_pinned(sizeof(int)), *dst = cu_user_alloc_pinned(sizeof(int));
    *src = 42;
    *dst = 0;
    void *d = cu_user_alloc(sizeof(int));
    RANK_CHECK(ops->flag_wait(&flags[0], 5, stream) == SHOAL_OK, fail, "flag_wait: %s",
               ops->why());
    RANK_CHECK(ops->copy(d, src, sizeof(int), stream) == SHOAL_OK, fail, "copy");
    RANK_CHECK(ops->copy(dst, d, sizeof(int), stream) == SHOAL_OK, fail, "copy back");
    RANK_CHECK(ops->flag_write(&flags[16], 5, stream) == SHOAL_OK, fail, "flag_write: %s",
               ops->why());
    RANK_CHECK(cu_user_idle(stream) == 0, fail, "rank %d: the stream passed its wait", rank);
    RANK_CHECK(atomic_load((_Atomic uint32_t *)&flags[16]) == 0, fail, "flag written early");
    /* A number below the one waited for (wrapping) does not release it. */
    atomic_store((_Atomic uint32_t *)&flags[0], 4);
    RANK_CHECK(cu_user_idle(stream) == 0, fail, "released by a smaller number");
    atomic_store((_Atomic uint32_t *)&flags[0], 6);
    RANK_CHECK(ops->stream_sync(stream) == SHOAL_OK, fail, "sync");
    RANK_CHECK(atomic_load((_Atomic uint32_t *)&flags[16]) == 5, fail, "flag not written");
    RANK_CHECK(*dst == 42, fail, "the copies before the flag did not run");
    if (cu_user_is_standin() && getenv("SHOAL_STANDIN_NO_MEMOPS"))
        RANK_CHECK(cu_user_launches(SHOAL_K_WAIT) == 1 && cu_user_launches(SHOAL_K_WRITE) == 1,
                   fail, "without stream memory operations the wait and the write are not "
                   "the kernels'");
    cu_user_free(d);
    cu_user_free_pinned(src);
    cu_user_free_pinned(dst);
    ops->stream_destroy(stream);
    ops->host_free(flags);
    return 0;
fail:
    return 1;
}

static void test_flags(void **state)
{
    (void)state;
    assert_int_equal(harness_run_ranks(1, rank_flags, NULL, 60), 0);
}

static void test_flags_wait_kernel(void **state)
{
    (void)state;
    /* Only the stand-in can be told to lack stream memory operations. */
    if (!getenv("SHOAL_CUDA_DRIVER")) {
        printf("# the wait kernel is not forced on a real driver\n");
        return;
    }
    harness_setenv("SHOAL_STANDIN_NO_MEMOPS", "1");
    int rc = harness_run_ranks(1, rank_flags, NULL, 60);
    harness_setenv("SHOAL_STANDIN_NO_MEMOPS", NULL);
    assert_int_equal(rc, 0);
}

/* Rank 0 exports device memory; rank 1 opens it, reads rank 0's bytes and
 * writes its own, which rank 0 then sees. */
typedef struct {
    atomic_int step;
    shoal_dev_ipc_t handle;
} ipc_share_t;

static int wait_step(ipc_share_t *sh, int step)
{
    for (int i = 0; i < 200000 && atomic_load(&sh->step) < step; i++)
        usleep(50);
    return atomic_load(&sh->step) >= step;
}

static int rank_ipc(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)nranks;
    (void)id;
    ipc_share_t *sh = arg;
    char why[256];
    unsigned char pat[4096], got[4096];
    for (size_t i = 0; i < sizeof(pat); i++)
        pat[i] = (unsigned char)(i * 7 + 3);
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "%s", why);
    ops = shoal_dev_get();
    RANK_CHECK(ops, fail, "%s", shoal_dev_why());
    if (rank == 0) {
        void *d = cu_user_alloc(8192);
        cu_user_htod((char *)d + 4096, pat, sizeof(pat));
        RANK_CHECK(ops->ipc_get((char *)d + 4096, &sh->handle) == SHOAL_OK, fail, "ipc_get: %s",
                   ops->why());
        atomic_store(&sh->step, 1);
        RANK_CHECK(wait_step(sh, 2), fail, "rank 1 did not answer");
        cu_user_dtoh(got, d, sizeof(got));
        for (size_t i = 0; i < sizeof(got); i++)
            RANK_CHECK(got[i] == (unsigned char)~pat[i], fail, "byte %zu not rank 1's", i);
        cu_user_free(d);
    } else {
        RANK_CHECK(wait_step(sh, 1), fail, "rank 0 did not export");
        void *base = NULL;
        RANK_CHECK(ops->ipc_open(&sh->handle, &base) == SHOAL_OK, fail, "ipc_open: %s",
                   ops->why());
        RANK_CHECK(shoal_dev_kind(base) == SHOAL_DEV_MEM_DEVICE, fail, "opened memory kind");
        cu_user_dtoh(got, (char *)base + 4096, sizeof(got));
        RANK_CHECK(memcmp(got, pat, sizeof(pat)) == 0, fail, "rank 0's bytes not seen");
        for (size_t i = 0; i < sizeof(pat); i++)
            got[i] = (unsigned char)~pat[i];
        cu_user_htod(base, got, sizeof(got));
        RANK_CHECK(ops->ipc_close(base) == SHOAL_OK, fail, "ipc_close: %s", ops->why());
        atomic_store(&sh->step, 2);
    }
    return 0;
fail:
    return 1;
}

static void test_ipc(void **state)
{
    (void)state;
    ipc_share_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    assert_int_equal(harness_run_ranks(2, rank_ipc, sh, 60), 0);
    munmap(sh, sizeof(*sh));
}


/* gemm: the row-major product through cuBLAS (the CPU stand-in of
 * tests/cuda/standin_cublas.c in make test, libcublas.so.13 in make
 * test-gpu). */

/* Whether there is a cuBLAS to test on: make test names the stand-in
 * beside the driver's; without it the module would pair the driver
 * stand-in with the real cuBLAS. */
static int gemm_testable(void)
{
    if (getenv("SHOAL_CUDA_DRIVER") && !getenv("SHOAL_CUBLAS")) {
        printf("# SHOAL_CUBLAS does not name the cuBLAS stand-in: gemm is not tested\n");
        return 0;
    }
    return 1;
}

typedef struct {
    int ta, tb;
    size_t m, n, k;
    size_t lda, ldb, ldc;
    float alpha, beta;
    int nan_c; /* C holds NaN before the call (beta 0: it must not spread) */
} gemm_case_t;

/* The stored shapes: A is m x k (k x m transposed), B k x n (n x k). */
static size_t gemm_rows_a(const gemm_case_t *g) { return g->ta ? g->k : g->m; }
static size_t gemm_cols_a(const gemm_case_t *g) { return g->ta ? g->m : g->k; }
static size_t gemm_rows_b(const gemm_case_t *g) { return g->tb ? g->n : g->k; }
static size_t gemm_cols_b(const gemm_case_t *g) { return g->tb ? g->k : g->n; }

static float gemm_op_a(const gemm_case_t *g, const float *a, size_t i, size_t l)
{
    return g->ta ? a[l * g->lda + i] : a[i * g->lda + l];
}

static float gemm_op_b(const gemm_case_t *g, const float *b, size_t l, size_t j)
{
    return g->tb ? b[j * g->ldb + l] : b[l * g->ldb + j];
}

/* The row-major reference, element by element: the products over l in
 * increasing order summed in float, then alpha times the sum plus beta
 * times C, each step rounded on its own (separate statements, so that no
 * compiler fuses them). That is the stand-in's column-major loop on the
 * same element: cuBLAS is handed C^T = op(B)^T op(A)^T, whose element
 * (j, i) sums op(B)[l][j] * op(A)[i][l] over the same l, the same two
 * floats in the other order, whose product is the same. So the stand-in's
 * results must equal these exactly. As BLAS specifies, C is not read when
 * beta is 0 and A and B are not when alpha is 0. bound_p gets each
 * element's error bound for a cuBLAS that adds in its own order (or
 * fuses): a few k ulps of the magnitudes summed. */
static void gemm_ref(const gemm_case_t *g, const float *a, const float *b, float *c,
                     float *bound)
{
    for (size_t i = 0; i < g->m; i++) {
        for (size_t j = 0; j < g->n; j++) {
            float *cij = &c[i * g->ldc + j];
            float t = 0.0f;
            double mag = 0;
            if (g->alpha != 0.0f) {
                float sum = 0.0f;
                for (size_t l = 0; l < g->k; l++) {
                    float p = gemm_op_a(g, a, i, l) * gemm_op_b(g, b, l, j);
                    sum += p;
                    mag += fabs((double)p);
                }
                t = g->alpha * sum;
                mag *= fabs((double)g->alpha);
            }
            if (g->beta != 0.0f) {
                float u = g->beta * *cij;
                t = g->alpha != 0.0f ? t + u : u;
                mag += fabs((double)u);
            }
            *cij = t;
            bound[i * g->ldc + j] = (float)(4.0 * (double)(g->k + 2) * FLT_EPSILON * mag);
        }
    }
}

static float gemm_value(uint32_t *seed)
{
    /* [-1, 1) in steps of 2^-23: exact in float. */
    return (float)(harness_mix((*seed)++) >> 8) / 8388608.0f - 1.0f;
}

/* A matrix of rows x cols values with row stride ld; the padding between
 * cols and ld holds pad (NaN in A and B, so a product that strays into
 * it shows). nan fills the values with NaN too. */
static float *gemm_matrix(size_t rows, size_t cols, size_t ld, float pad, int nan,
                          uint32_t *seed)
{
    float *m = malloc(rows * ld * sizeof(float));
    assert_non_null(m);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < ld; c++)
            m[r * ld + c] = c >= cols ? pad : nan ? NAN : gemm_value(seed);
    return m;
}

#define GEMM_C_PAD 12345.0f

/* The stand-in's element is the reference's, exactly (NaN never is);
 * cuBLAS's is within the bound. */
static int gemm_close(float got, float want, float bound)
{
    return cu_user_is_standin() ? got == want : fabsf(got - want) <= bound;
}

/* One case on stream: the product on device copies of fresh matrices,
 * compared with the reference: exactly on the stand-in, within the
 * bound on cuBLAS. C's padding must be left as it was. Returns 0, or -1
 * after saying which element differs. */
static int gemm_run_case(const gemm_case_t *g, void *stream, uint32_t *seed)
{
    char what[160];
    snprintf(what, sizeof(what), "%s%s m %zu n %zu k %zu lda %zu ldb %zu ldc %zu alpha %g "
             "beta %g%s", g->ta ? "A^T" : "A", g->tb ? " B^T" : " B", g->m, g->n, g->k, g->lda,
             g->ldb, g->ldc, (double)g->alpha, (double)g->beta, g->nan_c ? " C NaN" : "");
    size_t abytes = gemm_rows_a(g) * g->lda * sizeof(float);
    size_t bbytes = gemm_rows_b(g) * g->ldb * sizeof(float);
    size_t cbytes = g->m * g->ldc * sizeof(float);
    float *a = gemm_matrix(gemm_rows_a(g), gemm_cols_a(g), g->lda, NAN, 0, seed);
    float *b = gemm_matrix(gemm_rows_b(g), gemm_cols_b(g), g->ldb, NAN, 0, seed);
    float *c = gemm_matrix(g->m, g->n, g->ldc, GEMM_C_PAD, g->nan_c, seed);
    float *want = malloc(cbytes), *bound = malloc(cbytes), *got = malloc(cbytes);
    void *da = cu_user_alloc(abytes), *db = cu_user_alloc(bbytes), *dc = cu_user_alloc(cbytes);
    int rc = 0;
    assert_true(want && bound && got);
    memcpy(want, c, cbytes);
    memset(bound, 0, cbytes);
    gemm_ref(g, a, b, want, bound);
    cu_user_htod(da, a, abytes);
    cu_user_htod(db, b, bbytes);
    cu_user_htod(dc, c, cbytes);
    shoal_status_t st = ops->gemm(g->ta, g->tb, g->m, g->n, g->k, g->alpha, da, g->lda, db,
                                  g->ldb, g->beta, dc, g->ldc, stream);
    if (st != SHOAL_OK) {
        printf("# %s: gemm: %s: %s\n", what, shoal_status_string(st), ops->why());
        rc = -1;
        goto out;
    }
    assert_int_equal(ops->stream_sync(stream), SHOAL_OK);
    cu_user_dtoh(got, dc, cbytes);
    for (size_t i = 0; i < g->m && rc == 0; i++) {
        for (size_t j = 0; j < g->ldc && rc == 0; j++) {
            size_t e = i * g->ldc + j;
            int ok = j >= g->n ? got[e] == GEMM_C_PAD : gemm_close(got[e], want[e], bound[e]);
            if (!ok) {
                printf("# %s: C[%zu][%zu] is %.9g, the reference %.9g\n", what, i, j,
                       (double)got[e], (double)want[e]);
                rc = -1;
            }
        }
    }
out:
    cu_user_free(da);
    cu_user_free(db);
    cu_user_free(dc);
    free(a);
    free(b);
    free(c);
    free(want);
    free(bound);
    free(got);
    return rc;
}

/* Every transpose pair, a few shapes, tight and wider strides, and
 * alpha/beta pairs (beta 0 over a C of NaN, which must not spread; beta
 * 1, accumulating; alpha 0, scaling C alone), each against the
 * reference; all of them through the stand-in's products. */
static void test_gemm(void **state)
{
    (void)state;
    open_module();
    if (!gemm_testable())
        return;
    static const size_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 33, 17}};
    static const struct {
        float alpha, beta;
        int nan_c;
    } scalars[] = {{1.0f, 0.0f, 1}, {-0.5f, 2.0f, 0}, {2.5f, 1.0f, 0}, {0.0f, -1.5f, 0}};
    const size_t nshapes = sizeof(shapes) / sizeof(shapes[0]);
    const size_t nscalars = sizeof(scalars) / sizeof(scalars[0]);
    void *stream = NULL;
    uint32_t seed = 11;
    unsigned long before = cu_user_gemms(), runs = 0;
    int failed = 0;
    assert_int_equal(ops->stream_create(0, &stream), SHOAL_OK);
    for (size_t s = 0; s < nshapes; s++) {
        for (size_t pad = 0; pad <= 3; pad += 3) {
            for (int t = 0; t < 4; t++) {
                for (size_t v = 0; v < nscalars; v++) {
                    gemm_case_t g = {
                        .ta = t & 1, .tb = t >> 1,
                        .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2],
                        .alpha = scalars[v].alpha, .beta = scalars[v].beta,
                        .nan_c = scalars[v].nan_c,
                    };
                    g.lda = gemm_cols_a(&g) + pad;
                    g.ldb = gemm_cols_b(&g) + pad + (pad ? 2 : 0);
                    g.ldc = g.n + pad + (pad ? 1 : 0);
                    failed |= gemm_run_case(&g, stream, &seed) != 0;
                    runs++;
                }
            }
        }
    }
    if (failed)
        fail_msg("gemm differs from the row-major reference (cases above)");
    if (cu_user_is_standin())
        assert_int_equal(cu_user_gemms() - before, runs);
    assert_int_equal(ops->stream_destroy(stream), SHOAL_OK);
}

/* The product is queued on the stream, behind what is queued before it:
 * held by a gate, it has not run until the gate opens. */
static void test_gemm_stream_order(void **state)
{
    (void)state;
    open_module();
    if (!gemm_testable())
        return;
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, c[4], want[4] = {4, 5, 10, 11};
    void *da = cu_user_alloc(sizeof(a)), *db = cu_user_alloc(sizeof(b)),
         *dc = cu_user_alloc(sizeof(c));
    uint32_t *gate = cu_user_alloc_pinned(sizeof(*gate));
    void *stream = NULL;
    *gate = 0;
    cu_user_htod(da, a, sizeof(a));
    cu_user_htod(db, b, sizeof(b));
    assert_int_equal(ops->stream_create(0, &stream), SHOAL_OK);
    unsigned long before = cu_user_gemms();
    cu_user_gate(stream, gate, 1);
    /* (2 x 3) (3 x 2), beta 0 over C's fresh bytes. */
    shoal_status_t st = ops->gemm(0, 0, 2, 2, 3, 1.0f, da, 3, db, 2, 0.0f, dc, 2, stream);
    int idle = cu_user_idle(stream);
    unsigned long held = cu_user_gemms() - before;
    /* Open before any check, so that a failure leaves no stream held
     * (the stand-in's frees wait for every stream). */
    atomic_store((_Atomic uint32_t *)gate, 1);
    assert_int_equal(st, SHOAL_OK);
    assert_int_equal(idle, 0);
    if (cu_user_is_standin())
        assert_int_equal(held, 0);
    assert_int_equal(ops->stream_sync(stream), SHOAL_OK);
    if (cu_user_is_standin())
        assert_int_equal(cu_user_gemms() - before, 1);
    cu_user_dtoh(c, dc, sizeof(c));
    assert_memory_equal(c, want, sizeof(c));
    assert_int_equal(ops->stream_destroy(stream), SHOAL_OK);
    cu_user_free(da);
    cu_user_free(db);
    cu_user_free(dc);
    cu_user_free_pinned(gate);
}

/* Refused before anything is queued: sizes and strides above INT_MAX
 * (cuBLAS's int), strides below a row, transpose flags other than 0 and
 * 1, NULL matrices. Sizes of 0 queue nothing and leave C as it is. */
static void test_gemm_refusals(void **state)
{
    (void)state;
    open_module();
    if (!gemm_testable())
        return;
    float c[4] = {1, 2, 3, 4}, got[4];
    void *da = cu_user_alloc(64), *db = cu_user_alloc(64), *dc = cu_user_alloc(sizeof(c));
    void *stream = NULL;
    cu_user_htod(dc, c, sizeof(c));
    assert_int_equal(ops->stream_create(0, &stream), SHOAL_OK);
    unsigned long before = cu_user_gemms();
    static const struct {
        int ta, tb;
        size_t m, n, k, lda, ldb, ldc;
        const char *why;
    } bad[] = {
        {0, 0, (size_t)INT_MAX + 1, 2, 2, 2, 2, 2, "m"},
        {0, 0, 2, (size_t)INT_MAX + 1, 2, 2, 2, 2, "n"},
        {0, 0, 2, 2, (size_t)INT_MAX + 1, 2, 2, 2, "k"},
        {0, 0, 2, 2, 2, (size_t)INT_MAX + 1, 2, 2, "lda"},
        {0, 0, 2, 2, 2, 2, (size_t)INT_MAX + 1, 2, "ldb"},
        {0, 0, 2, 2, 2, 2, 2, (size_t)INT_MAX + 1, "ldc"},
        {0, 0, 2, 3, 4, 3, 3, 3, "lda"}, /* A's rows hold k = 4 values */
        {1, 0, 4, 3, 2, 3, 3, 4, "lda"}, /* A^T stored 2 x 4 */
        {0, 0, 2, 3, 4, 4, 2, 3, "ldb"}, /* B's rows hold n = 3 */
        {0, 1, 2, 3, 4, 4, 3, 3, "ldb"}, /* B^T stored 3 x 4 */
        {0, 0, 2, 3, 4, 4, 3, 2, "ldc"},
        {2, 0, 2, 2, 2, 2, 2, 2, "trans_a"},
        {0, -1, 2, 2, 2, 2, 2, 2, "trans_b"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(ops->gemm(bad[i].ta, bad[i].tb, bad[i].m, bad[i].n, bad[i].k, 1.0f, da,
                                   bad[i].lda, db, bad[i].ldb, 0.0f, dc, bad[i].ldc, stream),
                         SHOAL_ERR_INVALID_ARG);
        if (!strstr(ops->why(), bad[i].why))
            fail_msg("refusal %zu: \"%s\" does not name %s", i, ops->why(), bad[i].why);
    }
    assert_int_equal(ops->gemm(0, 0, 2, 2, 2, 1.0f, NULL, 2, db, 2, 0.0f, dc, 2, stream),
                     SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(ops->why(), "NULL"));
    assert_int_equal(ops->gemm(0, 0, 2, 2, 2, 1.0f, da, 2, db, 2, 0.0f, NULL, 2, stream),
                     SHOAL_ERR_INVALID_ARG);
    /* Nothing to multiply: no buffer is looked at, C keeps its values
     * (even with k 0, where BLAS would scale C by beta). */
    assert_int_equal(ops->gemm(0, 0, 0, 2, 2, 1.0f, NULL, 2, NULL, 2, 0.0f, NULL, 2, stream),
                     SHOAL_OK);
    assert_int_equal(ops->gemm(0, 0, 2, 0, 2, 1.0f, NULL, 2, NULL, 1, 0.0f, NULL, 1, stream),
                     SHOAL_OK);
    assert_int_equal(ops->gemm(1, 1, 2, 2, 0, 1.0f, da, 2, db, 2, 0.0f, dc, 2, stream),
                     SHOAL_OK);
    assert_int_equal(ops->stream_sync(stream), SHOAL_OK);
    cu_user_dtoh(got, dc, sizeof(got));
    assert_memory_equal(got, c, sizeof(c));
    if (cu_user_is_standin())
        assert_int_equal(cu_user_gemms(), before);
    assert_int_equal(ops->stream_destroy(stream), SHOAL_OK);
    cu_user_free(da);
    cu_user_free(db);
    cu_user_free(dc);
}

/* Threads that share the module's handle, each multiplying on its own
 * stream: each product lands on its thread's stream (C is copied back on
 * that stream right after it), and the stand-in's handle, which refuses
 * two threads inside it at once, is never entered concurrently. */
#define GEMM_THREADS 4
#define GEMM_THREAD_ITERS 24
#define GEMM_T_N 8

typedef struct {
    void *stream;
    void *da, *db, *dc;
    float a[GEMM_T_N * GEMM_T_N], b[GEMM_T_N * GEMM_T_N];
    float want[GEMM_T_N * GEMM_T_N], bound[GEMM_T_N * GEMM_T_N];
    float got[GEMM_T_N * GEMM_T_N], nan[GEMM_T_N * GEMM_T_N];
    char why[300];
} gemm_thread_t;

static void *gemm_thread(void *arg)
{
    gemm_thread_t *t = arg;
    const size_t bytes = sizeof(t->got);
    for (int it = 0; it < GEMM_THREAD_ITERS && !t->why[0]; it++) {
        shoal_status_t st = ops->copy(t->dc, t->nan, bytes, t->stream);
        if (st == SHOAL_OK)
            st = ops->gemm(0, 1, GEMM_T_N, GEMM_T_N, GEMM_T_N, 1.0f, t->da, GEMM_T_N, t->db,
                           GEMM_T_N, 0.0f, t->dc, GEMM_T_N, t->stream);
        if (st == SHOAL_OK)
            st = ops->copy(t->got, t->dc, bytes, t->stream);
        if (st == SHOAL_OK)
            st = ops->stream_sync(t->stream);
        if (st != SHOAL_OK) {
            snprintf(t->why, sizeof(t->why), "iteration %d: %s", it, ops->why());
            break;
        }
        for (size_t e = 0; e < GEMM_T_N * GEMM_T_N; e++) {
            if (!gemm_close(t->got[e], t->want[e], t->bound[e])) {
                snprintf(t->why, sizeof(t->why),
                         "iteration %d: C[%zu] is %g, not its own product %g", it, e,
                         (double)t->got[e], (double)t->want[e]);
                break;
            }
        }
    }
    return NULL;
}

static void test_gemm_threads(void **state)
{
    (void)state;
    open_module();
    if (!gemm_testable())
        return;
    gemm_thread_t *t = calloc(GEMM_THREADS, sizeof(*t));
    pthread_t tid[GEMM_THREADS];
    const gemm_case_t g = {.ta = 0, .tb = 1, .m = GEMM_T_N, .n = GEMM_T_N, .k = GEMM_T_N,
                           .lda = GEMM_T_N, .ldb = GEMM_T_N, .ldc = GEMM_T_N, .alpha = 1.0f};
    const size_t bytes = sizeof(t->got);
    uint32_t seed = 99;
    unsigned long before = cu_user_gemms();
    assert_non_null(t);
    for (int i = 0; i < GEMM_THREADS; i++) {
        for (size_t e = 0; e < GEMM_T_N * GEMM_T_N; e++) {
            t[i].a[e] = gemm_value(&seed);
            t[i].b[e] = gemm_value(&seed);
            t[i].nan[e] = NAN;
        }
        gemm_ref(&g, t[i].a, t[i].b, t[i].want, t[i].bound);
        t[i].da = cu_user_alloc(bytes);
        t[i].db = cu_user_alloc(bytes);
        t[i].dc = cu_user_alloc(bytes);
        cu_user_htod(t[i].da, t[i].a, bytes);
        cu_user_htod(t[i].db, t[i].b, bytes);
        assert_int_equal(ops->stream_create(0, &t[i].stream), SHOAL_OK);
    }
    for (int i = 0; i < GEMM_THREADS; i++)
        assert_int_equal(pthread_create(&tid[i], NULL, gemm_thread, &t[i]), 0);
    for (int i = 0; i < GEMM_THREADS; i++)
        pthread_join(tid[i], NULL);
    for (int i = 0; i < GEMM_THREADS; i++)
        if (t[i].why[0])
            fail_msg("thread %d: %s", i, t[i].why);
    if (cu_user_is_standin())
        assert_int_equal(cu_user_gemms() - before,
                         (unsigned long)GEMM_THREADS * GEMM_THREAD_ITERS);
    for (int i = 0; i < GEMM_THREADS; i++) {
        assert_int_equal(ops->stream_destroy(t[i].stream), SHOAL_OK);
        cu_user_free(t[i].da);
        cu_user_free(t[i].db);
        cu_user_free(t[i].dc);
    }
    free(t);
}

/* With SHOAL_CUBLAS naming a library that is not there, a product fails
 * with the library named (and keeps failing: the first load decides for
 * the process); what needs no cuBLAS goes on working. In a process of its
 * own, whose module has not loaded cuBLAS yet. */
#define GEMM_MISSING "/nonexistent/libcublas-missing.so.13"

static int rank_gemm_no_cublas(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)rank;
    (void)nranks;
    (void)id;
    (void)arg;
    char why[256];
    int x = 7, y = 0;
    void *stream = NULL;
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "%s", why);
    ops = shoal_dev_get();
    RANK_CHECK(ops, fail, "%s", shoal_dev_why());
    void *d = cu_user_alloc(64);
    RANK_CHECK(ops->stream_create(0, &stream) == SHOAL_OK, fail, "stream: %s", ops->why());
    for (int i = 0; i < 2; i++) {
        shoal_status_t st = ops->gemm(0, 0, 2, 2, 2, 1.0f, d, 2, d, 2, 0.0f, d, 2, stream);
        RANK_CHECK(st == SHOAL_ERR_UNSUPPORTED, fail, "gemm %d: %s: %s", i,
                   shoal_status_string(st), ops->why());
        RANK_CHECK(strstr(ops->why(), "cannot load") && strstr(ops->why(), GEMM_MISSING), fail,
                   "gemm %d: the message \"%s\" does not say the library cannot be loaded", i,
                   ops->why());
    }
    RANK_CHECK(ops->gemm(0, 0, 0, 2, 2, 1.0f, d, 2, d, 2, 0.0f, d, 2, stream) == SHOAL_OK, fail,
               "an empty product needs no cuBLAS");
    RANK_CHECK(ops->copy(d, &x, sizeof(x), stream) == SHOAL_OK &&
                   ops->copy(&y, d, sizeof(y), stream) == SHOAL_OK &&
                   ops->stream_sync(stream) == SHOAL_OK && y == 7,
               fail, "the module stopped working without cuBLAS: %s", ops->why());
    ops->stream_destroy(stream);
    cu_user_free(d);
    return 0;
fail:
    return 1;
}

static void test_gemm_no_cublas(void **state)
{
    (void)state;
    const char *was = getenv("SHOAL_CUBLAS");
    char *saved = was ? strdup(was) : NULL;
    harness_setenv("SHOAL_CUBLAS", GEMM_MISSING);
    int rc = harness_run_ranks(1, rank_gemm_no_cublas, NULL, 60);
    harness_setenv("SHOAL_CUBLAS", saved);
    free(saved);
    assert_int_equal(rc, 0);
}

/* Two devices: a product on each device's stream and memory, from a
 * thread whose context is device 0's, so the module makes a handle in
 * each device's context (the stand-in refuses a stream of another
 * context than its handle's). Device 1 first, then 0, then 1 again. */
static int rank_gemm_devices(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)rank;
    (void)nranks;
    (void)id;
    (void)arg;
    char why[256];
    const gemm_case_t g = {.ta = 1, .tb = 0, .m = 5, .n = 4, .k = 3, .lda = 5, .ldb = 4,
                           .ldc = 4, .alpha = 1.5f, .beta = 0.0f};
    float a[15], b[12], want[20], bound[20], got[20];
    void *stream[2] = {NULL, NULL}, *da[2] = {NULL, NULL}, *db[2] = {NULL, NULL},
         *dc[2] = {NULL, NULL};
    uint32_t seed = 5;
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "%s", why);
    ops = shoal_dev_get();
    RANK_CHECK(ops, fail, "%s", shoal_dev_why());
    if (ops->device_count() < 2) {
        RANK_CHECK(!cu_user_is_standin(), fail, "the stand-in has %d device(s), not 2",
                   ops->device_count());
        printf("# one device: products on two devices are not tested\n");
        return 0;
    }
    for (size_t e = 0; e < 15; e++)
        a[e] = gemm_value(&seed);
    for (size_t e = 0; e < 12; e++)
        b[e] = gemm_value(&seed);
    gemm_ref(&g, a, b, want, bound);
    unsigned long before = cu_user_gemms();
    for (int d = 0; d < 2; d++) {
        RANK_CHECK(ops->stream_create(d, &stream[d]) == SHOAL_OK, fail, "stream: %s",
                   ops->why());
        RANK_CHECK(ops->mem_alloc(d, sizeof(a), &da[d]) == SHOAL_OK &&
                       ops->mem_alloc(d, sizeof(b), &db[d]) == SHOAL_OK &&
                       ops->mem_alloc(d, sizeof(got), &dc[d]) == SHOAL_OK,
                   fail, "mem_alloc: %s", ops->why());
        RANK_CHECK(ops->copy(da[d], a, sizeof(a), stream[d]) == SHOAL_OK &&
                       ops->copy(db[d], b, sizeof(b), stream[d]) == SHOAL_OK,
                   fail, "copy: %s", ops->why());
    }
    static const int order[] = {1, 0, 1};
    for (int i = 0; i < 3; i++) {
        int d = order[i];
        memset(got, 0, sizeof(got));
        shoal_status_t st = ops->gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, da[d], g.lda, db[d],
                                      g.ldb, g.beta, dc[d], g.ldc, stream[d]);
        RANK_CHECK(st == SHOAL_OK, fail, "gemm on device %d: %s", d, ops->why());
        RANK_CHECK(ops->copy(got, dc[d], sizeof(got), stream[d]) == SHOAL_OK &&
                       ops->stream_sync(stream[d]) == SHOAL_OK,
                   fail, "device %d: %s", d, ops->why());
        for (size_t e = 0; e < 20; e++)
            RANK_CHECK(gemm_close(got[e], want[e], bound[e]), fail,
                       "device %d: C[%zu] is %g, the reference %g", d, e, (double)got[e],
                       (double)want[e]);
    }
    if (cu_user_is_standin())
        RANK_CHECK(cu_user_gemms() - before == 3, fail, "%lu products ran on the stand-in",
                   cu_user_gemms() - before);
    for (int d = 0; d < 2; d++) {
        ops->stream_destroy(stream[d]);
        ops->mem_free(da[d]);
        ops->mem_free(db[d]);
        ops->mem_free(dc[d]);
    }
    return 0;
fail:
    return 1;
}

static void test_gemm_devices(void **state)
{
    (void)state;
    if (!gemm_testable())
        return;
    if (getenv("SHOAL_CUDA_DRIVER"))
        harness_setenv("SHOAL_STANDIN_DEVICES", "2");
    int rc = harness_run_ranks(1, rank_gemm_devices, NULL, 60);
    harness_setenv("SHOAL_STANDIN_DEVICES", NULL);
    assert_int_equal(rc, 0);
}

int main(void)
{
    int rc;
    if (!cu_user_testable(&rc))
        return rc;
    /* The cases that run ranks in processes of their own come first: the
     * driver refuses the child of a process that has opened it, and the
     * module's first load of cuBLAS decides for its process. The rest
     * run in this process. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_flags_wait_kernel),
        cmocka_unit_test(test_ipc),
        cmocka_unit_test(test_gemm_no_cublas),
        cmocka_unit_test(test_gemm_devices),
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_orthonormalise),
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_reduce_kernels),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_stream_order),
        cmocka_unit_test(test_gemm_refusals),
        cmocka_unit_test(test_gemm_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
