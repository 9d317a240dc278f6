/* The shared-memory transport's settings ([shm], shoal_config_get()->shm). */
#include "base/config.h"

#include <stddef.h>
#include <stdint.h>
#include <strings.h>

static int shm_field_spin(const char *text, void *field)
{
    if (!strcasecmp(text, "auto")) {
        *(uint64_t *)field = SHOAL_SHM_SPIN_AUTO;
        return 0;
    }
    return shoal_config_field_time(text, field);
}

static const shoal_config_entry_t shm_entries[] = {
    {.name = "SHOAL_SHM_ENABLE", .def = "y",
     .doc = "use shared memory between ranks of one host (n forces tcp)",
     .parse = shoal_config_field_bool, .offset = SHOAL_CONFIG_FIELD(shm.enable)},
    {.name = "SHOAL_SHM_NSLOTS", .def = "0",
     .doc = "slots of one piece each in a shared-memory FIFO (0: as many as fill 1 MiB "
            "with the piece the probe at init chose, else 8)",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(shm.nslots)},
    {.name = "SHOAL_SHM_SPIN", .def = "auto",
     .doc = "how long a rank waiting on local peers polls (yielding the CPU now and "
            "then) before it sleeps until one of them rings it (auto: what one sleep and "
            "wake-up cost in the probe at init)",
     .parse = shm_field_spin, .offset = SHOAL_CONFIG_FIELD(shm.spin_ns)},
    {.name = "SHOAL_CMA", .def = "auto",
     .doc = "cross-memory attach (process_vm_writev/readv) for private host buffers of the "
            "put collectives: auto = from the size where the probe at init measured one such "
            "copy faster than the two of the slots; on = at every size; off = never. Needs "
            "ptrace permission between the ranks (same user and kernel.yama.ptrace_scope 0, "
            "or CAP_SYS_PTRACE); without it every rank uses slots",
     .parse = shoal_config_field_auto, .offset = SHOAL_CONFIG_FIELD(shm.cma)},
    {.name = "SHOAL_TEST_CMA_FAIL", .def = "-1",
     .doc = "tests only: the rank whose cross-memory probe fails as if ptrace were denied",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(shm.test_cma_fail)},
    {.name = "SHOAL_TEST_SHM_PIECE", .def = "0",
     .doc = "tests only: the piece the shared-memory probe chooses, whatever it measured "
            "(64k, 128k, 256k or 512k; 0: what it measured)",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(shm.test_piece)},
    {.name = "SHOAL_TEST_SHM_PROBE_FAIL", .def = "-1",
     .doc = "tests only: the rank whose part of the shared-memory probe fails",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(shm.test_probe_fail)},
};

/* A FIFO needs two slots: one being written while the other is read. */
static void shm_sanitize(shoal_config_t *c)
{
    if (c->shm.nslots == 1)
        c->shm.nslots = 2;
}

SHOAL_CONFIG_TABLE(shm, 2, shm_entries, shm_sanitize);
