/* The settings engine and every component's table. This file alone calls
 * getenv: everything else asks shoal_config_get() or shoal_config_env(). */
#include "config.h"
#include "log.h"

#include "algos/algo.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

typedef int (*shoal_config_parse_fn_t)(const char *text, void *field);

/* Rewrites the text of an NCCL variable as the text of its shoal setting
 * (out, SHOAL_CONFIG_STR_MAX bytes). note receives what the reader should
 * know about the rewriting ("" when nothing), for the INFO line that reports
 * it. Returns 0, or -1 for text NCCL itself would not accept. */
typedef int (*shoal_config_translate_fn_t)(const char *nccl_text, char *out, char *note,
                                           size_t note_cap);

typedef struct {
    const char *name;       /* environment variable */
    const char *def;        /* default, as text */
    const char *doc;        /* one line */
    shoal_config_parse_fn_t parse;
    size_t offset;          /* of the field in shoal_config_t */
    /* The NCCL variable that sets this entry when the NCCL door asked for
     * it (shoal_config_use_nccl_env) and the SHOAL_ one is not set; NULL
     * when none. */
    const char *nccl_name;
    shoal_config_translate_fn_t nccl_translate;
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

/* "off" or "int8": the door's compressions, which need no state of their
 * own (the others keep error feedback per tensor, which only the caller
 * can own). */
static int parse_compress(const char *text, void *field)
{
    if (!strcasecmp(text, "off") || !strcasecmp(text, "none") || !text[0])
        *(int *)field = 0;
    else if (!strcasecmp(text, "int8"))
        *(int *)field = SHOAL_COMPRESS_INT8;
    else
        return -1;
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

static const char *const subsys_names[] = {
#define SHOAL_SUBSYS_NAME_(name) #name,
    SHOAL_SUBSYS_LIST(SHOAL_SUBSYS_NAME_)
#undef SHOAL_SUBSYS_NAME_
};

/* "ALL", or a comma list of subsystem names; "^A,B" means all but A and B. */
static int parse_subsys(const char *text, void *field)
{
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
            if (!strcasecmp(tok, subsys_names[i]))
                break;
        if (i == SHOAL_SUBSYS_COUNT)
            return -1;
        mask |= 1u << i;
    }
    *(unsigned *)field = invert ? SHOAL_SUBSYS_ALL & ~mask : mask;
    return 0;
}

/* "host:port" or "[v6]:port" with a port in 1..65535, or "" (unset). The
 * host is resolved later, by whoever uses the address. */
static int parse_hostport(const char *text, void *field)
{
    if (text[0]) {
        const char *colon = strrchr(text, ':');
        if (!colon || colon == text || !colon[1] || strlen(colon + 1) > 5)
            return -1;
        if (text[0] == '[' && colon[-1] != ']')
            return -1;
        long port = 0;
        for (const char *p = colon + 1; *p; p++) {
            if (!isdigit((unsigned char)*p))
                return -1;
            port = port * 10 + (*p - '0');
        }
        if (port < 1 || port > 65535)
            return -1;
    }
    return parse_string(text, field);
}

/* ---- NCCL aliases --------------------------------------------------------
 * The NCCL door lets programs keep the NCCL_* variables they already set.
 * Each translator below turns NCCL's syntax into the shoal setting's text,
 * which then goes through that setting's own parser, so one place decides
 * what a value means. */

static int nccl_same_text(const char *nccl_text, char *out, char *note, size_t note_cap)
{
    if (strlen(nccl_text) >= SHOAL_CONFIG_STR_MAX)
        return -1;
    strcpy(out, nccl_text);
    return 0;
}

/* NCCL_DEBUG: NCCL's levels onto shoal's. VERSION, NCCL's version line
 * alone, becomes warn, the quietest level that still reports trouble;
 * ABORT becomes error. */
static int nccl_debug(const char *nccl_text, char *out, char *note, size_t note_cap)
{
    static const struct {
        const char *nccl, *shoal;
    } levels[] = {
        {"VERSION", "warn"}, {"WARN", "warn"},   {"INFO", "info"},
        {"TRACE", "trace"},  {"ABORT", "error"},
    };
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        if (!strcasecmp(nccl_text, levels[i].nccl)) {
            strcpy(out, levels[i].shoal);
            return 0;
        }
    }
    return -1;
}

