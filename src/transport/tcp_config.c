/* The tcp transport's settings ([tcp], shoal_config_get()->tcp). */
#include "base/config.h"
#include "base/log.h"

#include <stddef.h>
#include <string.h>

static int parse_connect(const char *text, void *field)
{
    if (!strcmp(text, "lazy"))
        *(int *)field = 1;
    else if (!strcmp(text, "eager"))
        *(int *)field = 0;
    else
        return -1;
    return 0;
}

/* NCCL_IB_HCA will alias the device list of the ibverbs transport's table. */
static const shoal_config_entry_t tcp_entries[] = {
    {.name = "SHOAL_TCP_ENABLE", .def = "y",
     .doc = "use tcp between ranks that shared memory does not join",
     .parse = shoal_config_field_bool, .offset = SHOAL_CONFIG_FIELD(tcp.enable)},
    {.name = "SHOAL_TCP_NSOCKS", .def = "2",
     .doc = "sockets per peer; each message is striped across them",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(tcp.nsocks)},
    {.name = "SHOAL_TCP_NSLOTS", .def = "2",
     .doc = "slots of SHOAL_CHUNK_SIZE bytes buffered per peer and direction",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(tcp.nslots)},
    {.name = "SHOAL_TCP_CONNECT", .def = "lazy",
     .doc = "lazy: connect a peer the first time an operation moves data with it (the "
            "listener stays open while the communicator lives); eager: every peer at init",
     .parse = parse_connect, .offset = SHOAL_CONFIG_FIELD(tcp.lazy)},
    {.name = "SHOAL_TCP_MEM", .def = "64M",
     .doc = "slot memory per rank: the k-th peer connected gets SHOAL_TCP_NSLOTS slots per "
            "direction while k x 2 x that x SHOAL_CHUNK_SIZE fits in it, fewer beyond, "
            "and at least 1 (0: no limit)",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(tcp.mem)},
    {.name = "SHOAL_TEST_TCP_DROP", .def = "0",
     .doc = "for tests only: the first this many handshakes of lazy connections that a "
            "communicator accepts are dropped, midway as if they had taken too long, or "
            "once whole when the acceptor first sees them whole",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(tcp.test_drop)},
    {.name = "SHOAL_TEST_TCP_DROP_LAST", .def = "0",
     .doc = "for tests only: of the first this many lazy connections that a communicator "
            "accepts, the last socket is closed once its handshake is through, before the "
            "set is complete",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(tcp.test_drop_last)},
};

/* Two slots per direction keep one in flight while the next fills; the
 * socket count bounds the descriptors a peer costs. */
static void tcp_sanitize(shoal_config_t *c)
{
    if (c->tcp.nslots < 2)
        c->tcp.nslots = 2;
    if (c->tcp.nsocks < 1 || c->tcp.nsocks > 16) {
        shoal_warn(INIT, "SHOAL_TCP_NSOCKS=%d out of 1..16; using 2", c->tcp.nsocks);
        c->tcp.nsocks = 2;
    }
}

SHOAL_CONFIG_TABLE(tcp, 3, tcp_entries, tcp_sanitize);
