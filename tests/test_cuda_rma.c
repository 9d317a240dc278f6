/* One-sided calls on device memory (the CUDA driver stand-in in make test,
 * a GPU in make test-gpu): windows whose parts are device memory, puts
 * from device and from host sources into device and host windows, to the
 * rank itself and to the others, of 0, 1, odd and several slots' bytes,
 * over shm (1, 2, 3 ranks) and tcp (2 ranks); each target reads its window
 * back with a driver copy and finds every put's bytes, and nothing past
 * them. Through the NCCL door the same from ncclMemAlloc's device memory
 * is test_nccl_230's on a GPU; here the door's window path is the core's. */
#include "harness.h"

#include "cuda_user.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096
#define RUN_TIMEOUT_S 120
#define SLOT (3 * TEST_CHUNK + 8)

static const size_t sizes[] = {0, 1, 1001, 3 * TEST_CHUNK + 5};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static unsigned char put_byte(int src, int dst, int k, size_t i)
{
    return (unsigned char)harness_mix((uint32_t)(src * 7919 + dst * 131 + k * 17) ^ (uint32_t)i);
}

/* kind bit 0: the window is device memory; bit 1: the source is. */
static int rma_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    char why[256];
    shoal_comm_t comm = NULL;
    size_t wsize = (size_t)n * SLOT;
    unsigned char *host = malloc(wsize), *hsrc = malloc(SLOT), *hwin = malloc(wsize);
    RANK_CHECK(host && hsrc && hwin, fail, "out of memory");
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "rank %d: %s", rank, why);
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    void *dwin = cu_user_alloc(wsize), *dsrc = cu_user_alloc(SLOT);
    for (int kind = 0; kind < 4; kind++) {
        int dev_win = kind & 1, dev_src = kind & 2;
        void *wbuf = dev_win ? dwin : hwin, *src = dev_src ? dsrc : hsrc;
        shoal_win_t win = NULL;
        unsigned long long puts0 = harness_direct_puts(comm);
        RANK_CHECK(shoal_win_create(wbuf, wsize, comm, &win) == SHOAL_OK, fail,
                   "win_create: %s", shoal_comm_last_error(comm));
        for (size_t z = 0; z < NSIZES; z++) {
            size_t sz = sizes[z];
            memset(host, 0xee, wsize);
            if (dev_win)
                cu_user_htod(dwin, host, wsize);
            else
                memcpy(hwin, host, wsize);
            RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");
            shoal_signal_wait_t w[8];
            for (int q = 0; q < n; q++) {
                for (size_t i = 0; i < sz; i++)
                    hsrc[i] = put_byte(rank, q, (int)z + 8 * kind, i);
                if (dev_src)
                    cu_user_htod(dsrc, hsrc, SLOT);
                RANK_CHECK(shoal_put_signal(src, sz, q, win, (size_t)rank * SLOT, comm) ==
                               SHOAL_OK,
                           fail, "kind %d: put of %zu B to rank %d: %s", kind, sz, q,
                           shoal_comm_last_error(comm));
                w[q] = (shoal_signal_wait_t){.peer = q, .count = 1};
            }
            RANK_CHECK(shoal_wait_signal(w, (size_t)n, comm) == SHOAL_OK, fail, "wait: %s",
                       shoal_comm_last_error(comm));
            if (dev_win)
                cu_user_dtoh(host, dwin, wsize);
            else
                memcpy(host, hwin, wsize);
            for (int q = 0; q < n; q++) {
                const unsigned char *got = host + (size_t)q * SLOT;
                for (size_t i = 0; i < sz; i++)
                    RANK_CHECK(got[i] == put_byte(q, rank, (int)z + 8 * kind, i), fail,
                               "kind %d: %zu B from rank %d: byte %zu is %#x", kind, sz, q, i,
                               got[i]);
                RANK_CHECK(!harness_check_untouched(got, sz, SLOT, 0xee, rank, "window"), fail,
                           "kind %d: rank %d's put ran past its %zu B", kind, q, sz);
            }
        }
        /* No transport writes device memory, nor reads it as a source. */
        if (dev_win || dev_src)
            RANK_CHECK(harness_direct_puts(comm) == puts0, fail,
                       "kind %d: a put went straight into a peer's memory", kind);
        RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");
        RANK_CHECK(shoal_win_free(win, comm) == SHOAL_OK, fail, "win_free");
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    cu_user_free(dwin);
    cu_user_free(dsrc);
    free(host);
    free(hsrc);
    free(hwin);
    return 0;
fail:
    return 1;
}

static void test_shm(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    /* Cross-memory attach at every size: host windows and sources get
     * keys, device ones must not. */
    harness_setenv("SHOAL_CMA", "on");
    for (int n = 1; n <= 3; n++)
        assert_int_equal(harness_run_ranks(n, rma_rank, NULL, RUN_TIMEOUT_S), 0);
    harness_setenv("SHOAL_CMA", NULL);
}

static void test_tcp(void **state)
{
    (void)state;
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, rma_rank, NULL, RUN_TIMEOUT_S), 0);
}

int main(void)
{
    int rc;
    if (!cu_user_testable(&rc))
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm),
        cmocka_unit_test(test_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
