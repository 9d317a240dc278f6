/* The doors' settings: their compression ([compress]), the MPI door's
 * choice of path ([mpi]) and the
 * translators of the NCCL_* aliases that shoal_config_use_nccl_env turns
 * on (the NCCL door's). Linked into libnccl.so.2 and libshoal_mpi.so, and
 * into the tools and tests that print or test these settings (Makefile). */
#include "base/config.h"
#include "base/log.h"

#include "algos/algo.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The door's compressions, which need no state of their own (the others
 * keep error feedback per tensor, which only the caller can own): "off",
 * or one of the kinds in takes (a mask of 1 << kind). */
#define KIND_BIT(k) (1u << SHOAL_COMPRESS_##k)
#define ALLREDUCE_KINDS KIND_BIT(INT8)
#define ALLGATHER_KINDS (KIND_BIT(INT8) | KIND_BIT(INT4))
#define REDUCESCATTER_KINDS (KIND_BIT(INT8) | KIND_BIT(INT4) | KIND_BIT(SIGN))

static int parse_kind(const char *text, unsigned takes, int *kind_p)
{
    static const struct {
        const char *name;
        int kind;
    } kinds[] = {{"off", 0}, {"none", 0}, {"", 0}, {"int8", SHOAL_COMPRESS_INT8},
                 {"int4", SHOAL_COMPRESS_INT4}, {"sign", SHOAL_COMPRESS_SIGN}};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        int taken = !kinds[i].kind || takes & (1u << kinds[i].kind);
        if (taken && !strcasecmp(text, kinds[i].name)) {
            *kind_p = kinds[i].kind;
            return 0;
        }
    }
    return -1;
}

static int parse_compress(const char *text, void *field)
{
    return parse_kind(text, ALLREDUCE_KINDS, field);
}

static int parse_compress_allgather(const char *text, void *field)
{
    return parse_kind(text, ALLGATHER_KINDS, field);
}

static int parse_compress_reducescatter(const char *text, void *field)
{
    return parse_kind(text, REDUCESCATTER_KINDS, field);
}

static const shoal_config_entry_t compress_entries[] = {
    {.name = "SHOAL_COMPRESS", .def = "off",
     .doc = "NCCL door: all-reduces of float32, float16 and bfloat16 sums and averages "
            "of SHOAL_COMPRESS_MIN bytes or more go through shoal_allreduce_int8, or on "
            "device buffers its stream-ordered form (int8 with a scale per 64 values, no "
            "error feedback); MPI door: the same for blocking MPI_Allreduce of MPI_FLOAT "
            "MPI_SUM: off or int8",
     .parse = parse_compress, .offset = SHOAL_CONFIG_FIELD(compress.kind)},
    {.name = "SHOAL_COMPRESS_MIN", .def = "1M",
     .doc = "NCCL and MPI doors: the smallest all-reduce buffer that SHOAL_COMPRESS "
            "compresses; NCCL door: also the smallest all-gather output and reduce-scatter "
            "input (nranks x count values) that SHOAL_COMPRESS_ALLGATHER and "
            "SHOAL_COMPRESS_REDUCESCATTER compress",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(compress.min_bytes)},
    {.name = "SHOAL_COMPRESS_ALLGATHER", .def = "off",
     .doc = "NCCL door: ncclAllGather of float32, float16 or bfloat16 on two ranks or more, "
            "on host buffers outside stream order (a NULL stream, or no CUDA in the "
            "process) and outside ncclGroupStart/End, whose output (nranks x count values) "
            "is SHOAL_COMPRESS_MIN bytes or more, goes through shoal_allgather_compressed "
            "(a scale per block of 64 values, nearest rounding, no error feedback, nothing "
            "kept between calls): off, int8 or int4. Every rank's output is bitwise the "
            "same, this rank's own values decoded too (in place, its send values are "
            "replaced by their decoded form). Error: each value within half its block's "
            "scale of its input, max|block|/254 for int8 and max|block|/14 for int4, the "
            "block being the 64 values of the sender's input that hold it (plus float16's "
            "or bfloat16's rounding of the result). int8 on device buffers (both) of a "
            "stream-ordered call goes through shoal_allgather_compressed_stream, with the "
            "same error and the same bits; int4 there, groups and other types take the "
            "plain all-gather",
     .parse = parse_compress_allgather, .offset = SHOAL_CONFIG_FIELD(compress.allgather)},
    {.name = "SHOAL_COMPRESS_REDUCESCATTER", .def = "off",
     .doc = "NCCL door: ncclReduceScatter sums and averages (ncclSum, ncclAvg) of float32, "
            "float16 or bfloat16 on two ranks or more, on host buffers outside stream order "
            "and outside ncclGroupStart/End, whose input (nranks x count values) is "
            "SHOAL_COMPRESS_MIN bytes or more, go through shoal_reduce_scatter_compressed, "
            "two-shot: each rank's block for another rank is quantised once (a scale per "
            "block of 64 values, nearest rounding, no error feedback, nothing kept between "
            "calls) and its owner adds the decoded blocks to its own exact values in fp32: "
            "off, int8, int4 or sign. Error: int8: each result within the sum, over the "
            "other ranks' contributions, of half the scale of the contribution's block of "
            "64, max|block|/254; int4: max|block|/14; averages that divided by nranks (plus "
            "fp32's, float16's or bfloat16's rounding). sign: each contribution becomes 1 "
            "bit a value times its block's mean magnitude, a 1-bit approximation meant for "
            "use with error feedback, which the stateless door does not keep, so its "
            "results here are coarse. int8 on device buffers (both) of a stream-ordered "
            "call goes through shoal_reduce_scatter_compressed_stream, with the same error "
            "and the host form's bits; int4 and sign there, groups, other types and other "
            "ops take the plain reduce-scatter",
     .parse = parse_compress_reducescatter,
     .offset = SHOAL_CONFIG_FIELD(compress.reduce_scatter)},
};

