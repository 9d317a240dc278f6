/* Reduction kernels against their scalar references, bit for bit: every
 * dtype x op, counts around the vector and block sizes, unaligned pointers,
 * in-place (dst == a, dst == b) and out-of-place, with both the portable and
 * the CPU-specific kernels. Inputs include NaN, inf, signed zeros and
 * subnormals. Spot checks pin down the documented semantics themselves.
 * The CUDA module's kernels are the range functions of cuda/kern.h, which
 * gcc compiles here as well: they are held to the same references, run as
 * one thread and as a grid of three threads striding over the elements. */
#include "harness.h"

#include "algos/prims.h"
#include "algos/reduce.h"
#include "base/dtype.h"
#include "cuda/kern.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COUNT 4099
#define MAX_OFFSET 3  /* elements */
#define GUARD 64      /* bytes after the end of dst that must stay untouched */
#define GUARD_BYTE 0xa5

static const size_t counts[] = {0, 1, 7, 1000, 4099};
static const int ops[] = {SHOAL_SUM, SHOAL_PROD, SHOAL_MAX, SHOAL_MIN, SHOAL_AVG};

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int is_float(shoal_dtype_t dt)
{
    return dt >= SHOAL_FLOAT16;
}

/* A float of a mix that exercises every path: ordinary values, specials,
 * subnormals, values large enough to overflow in a sum or product. */
static double random_double(void)
{
    static const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 1.0, -1.0};
    uint64_t r = rng_next();
    switch (r % 8) {
    case 0: return specials[(r >> 8) % 8];
    case 1: return ldexp((double)(int64_t)(r >> 11) / 0x1p52, (int)((r >> 3) % 300) - 150);
    default: return (double)(int64_t)(r >> 20) / 0x1p40;
    }
}

/* One element: random bits for the integers and the narrow floats (their
 * bit patterns include every special value), the mix above for fp32/fp64
 * with now and then raw bits (NaN payloads, subnormals). */
static void fill_one(void *buf, size_t i, shoal_dtype_t dt)
{
    uint64_t r = rng_next();
    int raw = r % 8 == 0;
    double v = random_double();
    switch (dt) {
    case SHOAL_FLOAT32: {
        float f = (float)v;
        if (raw)
            memcpy(&f, &r, sizeof(f));
        ((float *)buf)[i] = f;
        break;
    }
    case SHOAL_FLOAT64:
        if (raw)
            memcpy(&v, &r, sizeof(v));
        ((double *)buf)[i] = v;
        break;
    default:
        memcpy((char *)buf + i * shoal_dtype_bytes(dt), &r, shoal_dtype_bytes(dt));
        break;
    }
}

/* b gets a's element, its negation or a copy now and then, so that equal
 * operands and -0 against +0 occur often. */
static void fill_pair(void *a, void *b, size_t count, shoal_dtype_t dt)
{
    size_t es = shoal_dtype_bytes(dt);
    for (size_t i = 0; i < count; i++) {
        fill_one(a, i, dt);
        fill_one(b, i, dt);
        uint64_t r = rng_next() % 8;
        if (r == 0) {
            memcpy((char *)b + i * es, (char *)a + i * es, es);
        } else if (r == 1 && is_float(dt)) {
            /* flip the sign bit: the top bit of the element, little endian */
            memcpy((char *)b + i * es, (char *)a + i * es, es);
            ((unsigned char *)b)[i * es + es - 1] ^= 0x80;
        }
    }
}

typedef struct {
    unsigned char *a, *b, *dst, *want;
} bufs_t;

static void *alloc_buf(void)
{
    void *p = malloc((MAX_COUNT + MAX_OFFSET) * 8 + GUARD);
    assert_non_null(p);
    return p;
}

static void bufs_init(bufs_t *bu)
{
    bu->a = alloc_buf();
    bu->b = alloc_buf();
    bu->dst = alloc_buf();
    bu->want = alloc_buf();
}

static void bufs_free(bufs_t *bu)
{
    free(bu->a);
    free(bu->b);
    free(bu->dst);
    free(bu->want);
}

static void check_guard(const unsigned char *p, const char *what)
{
    for (size_t i = 0; i < GUARD; i++)
        if (p[i] != GUARD_BYTE)
            fail_msg("%s: wrote past the end (byte %zu)", what, i);
}

