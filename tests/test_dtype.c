/* Element types: sizes and names, and the narrow float conversions checked
 * exhaustively where the domain is small (every 16- and 8-bit pattern) and
 * against independent references where it is not (fp32 inputs: every
 * representable value, every halfway point and its fp32 neighbours, and
 * random floats). */
#include "harness.h"

#include "base/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANDOM_FLOATS 2000000

/* A narrow format as the tests see it, described independently of dtype.h. */
typedef struct {
    const char *name;
    int e, m;
    int ieee_inf;   /* top exponent is inf/NaN; else only all-ones is NaN */
    int sat;        /* overflow saturates to the largest finite value */
    float (*decode)(uint32_t v);
    uint32_t (*encode)(float f);
} test_format_t;

static float dec_f16(uint32_t v) { return shoal_f16_to_f32((uint16_t)v); }
static float dec_bf16(uint32_t v) { return shoal_bf16_to_f32((uint16_t)v); }
static float dec_e4m3(uint32_t v) { return shoal_e4m3_to_f32((uint8_t)v); }
static float dec_e5m2(uint32_t v) { return shoal_e5m2_to_f32((uint8_t)v); }
static uint32_t enc_f16(float f) { return shoal_f32_to_f16(f); }
static uint32_t enc_bf16(float f) { return shoal_f32_to_bf16(f); }
static uint32_t enc_e4m3(float f) { return shoal_f32_to_e4m3(f); }
static uint32_t enc_e5m2(float f) { return shoal_f32_to_e5m2(f); }

static const test_format_t fmt_f16 = {"half", 5, 10, 1, 0, dec_f16, enc_f16};
static const test_format_t fmt_bf16 = {"bfloat16", 8, 7, 1, 0, dec_bf16, enc_bf16};
static const test_format_t fmt_e4m3 = {"f8e4m3", 4, 3, 0, 1, dec_e4m3, enc_e4m3};
static const test_format_t fmt_e5m2 = {"f8e5m2", 5, 2, 1, 1, dec_e5m2, enc_e5m2};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint32_t fmt_codes(const test_format_t *fmt)
{
    return 1u << (1 + fmt->e + fmt->m);
}

static uint32_t fmt_sign_bit(const test_format_t *fmt)
{
    return 1u << (fmt->e + fmt->m);
}

/* The textbook decode: sign * 2^(exp-bias) * 1.man, or 2^(1-bias) * 0.man,
 * in double; NAN for the NaN patterns and INFINITY for inf. */
static double ref_decode(const test_format_t *fmt, uint32_t v)
{
    int bias = (1 << (fmt->e - 1)) - 1;
    int exp_all = (1 << fmt->e) - 1;
    int man_all = (1 << fmt->m) - 1;
    int sign = (v >> (fmt->e + fmt->m)) & 1;
    int exp = (int)(v >> fmt->m) & exp_all;
    int man = (int)v & man_all;
    double mag;
    if (fmt->ieee_inf && exp == exp_all)
        mag = man ? NAN : INFINITY;
    else if (!fmt->ieee_inf && exp == exp_all && man == man_all)
        mag = NAN;
    else if (exp == 0)
        mag = ldexp((double)man, 1 - bias - fmt->m);
    else
        mag = ldexp(1.0 + (double)man / (double)(1 << fmt->m), exp - bias);
    return sign ? -mag : mag;
}

/* Largest finite positive code: the codes of non-negative values increase
 * with the value, which the reference search below relies on. */
static uint32_t ref_max_finite(const test_format_t *fmt)
{
    uint32_t v = fmt_sign_bit(fmt) - 1;
    while (!isfinite(ref_decode(fmt, v)))
        v--;
    return v;
}

/* Nearest representable value to f, ties to the even code, found by binary
 * search over the table of every non-negative finite value. Past the largest
 * finite value the format either saturates, or rounds as if its exponent
 * went on and turns the result into infinity (IEEE overflow). */
