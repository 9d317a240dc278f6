/* The settings engine and every component's table. This file alone calls
 * getenv: everything else asks shoal_config_get() or shoal_config_env(). */
#include "config.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef int (*shoal_config_parse_fn_t)(const char *text, void *field);

typedef struct {
    const char *name;       /* environment variable */
    const char *def;        /* default, as text */
    const char *doc;        /* one line */
    shoal_config_parse_fn_t parse;
    size_t offset;          /* of the field in shoal_config_t */
} shoal_config_entry_t;

typedef struct {
    const char *component;
    const shoal_config_entry_t *entries;
    size_t count;
} shoal_config_table_t;

int shoal_config_parse_size(const char *text, size_t *out_p)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || errno || !isdigit((unsigned char)text[0]))
        return -1;
    unsigned shift = 0;
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    default: return -1;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0' || (shift && v > (ULLONG_MAX >> shift)))
        return -1;
    *out_p = (size_t)(v << shift);
    return 0;
}

int shoal_config_parse_time_ns(const char *text, uint64_t *out_p)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || !(v >= 0))
        return -1;
    double scale;
    if (*end == '\0' || !strcmp(end, "s"))
        scale = 1e9;
    else if (!strcmp(end, "ms"))
        scale = 1e6;
    else if (!strcmp(end, "us"))
        scale = 1e3;
    else if (!strcmp(end, "ns"))
        scale = 1;
    else if (!strcmp(end, "m") || !strcmp(end, "min"))
        scale = 60e9;
    else
        return -1;
    if (v * scale > 1e18)
        return -1;
    *out_p = (uint64_t)(v * scale);
    return 0;
}

int shoal_config_parse_bool(const char *text, int *out_p)
{
    static const char *const yes[] = {"y", "yes", "1", "true", "on"};
    static const char *const no[] = {"n", "no", "0", "false", "off"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (!strcasecmp(text, yes[i])) {
            *out_p = 1;
            return 0;
        }
        if (!strcasecmp(text, no[i])) {
            *out_p = 0;
            return 0;
        }
    }
    return -1;
}

static int parse_size(const char *text, void *field)
{
    return shoal_config_parse_size(text, field);
}

static int parse_time(const char *text, void *field)
{
    return shoal_config_parse_time_ns(text, field);
}

static int parse_bool(const char *text, void *field)
{
    return shoal_config_parse_bool(text, field);
}

static int parse_int(const char *text, void *field)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < INT_MIN || v > INT_MAX)
        return -1;
    *(int *)field = (int)v;
    return 0;
}

static int parse_string(const char *text, void *field)
{
    if (strlen(text) >= SHOAL_CONFIG_STR_MAX)
        return -1;
    strcpy(field, text);
    return 0;
}

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

/* A string that shoal_config_print never shows. */
static int parse_secret(const char *text, void *field)
{
    return parse_string(text, field);
}

static int parse_level(const char *text, void *field)
{
    static const char *const names[] = {"none", "error", "warn", "info",
                                        "debug", "trace"};
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++) {
        if (!strcasecmp(text, names[i]) || (i == SHOAL_LOG_WARN && !strcasecmp(text, "warning"))) {
            *(int *)field = i;
            return 0;
        }
    }
    return -1;
}

/* "ALL", or a comma list of subsystem names; "^A,B" means all but A and B. */
static int parse_subsys(const char *text, void *field)
{
    static const char *const names[] = {
#define SHOAL_SUBSYS_NAME_(name) #name,
        SHOAL_SUBSYS_LIST(SHOAL_SUBSYS_NAME_)
#undef SHOAL_SUBSYS_NAME_
    };
    int invert = text[0] == '^';
    unsigned mask = 0;
    char buf[SHOAL_CONFIG_STR_MAX];
    if (strlen(text) >= sizeof(buf))
        return -1;
    strcpy(buf, text + invert);
    for (char *save, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (!strcasecmp(tok, "ALL")) {
            mask = SHOAL_SUBSYS_ALL;
            continue;
        }
        int i;
        for (i = 0; i < SHOAL_SUBSYS_COUNT; i++)
            if (!strcasecmp(tok, names[i]))
                break;
        if (i == SHOAL_SUBSYS_COUNT)
            return -1;
        mask |= 1u << i;
    }
    *(unsigned *)field = invert ? SHOAL_SUBSYS_ALL & ~mask : mask;
    return 0;
}

