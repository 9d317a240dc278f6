/* Settings: one table per component, parsed once from the environment into
 * the typed struct below. config.c is the machinery (entries, typed parsers,
 * load, print, NCCL aliases) and the only place that reads the environment;
 * each component defines its own table in its own file (core/core_config.c,
 * transport/shm_config.c...) with SHOAL_CONFIG_TABLE, which places it in a
 * linker section that config.c walks, so the machinery names no component.
 * shoal_info -c prints every table. */
#ifndef SHOAL_CONFIG_H
#define SHOAL_CONFIG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SHOAL_CONFIG_STR_MAX 256

typedef struct {
    int log_level;                        /* SHOAL_DEBUG */
    unsigned log_subsys;                  /* SHOAL_DEBUG_SUBSYS */
    char log_file[SHOAL_CONFIG_STR_MAX];  /* SHOAL_DEBUG_FILE, "" = stderr */
    uint64_t timeout_ns;                  /* SHOAL_TIMEOUT */
    uint64_t heartbeat_ns;                /* SHOAL_HEARTBEAT */
    int flight_depth;                     /* SHOAL_FLIGHT_DEPTH */
    char host_id[SHOAL_CONFIG_STR_MAX];   /* SHOAL_HOST_ID, "" = hostname+boot id */
    uint64_t test_wireup_delay_ns;        /* SHOAL_TEST_WIREUP_DELAY, tests only; 0 = off */
    uint64_t test_exec_nap_ns;            /* SHOAL_TEST_EXEC_NAP, tests only */
} shoal_core_config_t;

/* SHOAL_AUTH: whether a launch with no secret that only the job knows may
 * use one derived from the job's identity (launch_secret.c). */
enum {
    SHOAL_AUTH_STRICT = 0, /* no: init fails and says how to provide one */
    SHOAL_AUTH_WARN = 1,   /* yes, with one warning on rank 0 */
    SHOAL_AUTH_OFF = 2,    /* yes, silently: single-user test machines */
};

typedef struct {
    char socket_ifname[SHOAL_CONFIG_STR_MAX]; /* SHOAL_SOCKET_IFNAME, "" = auto */
    char addr[SHOAL_CONFIG_STR_MAX];          /* SHOAL_ADDR: rendezvous host[:port] */
    char comm_id[SHOAL_CONFIG_STR_MAX];       /* SHOAL_COMM_ID: host:port a unique id names, "" = unset */
    int port;                                 /* SHOAL_PORT, 0 = MASTER_PORT+1 or 29501 */
    char secret[SHOAL_CONFIG_STR_MAX];        /* SHOAL_SECRET: passphrase for env init */
    char secret_file[SHOAL_CONFIG_STR_MAX];   /* SHOAL_SECRET_FILE: file holding one */
    int auth;                                 /* SHOAL_AUTH: SHOAL_AUTH_STRICT... */
    int mac;                                  /* SHOAL_BOOTSTRAP_MAC: y/n */
    int rank;                                 /* SHOAL_RANK, -1 = unset */
    int size;                                 /* SHOAL_SIZE, -1 = unset */
    int local_rank;                           /* SHOAL_LOCAL_RANK, -1 = unset */
} shoal_boot_config_t;

/* A setting that is auto, on or off (shoal_config_field_auto). */
enum {
    SHOAL_AUTO = 0,
    SHOAL_ON = 1,
    SHOAL_OFF = 2,
};

/* SHOAL_CMA: whether shm moves private host memory by cross-memory attach
 * (transport/shm_cma.c). */
enum {
    SHOAL_CMA_AUTO = SHOAL_AUTO, /* where the probe at init measured it faster than two copies */
    SHOAL_CMA_ON = SHOAL_ON,     /* at every size, where the probe found it permitted */
    SHOAL_CMA_OFF = SHOAL_OFF,   /* never */
};