static uint32_t ref_encode(const test_format_t *fmt, const double *table, uint32_t max, float f)
{
    uint32_t sign = signbit(f) ? fmt_sign_bit(fmt) : 0;
    if (isnan(f))
        return sign | fmt->encode(NAN); /* the pattern is checked separately */
    double x = fabs((double)f);
    if (x >= table[max]) {
        if (fmt->sat || x == table[max])
            return sign | max;
        /* The next value after max would be table[max] + one ulp of max. */
        double next = table[max] + (table[max] - table[max - 1]);
        int up = x > (table[max] + next) / 2 || (x == (table[max] + next) / 2 && (max & 1));
        return sign | (up ? max + 1 : max);
    }
    uint32_t lo = 0, hi = max; /* table[lo] <= x < table[hi] */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (table[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    double dlo = x - table[lo], dhi = table[hi] - x;
    if (dlo < dhi)
        return sign | lo;
    if (dhi < dlo)
        return sign | hi;
    return sign | ((lo & 1) ? hi : lo);
}

static double *ref_table(const test_format_t *fmt)
{
    uint32_t n = fmt_sign_bit(fmt);
    double *table = malloc(n * sizeof(*table));
    assert_non_null(table);
    for (uint32_t v = 0; v < n; v++)
        table[v] = ref_decode(fmt, v);
    return table;
}

static void check_decode_all(const test_format_t *fmt)
{
    for (uint32_t v = 0; v < fmt_codes(fmt); v++) {
        double want = ref_decode(fmt, v);
        float got = fmt->decode(v);
        if (isnan(want)) {
            /* A NaN keeps its sign and comes out quiet, except in bf16,
             * which is fp32's top half and keeps every NaN bit as it is. */
            if (!isnan(got) || !signbit(got) != !(v & fmt_sign_bit(fmt)) ||
                (fmt->e != 8 && !(bits_of(got) & 0x400000u))) {
                fail_msg("%s 0x%x: want a NaN with its sign, got 0x%08x", fmt->name, v,
                         bits_of(got));
            }
            continue;
        }
        if (bits_of(got) != bits_of((float)want))
            fail_msg("%s 0x%x: want %a, got %a", fmt->name, v, want, (double)got);
    }
}

/* Every non-NaN pattern survives decode then encode unchanged. */
static void check_roundtrip_all(const test_format_t *fmt)
{
    for (uint32_t v = 0; v < fmt_codes(fmt); v++) {
        double x = ref_decode(fmt, v);
        if (isnan(x))
            continue;
        uint32_t want = v;
        if (isinf(x) && fmt->sat) /* saturation turns inf into the largest finite */
            want = (v & fmt_sign_bit(fmt)) | ref_max_finite(fmt);
        uint32_t back = fmt->encode(fmt->decode(v));
        if (back != want)
            fail_msg("%s 0x%x: round trip gives 0x%x", fmt->name, v, back);
    }
}

static void check_encode_one(const test_format_t *fmt, const double *table, uint32_t max,
                             float f)
{
    uint32_t got = fmt->encode(f);
    if (isnan(f)) {
        /* NaN stays NaN with its sign; with IEEE NaNs it is made quiet and
         * keeps the top of its payload, like the fp16 conversions of x86. */
        uint32_t want = (signbit(f) ? fmt_sign_bit(fmt) : 0) | (((1u << fmt->e) - 1) << fmt->m);
        if (fmt->ieee_inf)
            want |= (1u << (fmt->m - 1)) | ((bits_of(f) & 0x7fffffu) >> (23 - fmt->m));
        else
            want |= (1u << fmt->m) - 1;
        if (got != want)
            fail_msg("%s: NaN 0x%08x encoded as 0x%x, want 0x%x", fmt->name, bits_of(f), got, want);
        return;
    }
    uint32_t want = ref_encode(fmt, table, max, f);
    if (got != want)
        fail_msg("%s: %a (0x%08x) encoded as 0x%x, want 0x%x", fmt->name, (double)f,
                 bits_of(f), got, want);
}

/* Both neighbours of a value and of every halfway point between adjacent
 * values decide the rounding; check them all, with both signs, plus random
 * floats (fully random bits, and bits concentrated on the format's range). */
static void check_encode(const test_format_t *fmt)
{
    double *table = ref_table(fmt);
    uint32_t max = ref_max_finite(fmt);
    for (uint32_t v = 0; v <= max; v++) {
        double next = v < max ? table[v + 1] : table[v] + (table[v] - table[v - 1]);
        float points[] = {(float)table[v], (float)((table[v] + next) / 2)};
        for (int p = 0; p < 2; p++) {
            uint32_t u = bits_of(points[p]);
            for (uint32_t d = 0; d < 3; d++) {
                uint32_t w = u + d - 1;
                if (u == 0 && d == 0)
                    w = 0x80000001u; /* below +0: the smallest negative subnormal */
                check_encode_one(fmt, table, max, float_of(w));
                check_encode_one(fmt, table, max, float_of(w ^ 0x80000000u));
            }
        }
    }
    static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN,
                                     1e-45f, 1e-40f, 1e38f, 3.4028235e38f};
    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++)
        check_encode_one(fmt, table, max, specials[i]);
    check_encode_one(fmt, table, max, float_of(0x7f800001u)); /* signalling NaN */
    check_encode_one(fmt, table, max, float_of(0xffc00123u));
    check_encode_one(fmt, table, max, float_of(0x7fbfe000u));

    int bias = (1 << (fmt->e - 1)) - 1;
    for (int i = 0; i < RANDOM_FLOATS; i++) {
        uint32_t r = (uint32_t)rng_next();
        check_encode_one(fmt, table, max, float_of(r));
        /* fp32 exponent within the format's range, +-4 */
        uint32_t span = (uint32_t)(2 * bias + fmt->m + 8);
        uint32_t exp = (uint32_t)(127 - bias - fmt->m - 4) + (uint32_t)(rng_next() % span);
        check_encode_one(fmt, table, max, float_of((r & 0x807fffffu) | (exp << 23)));
    }
    free(table);
}

