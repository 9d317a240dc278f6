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
#include <unistd.h>

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

/* The stream forms. Each rank's stream waits at a gate; behind it the
 * stream writes the sources, puts them to every rank, waits for every
 * rank's put and copies its window out. The calls return while the gate
 * holds, and nothing has moved then (this rank's put to itself has not
 * landed): the puts carry what the stream wrote, and the copy after the
 * wait finds every peer's bytes. kind bit 0: the window is device memory. */
static int stream_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    char why[256];
    shoal_comm_t comm = NULL;
    size_t wsize = (size_t)n * SLOT;
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "rank %d: %s", rank, why);
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    unsigned char *fresh = cu_user_alloc_pinned(wsize), *out = cu_user_alloc_pinned(wsize);
    unsigned char *hwin = malloc(wsize), *init = malloc(wsize);
    uint32_t *gate = cu_user_alloc_pinned(sizeof(*gate));
    void *dwin = cu_user_alloc(wsize), *dsrc = cu_user_alloc(wsize), *stream = cu_user_stream();
    RANK_CHECK(hwin && init, fail, "out of memory");
    memset(init, 0xee, wsize);
    for (int kind = 0; kind < 2; kind++) {
        void *wbuf = kind ? dwin : hwin;
        shoal_win_t win = NULL;
        RANK_CHECK(shoal_win_create(wbuf, wsize, comm, &win) == SHOAL_OK, fail,
                   "win_create: %s", shoal_comm_last_error(comm));
        for (size_t z = 0; z < NSIZES; z++) {
            size_t sz = sizes[z];
            int k = 32 + (int)z + 8 * kind;
            cu_user_htod(dwin, init, wsize);
            memcpy(hwin, init, wsize);
            /* What the source holds at the calls: the complement of what
             * the stream writes into it before the puts. */
            for (int q = 0; q < n; q++) {
                for (size_t i = 0; i < SLOT; i++)
                    fresh[(size_t)q * SLOT + i] = put_byte(rank, q, k, i);
            }
            for (size_t i = 0; i < wsize; i++)
                out[i] = (unsigned char)~fresh[i];
            cu_user_htod(dsrc, out, wsize);
            RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");
            *gate = 0;
            cu_user_gate(stream, gate, 1);
            cu_user_copy_async(dsrc, fresh, wsize, stream);
            shoal_signal_wait_t w[8];
            for (int q = 0; q < n; q++) {
                RANK_CHECK(shoal_put_signal_stream((char *)dsrc + (size_t)q * SLOT, sz, q, win,
                                                   (size_t)rank * SLOT, comm, stream) == SHOAL_OK,
                           fail, "kind %d: put of %zu B to rank %d: %s", kind, sz, q,
                           shoal_comm_last_error(comm));
                w[q] = (shoal_signal_wait_t){.peer = q, .count = 1};
            }
            RANK_CHECK(shoal_wait_signal_stream(w, (size_t)n, comm, stream) == SHOAL_OK, fail,
                       "wait: %s", shoal_comm_last_error(comm));
            cu_user_copy_async(out, wbuf, wsize, stream);
            RANK_CHECK(!cu_user_idle(stream), fail, "the stream ran past its gate");
            if (!kind)
                RANK_CHECK(!harness_check_untouched(hwin + (size_t)rank * SLOT, 0, SLOT, 0xee,
                                                    rank, "window"),
                           fail, "kind %d: the put to itself landed before its stream reached "
                           "it", kind);
            __atomic_store_n(gate, 1, __ATOMIC_RELEASE);
            cu_user_sync(stream);
            shoal_status_t async = SHOAL_ERR_INTERNAL;
            shoal_comm_get_async_error(comm, &async);
            RANK_CHECK(async == SHOAL_OK, fail, "async error: %s", shoal_comm_last_error(comm));
            for (int q = 0; q < n; q++) {
                const unsigned char *got = out + (size_t)q * SLOT;
                for (size_t i = 0; i < sz; i++)
                    RANK_CHECK(got[i] == put_byte(q, rank, k, i), fail,
                               "kind %d: %zu B from rank %d: byte %zu is %#x", kind, sz, q, i,
                               got[i]);
                RANK_CHECK(!harness_check_untouched(got, sz, SLOT, 0xee, rank, "window"), fail,
                           "kind %d: rank %d's put ran past its %zu B", kind, q, sz);
            }
        }
        RANK_CHECK(shoal_barrier(comm) == SHOAL_OK, fail, "barrier");
        RANK_CHECK(shoal_win_free(win, comm) == SHOAL_OK, fail, "win_free");
    }
    shoal_comm_destroy(comm);
    cu_user_stream_free(stream);
    cu_user_free(dwin);
    cu_user_free(dsrc);
    cu_user_free_pinned(fresh);
    cu_user_free_pinned(out);
    cu_user_free_pinned(gate);
    free(hwin);
    free(init);
    return 0;
fail:
    return 1;
}

/* A signal that never comes: rank 0's stream-ordered wait fails the
 * communicator at the deadline, and its stream goes on past the wait. */
static int stream_timeout_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    char why[256];
    shoal_comm_t comm = NULL;
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "rank %d: %s", rank, why);
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    void *stream = cu_user_stream();
    if (rank == 0) {
        shoal_signal_wait_t w = {.peer = n - 1, .count = 1};
        RANK_CHECK(shoal_wait_signal_stream(&w, 1, comm, stream) == SHOAL_OK, fail, "wait: %s",
                   shoal_comm_last_error(comm));
        cu_user_sync(stream);
        shoal_status_t s = SHOAL_OK;
        shoal_comm_get_async_error(comm, &s);
        RANK_CHECK(s == SHOAL_ERR_TIMEOUT, fail, "an unsatisfied stream wait left %s",
                   shoal_status_string(s));
        const char *e = shoal_comm_last_error(comm);
        RANK_CHECK(strstr(e, "signal") && strstr(e, "from rank 1"), fail,
                   "the error does not name the peer: %s", e);
    } else {
        sleep(4); /* alive past rank 0's deadline */
    }
    shoal_comm_abort(comm);
    cu_user_stream_free(stream);
    return 0;
fail:
    return 1;
}

static void test_stream(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    for (int n = 1; n <= 3; n++)
        assert_int_equal(harness_run_ranks(n, stream_rank, NULL, RUN_TIMEOUT_S), 0);
    harness_setenv("SHOAL_TIMEOUT", "2s");
    assert_int_equal(harness_run_ranks(2, stream_timeout_rank, NULL, RUN_TIMEOUT_S), 0);
    harness_setenv("SHOAL_TIMEOUT", NULL);
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, stream_rank, NULL, RUN_TIMEOUT_S), 0);
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
        cmocka_unit_test(test_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
