/* Memory registration: register and deregister, overlapping ranges and
 * the lookup transports use (shoal_reg_find), bad handles and double
 * deregistration, NULL and empty arguments, registrations on a stopped
 * communicator, and registrations left at destroy or abort (freed: the
 * ASan build's leak check sees none, as the communicators live in this
 * process). */
#include "harness.h"

#include "core/comm.h"
#include "core/reg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static shoal_comm_t one_rank_comm(void)
{
    shoal_unique_id_t id;
    shoal_comm_t comm = NULL;
    assert_int_equal(shoal_get_unique_id(&id), SHOAL_OK);
    assert_int_equal(shoal_comm_init(1, &id, 0, &comm), SHOAL_OK);
    return comm;
}

static void test_register_find(void **state)
{
    (void)state;
    shoal_comm_t comm = one_rank_comm();
    enum { SIZE = 1000 };
    static char mem[SIZE + 2];
    char *buf = mem + 1; /* registered: SIZE bytes, one byte unregistered each side */
    void *h = NULL;
    assert_int_equal(shoal_comm_register(comm, buf, SIZE, &h), SHOAL_OK);
    assert_non_null(h);
    assert_ptr_equal(shoal_reg_find(comm, buf, SIZE), h);
    assert_ptr_equal(shoal_reg_find(comm, buf + 10, SIZE - 10), h);
    assert_ptr_equal(shoal_reg_find(comm, buf + SIZE, 0), h);
    assert_null(shoal_reg_find(comm, buf + 10, SIZE - 9));
    assert_null(shoal_reg_find(comm, mem, 2));
    assert_null(shoal_reg_find(comm, mem + SIZE + 1, 1));
    assert_null(shoal_reg_find(comm, buf + 1, SIZE_MAX));
    const shoal_reg_t *reg = shoal_reg_find(comm, buf, 1);
    assert_ptr_equal(reg->buf, buf);
    assert_int_equal(reg->size, SIZE);

    /* Registered buffers serve operations as any other. */
    int32_t one = 1;
    void *hv = NULL;
    assert_int_equal(shoal_comm_register(comm, &one, sizeof(one), &hv), SHOAL_OK);
    assert_int_equal(shoal_allreduce(&one, &one, 1, SHOAL_INT32, SHOAL_SUM, comm), SHOAL_OK);
    assert_int_equal(one, 1);
    assert_int_equal(shoal_comm_deregister(comm, hv), SHOAL_OK);

    assert_int_equal(shoal_comm_deregister(comm, h), SHOAL_OK);
    assert_null(shoal_reg_find(comm, buf, 1));
    /* Twice: refused, with a reason. */
    assert_int_equal(shoal_comm_deregister(comm, h), SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(shoal_comm_last_error(comm), "not a live registration"));
    assert_int_equal(shoal_comm_destroy(comm), SHOAL_OK);
}

static void test_overlap(void **state)
{
    (void)state;
    shoal_comm_t comm = one_rank_comm();
    static char mem[1500];
    void *a, *b, *c, *a2;
    assert_int_equal(shoal_comm_register(comm, mem, 1000, &a), SHOAL_OK);
    assert_int_equal(shoal_comm_register(comm, mem + 500, 1000, &b), SHOAL_OK);
    assert_int_equal(shoal_comm_register(comm, mem + 200, 100, &c), SHOAL_OK);
    assert_int_equal(shoal_comm_register(comm, mem, 1000, &a2), SHOAL_OK);
    assert_true(a != b && a != c && b != c && a2 != a && a2 != b && a2 != c);

    /* The newest covering registration answers. */
    assert_ptr_equal(shoal_reg_find(comm, mem + 600, 100), a2);
    assert_ptr_equal(shoal_reg_find(comm, mem + 1200, 300), b);
    assert_ptr_equal(shoal_reg_find(comm, mem + 250, 10), a2);
    assert_null(shoal_reg_find(comm, mem + 100, 1000)); /* spans two, inside neither */

    assert_int_equal(shoal_comm_deregister(comm, a2), SHOAL_OK);
    assert_ptr_equal(shoal_reg_find(comm, mem + 250, 10), c);
    assert_ptr_equal(shoal_reg_find(comm, mem + 600, 100), b);
    assert_int_equal(shoal_comm_deregister(comm, b), SHOAL_OK);
    assert_ptr_equal(shoal_reg_find(comm, mem + 600, 100), a);
    assert_null(shoal_reg_find(comm, mem + 1200, 300));
    assert_int_equal(shoal_comm_deregister(comm, c), SHOAL_OK);
    assert_ptr_equal(shoal_reg_find(comm, mem + 250, 10), a);
    assert_int_equal(shoal_comm_deregister(comm, a), SHOAL_OK);
    assert_null(shoal_reg_find(comm, mem, 1));
    assert_int_equal(shoal_comm_destroy(comm), SHOAL_OK);
}