#define FIELD(member) offsetof(shoal_config_t, member)

static const shoal_config_entry_t core_entries[] = {
    {"SHOAL_DEBUG", "warn", "log level: none, error, warn, info, debug, trace",
     parse_level, FIELD(core.log_level)},
    {"SHOAL_DEBUG_SUBSYS", "ALL",
     "subsystems to log: ALL or a list of INIT,TOPO,BOOT,SHM,TCP,IBV,CUDA,ALGO,COMP,MEM (^ excludes)",
     parse_subsys, FIELD(core.log_subsys)},
    {"SHOAL_DEBUG_FILE", "", "log to this file instead of stderr; %h is the host name, %p the pid",
     parse_string, FIELD(core.log_file)},
    {"SHOAL_TIMEOUT", "300s", "deadline of every blocking wait (init, collectives, teardown)",
     parse_time, FIELD(core.timeout_ns)},
    {"SHOAL_HOST_ID", "", "identity of this host for topology; default hostname + boot id",
     parse_string, FIELD(core.host_id)},
};

static const shoal_config_entry_t boot_entries[] = {
    {"SHOAL_SOCKET_IFNAME", "", "network interface for sockets (prefix match, ^ excludes); default: first non-loopback, else loopback",
     parse_string, FIELD(boot.socket_ifname)},
    {"SHOAL_ADDR", "", "rendezvous host[:port] of rank 0 for shoal_comm_init_env (else MASTER_ADDR)",
     parse_string, FIELD(boot.addr)},
    {"SHOAL_PORT", "0", "rendezvous port for shoal_comm_init_env; 0 = MASTER_PORT+1, else 29501",
     parse_int, FIELD(boot.port)},
    {"SHOAL_SECRET", "", "shared secret for shoal_comm_init_env without PMIx; default derived from the job id",
     parse_secret, FIELD(boot.secret)},
    {"SHOAL_RANK", "-1", "this rank, for shoal_comm_init_env", parse_int, FIELD(boot.rank)},
    {"SHOAL_SIZE", "-1", "number of ranks, for shoal_comm_init_env", parse_int, FIELD(boot.size)},
    {"SHOAL_LOCAL_RANK", "-1", "rank on this host, for shoal_comm_init_env", parse_int,
     FIELD(boot.local_rank)},
};

static const shoal_config_entry_t shm_entries[] = {
    {"SHOAL_SHM_ENABLE", "y", "use shared memory between ranks of one host (n forces tcp)",
     parse_bool, FIELD(shm.enable)},
    {"SHOAL_SHM_NSLOTS", "8", "slots of SHOAL_CHUNK_SIZE bytes in each shared-memory FIFO",
     parse_size, FIELD(shm.nslots)},
};

static const shoal_config_entry_t tcp_entries[] = {
    {"SHOAL_TCP_ENABLE", "y", "use tcp between ranks that shared memory does not join",
     parse_bool, FIELD(tcp.enable)},
    {"SHOAL_TCP_NSOCKS", "2", "sockets per peer; each message is striped across them",
     parse_int, FIELD(tcp.nsocks)},
    {"SHOAL_TCP_NSLOTS", "4", "slots of SHOAL_CHUNK_SIZE bytes buffered per peer and direction",
     parse_size, FIELD(tcp.nslots)},
};

