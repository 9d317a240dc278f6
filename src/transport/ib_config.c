/* The RDMA verbs transport's settings ([ib], shoal_config_get()->ib). */
#include "base/config.h"

#include <stddef.h>

static const shoal_config_entry_t ib_entries[] = {
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
};

static void ib_sanitize(shoal_config_t *c)
{
    if (c->ib.gid_index < -1)
        c->ib.gid_index = -1;
}

SHOAL_CONFIG_TABLE(ib, 7, ib_entries, ib_sanitize);