static int is_nan_at(const void *buf, size_t i, shoal_dtype_t dt)
{
    switch (dt) {
    case SHOAL_FLOAT16: return isnan(shoal_f16_to_f32(((const uint16_t *)buf)[i]));
    case SHOAL_FLOAT32: return isnan(((const float *)buf)[i]);
    case SHOAL_FLOAT64: return isnan(((const double *)buf)[i]);
    case SHOAL_BFLOAT16: return isnan(shoal_bf16_to_f32(((const uint16_t *)buf)[i]));
    case SHOAL_FP8_E4M3: return isnan(shoal_e4m3_to_f32(((const uint8_t *)buf)[i]));
    case SHOAL_FP8_E5M2: return isnan(shoal_e5m2_to_f32(((const uint8_t *)buf)[i]));
    default: return 0;
    }
}

/* Bit for bit, except that with any_nan a NaN may stand for any NaN: when
 * both operands of + or * are NaN, IEEE lets the hardware return either
 * (x86 returns the first), and compilers may swap the operands. */
static void check_same(const void *got, const void *want, size_t count, shoal_dtype_t dt,
                       int any_nan, const char *what)
{
    size_t es = shoal_dtype_bytes(dt);
    if (memcmp(got, want, count * es) == 0)
        return;
    for (size_t i = 0; i < count; i++) {
        const unsigned char *g = (const unsigned char *)got + i * es;
        const unsigned char *w = (const unsigned char *)want + i * es;
        if (any_nan && is_nan_at(got, i, dt) && is_nan_at(want, i, dt))
            continue;
        if (memcmp(g, w, es) != 0) {
            uint64_t gv = 0, wv = 0;
            memcpy(&gv, g, es);
            memcpy(&wv, w, es);
            fail_msg("%s: element %zu: got 0x%llx, want 0x%llx", what, i,
                     (unsigned long long)gv, (unsigned long long)wv);
        }
    }
}

/* mode 0: out-of-place, 1: dst == a, 2: dst == b. Offsets (in elements)
 * make the three pointers differently aligned. */
static void check_reduce_case(bufs_t *bu, shoal_dtype_t dt, shoal_op_t op, size_t count,
                              int mode, int off)
{
    size_t es = shoal_dtype_bytes(dt);
    size_t bytes = count * es;
    unsigned char *a = bu->a + (size_t)off * es;
    unsigned char *b = bu->b + (size_t)((off + 1) % (MAX_OFFSET + 1)) * es;
    unsigned char *out = bu->dst + (size_t)((off + 2) % (MAX_OFFSET + 1)) * es;
    char what[128];
    snprintf(what, sizeof(what), "%s %s count %zu mode %d offset %d", shoal_dtype_name(dt),
             shoal_op_name(op), count, mode, off);

    fill_pair(a, b, count, dt);
    shoal_reduce_ref(bu->want, a, b, count, dt, op);

    shoal_reduce_fn_t fn = shoal_reduce_fn(dt, op);
    assert_non_null(fn);
    unsigned char *dst = mode == 0 ? out : mode == 1 ? a : b;
    if (mode == 0)
        memset(out, 0x5a, bytes);
    memset(dst + bytes, GUARD_BYTE, GUARD);
    fn(dst, a, b, count);
    check_same(dst, bu->want, count, dt, op != SHOAL_MAX && op != SHOAL_MIN, what);
    check_guard(dst + bytes, what);
}

static void check_reduce_all(int simd)
{
    bufs_t bu;
    bufs_init(&bu);
    shoal_reduce_simd_enable(simd);
    for (int dt = 0; dt < SHOAL_DTYPE_COUNT; dt++)
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (int mode = 0; mode < 3; mode++)
                    for (int off = 0; off <= MAX_OFFSET; off += 3)
                        check_reduce_case(&bu, (shoal_dtype_t)dt, (shoal_op_t)ops[o],
                                          counts[c], mode, off);
    shoal_reduce_simd_enable(1);
    bufs_free(&bu);
}

static void test_reduce_matches_ref(void **state)
{
    check_reduce_all(1);
}

static void test_reduce_portable_matches_ref(void **state)
{
    check_reduce_all(0);
}