/* SHOAL_SHM_SPIN=auto: the probe at init measures it (the default until
 * then, and where no probe runs). */
#define SHOAL_SHM_SPIN_AUTO UINT64_MAX
#define SHOAL_SHM_SPIN_DEFAULT 100000u
/* Slots per FIFO where neither SHOAL_SHM_NSLOTS nor the probe sets them. */
#define SHOAL_SHM_NSLOTS_DEFAULT 8u

typedef struct {
    int enable;      /* SHOAL_SHM_ENABLE */
    size_t nslots;   /* SHOAL_SHM_NSLOTS; 0: chosen at init */
    uint64_t spin_ns; /* SHOAL_SHM_SPIN: polling before a wait sleeps; SHOAL_SHM_SPIN_AUTO */
    int cma;         /* SHOAL_CMA: SHOAL_CMA_AUTO... */
    int test_cma_fail; /* SHOAL_TEST_CMA_FAIL, tests only: this rank's probe fails; -1 = none */
    size_t test_piece; /* SHOAL_TEST_SHM_PIECE, tests only: the probe's choice; 0 = measured */
    int test_probe_fail; /* SHOAL_TEST_SHM_PROBE_FAIL, tests only: this rank's part fails */
} shoal_shm_config_t;

/* Queue pairs per ib peer at most (SHOAL_IB_QPS_PER_CONN). */
#define SHOAL_IB_QPS_MAX 8

typedef struct {
    int enable;                     /* SHOAL_IB_ENABLE */
    char hca[SHOAL_CONFIG_STR_MAX]; /* SHOAL_IB_HCA: devices and ports, NCCL's syntax */
    int gid_index;                  /* SHOAL_IB_GID_INDEX; -1: the RoCE v2 IPv4 entry */
    int qps;                        /* SHOAL_IB_QPS_PER_CONN */
    size_t nslots;                  /* SHOAL_IB_NSLOTS: slots per direction and peer */
    char test_lib[SHOAL_CONFIG_STR_MAX]; /* SHOAL_TEST_IB_LIB, tests only: the library to load */
} shoal_ib_config_t;

typedef struct {
    int enable;      /* SHOAL_TCP_ENABLE */
    int nsocks;      /* SHOAL_TCP_NSOCKS */
    size_t nslots;   /* SHOAL_TCP_NSLOTS */
    int lazy;        /* SHOAL_TCP_CONNECT: 1 lazy (on first use), 0 eager (at init) */
    size_t mem;      /* SHOAL_TCP_MEM: slot bytes per rank before peers get fewer slots */
    int test_drop;   /* SHOAL_TEST_TCP_DROP, tests only */
    int test_drop_last; /* SHOAL_TEST_TCP_DROP_LAST, tests only */
} shoal_tcp_config_t;

typedef struct {
    size_t stream_min;                  /* SHOAL_STREAM_MIN; 0 = shoal_config_stream_min() */
    int copy;                           /* SHOAL_COPY: a shoal_copy_kind_t (base/copy.h) */
    size_t chunk_size;                  /* SHOAL_CHUNK_SIZE: bytes per pipeline piece; 0 =
                                           shoal_config_chunk() picks */
    char algo[SHOAL_CONFIG_STR_MAX];    /* SHOAL_ALGO, "auto", a name or coll:name,... */
    uint64_t latency_ns;                /* SHOAL_ALGO_LATENCY, 0 = from the transports */
    size_t bandwidth;                   /* SHOAL_ALGO_BANDWIDTH B/s, 0 = from the transports */
    int progress_thread;                /* SHOAL_PROGRESS: 1 thread, 0 caller */
    int hier_pipe;                      /* SHOAL_HIER_PIPE: pipeline pieces of the
                                           hierarchical collectives; 0 = the cost model's */
} shoal_algo_config_t;

