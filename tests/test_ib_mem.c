/* ib's memory (transport/ib_rcache.c, ib.c's keys and puts), two ranks as
 * two hosts of one machine (harness_split_hosts):
 * - registrations: two of one buffer share one memory region, a range
 *   inside a registered one takes its region, and the last deregistration
 *   of a region deregisters it (no region left, no verbs object left
 *   after the communicator);
 * - zero-copy: an all-gather on the put schedule (forced with
 *   SHOAL_ALGO=allgather:put, and as the model picks it) of registered
 *   buffers RDMA-writes each
 *   rank's block straight into the peer's registered output: the
 *   endpoint counts one put of the block's bytes per call, and the result
 *   is right; of unregistered buffers the blocks go through slots (no
 *   put) and the result is right too.
 * - every put schedule (all-reduce, reduce-scatter, broadcast, all-to-all,
 *   gather, scatter) forced on registered buffers: right results, blocks
 *   written by RDMA writes, and read by RDMA reads where a schedule reads
 *   the peer's memory.
 * The counts are checked inside the RDMA guest (SHOAL_TEST_RXE=1);
 * elsewhere tcp joins the hosts, which cannot put, and only the results
 * are checked. */
#include "harness.h"

#include "core/comm.h"
#include "transport/ib_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (300u * 1024) /* bytes of each rank's block: past the put's minimum */
#define CALLS 3

static int rxe_run(void)
{
    const char *v = getenv("SHOAL_TEST_RXE");
    return v && !strcmp(v, "1");
}

#if SHOAL_HAVE_IBVERBS
/* The ib context of comm; NULL outside the guest. */
static shoal_tl_ctx_t *ib_ctx(shoal_comm_t comm)
{
    for (int t = 0; t < comm->team.ntl; t++) {
        if (comm->team.tl_ctx[t] && comm->team.tl_ctx[t]->ops == &shoal_ib_ops)
            return comm->team.tl_ctx[t];
    }
    return NULL;
}
#endif

static int check_regions(shoal_comm_t comm, size_t regions, size_t misses, const char *when)
{
#if SHOAL_HAVE_IBVERBS
    shoal_tl_ctx_t *ctx = ib_ctx(comm);
    if (!rxe_run())
        return 0;
    RANK_CHECK(ctx, fail, "no ib context");
    RANK_CHECK(shoal_ib_rcache_regions(ctx) == regions && shoal_ib_rcache_misses(ctx) == misses,
               fail, "%s: %zu regions, %zu registered so far; want %zu and %zu", when,
               shoal_ib_rcache_regions(ctx), shoal_ib_rcache_misses(ctx), regions, misses);
    return 0;
fail:
    return 1;
#else
    return 0;
#endif
}

static int body_registrations(shoal_comm_t comm, int rank)
{
    unsigned char *a = malloc(BLOCK), *b = malloc(BLOCK);
    void *h1, *h2, *h3, *h4;
    RANK_CHECK(a && b, fail, "out of memory");
    RANK_CHECK(shoal_comm_register(comm, a, BLOCK, &h1) == SHOAL_OK, fail, "register a");
    RANK_CHECK(check_regions(comm, 1, 1, "a registered") == 0, fail, "a");
    RANK_CHECK(shoal_comm_register(comm, a, BLOCK, &h2) == SHOAL_OK, fail, "register a again");
    RANK_CHECK(shoal_comm_register(comm, a + 4096, 1000, &h3) == SHOAL_OK, fail, "a's inside");
    RANK_CHECK(check_regions(comm, 1, 1, "a three times") == 0, fail, "a x3");
    RANK_CHECK(shoal_comm_register(comm, b, BLOCK, &h4) == SHOAL_OK, fail, "register b");
    RANK_CHECK(check_regions(comm, 2, 2, "a and b") == 0, fail, "b");
    RANK_CHECK(shoal_comm_deregister(comm, h1) == SHOAL_OK &&
                   shoal_comm_deregister(comm, h2) == SHOAL_OK, fail, "deregister a");
    RANK_CHECK(check_regions(comm, 2, 2, "a's inside left") == 0, fail, "a's inside");
    RANK_CHECK(shoal_comm_deregister(comm, h3) == SHOAL_OK &&
                   shoal_comm_deregister(comm, h4) == SHOAL_OK, fail, "deregister");
    RANK_CHECK(check_regions(comm, 0, 2, "all deregistered") == 0, fail, "none");
    free(a);
    free(b);
    return 0;
fail:
    return 1;
}

static unsigned char pattern(int rank, int call, size_t i)
{
    return (unsigned char)(rank * 37 + call * 11 + i * 7 + (i >> 9));
}

