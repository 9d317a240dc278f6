/* Settings: one table per component, parsed once from the environment into
 * the typed struct below. This is the only place that reads the environment
 * (config.c). shoal_info -c prints every table. */
#ifndef SHOAL_CONFIG_H
#define SHOAL_CONFIG_H

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
} shoal_core_config_t;

typedef struct {
    char socket_ifname[SHOAL_CONFIG_STR_MAX]; /* SHOAL_SOCKET_IFNAME, "" = auto */
    char addr[SHOAL_CONFIG_STR_MAX];          /* SHOAL_ADDR: rendezvous host[:port] */
    char comm_id[SHOAL_CONFIG_STR_MAX];       /* SHOAL_COMM_ID: host:port a unique id names, "" = unset */
    int port;                                 /* SHOAL_PORT, 0 = MASTER_PORT+1 or 29501 */
    char secret[SHOAL_CONFIG_STR_MAX];        /* SHOAL_SECRET for env init */
    int rank;                                 /* SHOAL_RANK, -1 = unset */
    int size;                                 /* SHOAL_SIZE, -1 = unset */
    int local_rank;                           /* SHOAL_LOCAL_RANK, -1 = unset */
} shoal_boot_config_t;

typedef struct {
    int enable;      /* SHOAL_SHM_ENABLE */
    size_t nslots;   /* SHOAL_SHM_NSLOTS */
    uint64_t spin_ns; /* SHOAL_SHM_SPIN: polling before a wait sleeps */
} shoal_shm_config_t;

typedef struct {
    int enable;      /* SHOAL_TCP_ENABLE */
    int nsocks;      /* SHOAL_TCP_NSOCKS */
    size_t nslots;   /* SHOAL_TCP_NSLOTS */
} shoal_tcp_config_t;

typedef struct {
    size_t stream_min;                  /* SHOAL_STREAM_MIN; 0 = shoal_config_stream_min() */
    size_t chunk_size;                  /* SHOAL_CHUNK_SIZE: bytes per pipeline piece; 0 =
                                           shoal_config_chunk() picks */
    char algo[SHOAL_CONFIG_STR_MAX];    /* SHOAL_ALGO, "auto", a name or coll:name,... */
    uint64_t latency_ns;                /* SHOAL_ALGO_LATENCY, 0 = from the transports */
    size_t bandwidth;                   /* SHOAL_ALGO_BANDWIDTH B/s, 0 = from the transports */
    int progress_thread;                /* SHOAL_PROGRESS: 1 thread, 0 caller */
} shoal_algo_config_t;

typedef struct {
    char file[SHOAL_CONFIG_STR_MAX];      /* SHOAL_TOPO_FILE: hwloc XML, "" = this machine */
    char synthetic[SHOAL_CONFIG_STR_MAX]; /* SHOAL_TOPO_SYNTHETIC: hwloc synthetic description */
    char cpus[SHOAL_CONFIG_STR_MAX];      /* SHOAL_TOPO_CPUS: binding in a stand-in, "" = all */
    char links[SHOAL_CONFIG_STR_MAX];     /* SHOAL_TOPO_LINKS: class:latency:bandwidth,... */
    int probe;                            /* SHOAL_TOPO_PROBE: measure links at init */
} shoal_topo_config_t;

/* Compression of the NCCL door's all-reduces (shoal.h's API takes its
 * options from the caller, not from here). */
typedef struct {
    int kind;         /* SHOAL_COMPRESS: 0 off, or SHOAL_COMPRESS_INT8 */
    size_t min_bytes; /* SHOAL_COMPRESS_MIN: smaller buffers go uncompressed */
} shoal_compress_config_t;

typedef struct {
    shoal_core_config_t core;
    shoal_boot_config_t boot;
    shoal_shm_config_t shm;
    shoal_tcp_config_t tcp;
    shoal_algo_config_t algo;
    shoal_topo_config_t topo;
    shoal_compress_config_t compress;
} shoal_config_t;

/* The settings, parsed on first use. Thread-safe. Never NULL. */
const shoal_config_t *shoal_config_get(void);

/* Parse the environment again (tests change settings between cases).
 * Not thread-safe: no other shoal call may run concurrently. */
void shoal_config_reload(void);
/* How many times the settings were parsed: what was derived from them
 * holds while this stays the same. */
unsigned shoal_config_generation(void);

/* Honour the NCCL_* aliases of the settings from now on (NCCL_DEBUG for
 * SHOAL_DEBUG, NCCL_SOCKET_IFNAME for SHOAL_SOCKET_IFNAME...), then parse the
 * environment again. A SHOAL_* variable that is set still wins over its
 * alias. Called by the NCCL door once, before it creates any communicator;
 * it must not run concurrently with other shoal calls, as for
 * shoal_config_reload. */
void shoal_config_use_nccl_env(void);

/* A launcher variable that is not a shoal setting (RANK, OMPI_COMM_WORLD_RANK,
 * PMIX_NAMESPACE...): its value or NULL. */
const char *shoal_config_env(const char *name);

/* Print every setting: name, default, current value, documentation. */
void shoal_config_print(FILE *out);

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