static void test_dtype_sizes(void **state)
{
    static const size_t want[SHOAL_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    for (int d = 0; d < SHOAL_DTYPE_COUNT; d++) {
        size_t size = 0;
        assert_int_equal(shoal_dtype_bytes((shoal_dtype_t)d), want[d]);
        assert_int_equal(shoal_dtype_size((shoal_dtype_t)d, &size), SHOAL_OK);
        assert_int_equal(size, want[d]);
    }
    size_t size = 77;
    assert_int_equal(shoal_dtype_bytes(SHOAL_DTYPE_COUNT), 0);
    assert_int_equal(shoal_dtype_bytes((shoal_dtype_t)-1), 0);
    assert_int_equal(shoal_dtype_size(SHOAL_DTYPE_COUNT, &size), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_dtype_size((shoal_dtype_t)-1, &size), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(size, 77);
    assert_int_equal(shoal_dtype_size(SHOAL_FLOAT32, NULL), SHOAL_ERR_INVALID_ARG);
}

static void test_dtype_names(void **state)
{
    static const char *const want[SHOAL_DTYPE_COUNT] = {
        "int8", "uint8", "int32", "uint32", "int64", "uint64",
        "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
    for (int d = 0; d < SHOAL_DTYPE_COUNT; d++)
        assert_string_equal(shoal_dtype_name((shoal_dtype_t)d), want[d]);
    assert_string_equal(shoal_dtype_name(SHOAL_DTYPE_COUNT), "?");
    assert_string_equal(shoal_dtype_name((shoal_dtype_t)-1), "?");

    static const char *const ops[SHOAL_OP_COUNT] = {"sum", "prod", "max", "min", "avg"};
    for (int o = 0; o < SHOAL_OP_COUNT; o++)
        assert_string_equal(shoal_op_name((shoal_op_t)o), ops[o]);
    assert_string_equal(shoal_op_name(SHOAL_OP_COUNT), "?");
    assert_string_equal(shoal_op_name((shoal_op_t)-1), "?");
}

static void test_f16_decode(void **state)
{
    check_decode_all(&fmt_f16);
#ifdef __FLT16_MAX__
    /* The compiler's own conversion is exact IEEE: compare bit for bit,
     * NaNs included (both quiet the NaN and keep its payload). */
    for (uint32_t v = 0; v < 0x10000u; v++) {
        uint16_t h = (uint16_t)v;
        _Float16 x;
        memcpy(&x, &h, sizeof(x));
        float want = (float)x;
        float got = shoal_f16_to_f32(h);
        if (bits_of(got) != bits_of(want))
            fail_msg("half 0x%04x: want 0x%08x, got 0x%08x", v, bits_of(want), bits_of(got));
    }
#endif
}

static void test_f16_encode(void **state)
{
    check_encode(&fmt_f16);
    check_roundtrip_all(&fmt_f16);
#ifdef __FLT16_MAX__
    /* Against the compiler: random floats, and every halfway case between
     * adjacent halves (exact in fp32) with its fp32 neighbours. */
    for (uint32_t v = 0; v < 0x7c00u; v++) {
        uint16_t lo = (uint16_t)v, hi = (uint16_t)(v + 1);
        float mid = (shoal_f16_to_f32(lo) + shoal_f16_to_f32(hi)) / 2;
        for (uint32_t d = 0; d < 3; d++) {
            for (uint32_t s = 0; s < 2; s++) {
                float f = float_of((bits_of(mid) + d - 1) ^ (s << 31));
                _Float16 want = (_Float16)f;
                uint16_t wb;
                memcpy(&wb, &want, sizeof(wb));
                uint16_t got = shoal_f32_to_f16(f);
                if (got != wb)
                    fail_msg("half: %a encoded as 0x%04x, want 0x%04x", (double)f, got, wb);
            }
        }
    }
    for (int i = 0; i < RANDOM_FLOATS; i++) {
        float f = float_of((uint32_t)rng_next());
        _Float16 want = (_Float16)f;
        uint16_t wb;
        memcpy(&wb, &want, sizeof(wb));
        uint16_t got = shoal_f32_to_f16(f);
        if (got != wb)
            fail_msg("half: 0x%08x encoded as 0x%04x, want 0x%04x", bits_of(f), got, wb);
    }
#endif
    assert_int_equal(shoal_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(shoal_f32_to_f16(65519.996f), 0x7bff);
    assert_int_equal(shoal_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(shoal_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(shoal_f32_to_f16(NAN), 0x7e00);
    assert_int_equal(shoal_f32_to_f16(float_of(0xff812345u)), 0xfe09); /* quiet, payload top */
    assert_int_equal(shoal_f32_to_f16(0x1p-25f), 0x0000); /* tie to even: zero */
    assert_int_equal(shoal_f32_to_f16(0x1.8p-24f), 0x0002); /* tie to even: 2 */
}

static void test_bf16_decode(void **state)
{
    check_decode_all(&fmt_bf16);
    /* bf16 is the top half of fp32, NaN payloads included. */
    for (uint32_t v = 0; v < 0x10000u; v++) {
        uint32_t got = bits_of(shoal_bf16_to_f32((uint16_t)v));
        if (got != v << 16)
            fail_msg("bfloat16 0x%04x: got 0x%08x", v, got);
    }
}

static void test_bf16_encode(void **state)
{
    check_encode(&fmt_bf16);
    check_roundtrip_all(&fmt_bf16);
    assert_int_equal(shoal_f32_to_bf16(float_of(0x7f7f8000u)), 0x7f80); /* tie at max: inf */
    assert_int_equal(shoal_f32_to_bf16(float_of(0x7f7f7fffu)), 0x7f7f);
    assert_int_equal(shoal_f32_to_bf16(float_of(0x7f800001u)), 0x7fc0); /* NaN stays NaN */
    assert_int_equal(shoal_f32_to_bf16(float_of(0xff800001u)), 0xffc0);
    assert_int_equal(shoal_f32_to_bf16(float_of(0x3f808000u)), 0x3f80); /* tie to even */
    assert_int_equal(shoal_f32_to_bf16(float_of(0x3f818000u)), 0x3f82);
}

static void test_e4m3_decode(void **state)
{
    check_decode_all(&fmt_e4m3);
    assert_true(shoal_e4m3_to_f32(0x7e) == 448.0f);
    assert_true(shoal_e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(isnan(shoal_e4m3_to_f32(0x7f)) && isnan(shoal_e4m3_to_f32(0xff)));
    assert_true(shoal_e4m3_to_f32(0x78) == 256.0f); /* top exponent is a normal one */
}

static void test_e4m3_encode(void **state)
{
    check_encode(&fmt_e4m3);
    check_roundtrip_all(&fmt_e4m3);
    assert_int_equal(shoal_f32_to_e4m3(448.0f), 0x7e);
    assert_int_equal(shoal_f32_to_e4m3(464.0f), 0x7e);
    assert_int_equal(shoal_f32_to_e4m3(1e30f), 0x7e);
    assert_int_equal(shoal_f32_to_e4m3(INFINITY), 0x7e);
    assert_int_equal(shoal_f32_to_e4m3(-INFINITY), 0xfe);
    assert_int_equal(shoal_f32_to_e4m3(NAN), 0x7f);
    assert_int_equal(shoal_f32_to_e4m3(-NAN), 0xff);
    assert_int_equal(shoal_f32_to_e4m3(0x1p-10f), 0x00); /* tie to even: zero */
    assert_int_equal(shoal_f32_to_e4m3(0x1.8p-9f), 0x02);
}

static void test_e5m2_decode(void **state)
{
    check_decode_all(&fmt_e5m2);
    assert_true(shoal_e5m2_to_f32(0x7b) == 57344.0f);
    assert_true(shoal_e5m2_to_f32(0x7c) == INFINITY);
    assert_true(shoal_e5m2_to_f32(0xfc) == -INFINITY);
    assert_true(shoal_e5m2_to_f32(0x01) == 0x1p-16f);
}

static void test_e5m2_encode(void **state)
{
    check_encode(&fmt_e5m2);
    check_roundtrip_all(&fmt_e5m2);
    assert_int_equal(shoal_f32_to_e5m2(57344.0f), 0x7b);
    assert_int_equal(shoal_f32_to_e5m2(61440.0f), 0x7b);
    assert_int_equal(shoal_f32_to_e5m2(1e30f), 0x7b);
    assert_int_equal(shoal_f32_to_e5m2(INFINITY), 0x7b);
    assert_int_equal(shoal_f32_to_e5m2(-INFINITY), 0xfb);
    assert_int_equal(shoal_f32_to_e5m2(NAN), 0x7e);
    assert_int_equal(shoal_f32_to_e5m2(-NAN), 0xfe);
    assert_int_equal(shoal_f32_to_e5m2(1.125f), 0x3c); /* tie to even: 1.0 */
    assert_int_equal(shoal_f32_to_e5m2(1.375f), 0x3e); /* tie to even: 1.5 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_sizes),  cmocka_unit_test(test_dtype_names),
        cmocka_unit_test(test_f16_decode),   cmocka_unit_test(test_f16_encode),
        cmocka_unit_test(test_bf16_decode),  cmocka_unit_test(test_bf16_encode),
        cmocka_unit_test(test_e4m3_decode),  cmocka_unit_test(test_e4m3_encode),
        cmocka_unit_test(test_e5m2_decode),  cmocka_unit_test(test_e5m2_encode),
    };
    return cmocka_run_group_tests_name("dtype", tests, NULL, NULL);
}