typedef struct {
    char file[SHOAL_CONFIG_STR_MAX];      /* SHOAL_TOPO_FILE: hwloc XML, "" = this machine */
    char synthetic[SHOAL_CONFIG_STR_MAX]; /* SHOAL_TOPO_SYNTHETIC: hwloc synthetic description */
    char cpus[SHOAL_CONFIG_STR_MAX];      /* SHOAL_TOPO_CPUS: binding in a stand-in, "" = all */
    char links[SHOAL_CONFIG_STR_MAX];     /* SHOAL_TOPO_LINKS: class:latency:bandwidth,... */
    int probe;                            /* SHOAL_TOPO_PROBE: measure links at init */
    int bind;                             /* SHOAL_CPU_BIND: SHOAL_BIND_AUTO... */
} shoal_topo_config_t;

/* SHOAL_CPU_BIND: whether init binds a rank nothing bound to one CPU. */
enum {
    SHOAL_BIND_AUTO = SHOAL_AUTO, /* where the host's ranks outnumber its CPUs */
    SHOAL_BIND_ON = SHOAL_ON,     /* always */
    SHOAL_BIND_OFF = SHOAL_OFF,   /* never */
};

/* Compression of the NCCL door's collectives (shoal.h's API takes its
 * options from the caller, not from here). */
typedef struct {
    int kind;           /* SHOAL_COMPRESS: 0 off, or SHOAL_COMPRESS_INT8 */
    size_t min_bytes;   /* SHOAL_COMPRESS_MIN: smaller buffers go uncompressed */
    int allgather;      /* SHOAL_COMPRESS_ALLGATHER: 0 off, SHOAL_COMPRESS_INT8 or _INT4 */
    int reduce_scatter; /* SHOAL_COMPRESS_REDUCESCATTER: 0, _INT8, _INT4 or _SIGN */
} shoal_compress_config_t;

/* The MPI door's choice between shoal and MPI's own path (src/mpi/rule.c). */
#define SHOAL_MPI_LEARN_MAX 100
enum { SHOAL_MPI_PATH_AUTO = 0, SHOAL_MPI_PATH_SHOAL = 1 };
typedef struct {
    int path;      /* SHOAL_MPI_PATH: SHOAL_MPI_PATH_AUTO or _SHOAL */
    int learn;     /* SHOAL_MPI_LEARN: timed calls per path and size before choosing,
                    * 1..SHOAL_MPI_LEARN_MAX */
    int test_slow; /* SHOAL_TEST_MPI_SLOW: tests only: 0, or the path on which
                    * rank 1's rule clock runs on 1 s at each call's entry
                    * into the door (1 shoal, 2 MPI), or 3 on both,
                    * shoal's a little less and unevenly (rule.c) */
} shoal_mpi_config_t;

/* The device module (base/dev.h). */
typedef struct {
    char module[SHOAL_CONFIG_STR_MAX]; /* SHOAL_CUDA_MODULE: the module's path or name */
    char driver[SHOAL_CONFIG_STR_MAX]; /* SHOAL_CUDA_DRIVER: the driver library */
    char cublas[SHOAL_CONFIG_STR_MAX]; /* SHOAL_CUBLAS: the cuBLAS library */
    size_t stage_max;                  /* SHOAL_CUDA_STAGE_MAX: pinned staging kept per comm */
    char path[SHOAL_CONFIG_STR_MAX];   /* SHOAL_CUDA_PATH: auto, staged or direct */
} shoal_cuda_config_t;

typedef struct {
    shoal_core_config_t core;
    shoal_boot_config_t boot;
    shoal_shm_config_t shm;
    shoal_tcp_config_t tcp;
    shoal_ib_config_t ib;
    shoal_algo_config_t algo;
    shoal_topo_config_t topo;
    shoal_compress_config_t compress;
    shoal_mpi_config_t mpi;
    shoal_cuda_config_t cuda;
} shoal_config_t;

/* ---- tables ---------------------------------------------------------------
 * A field parser reads text into the field it is given; 0 on success, -1
 * for text it does not accept (the entry then takes its default). */