static const shoal_config_entry_t algo_entries[] = {
    {"SHOAL_CHUNK_SIZE", "128k", "bytes moved per pipeline step and per transport slot",
     parse_size, FIELD(algo.chunk_size)},
    {"SHOAL_ALGO", "auto",
     "algorithm: auto (cost model), a name for every collective that has it, or coll:name,... "
     "(shoal_info -a lists them)", parse_string, FIELD(algo.algo)},
    {"SHOAL_ALGO_LATENCY", "0", "cost model: latency of the slowest link (0 = the transports' figure)",
     parse_time, FIELD(algo.latency_ns)},
    {"SHOAL_ALGO_BANDWIDTH", "0", "cost model: bytes/s of the slowest link (0 = the transports' figure)",
     parse_size, FIELD(algo.bandwidth)},
    {"SHOAL_PROGRESS", "thread",
     "who runs non-blocking operations: thread (a progress thread per communicator) or caller "
     "(shoal_test/shoal_wait)", parse_progress, FIELD(algo.progress_thread)},
};

#define TABLE(name, entries) {name, entries, sizeof(entries) / sizeof(entries[0])}

static const shoal_config_table_t tables[] = {
    TABLE("core", core_entries), TABLE("boot", boot_entries),
    TABLE("shm", shm_entries),   TABLE("tcp", tcp_entries),
    TABLE("algo", algo_entries),
};

static shoal_config_t config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;

/* Checks the table's invariants that a parser cannot: called after parsing. */
static void config_sanitize(shoal_config_t *c)
{
    if (c->algo.chunk_size < 4096 || (c->algo.chunk_size & (c->algo.chunk_size - 1))) {
        shoal_warn(INIT, "SHOAL_CHUNK_SIZE=%zu must be a power of two >= 4096; using 128k",
                   c->algo.chunk_size);
        c->algo.chunk_size = 128 << 10;
    }
    if (c->shm.nslots < 2)
        c->shm.nslots = 2;
    if (c->tcp.nslots < 2)
        c->tcp.nslots = 2;
    if (c->tcp.nsocks < 1 || c->tcp.nsocks > 16) {
        shoal_warn(INIT, "SHOAL_TCP_NSOCKS=%d out of 1..16; using 2", c->tcp.nsocks);
        c->tcp.nsocks = 2;
    }
    if (c->core.timeout_ns == 0)
        c->core.timeout_ns = 300ull * 1000000000ull;
}

static void config_load(void)
{
    shoal_config_t c;
    memset(&c, 0, sizeof(c));
    const char *bad[64];
    size_t nbad = 0;
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        for (size_t i = 0; i < tables[t].count; i++) {
            const shoal_config_entry_t *e = &tables[t].entries[i];
            void *field = (char *)&c + e->offset;
            const char *text = getenv(e->name);
            if (text && e->parse(text, field) == 0)
                continue;
            if (text && nbad < 64)
                bad[nbad++] = e->name;
            e->parse(e->def, field);
        }
    }
    shoal_log_setup(c.core.log_level, c.core.log_subsys, c.core.log_file);
    for (size_t i = 0; i < nbad; i++)
        shoal_warn(INIT, "cannot parse %s=\"%s\"; using its default", bad[i], getenv(bad[i]));
    config_sanitize(&c);
    config = c;
}

const shoal_config_t *shoal_config_get(void)
{
    pthread_once(&config_once, config_load);
    return &config;
}

void shoal_config_reload(void)
{
    pthread_once(&config_once, config_load);
    config_load();
}

const char *shoal_config_env(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

void shoal_config_print(FILE *out)
{
    shoal_config_get();
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        fprintf(out, "[%s]\n", tables[t].component);
        for (size_t i = 0; i < tables[t].count; i++) {
            const shoal_config_entry_t *e = &tables[t].entries[i];
            const char *cur = getenv(e->name);
            if (cur && e->parse == parse_secret)
                cur = "(set, not shown)";
            fprintf(out, "  %-22s default=\"%s\" current=\"%s\"\n      %s\n", e->name,
                    e->def, cur ? cur : e->def, e->doc);
        }
    }
}