/* The float MAX/MIN rules make the result independent of operand order,
 * bit for bit, which the kernels must show on the random mix. */
static void test_reduce_minmax_commute(void **state)
{
    bufs_t bu;
    bufs_init(&bu);
    for (int dt = SHOAL_FLOAT16; dt < SHOAL_DTYPE_COUNT; dt++) {
        for (int op = SHOAL_MAX; op <= SHOAL_MIN; op++) {
            fill_pair(bu.a, bu.b, MAX_COUNT, (shoal_dtype_t)dt);
            shoal_reduce_fn_t fn = shoal_reduce_fn((shoal_dtype_t)dt, (shoal_op_t)op);
            fn(bu.dst, bu.a, bu.b, MAX_COUNT);
            fn(bu.want, bu.b, bu.a, MAX_COUNT);
            check_same(bu.dst, bu.want, MAX_COUNT, (shoal_dtype_t)dt, 0, shoal_dtype_name(dt));
        }
    }
    bufs_free(&bu);
}

static void check_avg_all(int simd)
{
    bufs_t bu;
    bufs_init(&bu);
    shoal_reduce_simd_enable(simd);
    for (int dt = 0; dt < SHOAL_DTYPE_COUNT; dt++) {
        size_t es = shoal_dtype_bytes((shoal_dtype_t)dt);
        for (int n = 1; n <= 8; n++) {
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                size_t count = counts[c];
                char what[96];
                snprintf(what, sizeof(what), "avg %s n %d count %zu", shoal_dtype_name(dt), n,
                         count);
                unsigned char *src = bu.a + es; /* unaligned for vectors */
                fill_pair(src, bu.b, count, (shoal_dtype_t)dt);
                shoal_avg_finish_ref(bu.want, src, count, (shoal_dtype_t)dt, n);

                memset(bu.dst + count * es, GUARD_BYTE, GUARD);
                shoal_avg_finish(bu.dst, src, count, (shoal_dtype_t)dt, n);
                check_same(bu.dst, bu.want, count, (shoal_dtype_t)dt, 0, what);
                check_guard(bu.dst + count * es, what);

                memset(src + count * es, GUARD_BYTE, GUARD);
                shoal_avg_finish(src, src, count, (shoal_dtype_t)dt, n); /* in place */
                check_same(src, bu.want, count, (shoal_dtype_t)dt, 0, what);
                check_guard(src + count * es, what);
            }
        }
    }
    shoal_reduce_simd_enable(1);
    bufs_free(&bu);
}

static void test_avg_matches_ref(void **state)
{
    check_avg_all(1);
    check_avg_all(0);
}

/* The device kernels' code: one thread over the whole range, then three
 * threads taking every third element each, as a grid-stride loop does. */
static void test_device_kernels_match_ref(void **state)
{
    (void)state;
    bufs_t bu;
    bufs_init(&bu);
    for (int dt = 0; dt < SHOAL_DTYPE_COUNT; dt++) {
        size_t es = shoal_dtype_bytes((shoal_dtype_t)dt);
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                size_t count = counts[c];
                char what[96];
                snprintf(what, sizeof(what), "device %s %s count %zu", shoal_dtype_name(dt),
                         shoal_op_name(ops[o]), count);
                fill_pair(bu.a, bu.b, count, (shoal_dtype_t)dt);
                shoal_reduce_ref(bu.want, bu.a, bu.b, count, (shoal_dtype_t)dt,
                                 (shoal_op_t)ops[o]);
                shoal_k_reduce_t k = {.dst = bu.dst, .a = bu.a, .b = bu.b, .count = count,
                                      .dtype = dt, .op = ops[o]};
                for (int threads = 1; threads <= 3; threads += 2) {
                    memset(bu.dst, 0x5a, count * es);
                    memset(bu.dst + count * es, GUARD_BYTE, GUARD);
                    for (int t = 0; t < threads; t++)
                        shoal_k_reduce_range(&k, (uint64_t)t, count, (uint64_t)threads);
                    check_same(bu.dst, bu.want, count, (shoal_dtype_t)dt,
                               ops[o] != SHOAL_MAX && ops[o] != SHOAL_MIN, what);
                    check_guard(bu.dst + count * es, what);
                }
                for (int n = 1; n <= 8; n += 3) {
                    shoal_avg_finish_ref(bu.want, bu.a, count, (shoal_dtype_t)dt, n);
                    shoal_k_avg_t ka = {.dst = bu.dst, .src = bu.a, .count = count,
                                        .dtype = dt, .n = n};
                    for (int t = 0; t < 3; t++)
                        shoal_k_avg_range(&ka, (uint64_t)t, count, 3);
                    check_same(bu.dst, bu.want, count, (shoal_dtype_t)dt, 0, what);
                }
            }
        }
    }
    bufs_free(&bu);
}