/* NCCL_DEBUG_SUBSYS: a comma list of NCCL's subsystems, "^" excluding them.
 * Each maps onto the shoal subsystems that log the same kind of event;
 * NCCL subsystems with no shoal counterpart (CALL, PROXY, PROFILE, RAS)
 * select nothing. A name NCCL does not know is an error. */
static int nccl_debug_subsys(const char *nccl_text, char *out, char *note, size_t note_cap)
{
    static const struct {
        const char *nccl;
        unsigned mask;
    } subsys[] = {
        {"INIT", SHOAL_SUBSYS(INIT)},
        {"COLL", SHOAL_SUBSYS(ALGO)},
        {"P2P", SHOAL_SUBSYS(ALGO)},
        {"SHM", SHOAL_SUBSYS(SHM)},
        {"NET", SHOAL_SUBSYS(TCP) | SHOAL_SUBSYS(IBV)},
        {"GRAPH", SHOAL_SUBSYS(TOPO)},
        {"TUNING", SHOAL_SUBSYS(ALGO)},
        {"ENV", SHOAL_SUBSYS(INIT)},
        {"ALLOC", SHOAL_SUBSYS(MEM)},
        {"CALL", 0},
        {"PROXY", 0},
        {"NVLS", SHOAL_SUBSYS(CUDA)},
        {"BOOTSTRAP", SHOAL_SUBSYS(BOOT)},
        {"REG", SHOAL_SUBSYS(MEM)},
        {"PROFILE", 0},
        {"RAS", 0},
        {"ALL", SHOAL_SUBSYS_ALL},
    };
    int invert = nccl_text[0] == '^';
    char buf[SHOAL_CONFIG_STR_MAX];
    if (strlen(nccl_text) >= sizeof(buf))
        return -1;
    strcpy(buf, nccl_text + invert);
    unsigned mask = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < sizeof(subsys) / sizeof(subsys[0]); i++)
            if (!strcasecmp(tok, subsys[i].nccl))
                break;
        if (i == sizeof(subsys) / sizeof(subsys[0]))
            return -1;
        mask |= subsys[i].mask;
    }
    /* Ten names of at most four letters and their commas fit in out. */
    size_t n = 0;
    if (invert)
        out[n++] = '^';
    for (int i = 0; i < SHOAL_SUBSYS_COUNT; i++) {
        if (!(mask & (1u << i)))
            continue;
        n += (size_t)snprintf(out + n, SHOAL_CONFIG_STR_MAX - n, "%s%s",
                              n > (size_t)invert ? "," : "", subsys_names[i]);
    }
    out[n] = '\0';
    return 0;
}

/* NCCL's algorithms, as NCCL_ALGO names them; shoal has counterparts of
 * Ring and Tree only. */
enum {
    NCCL_ALGO_TREE = 1u << 0,
    NCCL_ALGO_RING = 1u << 1,
    NCCL_ALGO_COLLNET_DIRECT = 1u << 2,
    NCCL_ALGO_COLLNET_CHAIN = 1u << 3,
    NCCL_ALGO_NVLS = 1u << 4,
    NCCL_ALGO_NVLS_TREE = 1u << 5,
    NCCL_ALGO_PAT = 1u << 6,
    NCCL_ALGO_ALL = (1u << 7) - 1,
    NCCL_ALGO_LACKING = NCCL_ALGO_ALL & ~(NCCL_ALGO_TREE | NCCL_ALGO_RING),
};

static const char *const nccl_algo_names[] = {"Tree", "Ring", "CollNetDirect", "CollNetChain",
                                              "NVLS", "NVLSTree", "PAT"};

/* The collectives NCCL_ALGO governs, in NCCL's names, which are also
 * shoal's (gather, scatter and all-to-all are point-to-point in NCCL). */
static const shoal_coll_kind_t nccl_algo_colls[] = {
    SHOAL_COLL_BROADCAST, SHOAL_COLL_REDUCE, SHOAL_COLL_ALLGATHER,
    SHOAL_COLL_REDUCE_SCATTER, SHOAL_COLL_ALLREDUCE,
};
#define NCCL_ALGO_NCOLLS (sizeof(nccl_algo_colls) / sizeof(nccl_algo_colls[0]))

