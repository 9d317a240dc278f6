/* Requests of the non-blocking calls the door takes.
 *
 * The program holds an MPI generalized request (PMPI_Grequest_start) for
 * each, so that MPI's own completion calls accept it beside MPI's
 * requests; the door keeps the shoal request behind it in a table keyed
 * by the handle. MPI_Wait, MPI_Test and their all/any/some forms, and
 * MPI_Request_get_status, first settle the door's requests among theirs
 * (shoal_wait or shoal_test; a completed one finishes its call and
 * completes the generalized request), then hand the whole array to
 * PMPI_*, which now sees those complete. Shoal's calls progress on its own
 * thread, so waiting for them first cannot hold up MPI's; the any and some
 * forms poll both until one completes.
 *
 * MPI_Request_free and MPI_Cancel of a non-blocking collective's request
 * are erroneous in MPI (MPI 4.0 §6.12), and Open MPI and MPICH refuse
 * both with an error through the communicator's handler, leaving the
 * request to be completed as usual: the door does the same for its own. */
#include "mpi_priv.h"

#include "base/log.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct door_req {
    struct door_req *next;
    MPI_Request mpi;    /* the generalized request the program holds */
    shoal_request_t sr; /* NULL once complete */
    door_call_t call;
} door_req_t;

#define BUCKETS 64
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static door_req_t *table[BUCKETS];

static size_t bucket(MPI_Request r)
{
    uint64_t h = 0;
    memcpy(&h, &r, sizeof(r) < sizeof(h) ? sizeof(r) : sizeof(h));
    return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 58) % BUCKETS;
}

static door_req_t *find(MPI_Request r)
{
    if (r == MPI_REQUEST_NULL)
        return NULL;
    pthread_mutex_lock(&table_lock);
    door_req_t *d = table[bucket(r)];
    while (d && d->mpi != r)
        d = d->next;
    pthread_mutex_unlock(&table_lock);
    return d;
}

static void unlink_req(door_req_t *d)
{
    pthread_mutex_lock(&table_lock);
    door_req_t **pp = &table[bucket(d->mpi)];
    while (*pp && *pp != d)
        pp = &(*pp)->next;
    if (*pp)
        *pp = d->next;
    pthread_mutex_unlock(&table_lock);
}

/* The generalized request's callbacks: MPI asks for the status when the
 * program completes the request, and frees it after. */
