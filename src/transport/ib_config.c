/* The RDMA verbs transport's settings ([ib], shoal_config_get()->ib). */
#include "base/config.h"

#include <stddef.h>

static const shoal_config_entry_t ib_entries[] = {
    {.name = "SHOAL_IB_ENABLE", .def = "y",
     .doc = "use RDMA verbs between ranks of different hosts whose ports share a link layer "
            "(n: tcp there)",
     .parse = shoal_config_field_bool, .offset = SHOAL_CONFIG_FIELD(ib.enable),
     .nccl_name = "NCCL_IB_DISABLE"},
    {.name = "SHOAL_IB_HCA", .def = "",
     .doc = "RDMA devices and ports to use: name prefixes with an optional :port "
            "(mlx5_0:1,mlx5_1), = for exact names, ^ excludes (^mlx5_2); default: every "
            "active port",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(ib.hca),
     .nccl_name = "NCCL_IB_HCA"},
    {.name = "SHOAL_IB_GID_INDEX", .def = "-1",
     .doc = "GID table entry of every RoCE port; -1: the RoCE v2 entry of an IPv4 address "
            "(else the first RoCE v2 one), read from the device and sysfs",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(ib.gid_index),
     .nccl_name = "NCCL_IB_GID_INDEX"},
    {.name = "SHOAL_IB_QPS_PER_CONN", .def = "1",
     .doc = "queue pairs per peer; messages take them in turn, each with its share of the "
            "slots (1..8)",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(ib.qps),
     .nccl_name = "NCCL_IB_QPS_PER_CONNECTION"},
    {.name = "SHOAL_IB_NSLOTS", .def = "8",
     .doc = "slots of one piece each that a peer may write into ahead of this rank's "
            "reading, per direction (at least 2 per queue pair)",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(ib.nslots)},
    {.name = "SHOAL_TEST_IB_LIB", .def = "libibverbs.so.1",
     .doc = "tests only: the verbs library ib loads (a name that is not there stands for "
            "a machine without rdma-core)",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(ib.test_lib)},
};

static void ib_sanitize(shoal_config_t *c)
{
    if (c->ib.gid_index < -1)
        c->ib.gid_index = -1;
    if (c->ib.qps < 1)
        c->ib.qps = 1;
    if (c->ib.qps > SHOAL_IB_QPS_MAX)
        c->ib.qps = SHOAL_IB_QPS_MAX;
    if (c->ib.nslots < 2 * (size_t)c->ib.qps)
        c->ib.nslots = 2 * (size_t)c->ib.qps;
}

SHOAL_CONFIG_TABLE(ib, 7, ib_entries, ib_sanitize);