/* One list of NCCL algorithms, text[0..len): "Ring,Tree" or "^Ring".
 * Sets the algorithms it allows and whether it named them (rather than
 * excluding others). */
static int nccl_algo_list(const char *text, size_t len, unsigned *allowed_p, int *named_p)
{
    int invert = len > 0 && text[0] == '^';
    unsigned mask = 0;
    size_t pos = (size_t)invert;
    if (pos == len)
        return -1;
    while (pos < len) {
        size_t tlen = strcspn(text + pos, ",");
        if (pos + tlen > len)
            tlen = len - pos;
        size_t i;
        for (i = 0; i < sizeof(nccl_algo_names) / sizeof(nccl_algo_names[0]); i++) {
            if (strlen(nccl_algo_names[i]) == tlen &&
                !strncasecmp(text + pos, nccl_algo_names[i], tlen))
                break;
        }
        if (i == sizeof(nccl_algo_names) / sizeof(nccl_algo_names[0]))
            return -1;
        mask |= 1u << i;
        pos += tlen + 1;
    }
    *allowed_p = invert ? NCCL_ALGO_ALL & ~mask : mask;
    *named_p = !invert;
    return 0;
}

/* NCCL_ALGO: "Ring", "ring,tree", "^ring", or per collective
 * "allreduce:tree;broadcast:ring" (the first list may apply to every
 * collective: "ring;allreduce:tree"). For each collective NCCL_ALGO
 * governs, the allowed algorithms that shoal has decide: one of them forces
 * it (Ring is the collective's ring, or chain for broadcast and reduce;
 * Tree is all-reduce's tree); both, or a named NCCL algorithm shoal lacks,
 * leave the choice to the cost model, as does a list that allows none of
 * shoal's. Algorithms shoal lacks that a "^" list leaves allowed without
 * naming them count as unavailable, as they are to NCCL on such hosts. */
