/* The MPI door (libshoal_mpi.so): an MPI program run with this library
 * preloaded has its collectives on predefined types and ops served by
 * shoal, through the MPI profiling interface: the door defines MPI_*,
 * and reaches MPI itself through PMPI_*. Anything it does not take goes
 * to PMPI_* unchanged.
 *
 * Communicators. Each MPI intracommunicator gets a shoal communicator
 * the first time a call on it is taken: rank 0 makes the unique id, a
 * PMPI_Bcast on the communicator carries it, every rank joins, and a
 * PMPI_Allreduce agrees that all could (otherwise every rank passes the
 * communicator's calls through from then on). It is kept as an attribute
 * of the MPI communicator, so a dup does not inherit it (the copy
 * callback copies nothing) and MPI_Comm_free destroys it (the delete
 * callback). An attribute on MPI_COMM_SELF, whose delete callback MPI
 * runs first inside MPI_Finalize, tears down what is left.
 *
 * The choice to take a call depends only on arguments every rank must
 * pass alike (datatype, op, count, the communicator), so the ranks never
 * part ways. */
#include "mpi_priv.h"

#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a communicator's attribute holds. */
typedef struct {
    shoal_comm_t comm; /* NULL: calls on it pass through */
} door_comm_t;

static int comm_keyval = MPI_KEYVAL_INVALID;
static int self_keyval = MPI_KEYVAL_INVALID;
static int door_off;             /* not the MPI this was built for: pass everything */
static unsigned long taken, passed;

static int delete_comm(MPI_Comm c, int keyval, void *attr, void *extra)
{
    (void)c;
    (void)keyval;
    (void)extra;
    door_comm_t *d = attr;
    if (d && d->comm)
        shoal_comm_destroy(d->comm);
    free(d);
    return MPI_SUCCESS;
}

/* Inside MPI_Finalize, before any other communicator is gone. */
static int delete_self(MPI_Comm c, int keyval, void *attr, void *extra)
{
    (void)c;
    (void)keyval;
    (void)attr;
    (void)extra;
    shoal_info(INIT, "MPI door: %lu calls taken, %lu passed to MPI", taken, passed);
    if (comm_keyval != MPI_KEYVAL_INVALID)
        PMPI_Comm_free_keyval(&comm_keyval);
    return MPI_SUCCESS;
}

/* The keyvals, made on first use (MPI is initialised by then). */
static int door_ready(void)
{
    if (door_off)
        return 0;
    if (comm_keyval != MPI_KEYVAL_INVALID)
        return 1;
    if (!shoal_mpi_is_ours()) {
        door_off = 1;
        shoal_warn(INIT, "MPI door: the MPI in this process is not the one the door was built "
                   "for (%s); every call goes to MPI unchanged", SHOAL_MPI_NAME);
        return 0;
    }
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_comm, &comm_keyval, NULL) !=
            MPI_SUCCESS ||
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_self, &self_keyval, NULL) !=
            MPI_SUCCESS ||
        PMPI_Comm_set_attr(MPI_COMM_SELF, self_keyval, NULL) != MPI_SUCCESS) {
        door_off = 1;
        return 0;
    }
    return 1;
}

/* The shoal communicator of c, made on its first taken call; NULL when
 * its calls pass through. Collective over c when it makes one. */
shoal_comm_t shoal_mpi_comm(MPI_Comm c)
{
    if (!door_ready())
        return NULL;
    void *attr;
    int found = 0, inter = 0;
    if (PMPI_Comm_get_attr(c, comm_keyval, &attr, &found) != MPI_SUCCESS)
        return NULL;
    if (found)
        return ((door_comm_t *)attr)->comm;
    door_comm_t *d = calloc(1, sizeof(*d));
    if (!d || PMPI_Comm_test_inter(c, &inter) != MPI_SUCCESS || inter) {
        /* An intercommunicator (or no memory) passes through: every rank
         * of it sees the same. */
        if (d)
            PMPI_Comm_set_attr(c, comm_keyval, d);
        return NULL;
    }
    int rank, size;
    PMPI_Comm_rank(c, &rank);
    PMPI_Comm_size(c, &size);
    struct {
        int ok;
        shoal_unique_id_t id;
    } root;
    memset(&root, 0, sizeof(root));
    if (rank == 0)
        root.ok = shoal_get_unique_id(&root.id) == SHOAL_OK;
    PMPI_Bcast(&root, (int)sizeof(root), MPI_BYTE, 0, c);
    shoal_comm_t comm = NULL;
    int ok = root.ok && shoal_comm_init(size, &root.id, rank, &comm) == SHOAL_OK;
    int all = 0;
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, c);
    if (!all && comm) {
        shoal_comm_abort(comm);
        comm = NULL;
    }
    if (!all && rank == 0)
        shoal_warn(INIT, "MPI door: a communicator of %d ranks could not get a shoal "
                   "communicator; its calls go to MPI", size);
    d->comm = comm;
    PMPI_Comm_set_attr(c, comm_keyval, d);
    return comm;
}

void shoal_mpi_count(int took)
{
    if (took)
        taken++;
    else
        passed++;
}

/* A failed shoal call: through the communicator's error handler, as MPI
 * reports its own (MPI_ERRORS_ARE_FATAL aborts, MPI_ERRORS_RETURN
 * returns the code). */
int shoal_mpi_fail(MPI_Comm c, shoal_comm_t comm, const char *what, shoal_status_t s)
{
    const char *why = shoal_comm_last_error(comm);
    shoal_error(INIT, "%s: %s: %s", what, shoal_status_string(s), why ? why : "");
    int code = s == SHOAL_ERR_INVALID_ARG ? MPI_ERR_ARG : MPI_ERR_OTHER;
    PMPI_Comm_call_errhandler(c, code);
    return code;
}
