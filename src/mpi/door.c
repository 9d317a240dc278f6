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
 * runs first inside MPI_Finalize, logs what the door took.
 *
 * Threads (MPI_THREAD_MULTIPLE): the keyvals are made once; a
 * communicator's shoal communicator is made by the one thread that calls
 * a collective on it (MPI lets one thread at a time do so), and several
 * communicators are served from several threads at once, as shoal's
 * communicators are independent. */
#include "mpi_priv.h"

#include "base/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static int comm_keyval = MPI_KEYVAL_INVALID;
static int self_keyval = MPI_KEYVAL_INVALID;
static int door_on; /* set once by door_init */
static pthread_once_t door_once = PTHREAD_ONCE_INIT;

/* A communicator's shoal side lives while MPI's does and while any of
 * its non-blocking calls is in flight (MPI lets a program free a
 * communicator with calls pending). */
void shoal_mpi_comm_hold(door_comm_t *d)
{
    atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
}

void shoal_mpi_comm_put(door_comm_t *d)
{
    if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (d->comm)
        shoal_comm_destroy(d->comm);
    free(d);
}

static int delete_comm(MPI_Comm c, int keyval, void *attr, void *extra)
{
    (void)c;
    (void)keyval;
    (void)extra;
    if (attr)
        shoal_mpi_comm_put(attr);
    return MPI_SUCCESS;
}

/* Inside MPI_Finalize, before any other communicator is gone. */
static int delete_self(MPI_Comm c, int keyval, void *attr, void *extra)
{
    (void)c;
    (void)keyval;
    (void)attr;
    (void)extra;
    shoal_mpi_log_counts();
    return MPI_SUCCESS;
}

static void door_init(void)
{
    if (!shoal_mpi_is_ours()) {
        shoal_warn(INIT, "MPI door: the MPI in this process is not the one the door was built "
                   "for (%s); every call goes to MPI unchanged", SHOAL_MPI_NAME);
        return;
    }
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_comm, &comm_keyval, NULL) !=
            MPI_SUCCESS ||
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_self, &self_keyval, NULL) !=
            MPI_SUCCESS ||
        PMPI_Comm_set_attr(MPI_COMM_SELF, self_keyval, NULL) != MPI_SUCCESS) {
        shoal_warn(INIT, "MPI door: MPI refused the door its communicator attributes; every "
                   "call goes to MPI unchanged");
        return;
    }
    door_on = 1;
}

/* Whether the door serves calls; made ready on first use (MPI is
 * initialised by then: the calls it serves need it). */
int shoal_mpi_ready(void)
{
    pthread_once(&door_once, door_init);
    return door_on;
}

int shoal_mpi_comm_size(MPI_Comm c)
{
    int n = 0;
    PMPI_Comm_size(c, &n);
    return n;
}

int shoal_mpi_comm_rank(MPI_Comm c)
{
    int r = 0;
    PMPI_Comm_rank(c, &r);
    return r;
}

/* The door's side of c, made on its first taken call; NULL, or comm
 * NULL, when its calls pass through. Collective over c when it makes one. */
door_comm_t *shoal_mpi_comm(MPI_Comm c)
{
    if (!shoal_mpi_ready() || c == MPI_COMM_NULL)
        return NULL;
    void *attr;
    int found = 0, inter = 0;
    if (PMPI_Comm_get_attr(c, comm_keyval, &attr, &found) != MPI_SUCCESS)
        return NULL;
    if (found)
        return attr;
    door_comm_t *slot = calloc(1, sizeof(*slot));
    if (slot)
        atomic_init(&slot->refs, 1);
    if (PMPI_Comm_test_inter(c, &inter) != MPI_SUCCESS || inter || !slot) {
        /* An intercommunicator passes through: every rank of it sees the
         * same. Without memory this rank cannot tell the others: let MPI
         * report its own trouble. */
        if (slot)
            PMPI_Comm_set_attr(c, comm_keyval, slot);
        return NULL;
    }
    int rank = shoal_mpi_comm_rank(c), size = shoal_mpi_comm_size(c);
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
    slot->comm = comm;
    PMPI_Comm_set_attr(c, comm_keyval, slot);
    return slot;
}

/* A failed shoal call: through the communicator's error handler, as MPI
 * reports its own (MPI_ERRORS_ARE_FATAL aborts, MPI_ERRORS_RETURN
 * returns the code). */
int shoal_mpi_fail(MPI_Comm c, shoal_comm_t comm, const char *what, shoal_status_t s)
{
    const char *why = shoal_comm_last_error(comm);
    shoal_error(INIT, "MPI door: %s: %s: %s", what, shoal_status_string(s), why ? why : "");
    int code = s == SHOAL_ERR_INVALID_ARG ? MPI_ERR_ARG : MPI_ERR_OTHER;
    PMPI_Comm_call_errhandler(c, code);
    return code;
}