static int nccl_algo(const char *nccl_text, char *out, char *note, size_t note_cap)
{
    unsigned allowed[NCCL_ALGO_NCOLLS];
    int named[NCCL_ALGO_NCOLLS];
    int set[NCCL_ALGO_NCOLLS] = {0};
    const char *seg = nccl_text;
    for (int first = 1; *seg; first = 0) {
        size_t len = strcspn(seg, ";");
        const char *colon = memchr(seg, ':', len);
        const char *list = colon ? colon + 1 : seg;
        size_t list_len = len - (size_t)(list - seg);
        unsigned a;
        int nm;
        if ((!colon && !first) || nccl_algo_list(list, list_len, &a, &nm) != 0)
            return -1;
        int matched = 0;
        for (size_t c = 0; c < NCCL_ALGO_NCOLLS; c++) {
            const char *cname = shoal_coll_kind_name(nccl_algo_colls[c]);
            if (colon && !(strlen(cname) == (size_t)(colon - seg) &&
                           !strncasecmp(seg, cname, strlen(cname))))
                continue;
            allowed[c] = a;
            named[c] = nm;
            set[c] = 1;
            matched = 1;
        }
        if (!matched)
            return -1;
        seg += len;
        if (*seg == ';' && !*++seg)
            return -1; /* a list must follow every ";" */
    }
    if (seg == nccl_text)
        return -1;

    /* Each collective forced, or the reason the cost model keeps it. */
    char why[NCCL_ALGO_NCOLLS][96];
    size_t n = 0;
    out[0] = '\0';
    for (size_t c = 0; c < NCCL_ALGO_NCOLLS; c++) {
        why[c][0] = '\0';
        if (!set[c])
            continue;
        shoal_coll_kind_t kind = nccl_algo_colls[c];
        const shoal_algo_ops_t *ring = shoal_algo_find(kind, "ring");
        if (!ring)
            ring = shoal_algo_find(kind, "chain");
        const shoal_algo_ops_t *tree = shoal_algo_find(kind, "tree");
        const shoal_algo_ops_t *pick[2];
        int npick = 0;
        if ((allowed[c] & NCCL_ALGO_RING) && ring)
            pick[npick++] = ring;
        if ((allowed[c] & NCCL_ALGO_TREE) && tree)
            pick[npick++] = tree;
        if (named[c] && (allowed[c] & NCCL_ALGO_LACKING)) {
            size_t w = (size_t)snprintf(why[c], sizeof(why[c]), "shoal has no ");
            const char *sep = "";
            for (size_t i = 2; i < sizeof(nccl_algo_names) / sizeof(nccl_algo_names[0]); i++) {
                if ((allowed[c] & (1u << i)) && w < sizeof(why[c])) {
                    w += (size_t)snprintf(why[c] + w, sizeof(why[c]) - w, "%s%s", sep,
                                          nccl_algo_names[i]);
                    sep = "/";
                }
            }
        } else if (npick == 2) {
            snprintf(why[c], sizeof(why[c]), "ring and tree allowed");
        } else if (npick == 0) {
            snprintf(why[c], sizeof(why[c]), "none of shoal's algorithms allowed");
        } else {
            n += (size_t)snprintf(out + n, SHOAL_CONFIG_STR_MAX - n, "%s%s:%s", n ? "," : "",
                                  shoal_coll_kind_name(kind), pick[0]->name);
        }
    }
    /* One note per reason: "broadcast, reduce: none of shoal's algorithms
     * allowed, the cost model chooses". */
    size_t m = 0;
    note[0] = '\0';
    for (size_t c = 0; c < NCCL_ALGO_NCOLLS; c++) {
        if (!why[c][0])
            continue;
        for (size_t d = c; d < NCCL_ALGO_NCOLLS && m < note_cap; d++) {
            if (d == c || !strcmp(why[d], why[c]))
                m += (size_t)snprintf(note + m, note_cap - m, "%s%s", d == c ? (m ? "; " : "")
                                      : ", ", shoal_coll_kind_name(nccl_algo_colls[d]));
        }
        if (m < note_cap)
            m += (size_t)snprintf(note + m, note_cap - m, ": %s, the cost model chooses",
                                  why[c]);
        for (size_t d = NCCL_ALGO_NCOLLS; d-- > c;) {
            if (!strcmp(why[d], why[c]))
                why[d][0] = '\0';
        }
    }
    if (n == 0)
        strcpy(out, "auto");
    return 0;
}

#define FIELD(member) offsetof(shoal_config_t, member)

static const shoal_config_entry_t core_entries[] = {
    {.name = "SHOAL_DEBUG", .def = "warn",
     .doc = "log level: none, error, warn, info, debug, trace",
     .parse = parse_level, .offset = FIELD(core.log_level),
     .nccl_name = "NCCL_DEBUG", .nccl_translate = nccl_debug},
    {.name = "SHOAL_DEBUG_SUBSYS", .def = "ALL",
     .doc = "subsystems to log: ALL or a list of INIT,TOPO,BOOT,SHM,TCP,IBV,CUDA,ALGO,COMP,MEM (^ excludes)",
     .parse = parse_subsys, .offset = FIELD(core.log_subsys),
     .nccl_name = "NCCL_DEBUG_SUBSYS", .nccl_translate = nccl_debug_subsys},
    {.name = "SHOAL_DEBUG_FILE", .def = "",
     .doc = "log to this file instead of stderr; %h is the host name, %p the pid",
     .parse = parse_string, .offset = FIELD(core.log_file),
     .nccl_name = "NCCL_DEBUG_FILE", .nccl_translate = nccl_same_text},
    {.name = "SHOAL_TIMEOUT", .def = "300s",
     .doc = "deadline of every blocking wait (init, collectives, teardown)",
     .parse = parse_time, .offset = FIELD(core.timeout_ns)},
    {.name = "SHOAL_HEARTBEAT", .def = "1s",
     .doc = "how often an idle communicator looks for dead or failed peers, and the TCP "
            "keepalive interval of its connections (a vanished host is noticed after 5)",
     .parse = parse_time, .offset = FIELD(core.heartbeat_ns)},
    {.name = "SHOAL_FLIGHT_DEPTH", .def = "64",
     .doc = "operations each communicator remembers and logs on a failure (0: off)",
     .parse = parse_int, .offset = FIELD(core.flight_depth)},
    {.name = "SHOAL_HOST_ID", .def = "",
     .doc = "identity of this host for topology; default hostname + boot id",
     .parse = parse_string, .offset = FIELD(core.host_id)},
};