typedef int (*shoal_config_parse_fn_t)(const char *text, void *field);

typedef struct {
    const char *name;       /* environment variable */
    const char *def;        /* default, as text */
    const char *doc;        /* one line */
    shoal_config_parse_fn_t parse;
    size_t offset;          /* of the field in shoal_config_t */
    /* The NCCL variable that sets this entry once the NCCL door turned the
     * aliases on and the SHOAL_ one is not set; NULL when none. Its
     * translator is the door's (SHOAL_CONFIG_ALIAS). */
    const char *nccl_name;
} shoal_config_entry_t;

/* The fields a component's entries write, checked together after every
 * entry parsed (limits a parser cannot see, values derived from others). */
typedef void (*shoal_config_sanitize_fn_t)(shoal_config_t *c);

typedef struct {
    const char *component;  /* "[shm]" in shoal_config_print */
    int order;              /* print and parse order: smaller first */
    const shoal_config_entry_t *entries;
    size_t count;
    shoal_config_sanitize_fn_t sanitize;
} shoal_config_table_t;

#define SHOAL_CONFIG_FIELD(member) offsetof(shoal_config_t, member)

/* Defines the table of a component: SHOAL_CONFIG_TABLE(shm, 2, entries,
 * sanitize). The table lands in the shoal_config_tables section, found by
 * config.c. libshoal.a links every table with config.o (Makefile), since
 * nothing else references them. */
#define SHOAL_CONFIG_TABLE(comp, ord, ents, san)                                        \
    __attribute__((used, section("shoal_config_tables"), aligned(sizeof(void *))))      \
    const shoal_config_table_t shoal_config_table_##comp = {                            \
        .component = #comp, .order = (ord), .entries = (ents),                          \
        .count = sizeof(ents) / sizeof((ents)[0]), .sanitize = (san)}

/* Rewrites the text of an NCCL variable as the text of its shoal setting
 * (out, SHOAL_CONFIG_STR_MAX bytes). note receives what the reader should
 * know about the rewriting ("" when nothing), for the INFO line that reports
 * it. Returns 0, or -1 for text NCCL itself would not accept. */
typedef int (*shoal_config_translate_fn_t)(const char *nccl_text, char *out, char *note,
                                           size_t note_cap);

typedef struct {
    const char *nccl_name;
    shoal_config_translate_fn_t translate;
} shoal_config_alias_t;

/* Defines the translator of an NCCL alias (the NCCL door's files do):
 * SHOAL_CONFIG_ALIAS(NCCL_ALGO, fn). An alias without a translator linked
 * is not honoured. */
#define SHOAL_CONFIG_ALIAS(name, fn)                                                    \
    __attribute__((used, section("shoal_config_aliases"), aligned(sizeof(void *))))     \
    const shoal_config_alias_t shoal_config_alias_##name = {#name, (fn)}

/* Typed field parsers for the tables. */
int shoal_config_field_size(const char *text, void *field);    /* size_t: 8k, 1M */
int shoal_config_field_time(const char *text, void *field);    /* uint64_t ns: 10ms */
int shoal_config_field_bool(const char *text, void *field);    /* int: y/n */
/* int: "auto" SHOAL_AUTO, or a y/n word: SHOAL_ON, SHOAL_OFF */
int shoal_config_field_auto(const char *text, void *field);
int shoal_config_field_int(const char *text, void *field);     /* int */
int shoal_config_field_string(const char *text, void *field);  /* char[STR_MAX] */
/* A string that shoal_config_print never shows. */
int shoal_config_field_secret(const char *text, void *field);
/* int: none, error, warn, info, debug, trace */
int shoal_config_field_level(const char *text, void *field);
/* unsigned mask: ALL, or a list of subsystems; "^A,B" all but A and B */
int shoal_config_field_subsys(const char *text, void *field);
/* char[STR_MAX]: "host:port", "[v6]:port" with a port in 1..65535, or "" */
int shoal_config_field_hostport(const char *text, void *field);

