/* The MPI door (libshoal_mpi.so): an MPI program run with this library
 * preloaded has its collectives on predefined types and ops served by
 * shoal, through the MPI profiling interface: the door defines MPI_*,
 * and reaches MPI itself through PMPI_*. Anything it does not take goes
 * to PMPI_* unchanged.
 *
 * Communicators. Each MPI intracommunicator gets a shoal communicator
 * the first time a call on it is taken: rank 0 makes the unique id, a
 * PMPI_Allreduce on the communicator carries it, every rank joins, and a
 * PMPI_Allreduce agrees that all could (otherwise every rank passes the
 * communicator's calls through from then on). It is kept as an attribute
 * of the MPI communicator, so a dup does not inherit it (the copy
 * callback copies nothing) and MPI_Comm_free destroys it (the delete
 * callback). An attribute on MPI_COMM_SELF, whose delete callback MPI
 * runs first inside MPI_Finalize, logs what the door took.
 *
 * The wrong MPI. The door needs the library of the MPI it was built for,
 * and a program of the other MPI finds both loaded. A constructor sees
 * which library the program's own MPI_Init comes from; when it is not the
 * door's, the door logs one warning and starts the program again with
 * itself taken out of LD_PRELOAD, so that the program runs on its MPI
 * untouched (the door could not even pass calls on: MPICH's handles are
 * ints and Open MPI's pointers). Where no MPI_Init is found before main
 * (a program that opens MPI later), MPI_Get_library_version decides at
 * the first call: not the door's MPI, every call is passed on.
 *
 * Threads (MPI_THREAD_MULTIPLE): the keyvals are made once; a
 * communicator's shoal communicator is made by the one thread that calls
 * a collective on it (MPI lets one thread at a time do so), and several
 * communicators are served from several threads at once, as shoal's
 * communicators are independent. */
#include "mpi_priv.h"

#include "base/config.h"
#include "base/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The door's MPI library, as its file name starts (after the directory). */
#ifdef OPEN_MPI
#define DOOR_LIB "libmpi.so"
#else
#define DOOR_LIB "libmpich.so"
#endif

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

/* Each thread remembers the last communicator it looked up, which spares
 * the attribute lookup in MPI on every call; a freed communicator (whose
 * handle MPI may give the next one) moves the generation on, which
 * forgets every thread's. */
atomic_uint shoal_mpi_comm_gen = 1;
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
    MPI_Comm c;
    door_comm_t *d;
    unsigned gen;
} last;

/* The blocking calls passed to MPI at once (mpi_priv.h), the last per
 * kind and thread. */
_Thread_local __attribute__((tls_model("initial-exec"))) door_memo_t shoal_mpi_memo[DOOR_NKINDS];

void shoal_mpi_memo_keep(const door_call_t *k)
{
    if (!k->keyed || k->nb || shoal_log_level >= SHOAL_LOG_DEBUG)
        return;
    door_memo_t *m = &shoal_mpi_memo[k->kind];
    m->c = k->mpi;
    m->t = k->m.rt;
    m->op = k->m.op;
    m->count = k->m.rcount;
    m->gen = atomic_load_explicit(&shoal_mpi_comm_gen, memory_order_acquire);
    m->settings = shoal_config_generation();
}

static int delete_comm(MPI_Comm c, int keyval, void *attr, void *extra)
{
    (void)c;
    (void)keyval;
    (void)extra;
    atomic_fetch_add_explicit(&shoal_mpi_comm_gen, 1, memory_order_acq_rel);
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

/* LD_PRELOAD without the entry that names path. */
static void preload_without(const char *path, char *out, size_t cap)
{
    const char *list = getenv("LD_PRELOAD");
    size_t used = 0;
    out[0] = '\0';
    for (const char *p = list ? list : ""; *p;) {
        size_t n = strcspn(p, ": ");
        if (n && !(n == strlen(path) && !strncmp(p, path, n)) && used + n + 2 < cap) {
            if (used)
                out[used++] = ':';
            memcpy(out + used, p, n);
            used += n;
            out[used] = '\0';
        }
        p += n + (p[n] != '\0');
    }
}

/* The arguments of this process, from /proc/self/cmdline. */
static char **own_argv(void)
{
    static char buf[65536];
    static char *argv[1024];
    FILE *f = fopen("/proc/self/cmdline", "r");
    if (!f)
        return NULL;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    size_t n = 0;
    for (size_t i = 0; i < len && n + 1 < sizeof(argv) / sizeof(argv[0]); i += strlen(buf + i) + 1)
        argv[n++] = buf + i;
    argv[n] = NULL;
    return n ? argv : NULL;
}

__attribute__((constructor)) static void door_load(void)
{
    Dl_info prog, self;
    void *init = dlsym(RTLD_DEFAULT, "MPI_Init");
    if (!init || !dladdr(init, &prog) || !prog.dli_fname ||
        !dladdr((void *)door_load, &self) || !self.dli_fname)
        return;
    const char *base = strrchr(prog.dli_fname, '/');
    base = base ? base + 1 : prog.dli_fname;
    if (!strncmp(base, DOOR_LIB, strlen(DOOR_LIB)))
        return;
    shoal_warn(INIT, "MPI door: this program's MPI (%s) is not the one the door was built "
               "for (%s); running it without the door", prog.dli_fname, SHOAL_MPI_NAME);
    char rest[8192];
    char **argv = own_argv();
    preload_without(self.dli_fname, rest, sizeof(rest));
    if (!argv || (rest[0] ? setenv("LD_PRELOAD", rest, 1) : unsetenv("LD_PRELOAD")) != 0)
        return;
    execv("/proc/self/exe", argv);
}

static void door_init(void)
{
    shoal_config_get(); /* the log level of SHOAL_DEBUG, before the first line */
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
    static atomic_int ready; /* door_init has run: skip the once */
    if (atomic_load_explicit(&ready, memory_order_acquire))
        return door_on;
    pthread_once(&door_once, door_init);
    atomic_store_explicit(&ready, 1, memory_order_release);
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
    unsigned gen = atomic_load_explicit(&shoal_mpi_comm_gen, memory_order_acquire);
    if (last.gen == gen && last.c == c)
        return last.d;
    void *attr;
    int found = 0, inter = 0;
    if (PMPI_Comm_get_attr(c, comm_keyval, &attr, &found) != MPI_SUCCESS)
        return NULL;
    if (found) {
        last.c = c;
        last.d = attr;
        last.gen = gen;
        return attr;
    }
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
    /* Rank 0's id reaches the others by an allreduce (OR of bytes: the
     * others give zeros), not a broadcast: Open MPI 4.1 runs every later
     * 8-byte all-reduce about 20% slower once a process has made any
     * broadcast (0.48 against 0.58 us on 2 ranks), which would weigh on
     * the calls the door passes to it. */
    PMPI_Allreduce(MPI_IN_PLACE, &root, (int)sizeof(root), MPI_BYTE, MPI_BOR, c);
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