static const shoal_config_entry_t boot_entries[] = {
    {.name = "SHOAL_SOCKET_IFNAME", .def = "",
     .doc = "network interfaces for sockets: name prefixes (eth,ib), = for exact names (=eth0), "
            "^ excludes (^docker,lo); default: first non-loopback, else loopback",
     .parse = parse_string, .offset = FIELD(boot.socket_ifname),
     .nccl_name = "NCCL_SOCKET_IFNAME", .nccl_translate = nccl_same_text},
    {.name = "SHOAL_ADDR", .def = "",
     .doc = "rendezvous host[:port] of rank 0 for shoal_comm_init_env (else MASTER_ADDR)",
     .parse = parse_string, .offset = FIELD(boot.addr)},
    {.name = "SHOAL_COMM_ID", .def = "",
     .doc = "host:port that a unique id names instead of a fresh listener: rank 0 binds it, "
            "so every rank can build the id locally",
     .parse = parse_hostport, .offset = FIELD(boot.comm_id),
     .nccl_name = "NCCL_COMM_ID", .nccl_translate = nccl_same_text},
    {.name = "SHOAL_PORT", .def = "0",
     .doc = "rendezvous port for shoal_comm_init_env; 0 = MASTER_PORT+1, else 29501",
     .parse = parse_int, .offset = FIELD(boot.port)},
    {.name = "SHOAL_SECRET", .def = "",
     .doc = "shared secret for shoal_comm_init_env without PMIx; default derived from the job id",
     .parse = parse_secret, .offset = FIELD(boot.secret)},
    {.name = "SHOAL_RANK", .def = "-1", .doc = "this rank, for shoal_comm_init_env",
     .parse = parse_int, .offset = FIELD(boot.rank)},
    {.name = "SHOAL_SIZE", .def = "-1", .doc = "number of ranks, for shoal_comm_init_env",
     .parse = parse_int, .offset = FIELD(boot.size)},
    {.name = "SHOAL_LOCAL_RANK", .def = "-1", .doc = "rank on this host, for shoal_comm_init_env",
     .parse = parse_int, .offset = FIELD(boot.local_rank)},
};

static const shoal_config_entry_t shm_entries[] = {
    {.name = "SHOAL_SHM_ENABLE", .def = "y",
     .doc = "use shared memory between ranks of one host (n forces tcp)",
     .parse = parse_bool, .offset = FIELD(shm.enable)},
    {.name = "SHOAL_SHM_NSLOTS", .def = "8",
     .doc = "slots of SHOAL_CHUNK_SIZE bytes in each shared-memory FIFO",
     .parse = parse_size, .offset = FIELD(shm.nslots)},
    {.name = "SHOAL_SHM_SPIN", .def = "100us",
     .doc = "how long a rank waiting on local peers polls (yielding the CPU now and "
            "then) before it sleeps until one of them rings it",
     .parse = parse_time, .offset = FIELD(shm.spin_ns)},
};

/* NCCL_IB_HCA will alias the device list of the ibverbs transport's table. */
static const shoal_config_entry_t tcp_entries[] = {
    {.name = "SHOAL_TCP_ENABLE", .def = "y",
     .doc = "use tcp between ranks that shared memory does not join",
     .parse = parse_bool, .offset = FIELD(tcp.enable)},
    {.name = "SHOAL_TCP_NSOCKS", .def = "2",
     .doc = "sockets per peer; each message is striped across them",
     .parse = parse_int, .offset = FIELD(tcp.nsocks)},
    {.name = "SHOAL_TCP_NSLOTS", .def = "2",
     .doc = "slots of SHOAL_CHUNK_SIZE bytes buffered per peer and direction",
     .parse = parse_size, .offset = FIELD(tcp.nslots)},
};