static void test_reduce_lookup(void **state)
{
    for (int dt = 0; dt < SHOAL_DTYPE_COUNT; dt++) {
        for (int op = 0; op < SHOAL_OP_COUNT; op++)
            assert_non_null(shoal_reduce_fn((shoal_dtype_t)dt, (shoal_op_t)op));
        assert_ptr_equal(shoal_reduce_fn((shoal_dtype_t)dt, SHOAL_AVG),
                         shoal_reduce_fn((shoal_dtype_t)dt, SHOAL_SUM));
        assert_null(shoal_reduce_fn((shoal_dtype_t)dt, SHOAL_OP_COUNT));
        assert_null(shoal_reduce_fn((shoal_dtype_t)dt, (shoal_op_t)-1));
    }
    assert_null(shoal_reduce_fn(SHOAL_DTYPE_COUNT, SHOAL_SUM));
    assert_null(shoal_reduce_fn((shoal_dtype_t)-1, SHOAL_SUM));
}

/* Runs the kernel on one pair of elements. */
static void reduce1(shoal_dtype_t dt, shoal_op_t op, const void *a, const void *b, void *out)
{
    shoal_reduce_fn(dt, op)(out, a, b, 1);
}

/* The bitwise and logical ops: every integer type against the reference,
 * in and out of place; no kernel for the floats. */
static void test_reduce_bitops(void **state)
{
    (void)state;
    bufs_t bu;
    bufs_init(&bu);
    for (int dt = 0; dt < SHOAL_DTYPE_COUNT; dt++) {
        for (int op = SHOAL_BAND; op < SHOAL_BITOP_END; op++) {
            if (!shoal_dtype_is_int((shoal_dtype_t)dt)) {
                assert_null(shoal_reduce_fn((shoal_dtype_t)dt, (shoal_op_t)op));
                continue;
            }
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (int mode = 0; mode < 3; mode++)
                    check_reduce_case(&bu, (shoal_dtype_t)dt, (shoal_op_t)op, counts[c], mode,
                                      (int)c % (MAX_OFFSET + 1));
        }
    }
    assert_null(shoal_reduce_fn(SHOAL_INT32, SHOAL_BITOP_END));
    bufs_free(&bu);

    int8_t a8 = -2, b8 = 0, r8;
    reduce1(SHOAL_INT8, SHOAL_LOR, &a8, &b8, &r8);
    assert_int_equal(r8, 1);
    reduce1(SHOAL_INT8, SHOAL_LAND, &a8, &b8, &r8);
    assert_int_equal(r8, 0);
    reduce1(SHOAL_INT8, SHOAL_BOR, &a8, &b8, &r8);
    assert_int_equal(r8, -2);
    uint32_t a32 = 6, b32 = 3, r32;
    reduce1(SHOAL_UINT32, SHOAL_BAND, &a32, &b32, &r32);
    assert_int_equal(r32, 2);
    reduce1(SHOAL_UINT32, SHOAL_BXOR, &a32, &b32, &r32);
    assert_int_equal(r32, 5);
    reduce1(SHOAL_UINT32, SHOAL_LXOR, &a32, &b32, &r32);
    assert_int_equal(r32, 0); /* both true */
    reduce1(SHOAL_UINT32, SHOAL_LAND, &a32, &b32, &r32);
    assert_int_equal(r32, 1);
    uint64_t a64 = 1ull << 63, b64 = 0, r64;
    reduce1(SHOAL_UINT64, SHOAL_LXOR, &a64, &b64, &r64);
    assert_true(r64 == 1);
    assert_string_equal(shoal_op_name(SHOAL_LXOR), "lxor");
    assert_int_equal(shoal_op_of_sig_code(shoal_op_sig_code(SHOAL_BOR)), SHOAL_BOR);
    assert_int_equal(shoal_op_of_sig_code(shoal_op_sig_code(SHOAL_MIN)), SHOAL_MIN);
}