/* CALLS all-gathers of BLOCK bytes per rank, registered or not; the puts
 * the endpoint to the peer counted meanwhile. */
static int gather_calls(shoal_comm_t comm, int rank, int nranks, int reg)
{
    unsigned char *in = malloc(BLOCK), *out = malloc((size_t)nranks * BLOCK);
    void *hin = NULL, *hout = NULL;
    RANK_CHECK(in && out, fail, "out of memory");
    if (reg)
        RANK_CHECK(shoal_comm_register(comm, in, BLOCK, &hin) == SHOAL_OK &&
                       shoal_comm_register(comm, out, (size_t)nranks * BLOCK, &hout) == SHOAL_OK,
                   fail, "register");
    int peer = 1 - rank;
    shoal_ep_t *ep = shoal_comm_ep(comm, peer);
    unsigned long long puts0 = atomic_load(&ep->puts), bytes0 = atomic_load(&ep->put_bytes);
    for (int call = 0; call < CALLS; call++) {
        for (size_t i = 0; i < BLOCK; i++)
            in[i] = pattern(rank, call, i);
        memset(out, 0, (size_t)nranks * BLOCK);
        shoal_status_t s = shoal_allgather(in, out, BLOCK, SHOAL_UINT8, comm);
        RANK_CHECK(s == SHOAL_OK, fail, "all-gather: %s", shoal_status_string(s));
        for (int r = 0; r < nranks; r++) {
            for (size_t i = 0; i < BLOCK; i++)
                RANK_CHECK(out[(size_t)r * BLOCK + i] == pattern(r, call, i), fail,
                           "call %d: rank %d's byte %zu", call, r, i);
        }
    }
    unsigned long long puts = atomic_load(&ep->puts) - puts0;
    unsigned long long bytes = atomic_load(&ep->put_bytes) - bytes0;
    printf("# rank %d, %s buffers: %llu puts of %llu B to rank %d\n", rank,
           reg ? "registered" : "unregistered", puts, bytes, peer);
    if (rxe_run()) {
        unsigned long long want = reg ? CALLS : 0;
        RANK_CHECK(puts == want && bytes == want * BLOCK, fail,
                   "%llu puts of %llu B, want %llu of %llu", puts, bytes, want,
                   want * (unsigned long long)BLOCK);
    }
    if (reg)
        RANK_CHECK(shoal_comm_deregister(comm, hin) == SHOAL_OK &&
                       shoal_comm_deregister(comm, hout) == SHOAL_OK, fail, "deregister");
    free(in);
    free(out);
    return 0;
fail:
    return 1;
}

/* Every put schedule forced, on registered buffers of two ranks: right
 * results, whether a block went by RDMA write or was read by RDMA read. */
#define PC 80000 /* floats per block: past the put's minimum */

static float v_allreduce(int r, size_t i) { return (float)(r + 1 + (int)(i % 5)); }
static float v_block(int r, int k, size_t i) { return (float)(r * 1000 + k * 100 + (int)(i % 13)); }

static int check_floats(const float *got, size_t n, float (*want)(size_t, int), int arg,
                        const char *what)
{
    for (size_t i = 0; i < n; i++)
        RANK_CHECK(got[i] == want(i, arg), fail, "%s: element %zu is %g, want %g", what, i,
                   got[i], want(i, arg));
    return 0;
fail:
    return 1;
}

static float w_allreduce(size_t i, int unused) { return v_allreduce(0, i) + v_allreduce(1, i); }
static float w_rs(size_t i, int rank) { return v_block(0, rank, i) + v_block(1, rank, i); }
static float w_bcast(size_t i, int unused) { return v_block(1, 0, i); }
static float w_a2a(size_t j, int rank) { return v_block((int)(j / PC), rank, j % PC); }
static float w_gather(size_t j, int unused) { return v_block((int)(j / PC), 0, j % PC); }
static float w_scatter(size_t i, int rank) { return v_block(1, rank, i); }

