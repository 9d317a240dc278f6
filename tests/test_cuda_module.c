/* The CUDA module's table (base/dev_ops.h) entry by entry, loaded the way
 * libshoal loads it (base/dev.h): pointer kinds, memory, copies, the
 * reduction and AVG kernels for every dtype x op against the scalar
 * references, the convert kernel between every pair of its types against
 * base/dtype.h's conversions, the stream flags (and the wait kernel used where a device
 * has no stream memory operations), and memory handles opened by another
 * process. In make test the driver is the CPU stand-in of tests/cuda/
 * (its kernels run the very range functions of cuda/kern.h); make
 * test-gpu runs this binary on the real driver. */
#include "cuda_user.h"
#include "harness.h"

#include "algos/reduce.h"
#include "base/dev.h"
#include "base/dtype.h"
#include "cuda/kern.h"

#include <math.h>
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
            for (size_t i = 0; i < count; i++) {
                if (memcmp(got + i * es, want + i * es, es) == 0)
                    continue;
                /* Two NaN operands of + or * may give either NaN. */
                int nan_ok = op != SHOAL_MAX && op != SHOAL_MIN && dt >= SHOAL_FLOAT16;
                double g = 0, w = 0;
                if (dt == SHOAL_FLOAT32) {
                    g = ((float *)got)[i];
                    w = ((float *)want)[i];
                } else if (dt == SHOAL_FLOAT64) {
                    g = ((double *)got)[i];
                    w = ((double *)want)[i];
                } else if (dt == SHOAL_FLOAT16) {
                    g = shoal_f16_to_f32(((uint16_t *)got)[i]);
                    w = shoal_f16_to_f32(((uint16_t *)want)[i]);
                } else if (dt == SHOAL_BFLOAT16) {
                    g = shoal_bf16_to_f32(((uint16_t *)got)[i]);
                    w = shoal_bf16_to_f32(((uint16_t *)want)[i]);
                } else if (dt == SHOAL_FP8_E4M3) {
                    g = shoal_e4m3_to_f32(got[i]);
                    w = shoal_e4m3_to_f32(want[i]);
                } else if (dt == SHOAL_FP8_E5M2) {
                    g = shoal_e5m2_to_f32(got[i]);
                    w = shoal_e5m2_to_f32(want[i]);
                }
                if (!(nan_ok && isnan(g) && isnan(w)))
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
            assert_memory_equal(got, want, bytes);
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
    int src = 42, dst = 0;
    void *d = cu_user_alloc(sizeof(int));
    RANK_CHECK(ops->flag_wait(&flags[0], 5, stream) == SHOAL_OK, fail, "flag_wait: %s",
               ops->why());
    RANK_CHECK(ops->copy(d, &src, sizeof(int), stream) == SHOAL_OK, fail, "copy");
    RANK_CHECK(ops->copy(&dst, d, sizeof(int), stream) == SHOAL_OK, fail, "copy back");
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
    RANK_CHECK(dst == 42, fail, "the copies before the flag did not run");
    if (cu_user_is_standin() && getenv("SHOAL_STANDIN_NO_MEMOPS"))
        RANK_CHECK(cu_user_launches(SHOAL_K_WAIT) == 1 && cu_user_launches(SHOAL_K_WRITE) == 1,
                   fail, "without stream memory operations the wait and the write are not "
                   "the kernels'");
    cu_user_free(d);
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

int main(void)
{
    int rc;
    if (!cu_user_testable(&rc))
        return rc;
    /* Each case that touches the driver runs in processes of its own, so
     * that a failure in one leaves the others their own driver state. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_flags_wait_kernel),
        cmocka_unit_test(test_ipc),
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_reduce_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
