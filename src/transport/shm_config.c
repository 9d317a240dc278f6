/* The shared-memory transport's settings ([shm], shoal_config_get()->shm). */
#include "base/config.h"

#include <stddef.h>

static const shoal_config_entry_t shm_entries[] = {
    {.name = "SHOAL_SHM_ENABLE", .def = "y",
     .doc = "use shared memory between ranks of one host (n forces tcp)",
     .parse = shoal_config_field_bool, .offset = SHOAL_CONFIG_FIELD(shm.enable)},
    {.name = "SHOAL_SHM_NSLOTS", .def = "8",
     .doc = "slots of SHOAL_CHUNK_SIZE bytes in each shared-memory FIFO",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(shm.nslots)},
    {.name = "SHOAL_SHM_SPIN", .def = "100us",
     .doc = "how long a rank waiting on local peers polls (yielding the CPU now and "
            "then) before it sleeps until one of them rings it",
     .parse = shoal_config_field_time, .offset = SHOAL_CONFIG_FIELD(shm.spin_ns)},
};

/* A FIFO needs two slots: one being written while the other is read. */
static void shm_sanitize(shoal_config_t *c)
{
    if (c->shm.nslots < 2)
        c->shm.nslots = 2;
}

SHOAL_CONFIG_TABLE(shm, 2, shm_entries, shm_sanitize);
