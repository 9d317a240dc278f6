/* Topology settings ([topo], shoal_config_get()->topo). */
#include "base/config.h"

#include <stddef.h>

/* Stand-ins for the machine, so that topology decisions can be seen and
 * tested for hosts one does not have. */
static const shoal_config_entry_t topo_entries[] = {
    {.name = "SHOAL_TOPO_FILE", .def = "",
     .doc = "read the host topology from this hwloc XML file instead of this machine "
            "(shoal_info -T shows it)",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(topo.file)},
    {.name = "SHOAL_TOPO_SYNTHETIC", .def = "",
     .doc = "host topology from an hwloc synthetic description (\"pack:2 numa:2 core:4 pu:2\"), "
            "instead of this machine",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(topo.synthetic)},
    {.name = "SHOAL_TOPO_CPUS", .def = "",
     .doc = "with SHOAL_TOPO_FILE or SHOAL_TOPO_SYNTHETIC: the PUs (OS indexes, \"0-3,8\") this "
            "rank counts as its binding there; empty: the whole stand-in machine",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(topo.cpus)},
    {.name = "SHOAL_TOPO_LINKS", .def = "",
     .doc = "cost model: latency and bytes/s per link class, \"tcp:50us:1G,shm:1us:8G\" "
            "(classes as shoal_info -T names them); unnamed classes keep their defaults",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(topo.links)},
    {.name = "SHOAL_TOPO_PROBE", .def = "n",
     .doc = "measure the latency and bandwidth of each link class at init (a few ms) instead "
            "of the defaults; SHOAL_TOPO_LINKS still wins",
     .parse = shoal_config_field_bool, .offset = SHOAL_CONFIG_FIELD(topo.probe)},
    {.name = "SHOAL_CPU_BIND", .def = "auto",
     .doc = "bind each rank that nothing bound to one CPU at init, spreading a host's ranks "
            "over its cores in turn, until the communicator that bound it is destroyed: "
            "auto (where the host's ranks outnumber its CPUs), on, off",
     .parse = shoal_config_field_auto, .offset = SHOAL_CONFIG_FIELD(topo.bind)},
};

static void topo_sanitize(shoal_config_t *c)
{
}

SHOAL_CONFIG_TABLE(topo, 5, topo_entries, topo_sanitize);