/* A value that does not parse has had the machinery's warning and the
 * default (off); this says what the setting takes. */
static void compress_sanitize(shoal_config_t *c)
{
    static const struct {
        const char *name, *text, *calls;
        unsigned takes;
    } colls[] = {
        {"SHOAL_COMPRESS_ALLGATHER", "off, int8 or int4", "all-gathers", ALLGATHER_KINDS},
        {"SHOAL_COMPRESS_REDUCESCATTER", "off, int8, int4 or sign", "reduce-scatters",
         REDUCESCATTER_KINDS},
    };
    for (size_t i = 0; i < sizeof(colls) / sizeof(colls[0]); i++) {
        const char *text = shoal_config_env(colls[i].name);
        int kind;
        if (text && parse_kind(text, colls[i].takes, &kind) != 0)
            shoal_warn(INIT, "%s=\"%s\" is not %s: the NCCL door's %s stay uncompressed",
                       colls[i].name, text, colls[i].text, colls[i].calls);
    }
}

SHOAL_CONFIG_TABLE(compress, 6, compress_entries, compress_sanitize);

static int parse_mpi_path(const char *text, void *field)
{
    if (!strcasecmp(text, "auto"))
        *(int *)field = SHOAL_MPI_PATH_AUTO;
    else if (!strcasecmp(text, "shoal"))
        *(int *)field = SHOAL_MPI_PATH_SHOAL;
    else
        return -1;
    return 0;
}

static int parse_mpi_slow(const char *text, void *field)
{
    if (!strcasecmp(text, "off") || !text[0])
        *(int *)field = 0;
    else if (!strcasecmp(text, "shoal"))
        *(int *)field = 1;
    else if (!strcasecmp(text, "mpi"))
        *(int *)field = 2;
    else if (!strcasecmp(text, "near"))
        *(int *)field = 3;
    else
        return -1;
    return 0;
}

