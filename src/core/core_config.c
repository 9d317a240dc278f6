/* The settings of the communicator and its bootstrap: logging, deadlines,
 * failure detection, host identity ([core]) and how ranks find each other
 * ([boot]). config.c parses them; shoal_config_get()->core and ->boot read
 * them. */
#include "base/config.h"
#include "base/log.h"

#include <stddef.h>
#include <strings.h>

static const shoal_config_entry_t core_entries[] = {
    {.name = "SHOAL_DEBUG", .def = "warn",
     .doc = "log level: none, error, warn, info, debug, trace",
     .parse = shoal_config_field_level, .offset = SHOAL_CONFIG_FIELD(core.log_level),
     .nccl_name = "NCCL_DEBUG"},
    {.name = "SHOAL_DEBUG_SUBSYS", .def = "ALL",
     .doc = "subsystems to log: ALL or a list of INIT,TOPO,BOOT,SHM,TCP,IBV,CUDA,ALGO,COMP,MEM (^ excludes)",
     .parse = shoal_config_field_subsys, .offset = SHOAL_CONFIG_FIELD(core.log_subsys),
     .nccl_name = "NCCL_DEBUG_SUBSYS"},
    {.name = "SHOAL_DEBUG_FILE", .def = "",
     .doc = "log to this file instead of stderr; %h is the host name, %p the pid",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(core.log_file),
     .nccl_name = "NCCL_DEBUG_FILE"},
    {.name = "SHOAL_TIMEOUT", .def = "300s",
     .doc = "deadline of every blocking wait (init, collectives, teardown)",
     .parse = shoal_config_field_time, .offset = SHOAL_CONFIG_FIELD(core.timeout_ns)},
    {.name = "SHOAL_HEARTBEAT", .def = "1s",
     .doc = "how often an idle communicator looks for dead or failed peers, and the TCP "
            "keepalive interval of its connections (a vanished host is noticed after 5)",
     .parse = shoal_config_field_time, .offset = SHOAL_CONFIG_FIELD(core.heartbeat_ns)},
    {.name = "SHOAL_FLIGHT_DEPTH", .def = "64",
     .doc = "operations each communicator remembers and logs on a failure (0: off)",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(core.flight_depth)},
    {.name = "SHOAL_HOST_ID", .def = "",
     .doc = "identity of this host for topology; default hostname + boot id",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(core.host_id)},
    {.name = "SHOAL_TEST_WIREUP_DELAY", .def = "0",
     .doc = "for tests only: at init every rank but 0 waits this long before it joins the "
            "bootstrap, and rank r waits r times this long before it connects its transports, "
            "so that the listeners of init stay open and served while a test attacks them",
     .parse = shoal_config_field_time, .offset = SHOAL_CONFIG_FIELD(core.test_wireup_delay_ns)},
    {.name = "SHOAL_TEST_EXEC_NAP", .def = "100ms",
     .doc = "for tests only: the longest a thread waiting for an operation sleeps before it "
            "looks again; a long one turns a wake-up that no path sends into a stall",
     .parse = shoal_config_field_time, .offset = SHOAL_CONFIG_FIELD(core.test_exec_nap_ns)},
};

/* A finite deadline and a heartbeat TCP keepalive can express. */
static void core_sanitize(shoal_config_t *c)
{
    if (c->core.timeout_ns == 0)
        c->core.timeout_ns = 300ull * 1000000000ull;
    if (c->core.heartbeat_ns < 1000000000ull) {
        shoal_warn(INIT, "SHOAL_HEARTBEAT below 1s; using 1s (TCP keepalive counts seconds)");
        c->core.heartbeat_ns = 1000000000ull;
    }
    if (c->core.flight_depth < 0)
        c->core.flight_depth = 0;
    if (c->core.test_exec_nap_ns == 0)
        c->core.test_exec_nap_ns = 100000000ull;
}

static void boot_sanitize(shoal_config_t *c)
{
}

/* SHOAL_AUTH: strict, warn or off. */
static int boot_field_auth(const char *text, void *field)
{
    static const char *const names[] = {"strict", "warn", "off"};
    static const int values[] = {SHOAL_AUTH_STRICT, SHOAL_AUTH_WARN, SHOAL_AUTH_OFF};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (!strcasecmp(text, names[i])) {
            *(int *)field = values[i];
            return 0;
        }
    }
    return -1;
}

SHOAL_CONFIG_TABLE(core, 0, core_entries, core_sanitize);

static const shoal_config_entry_t boot_entries[] = {
    {.name = "SHOAL_SOCKET_IFNAME", .def = "",
     .doc = "network interfaces for sockets: name prefixes (eth,ib), = for exact names (=eth0), "
            "^ excludes (^docker,lo); default: first non-loopback, else loopback",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(boot.socket_ifname),
     .nccl_name = "NCCL_SOCKET_IFNAME"},
    {.name = "SHOAL_ADDR", .def = "",
     .doc = "rendezvous host[:port] of rank 0 for shoal_comm_init_env (else MASTER_ADDR)",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(boot.addr)},
    {.name = "SHOAL_COMM_ID", .def = "",
     .doc = "host:port that a unique id names instead of a fresh listener: rank 0 binds it, "
            "so every rank can build the id locally",
     .parse = shoal_config_field_hostport, .offset = SHOAL_CONFIG_FIELD(boot.comm_id),
     .nccl_name = "NCCL_COMM_ID"},
    {.name = "SHOAL_PORT", .def = "0",
     .doc = "rendezvous port for shoal_comm_init_env; 0 = MASTER_PORT+1, else 29501",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(boot.port)},
    {.name = "SHOAL_SECRET", .def = "",
     .doc = "passphrase shared by the ranks, for shoal_comm_init_env without PMIx and for "
            "NCCL_COMM_ID ids (prefer SHOAL_SECRET_FILE: the environment is less private)",
     .parse = shoal_config_field_secret, .offset = SHOAL_CONFIG_FIELD(boot.secret)},
    {.name = "SHOAL_SECRET_FILE", .def = "",
     .doc = "file holding that passphrase; refused unless only its owner may read or write it",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(boot.secret_file)},
    {.name = "SHOAL_AUTH", .def = "strict",
     .doc = "with no SHOAL_SECRET(_FILE) and no PMIx: strict = init fails; warn = use a secret "
            "derived from the job's identity, which anyone who sees the launch variables can "
            "compute, and warn on rank 0; off = the same silently (single-user test machines)",
     .parse = boot_field_auth, .offset = SHOAL_CONFIG_FIELD(boot.auth)},
    {.name = "SHOAL_BOOTSTRAP_MAC", .def = "n",
     .doc = "an HMAC-SHA256 on every bootstrap control message, keyed per connection from its "
            "handshake: a message changed in transit fails with SHOAL_ERR_AUTH",
     .parse = shoal_config_field_bool, .offset = SHOAL_CONFIG_FIELD(boot.mac)},
    {.name = "SHOAL_RANK", .def = "-1", .doc = "this rank, for shoal_comm_init_env",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(boot.rank)},
    {.name = "SHOAL_SIZE", .def = "-1", .doc = "number of ranks, for shoal_comm_init_env",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(boot.size)},
    {.name = "SHOAL_LOCAL_RANK", .def = "-1", .doc = "rank on this host, for shoal_comm_init_env",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(boot.local_rank)},
};

SHOAL_CONFIG_TABLE(boot, 1, boot_entries, boot_sanitize);