static void test_bad_args(void **state)
{
    (void)state;
    shoal_comm_t comm = one_rank_comm(), other = one_rank_comm();
    static char buf[64];
    void *const sentinel = (void *)0x1;
    void *h = sentinel;
    assert_int_equal(shoal_comm_register(comm, NULL, 8, &h), SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(shoal_comm_last_error(comm), "buf is NULL"));
    assert_int_equal(shoal_comm_register(comm, buf, 0, &h), SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(shoal_comm_last_error(comm), "size is 0"));
    assert_int_equal(shoal_comm_register(comm, buf, 8, NULL), SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(shoal_comm_last_error(comm), "handle_p is NULL"));
    assert_int_equal(shoal_comm_register(comm, (void *)(UINTPTR_MAX - 10), 100, &h),
                     SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(shoal_comm_last_error(comm), "address space"));
    assert_int_equal(shoal_comm_register(NULL, buf, 8, &h), SHOAL_ERR_INVALID_ARG);
    assert_ptr_equal(h, sentinel); /* outputs written only on success */
    assert_null(shoal_reg_find(comm, buf, 1));

    void *mine, *theirs;
    assert_int_equal(shoal_comm_register(comm, buf, sizeof(buf), &mine), SHOAL_OK);
    assert_int_equal(shoal_comm_register(other, buf, sizeof(buf), &theirs), SHOAL_OK);
    /* Not handles of comm: refused, and nothing changes. */
    int local;
    assert_int_equal(shoal_comm_deregister(comm, NULL), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_comm_deregister(comm, &local), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_comm_deregister(comm, theirs), SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(shoal_comm_last_error(comm), "not a live registration"));
    assert_int_equal(shoal_comm_deregister(NULL, mine), SHOAL_ERR_INVALID_ARG);
    assert_ptr_equal(shoal_reg_find(comm, buf, sizeof(buf)), mine);
    assert_ptr_equal(shoal_reg_find(other, buf, sizeof(buf)), theirs);
    assert_int_equal(shoal_comm_deregister(other, theirs), SHOAL_OK);
    assert_int_equal(shoal_comm_deregister(comm, mine), SHOAL_OK);
    assert_int_equal(shoal_comm_destroy(other), SHOAL_OK);

    /* A destroyed communicator is refused before its handle is looked at. */
    assert_int_equal(shoal_comm_destroy(comm), SHOAL_OK);
    assert_int_equal(shoal_comm_register(comm, buf, 8, &h), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_comm_deregister(comm, mine), SHOAL_ERR_INVALID_ARG);
    assert_non_null(strstr(shoal_comm_last_error(comm), "not valid"));
    assert_ptr_equal(h, sentinel);
}

/* Registrations are local bookkeeping: a stopped communicator, which
 * refuses operations, still takes and drops them. */
static void test_stopped_comm(void **state)
{
    (void)state;
    shoal_comm_t comm = one_rank_comm();
    static char buf[64];
    void *h, *h2;
    assert_int_equal(shoal_comm_register(comm, buf, sizeof(buf), &h), SHOAL_OK);
    assert_int_equal(shoal_comm_stop(comm), SHOAL_OK);
    assert_int_equal(shoal_allreduce(buf, buf, 1, SHOAL_INT8, SHOAL_SUM, comm), SHOAL_ERR_ABORTED);
    assert_int_equal(shoal_comm_register(comm, buf + 8, 8, &h2), SHOAL_OK);
    assert_int_equal(shoal_comm_deregister(comm, h), SHOAL_OK);
    assert_ptr_equal(shoal_reg_find(comm, buf + 8, 8), h2);
    assert_int_equal(shoal_comm_destroy(comm), SHOAL_OK); /* h2 left: freed */
}

/* Left at the end: destroy and abort free what is registered. */
static void test_left_at_release(void **state)
{
    (void)state;
    static char buf[4096];
    for (int k = 0; k < 2; k++) {
        shoal_comm_t comm = one_rank_comm();
        for (int i = 0; i < 100; i++) {
            void *h;
            assert_int_equal(shoal_comm_register(comm, buf + i, sizeof(buf) - (size_t)i, &h),
                             SHOAL_OK);
        }
        assert_int_equal(k ? shoal_comm_abort(comm) : shoal_comm_destroy(comm), SHOAL_OK);
    }
}

/* Several ranks, each with its own registrations around a collective. */
static int rank_register(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    enum { COUNT = 1000 };
    static float in[COUNT], out[COUNT], want[COUNT], tmp[COUNT];
    void *hin, *hout;
    RANK_CHECK(shoal_comm_register(comm, in, sizeof(in), &hin) == SHOAL_OK, fail, "register in");
    RANK_CHECK(shoal_comm_register(comm, out, sizeof(out), &hout) == SHOAL_OK, fail,
               "register out");
    harness_fill_exact(in, COUNT, rank, SHOAL_FLOAT32, SHOAL_SUM);
    harness_expected(want, tmp, COUNT, nranks, SHOAL_FLOAT32, SHOAL_SUM);
    RANK_CHECK(shoal_allreduce(in, out, COUNT, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
               "allreduce");
    RANK_CHECK(memcmp(out, want, sizeof(out)) == 0, fail, "wrong sum");
    RANK_CHECK(shoal_comm_deregister(comm, hout) == SHOAL_OK, fail, "deregister out");
    RANK_CHECK(shoal_comm_deregister(comm, hout) == SHOAL_ERR_INVALID_ARG, fail, "twice");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy with in still registered");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_ranks(void **state)
{
    (void)state;
    harness_use_transport("shm", 4096);
    assert_int_equal(harness_run_ranks(3, rank_register, NULL, 60), 0);
    harness_use_transport("tcp", 4096);
    assert_int_equal(harness_run_ranks(2, rank_register, NULL, 60), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_find),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_stopped_comm),
        cmocka_unit_test(test_left_at_release),
        cmocka_unit_test(test_ranks),
    };
    return cmocka_run_group_tests_name("register", tests, NULL, NULL);
}