static const shoal_config_entry_t algo_entries[] = {
    {.name = "SHOAL_CHUNK_SIZE", .def = "0",
     .doc = "bytes moved per pipeline step and per transport slot (0: 128k when shared "
            "memory joins every rank, 512k when the communicator spans hosts)",
     .parse = parse_size, .offset = FIELD(algo.chunk_size)},
    {.name = "SHOAL_STREAM_MIN", .def = "0",
     .doc = "output bytes per rank from which an operation writes its output with "
            "streaming stores, past the caches (0: half the last-level cache shared "
            "among this host's ranks)",
     .parse = parse_size, .offset = FIELD(algo.stream_min)},
    {.name = "SHOAL_ALGO", .def = "auto",
     .doc = "algorithm: auto (cost model), a name for every collective that has it, or "
            "coll:name,... (shoal_info -a lists them)",
     .parse = parse_string, .offset = FIELD(algo.algo),
     .nccl_name = "NCCL_ALGO", .nccl_translate = nccl_algo},
    {.name = "SHOAL_ALGO_LATENCY", .def = "0",
     .doc = "cost model: latency of the slowest link (0 = the transports' figure)",
     .parse = parse_time, .offset = FIELD(algo.latency_ns)},
    {.name = "SHOAL_ALGO_BANDWIDTH", .def = "0",
     .doc = "cost model: bytes/s of the slowest link (0 = the transports' figure)",
     .parse = parse_size, .offset = FIELD(algo.bandwidth)},
    {.name = "SHOAL_PROGRESS", .def = "thread",
     .doc = "who runs non-blocking operations: thread (a progress thread per communicator) or "
            "caller (shoal_test/shoal_wait)",
     .parse = parse_progress, .offset = FIELD(algo.progress_thread)},
};

/* Stand-ins for the machine, so that topology decisions can be seen and
 * tested for hosts one does not have. */
static const shoal_config_entry_t topo_entries[] = {
    {.name = "SHOAL_TOPO_FILE", .def = "",
     .doc = "read the host topology from this hwloc XML file instead of this machine "
            "(shoal_info -T shows it)",
     .parse = parse_string, .offset = FIELD(topo.file)},
    {.name = "SHOAL_TOPO_SYNTHETIC", .def = "",
     .doc = "host topology from an hwloc synthetic description (\"pack:2 numa:2 core:4 pu:2\"), "
            "instead of this machine",
     .parse = parse_string, .offset = FIELD(topo.synthetic)},
    {.name = "SHOAL_TOPO_CPUS", .def = "",
     .doc = "with SHOAL_TOPO_FILE or SHOAL_TOPO_SYNTHETIC: the PUs (OS indexes, \"0-3,8\") this "
            "rank counts as its binding there; empty: the whole stand-in machine",
     .parse = parse_string, .offset = FIELD(topo.cpus)},
    {.name = "SHOAL_TOPO_LINKS", .def = "",
     .doc = "cost model: latency and bytes/s per link class, \"tcp:50us:1G,shm:1us:8G\" "
            "(classes as shoal_info -T names them); unnamed classes keep their defaults",
     .parse = parse_string, .offset = FIELD(topo.links)},
    {.name = "SHOAL_TOPO_PROBE", .def = "n",
     .doc = "measure the latency and bandwidth of each link class at init (a few ms) instead "
            "of the defaults; SHOAL_TOPO_LINKS still wins",
     .parse = parse_bool, .offset = FIELD(topo.probe)},
};

static const shoal_config_entry_t compress_entries[] = {
    {.name = "SHOAL_COMPRESS", .def = "off",
     .doc = "NCCL door: all-reduces of float32, float16 and bfloat16 sums and averages "
            "of SHOAL_COMPRESS_MIN bytes or more go through shoal_allreduce_int8 (int8 "
            "with a scale per 64 values, no error feedback): off or int8",
     .parse = parse_compress, .offset = FIELD(compress.kind)},
    {.name = "SHOAL_COMPRESS_MIN", .def = "1M",
     .doc = "NCCL door: the smallest all-reduce buffer that SHOAL_COMPRESS compresses",
     .parse = parse_size, .offset = FIELD(compress.min_bytes)},
};

#define TABLE(name, entries) {name, entries, sizeof(entries) / sizeof(entries[0])}