static const shoal_config_entry_t mpi_entries[] = {
    {.name = "SHOAL_MPI_PATH", .def = "auto",
     .doc = "MPI door: auto: per communicator, collective and power-of-two size, time the "
            "first blocking calls on shoal and on MPI's own path alike and keep the faster "
            "(the slowest rank's time decides, so every rank keeps the same); shoal: take "
            "every call shoal can serve",
     .parse = parse_mpi_path, .offset = SHOAL_CONFIG_FIELD(mpi.path)},
    {.name = "SHOAL_MPI_LEARN", .def = "2",
     .doc = "MPI door, SHOAL_MPI_PATH=auto: the timed rounds on each path (after one "
            "untimed run each) before a size's path is chosen",
     .parse = shoal_config_field_int, .offset = SHOAL_CONFIG_FIELD(mpi.learn)},
    {.name = "SHOAL_TEST_MPI_SLOW", .def = "off",
     .doc = "for tests only: on this path (shoal or mpi), the clock that rank 1 of each "
            "communicator times calls by runs on 1 s as each call enters the door",
     .parse = parse_mpi_slow, .offset = SHOAL_CONFIG_FIELD(mpi.test_slow)},
};

static void mpi_sanitize(shoal_config_t *c)
{
    if (c->mpi.learn < 1) {
        shoal_warn(INIT, "SHOAL_MPI_LEARN=%d: at least 1; using 1", c->mpi.learn);
        c->mpi.learn = 1;
    } else if (c->mpi.learn > SHOAL_MPI_LEARN_MAX) {
        shoal_warn(INIT, "SHOAL_MPI_LEARN=%d: at most %d; using %d", c->mpi.learn,
                   SHOAL_MPI_LEARN_MAX, SHOAL_MPI_LEARN_MAX);
        c->mpi.learn = SHOAL_MPI_LEARN_MAX;
    }
}

SHOAL_CONFIG_TABLE(mpi, 7, mpi_entries, mpi_sanitize);

static const char *const subsys_names[] = {
#define SHOAL_SUBSYS_NAME_(name) #name,
    SHOAL_SUBSYS_LIST(SHOAL_SUBSYS_NAME_)
#undef SHOAL_SUBSYS_NAME_
};

/* ---- NCCL aliases --------------------------------------------------------
 * The NCCL door lets programs keep the NCCL_* variables they already set.
 * Each translator below turns NCCL's syntax into the shoal setting's text,
 * which then goes through that setting's own parser, so one place decides
 * what a value means. The tables name the aliases (shoal_info -c shows them
 * without the door); the translators are the door's, since NCCL_ALGO's
 * needs the algorithm registry, which the settings' machinery sits below. */

static int nccl_same_text(const char *nccl_text, char *out, char *note, size_t note_cap)
{
    if (strlen(nccl_text) >= SHOAL_CONFIG_STR_MAX)
        return -1;
    strcpy(out, nccl_text);
    return 0;
}

/* NCCL_IB_DISABLE=1 turns ib off: SHOAL_IB_ENABLE is its opposite. */
static int nccl_ib_disable(const char *nccl_text, char *out, char *note, size_t note_cap)
{
    if (!strcmp(nccl_text, "0") || !strcmp(nccl_text, "1")) {
        strcpy(out, nccl_text[0] == '1' ? "n" : "y");
        return 0;
    }
    return -1;
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

SHOAL_CONFIG_ALIAS(NCCL_DEBUG, nccl_debug);
SHOAL_CONFIG_ALIAS(NCCL_DEBUG_SUBSYS, nccl_debug_subsys);
SHOAL_CONFIG_ALIAS(NCCL_DEBUG_FILE, nccl_same_text);
SHOAL_CONFIG_ALIAS(NCCL_SOCKET_IFNAME, nccl_same_text);
SHOAL_CONFIG_ALIAS(NCCL_IB_HCA, nccl_same_text);
SHOAL_CONFIG_ALIAS(NCCL_IB_GID_INDEX, nccl_same_text);
SHOAL_CONFIG_ALIAS(NCCL_IB_DISABLE, nccl_ib_disable);
SHOAL_CONFIG_ALIAS(NCCL_IB_QPS_PER_CONNECTION, nccl_same_text);
SHOAL_CONFIG_ALIAS(NCCL_COMM_ID, nccl_same_text);
SHOAL_CONFIG_ALIAS(NCCL_ALGO, nccl_algo);