static int body_every_put(shoal_comm_t comm, int rank)
{
    size_t bytes = 2 * PC * sizeof(float);
    float *in = malloc(bytes), *out = malloc(bytes);
    void *hin, *hout;
    RANK_CHECK(in && out, fail, "out of memory");
    RANK_CHECK(shoal_comm_register(comm, in, bytes, &hin) == SHOAL_OK &&
                   shoal_comm_register(comm, out, bytes, &hout) == SHOAL_OK, fail, "register");
    shoal_ep_t *ep = shoal_comm_ep(comm, 1 - rank);
    unsigned long long puts0 = atomic_load(&ep->puts);
    for (size_t i = 0; i < PC; i++)
        in[i] = v_allreduce(rank, i);
    RANK_CHECK(shoal_allreduce(in, out, PC, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
               "all-reduce");
    RANK_CHECK(!check_floats(out, PC, w_allreduce, 0, "all-reduce"), fail, "all-reduce");
    for (size_t j = 0; j < 2 * PC; j++)
        in[j] = v_block(rank, (int)(j / PC), j % PC);
    RANK_CHECK(shoal_reduce_scatter(in, out, PC, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_OK,
               fail, "reduce-scatter");
    RANK_CHECK(!check_floats(out, PC, w_rs, rank, "reduce-scatter"), fail, "reduce-scatter");
    RANK_CHECK(shoal_alltoall(in, out, PC, SHOAL_FLOAT32, comm) == SHOAL_OK, fail, "all-to-all");
    RANK_CHECK(!check_floats(out, 2 * PC, w_a2a, rank, "all-to-all"), fail, "all-to-all");
    RANK_CHECK(shoal_scatter(in, out, PC, SHOAL_FLOAT32, 1, comm) == SHOAL_OK, fail, "scatter");
    RANK_CHECK(!check_floats(out, PC, w_scatter, rank, "scatter"), fail, "scatter");
    for (size_t i = 0; i < PC; i++)
        in[i] = v_block(rank, 0, i);
    RANK_CHECK(shoal_broadcast(in, out, PC, SHOAL_FLOAT32, 1, comm) == SHOAL_OK, fail,
               "broadcast");
    RANK_CHECK(!check_floats(out, PC, w_bcast, 0, "broadcast"), fail, "broadcast");
    RANK_CHECK(shoal_gather(in, out, PC, SHOAL_FLOAT32, 0, comm) == SHOAL_OK, fail, "gather");
    RANK_CHECK(rank != 0 || !check_floats(out, 2 * PC, w_gather, 0, "gather"), fail, "gather");
    unsigned long long puts = atomic_load(&ep->puts) - puts0;
    printf("# rank %d, every put schedule: %llu puts to rank %d\n", rank, puts, 1 - rank);
    RANK_CHECK(!rxe_run() || puts > 0, fail, "no put over ib");
    RANK_CHECK(shoal_comm_deregister(comm, hin) == SHOAL_OK &&
                   shoal_comm_deregister(comm, hout) == SHOAL_OK, fail, "deregister");
    free(in);
    free(out);
    return 0;
fail:
    return 1;
}

typedef int (*mem_body_t)(shoal_comm_t comm, int rank);

static int body_puts(shoal_comm_t comm, int rank)
{
    return gather_calls(comm, rank, 2, 1) || gather_calls(comm, rank, 2, 0);
}

static int mem_rank(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    mem_body_t body = *(mem_body_t *)arg;
    harness_split_hosts(rank, nranks, 2);
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(NULL));
    int rc = body(comm, rank);
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    RANK_CHECK(shoal_ib_live_objects() == 0, fail, "%zu verbs objects left",
               shoal_ib_live_objects());
    return rc;
fail:
    return 1;
}

static void run_mem(mem_body_t body)
{
    harness_use_transport("shm", 1 << 16);
    assert_int_equal(harness_run_ranks(2, mem_rank, &body, 120), 0);
}

static void test_registrations_share_regions(void **state)
{
    (void)state;
    run_mem(body_registrations);
}

static void test_allgather_puts_registered(void **state)
{
    (void)state;
    harness_setenv("SHOAL_ALGO", "allgather:put");
    run_mem(body_puts);
    harness_setenv("SHOAL_ALGO", NULL);
}

/* Chosen by the model: the all-gather that writes is picked between hosts
 * over ib, and moves registered buffers by RDMA writes; unregistered ones
 * make it fall back, right all the same. */
static void test_allgather_puts_by_choice(void **state)
{
    (void)state;
    harness_setenv("SHOAL_ALGO", NULL);
    run_mem(body_puts);
}

static void test_every_put_schedule(void **state)
{
    (void)state;
    harness_setenv("SHOAL_ALGO", "allreduce:put,reducescatter:put,broadcast:put,alltoall:put,"
                                 "gather:put,scatter:put");
    run_mem(body_every_put);
    harness_setenv("SHOAL_ALGO", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registrations_share_regions),
        cmocka_unit_test(test_allgather_puts_registered),
        cmocka_unit_test(test_allgather_puts_by_choice),
        cmocka_unit_test(test_every_put_schedule),
    };
    return cmocka_run_group_tests_name("ib_mem", tests, NULL, NULL);
}