static const shoal_config_table_t tables[] = {
    TABLE("core", core_entries), TABLE("boot", boot_entries),
    TABLE("shm", shm_entries),   TABLE("tcp", tcp_entries),
    TABLE("algo", algo_entries), TABLE("topo", topo_entries),
    TABLE("compress", compress_entries),
};

#define NTABLES (sizeof(tables) / sizeof(tables[0]))

static shoal_config_t config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
/* Set once by the NCCL door; read by every load after. */
static atomic_int config_nccl_env;
/* Loads so far, so that shoal_config_use_nccl_env loads only once when it
 * comes first. */
static atomic_uint config_loads;

/* Checks the table's invariants that a parser cannot: called after parsing. */
static void config_sanitize(shoal_config_t *c)
{
    size_t chunk = c->algo.chunk_size;
    if (chunk != 0 && (chunk < 4096 || (chunk & (chunk - 1)))) {
        shoal_warn(INIT, "SHOAL_CHUNK_SIZE=%zu must be 0 or a power of two >= 4096; "
                   "using 0 (chosen per communicator)", chunk);
        c->algo.chunk_size = 0;
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
    if (c->core.heartbeat_ns < 1000000000ull) {
        shoal_warn(INIT, "SHOAL_HEARTBEAT below 1s; using 1s (TCP keepalive counts seconds)");
        c->core.heartbeat_ns = 1000000000ull;
    }
    if (c->core.flight_depth < 0)
        c->core.flight_depth = 0;
}

/* Where an entry's text came from. */
typedef enum {
    SOURCE_DEFAULT,   /* neither variable set */
    SOURCE_SHOAL,     /* the SHOAL_ variable */
    SOURCE_NCCL,      /* the NCCL alias, translated into buf */
    SOURCE_NCCL_BAD,  /* the NCCL alias, which does not translate */
} config_source_t;

/* The text that sets e: the SHOAL_ variable when set, else (with aliases
 * on) the NCCL variable when set and not empty, translated into buf
 * (SHOAL_CONFIG_STR_MAX bytes), with the translator's note. */
static config_source_t config_text(const shoal_config_entry_t *e, int aliases, char *buf,
                                   char *note, size_t note_cap, const char **text_p)
{
    const char *text = getenv(e->name);
    note[0] = '\0';
    if (text) {
        *text_p = text;
        return SOURCE_SHOAL;
    }
    const char *nccl = aliases && e->nccl_name ? getenv(e->nccl_name) : NULL;
    if (!nccl || !nccl[0]) {
        *text_p = e->def;
        return SOURCE_DEFAULT;
    }
    if (e->nccl_translate(nccl, buf, note, note_cap) != 0) {
        *text_p = e->def;
        return SOURCE_NCCL_BAD;
    }
    *text_p = buf;
    return SOURCE_NCCL;
}

typedef struct {
    const shoal_config_entry_t *entry;
    config_source_t source;
    int parsed;                          /* the text parsed */
    char text[SHOAL_CONFIG_STR_MAX];     /* what a translated alias became */
    char note[512];
} config_report_t;

#define CONFIG_MAX_ENTRIES 64

/* Logging is configured by the table itself, so the load reports what it
 * did (bad values, aliases taken) only once the log settings apply. */
static void config_report(const config_report_t *r)
{
    const shoal_config_entry_t *e = r->entry;
    switch (r->source) {
    case SOURCE_SHOAL:
        if (!r->parsed)
            shoal_warn(INIT, "cannot parse %s=\"%s\"; using its default", e->name,
                       getenv(e->name));
        if (config_nccl_env && e->nccl_name && getenv(e->nccl_name))
            shoal_info(INIT, "%s is set, so %s=\"%s\" is ignored", e->name, e->nccl_name,
                       getenv(e->nccl_name));
        break;
    case SOURCE_NCCL_BAD:
        shoal_warn(INIT, "cannot read %s=\"%s\" as %s; using its default", e->nccl_name,
                   getenv(e->nccl_name), e->name);
        break;
    case SOURCE_NCCL:
        if (!r->parsed)
            shoal_warn(INIT, "%s=\"%s\" gives %s=\"%s\", which does not parse; using its "
                       "default", e->nccl_name, getenv(e->nccl_name), e->name, r->text);
        else
            shoal_info(INIT, "%s=\"%s\" read as %s=\"%s\"%s%s", e->nccl_name,
                       getenv(e->nccl_name), e->name, r->text, r->note[0] ? ": " : "",
                       r->note);
        break;
    case SOURCE_DEFAULT:
        break;
    }
}

static void config_load(void)
{
    shoal_config_t c;
    memset(&c, 0, sizeof(c));
    static config_report_t reports[CONFIG_MAX_ENTRIES];
    size_t nreports = 0;
    int aliases = atomic_load_explicit(&config_nccl_env, memory_order_acquire);
    for (size_t t = 0; t < NTABLES; t++) {
        for (size_t i = 0; i < tables[t].count && nreports < CONFIG_MAX_ENTRIES; i++) {
            const shoal_config_entry_t *e = &tables[t].entries[i];
            config_report_t *r = &reports[nreports++];
            void *field = (char *)&c + e->offset;
            const char *text;
            r->entry = e;
            r->source = config_text(e, aliases, r->text, r->note, sizeof(r->note), &text);
            r->parsed = e->parse(text, field) == 0;
            if (!r->parsed)
                e->parse(e->def, field);
        }
    }
    shoal_log_setup(c.core.log_level, c.core.log_subsys, c.core.log_file);
    for (size_t i = 0; i < nreports; i++)
        config_report(&reports[i]);
    config_sanitize(&c);
    config = c;
    atomic_fetch_add_explicit(&config_loads, 1, memory_order_release);
}

const shoal_config_t *shoal_config_get(void)
{
    pthread_once(&config_once, config_load);
    return &config;
}

unsigned shoal_config_generation(void)
{
    return atomic_load_explicit(&config_loads, memory_order_acquire);
}

void shoal_config_reload(void)
{
    pthread_once(&config_once, config_load);
    config_load();
}

void shoal_config_use_nccl_env(void)
{
    atomic_store_explicit(&config_nccl_env, 1, memory_order_release);
    unsigned before = atomic_load_explicit(&config_loads, memory_order_acquire);
    pthread_once(&config_once, config_load);
    if (atomic_load_explicit(&config_loads, memory_order_acquire) == before)
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
    int aliases = atomic_load_explicit(&config_nccl_env, memory_order_acquire);
    for (size_t t = 0; t < NTABLES; t++) {
        fprintf(out, "[%s]\n", tables[t].component);
        for (size_t i = 0; i < tables[t].count; i++) {
            const shoal_config_entry_t *e = &tables[t].entries[i];
            char buf[SHOAL_CONFIG_STR_MAX], note[512];
            const char *cur;
            config_source_t src = config_text(e, aliases, buf, note, sizeof(note), &cur);
            if (src != SOURCE_DEFAULT && e->parse == parse_secret)
                cur = "(set, not shown)";
            fprintf(out, "  %-22s default=\"%s\" current=\"%s\"%s%s%s\n      %s", e->name,
                    e->def, cur, src == SOURCE_NCCL ? " (from " : "",
                    src == SOURCE_NCCL ? e->nccl_name : "", src == SOURCE_NCCL ? ")" : "",
                    e->doc);
            if (e->nccl_name)
                fprintf(out, " [NCCL alias: %s%s]", e->nccl_name,
                        aliases ? "" : ", honoured by libnccl");
            fputc('\n', out);
        }
    }
}

size_t shoal_config_chunk(const shoal_config_t *c, int networked)
{
    if (c->algo.chunk_size)
        return c->algo.chunk_size;
    return networked ? SHOAL_CHUNK_NET : SHOAL_CHUNK_LOCAL;
}

size_t shoal_config_stream_min(const shoal_config_t *c, int nlocal)
{
    if (c->algo.stream_min)
        return c->algo.stream_min;
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0)
        llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (llc <= 0)
        llc = 8l << 20;
    size_t min = (size_t)llc / 2 / (size_t)(nlocal > 0 ? nlocal : 1);
    return min > SHOAL_CHUNK_LOCAL ? min : SHOAL_CHUNK_LOCAL;
}
