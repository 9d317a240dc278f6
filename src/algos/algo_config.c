/* The algorithms' settings: pipeline pieces, copies, streaming stores, forced
 * algorithms, the cost model's overrides and who runs non-blocking
 * operations ([algo], shoal_config_get()->algo). */
#include "base/config.h"
#include "base/copy.h"
#include "base/log.h"

#include <stddef.h>
#include <string.h>

static int parse_progress(const char *text, void *field)
{
    if (!strcmp(text, "thread"))
        *(int *)field = 1;
    else if (!strcmp(text, "caller"))
        *(int *)field = 0;
    else
        return -1;
    return 0;
}

static int parse_copy(const char *text, void *field)
{
    for (int k = 0; k < SHOAL_COPY_NKINDS; k++) {
        if (!strcmp(text, shoal_copy_name((shoal_copy_kind_t)k))) {
            *(int *)field = k;
            return 0;
        }
    }
    return -1;
}

static const shoal_config_entry_t algo_entries[] = {
    {.name = "SHOAL_CHUNK_SIZE", .def = "0",
     .doc = "bytes moved per pipeline step and per transport slot (0: 128k when shared "
            "memory joins every rank, 512k when the communicator spans hosts)",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(algo.chunk_size)},
    {.name = "SHOAL_STREAM_MIN", .def = "0",
     .doc = "output bytes per rank from which an operation writes its output with "
            "streaming stores, past the caches (0: half the last-level cache shared "
            "among this host's ranks)",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(algo.stream_min)},
    {.name = "SHOAL_COPY", .def = "auto",
     .doc = "how the collectives copy payload: auto (each communicator times both kinds "
            "on its first copies and keeps the faster), libc (memcpy) or vector (plain "
            "vector loads and stores)",
     .parse = parse_copy, .offset = SHOAL_CONFIG_FIELD(algo.copy)},
    {.name = "SHOAL_ALGO", .def = "auto",
     .doc = "algorithm: auto (cost model), a name for every collective that has it, or "
            "coll:name,... (shoal_info -a lists them)",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(algo.algo),
     .nccl_name = "NCCL_ALGO"},
    {.name = "SHOAL_ALGO_LATENCY", .def = "0",
     .doc = "cost model: latency of the slowest link (0 = the transports' figure)",
     .parse = shoal_config_field_time, .offset = SHOAL_CONFIG_FIELD(algo.latency_ns)},
    {.name = "SHOAL_ALGO_BANDWIDTH", .def = "0",
     .doc = "cost model: bytes/s of the slowest link (0 = the transports' figure)",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(algo.bandwidth)},
    {.name = "SHOAL_PROGRESS", .def = "thread",
     .doc = "who runs non-blocking operations: thread (a progress thread per communicator) or "
            "caller (shoal_test/shoal_wait)",
     .parse = parse_progress, .offset = SHOAL_CONFIG_FIELD(algo.progress_thread)},
    {.name = "SHOAL_HIER_PIPE", .def = "0",
     .doc = "pipeline pieces of the hierarchical all-reduce, reduce-scatter, all-gather "
            "and broadcast, 1..16 (0: the number the cost model finds fastest; 1: their "
            "phases one after the other)",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(algo.hier_pipe)},
};

/* Pieces are whole pages and a power of two, so that every schedule's
 * block arithmetic stays exact. */
static void algo_sanitize(shoal_config_t *c)
{
    size_t chunk = c->algo.chunk_size;
    if (chunk != 0 && (chunk < 4096 || (chunk & (chunk - 1)))) {
        shoal_warn(INIT, "SHOAL_CHUNK_SIZE=%zu must be 0 or a power of two >= 4096; "
                   "using 0 (chosen per communicator)", chunk);
        c->algo.chunk_size = 0;
    }
    if (c->algo.hier_pipe < 0 || c->algo.hier_pipe > 16) {
        shoal_warn(INIT, "SHOAL_HIER_PIPE=%d must be 0..16; using 0 (the cost model's)",
                   c->algo.hier_pipe);
        c->algo.hier_pipe = 0;
    }
}

SHOAL_CONFIG_TABLE(algo, 4, algo_entries, algo_sanitize);