static void test_reduce_int_semantics(void **state)
{
    int8_t i8a = 127, i8b = 1, i8r;
    reduce1(SHOAL_INT8, SHOAL_SUM, &i8a, &i8b, &i8r);
    assert_int_equal(i8r, -128); /* wraps */
    i8a = -128;
    i8b = -1;
    reduce1(SHOAL_INT8, SHOAL_PROD, &i8a, &i8b, &i8r);
    assert_int_equal(i8r, -128);
    reduce1(SHOAL_INT8, SHOAL_MAX, &i8a, &i8b, &i8r);
    assert_int_equal(i8r, -1);
    reduce1(SHOAL_INT8, SHOAL_MIN, &i8a, &i8b, &i8r);
    assert_int_equal(i8r, -128);

    uint8_t u8a = 200, u8b = 2, u8r;
    reduce1(SHOAL_UINT8, SHOAL_PROD, &u8a, &u8b, &u8r);
    assert_int_equal(u8r, 144);
    reduce1(SHOAL_UINT8, SHOAL_MAX, &u8a, &u8b, &u8r);
    assert_int_equal(u8r, 200);

    int32_t i32a = INT32_MIN, i32b = -1, i32r;
    reduce1(SHOAL_INT32, SHOAL_PROD, &i32a, &i32b, &i32r);
    assert_int_equal(i32r, INT32_MIN);
    i32a = INT32_MAX;
    i32b = 2;
    reduce1(SHOAL_INT32, SHOAL_SUM, &i32a, &i32b, &i32r);
    assert_int_equal(i32r, INT32_MIN + 1);

    uint32_t u32a = 0xffffffffu, u32b = 1, u32r;
    reduce1(SHOAL_UINT32, SHOAL_MAX, &u32a, &u32b, &u32r);
    assert_int_equal(u32r, 0xffffffffu); /* unsigned compare */

    int64_t i64a = INT64_MAX, i64b = 1, i64r;
    reduce1(SHOAL_INT64, SHOAL_SUM, &i64a, &i64b, &i64r);
    assert_true(i64r == INT64_MIN);
    reduce1(SHOAL_INT64, SHOAL_MIN, &i64a, &i64r, &i64b);
    assert_true(i64b == INT64_MIN);

    uint64_t u64a = 1ull << 63, u64b = 3, u64r;
    reduce1(SHOAL_UINT64, SHOAL_PROD, &u64a, &u64b, &u64r);
    assert_true(u64r == 1ull << 63);
    reduce1(SHOAL_UINT64, SHOAL_MIN, &u64a, &u64b, &u64r);
    assert_true(u64r == 3);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static void test_reduce_float_semantics(void **state)
{
    float one = 1.0f, nan = NAN, pz = 0.0f, nz = -0.0f, r;
    reduce1(SHOAL_FLOAT32, SHOAL_MAX, &nan, &one, &r);
    assert_true(r == 1.0f); /* a NaN gives way to the number */
    reduce1(SHOAL_FLOAT32, SHOAL_MAX, &one, &nan, &r);
    assert_true(r == 1.0f);
    reduce1(SHOAL_FLOAT32, SHOAL_MIN, &nan, &one, &r);
    assert_true(r == 1.0f);
    reduce1(SHOAL_FLOAT32, SHOAL_MAX, &nan, &nan, &r);
    assert_true(isnan(r));
    reduce1(SHOAL_FLOAT32, SHOAL_MAX, &nz, &pz, &r);
    assert_int_equal(f32_bits(r), 0x00000000u);
    reduce1(SHOAL_FLOAT32, SHOAL_MAX, &pz, &nz, &r);
    assert_int_equal(f32_bits(r), 0x00000000u);
    reduce1(SHOAL_FLOAT32, SHOAL_MIN, &pz, &nz, &r);
    assert_int_equal(f32_bits(r), 0x80000000u);
    reduce1(SHOAL_FLOAT32, SHOAL_MIN, &nz, &pz, &r);
    assert_int_equal(f32_bits(r), 0x80000000u);
    reduce1(SHOAL_FLOAT32, SHOAL_SUM, &nan, &one, &r);
    assert_true(isnan(r));

    double dn = NAN, d2 = -2.0, dr;
    reduce1(SHOAL_FLOAT64, SHOAL_MIN, &d2, &dn, &dr);
    assert_true(dr == -2.0);

    /* half: the sum overflows to inf; fp8 saturates instead. */
    uint16_t h = shoal_f32_to_f16(65504.0f), hr;
    reduce1(SHOAL_FLOAT16, SHOAL_SUM, &h, &h, &hr);
    assert_int_equal(hr, 0x7c00);
    uint8_t e4 = shoal_f32_to_e4m3(448.0f), e4r;
    reduce1(SHOAL_FP8_E4M3, SHOAL_SUM, &e4, &e4, &e4r);
    assert_int_equal(e4r, 0x7e);
    uint8_t e5 = shoal_f32_to_e5m2(57344.0f), e5r, e5inf = 0x7c;
    reduce1(SHOAL_FP8_E5M2, SHOAL_SUM, &e5, &e5, &e5r);
    assert_int_equal(e5r, 0x7b);
    reduce1(SHOAL_FP8_E5M2, SHOAL_MAX, &e5inf, &e5, &e5r);
    assert_int_equal(e5r, 0x7b); /* inf saturates too */
    uint16_t b1 = shoal_f32_to_bf16(1.0f), b2 = shoal_f32_to_bf16(0x1p-8f), br;
    reduce1(SHOAL_BFLOAT16, SHOAL_SUM, &b1, &b2, &br);
    assert_int_equal(br, 0x3f80); /* 1 + 2^-8 is a tie: even, 1.0 */
}

static void test_avg_semantics(void **state)
{
    int32_t i[3] = {-7, 7, -1}, ir[3];
    shoal_avg_finish(ir, i, 3, SHOAL_INT32, 2);
    assert_int_equal(ir[0], -3); /* truncates toward zero */
    assert_int_equal(ir[1], 3);
    assert_int_equal(ir[2], 0);

    uint8_t u = 255, ur;
    shoal_avg_finish(&ur, &u, 1, SHOAL_UINT8, 300); /* n larger than the type */
    assert_int_equal(ur, 0);
    shoal_avg_finish(&ur, &u, 1, SHOAL_UINT8, 2);
    assert_int_equal(ur, 127);

    int64_t l = INT64_MIN, lr;
    shoal_avg_finish(&lr, &l, 1, SHOAL_INT64, 1);
    assert_true(lr == INT64_MIN);

    float f = 1.0f, fr;
    shoal_avg_finish(&fr, &f, 1, SHOAL_FLOAT32, 3);
    assert_true(fr == 1.0f * (1.0f / 3.0f));
    double d = 1.0, dr;
    shoal_avg_finish(&dr, &d, 1, SHOAL_FLOAT64, 3);
    assert_true(dr == 1.0 / 3.0);

    /* fp32's 1/3, then rounded to half */
    uint16_t h = shoal_f32_to_f16(3.0f), hr;
    shoal_avg_finish(&hr, &h, 1, SHOAL_FLOAT16, 3);
    assert_int_equal(hr, shoal_f32_to_f16(3.0f * (1.0f / 3.0f)));

    /* n < 1 changes nothing */
    fr = 5.0f;
    shoal_avg_finish(&fr, &f, 1, SHOAL_FLOAT32, 0);
    assert_true(fr == 5.0f);
}

/* A failing case leaves by longjmp: restore the default for the next. */
static int simd_default(void **state)
{
    shoal_reduce_simd_enable(1);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduce_lookup),
        cmocka_unit_test(test_reduce_int_semantics),
        cmocka_unit_test(test_reduce_float_semantics),
        cmocka_unit_test(test_avg_semantics),
        cmocka_unit_test(test_reduce_matches_ref),
        cmocka_unit_test(test_reduce_bitops),
        cmocka_unit_test(test_device_kernels_match_ref),
        cmocka_unit_test_teardown(test_reduce_portable_matches_ref, simd_default),
        cmocka_unit_test(test_reduce_minmax_commute),
        cmocka_unit_test_teardown(test_avg_matches_ref, simd_default),
    };
    return cmocka_run_group_tests_name("reduce", tests, NULL, NULL);
}