/* ---- access ------------------------------------------------------------- */

/* The settings, parsed on first use. Thread-safe. Never NULL. */
const shoal_config_t *shoal_config_get(void);

/* Parse the environment again (tests change settings between cases).
 * Not thread-safe: no other shoal call may run concurrently. */
void shoal_config_reload(void);
/* How many times the settings were parsed: what was derived from them
 * holds while this stays the same. Read inline: the MPI door's calls
 * passed to MPI look at it on every call. */
extern atomic_uint shoal_config_loads;
static inline unsigned shoal_config_generation(void)
{
    return atomic_load_explicit(&shoal_config_loads, memory_order_acquire);
}

/* Honour the NCCL_* aliases of the settings from now on (NCCL_DEBUG for
 * SHOAL_DEBUG, NCCL_SOCKET_IFNAME for SHOAL_SOCKET_IFNAME...) through the
 * translators linked (src/nccl/nccl_config.c), then parse the environment
 * again. A SHOAL_* variable that is set still wins over its
 * alias. Called by the NCCL door once, before it creates any communicator;
 * it must not run concurrently with other shoal calls, as for
 * shoal_config_reload. */
void shoal_config_use_nccl_env(void);

/* A launcher variable that is not a shoal setting (RANK, OMPI_COMM_WORLD_RANK,
 * PMIX_NAMESPACE...): its value or NULL. */
const char *shoal_config_env(const char *name);

/* Print every setting: name, default, current value, documentation. */
void shoal_config_print(FILE *out);

/* The settings one by one, in print order (i < shoal_config_count()), and
 * by name: a SHOAL_ name, or, once the NCCL aliases are on, an NCCL
 * alias's (NULL: none). For the NCCL door's parameter API. */
size_t shoal_config_count(void);
const shoal_config_entry_t *shoal_config_at(size_t i);
const shoal_config_entry_t *shoal_config_find(const char *name);
/* The text e took at the settings' last load, into buf
 * (SHOAL_CONFIG_STR_MAX bytes): its variable's, its alias's as translated,
 * or the default where neither was set or the text did not parse; a
 * secret's is "(set, not shown)" or its default. A component's check
 * after the parse may still correct the value (SHOAL_CHUNK_SIZE to 0 when
 * not a power of two): the field holds that, the text is as given.
 * Returns buf. */
const char *shoal_config_text(const shoal_config_entry_t *e, char *buf);

/* Pipeline piece of a communicator: SHOAL_CHUNK_SIZE when set, else
 * SHOAL_CHUNK_LOCAL when shared memory joins every rank and
 * SHOAL_CHUNK_NET when some piece crosses a network (networked: the
 * communicator spans hosts, or shared memory is off). A network pays a
 * system call and a round of its window per piece, so it wants them larger
 * than memory does, whose pieces should stay in the caches. */
#define SHOAL_CHUNK_LOCAL ((size_t)128 << 10)
#define SHOAL_CHUNK_NET ((size_t)512 << 10)
size_t shoal_config_chunk(const shoal_config_t *c, int networked);

/* Output bytes per rank from which an operation streams its output past the
 * caches: SHOAL_STREAM_MIN when set, else half the last-level cache shared
 * by the nlocal ranks of this host (every rank's input and output compete
 * for it; from there on the lines written are gone before anyone reads
 * them, and a plain store's read of each line only costs bandwidth). */
size_t shoal_config_stream_min(const shoal_config_t *c, int nlocal);

/* Typed parsers, exposed for tests. Return 0 on success, -1 on bad text. */
int shoal_config_parse_size(const char *text, size_t *out_p);
int shoal_config_parse_time_ns(const char *text, uint64_t *out_p);
int shoal_config_parse_bool(const char *text, int *out_p);

#endif