static int query_fn(void *extra, MPI_Status *st)
{
    (void)extra;
    PMPI_Status_set_elements(st, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}

static int free_fn(void *extra)
{
    free(extra);
    return MPI_SUCCESS;
}

static int cancel_fn(void *extra, int complete)
{
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

int shoal_mpi_request_start(const door_call_t *k, shoal_request_t sr, MPI_Request *req)
{
    door_req_t *d = calloc(1, sizeof(*d));
    if (!d || PMPI_Grequest_start(query_fn, free_fn, cancel_fn, d, &d->mpi) != MPI_SUCCESS) {
        /* The call is running on every rank: see it through here. */
        shoal_status_t s = shoal_wait(&sr);
        door_call_t copy = *k;
        shoal_mpi_call_finish(&copy, s == SHOAL_OK);
        free(d);
        return shoal_mpi_fail(k->mpi, k->comm, k->what,
                              s == SHOAL_OK ? SHOAL_ERR_NO_MEMORY : s);
    }
    d->sr = sr;
    d->call = *k;
    shoal_mpi_comm_hold(d->call.dc);
    pthread_mutex_lock(&table_lock);
    size_t b = bucket(d->mpi);
    d->next = table[b];
    table[b] = d;
    pthread_mutex_unlock(&table_lock);
    *req = d->mpi;
    return MPI_SUCCESS;
}

/* Wait for d (or only look, when wait is 0; *done_p says whether it
 * completed); once complete, finish its call and complete the generalized
 * request. Returns MPI_SUCCESS or the error the communicator's handler
 * gave for a failed call. */
static int settle(door_req_t *d, int wait, int *done_p)
{
    int done = 1;
    shoal_status_t s = wait ? shoal_wait(&d->sr) : shoal_test(&d->sr, &done);
    if (done_p)
        *done_p = done;
    if (!done)
        return MPI_SUCCESS;
    unlink_req(d);
    door_call_t *k = &d->call;
    shoal_mpi_call_finish(k, s == SHOAL_OK);
    int code = s == SHOAL_OK ? MPI_SUCCESS : shoal_mpi_fail(k->mpi, k->comm, k->what, s);
    door_comm_t *dc = k->dc;
    PMPI_Grequest_complete(d->mpi);
    shoal_mpi_comm_put(dc);
    return code;
}

/* Settle the door's requests among n (wait: until each completes). */
static int settle_all(int n, const MPI_Request *rs, int wait)
{
    int code = MPI_SUCCESS;
    for (int i = 0; i < n; i++) {
        door_req_t *d = find(rs[i]);
        int c = d ? settle(d, wait, NULL) : MPI_SUCCESS;
        if (code == MPI_SUCCESS)
            code = c;
    }
    return code;
}

static int any_ours(int n, const MPI_Request *rs)
{
    for (int i = 0; i < n; i++)
        if (find(rs[i]))
            return 1;
    return 0;
}

static int first_error(int code, int rc)
{
    return code != MPI_SUCCESS ? code : rc;
}

int MPI_Wait(MPI_Request *r, MPI_Status *st)
{
    int code = settle_all(1, r, 1);
    return first_error(code, PMPI_Wait(r, st));
}

int MPI_Test(MPI_Request *r, int *flag, MPI_Status *st)
{
    int code = settle_all(1, r, 0);
    return first_error(code, PMPI_Test(r, flag, st));
}

int MPI_Request_get_status(MPI_Request r, int *flag, MPI_Status *st)
{
    int code = settle_all(1, &r, 0);
    return first_error(code, PMPI_Request_get_status(r, flag, st));
}

int MPI_Waitall(int n, MPI_Request rs[], MPI_Status sts[])
{
    int code = settle_all(n, rs, 1);
    return first_error(code, PMPI_Waitall(n, rs, sts));
}

int MPI_Testall(int n, MPI_Request rs[], int *flag, MPI_Status sts[])
{
    int code = settle_all(n, rs, 0);
    return first_error(code, PMPI_Testall(n, rs, flag, sts));
}

int MPI_Testany(int n, MPI_Request rs[], int *idx, int *flag, MPI_Status *st)
{
    int code = settle_all(n, rs, 0);
    return first_error(code, PMPI_Testany(n, rs, idx, flag, st));
}

int MPI_Testsome(int n, MPI_Request rs[], int *outcount, int idxs[], MPI_Status sts[])
{
    int code = settle_all(n, rs, 0);
    return first_error(code, PMPI_Testsome(n, rs, outcount, idxs, sts));
}

int MPI_Waitany(int n, MPI_Request rs[], int *idx, MPI_Status *st)
{
    if (!any_ours(n, rs))
        return PMPI_Waitany(n, rs, idx, st);
    for (;;) {
        int flag = 0;
        int code = settle_all(n, rs, 0);
        int rc = PMPI_Testany(n, rs, idx, &flag, st);
        if (code != MPI_SUCCESS || rc != MPI_SUCCESS || flag)
            return first_error(code, rc);
        sched_yield();
    }
}

int MPI_Waitsome(int n, MPI_Request rs[], int *outcount, int idxs[], MPI_Status sts[])
{
    if (!any_ours(n, rs))
        return PMPI_Waitsome(n, rs, outcount, idxs, sts);
    for (;;) {
        int code = settle_all(n, rs, 0);
        int rc = PMPI_Testsome(n, rs, outcount, idxs, sts);
        if (code != MPI_SUCCESS || rc != MPI_SUCCESS || *outcount != 0)
            return first_error(code, rc);
        sched_yield();
    }
}

/* MPI's error for a request of a collective, through the handler of the
 * collective's communicator. */
static int refuse(const door_req_t *d, const char *what)
{
    shoal_error(INIT, "MPI door: %s of %s's request: a non-blocking collective can be neither "
                "freed nor cancelled before it completes", what, d->call.what);
    PMPI_Comm_call_errhandler(d->call.mpi, MPI_ERR_REQUEST);
    return MPI_ERR_REQUEST;
}

int MPI_Request_free(MPI_Request *r)
{
    door_req_t *d = find(*r);
    return d ? refuse(d, "MPI_Request_free") : PMPI_Request_free(r);
}

int MPI_Cancel(MPI_Request *r)
{
    door_req_t *d = find(*r);
    return d ? refuse(d, "MPI_Cancel") : PMPI_Cancel(r);
}
