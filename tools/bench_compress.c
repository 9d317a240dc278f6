/* allreduce_bench --compress: settings, PowerSGD's layout, inputs, and one
 * row of timed and checked compressed collectives (bench_compress.h): the
 * all-reduce of host buffers or, with --mem device, of device buffers
 * through the stream-ordered call; the all-gather, reduce-scatter and
 * all-to-all of host buffers.
 *
 * The plain rows' inputs are small integers, chosen so that every sum is
 * exact; a block of them holds nearly equal values, which no compressor
 * finds hard. The compressed rows take values spread over [-1, 1) instead,
 * from a hash of the rank and the index, as gradients would be: every rank
 * can still compute every other rank's input, and so the exact result of
 * each collective. */
#include "bench_compress.h"

#include "bench_coll.h"
#include "bench_mem.h"

#include "base/dtype.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_COMP_GUARD_BYTE 0xa5
#define BENCH_COMP_POISON_BYTE 0xcd
#define BENCH_COMP_OPTS_MAX 256

#define KIND_BIT(k) (1u << SHOAL_COMPRESS_##k)
#define COLL_BIT(c) (1u << SHOAL_COMPRESS_COLL_##c)
#define ALGO_BIT(a) (1u << SHOAL_COMPRESS_ALGO_##a)
#define ALL_KINDS                                                                            \
    (KIND_BIT(INT8) | KIND_BIT(TERNARY) | KIND_BIT(POWERSGD) | KIND_BIT(SIGN) |              \
     KIND_BIT(MAJORITY) | KIND_BIT(INT4) | KIND_BIT(ADAPTIVE))
#define ALL_COLLS                                                                            \
    (COLL_BIT(ALLREDUCE) | COLL_BIT(ALLGATHER) | COLL_BIT(REDUCE_SCATTER) | COLL_BIT(ALLTOALL))
#define ALL_ALGOS (ALGO_BIT(AUTO) | ALGO_BIT(RING) | ALGO_BIT(TWO_SHOT) | ALGO_BIT(TREE))

/* ---- Kinds and collectives ------------------------------------------------ */

/* A kind --compress names. A kind that takes something after its name
 * ("powersgd:RANK") parses it in suffix; the others refuse it there. A kind
 * with parameters of its own (a budget, say) is one more row with its own
 * suffix parser; which collectives take it is the collectives' table's
 * business, and which --compress-opts apply to it the items' table's. */
typedef struct bench_comp_kind {
    const char *name;
    const char *syntax; /* as the messages list it: "powersgd[:RANK]" */
    shoal_compress_kind_t kind;
    unsigned algos; /* the all-reduce's schedules of the kind (ALGO_BIT); 0: algo does not apply */
    /* The text after "NAME:" of --compress arg into c (whose options hold
     * the kind's defaults). 0, or -1 after saying on stderr what is wrong. */
    int (*suffix)(shoal_bench_comp_t *c, const char *arg, const char *text);
} bench_comp_kind_t;

static int bench_comp_no_suffix(shoal_bench_comp_t *c, const char *arg, const char *text);
static int bench_comp_psgd_rank(shoal_bench_comp_t *c, const char *arg, const char *text);
static int bench_comp_adapt_budget(shoal_bench_comp_t *c, const char *arg, const char *text);

/* In the order the messages list them. The schedules are shoal.h's: SIGN
 * two-shot only, TERNARY the ring only, INT4 anything but the tree. */
static const bench_comp_kind_t bench_comp_kinds[] = {
    {"int8", "int8", SHOAL_COMPRESS_INT8, ALL_ALGOS, bench_comp_no_suffix},
    {"int4", "int4", SHOAL_COMPRESS_INT4, ALL_ALGOS & ~ALGO_BIT(TREE), bench_comp_no_suffix},
    {"sign", "sign", SHOAL_COMPRESS_SIGN, ALGO_BIT(AUTO) | ALGO_BIT(TWO_SHOT),
     bench_comp_no_suffix},
    {"majority", "majority", SHOAL_COMPRESS_MAJORITY, 0, bench_comp_no_suffix},
    {"ternary", "ternary", SHOAL_COMPRESS_TERNARY, ALGO_BIT(AUTO) | ALGO_BIT(RING),
     bench_comp_no_suffix},
    {"powersgd", "powersgd[:RANK]", SHOAL_COMPRESS_POWERSGD, 0, bench_comp_psgd_rank},
    {"adaptive", "adaptive[:budget=B]", SHOAL_COMPRESS_ADAPTIVE, 0, bench_comp_adapt_budget},
};
#define BENCH_COMP_NKINDS (sizeof(bench_comp_kinds) / sizeof(bench_comp_kinds[0]))

/* A collective that --compress times, with --coll's name. */
typedef struct {
    const char *name;      /* --coll */
    const char *what;      /* in messages and the header */
    const char *call_name; /* the host call the rows time */
    unsigned kinds;        /* the kinds its compressor takes (shoal.h) */
    unsigned device_kinds; /* those its stream-ordered form takes (--mem device) */
    unsigned algos;        /* the schedules it offers (ALGO_BIT); 0: algo does not apply */
    int same_everywhere;   /* every rank receives the same result */
    const char *exact;     /* what relerr compares against */
    const char *plain;     /* whose bytes the ratio counts over the bytes sent */
} bench_comp_coll_t;

static const bench_comp_coll_t bench_comp_colls[] = {
    [SHOAL_COMPRESS_COLL_ALLREDUCE] = {
        .name = "allreduce", .what = "all-reduce", .call_name = "shoal_allreduce_compressed",
        .kinds = ALL_KINDS,
        .device_kinds = KIND_BIT(INT8) | KIND_BIT(TERNARY) | KIND_BIT(POWERSGD),
        .algos = ALL_ALGOS, .same_everywhere = 1,
        .exact = "the exact sum (average) of the inputs",
        .plain = "a full-precision ring's bytes",
    },
    [SHOAL_COMPRESS_COLL_ALLGATHER] = {
        .name = "allgather", .what = "all-gather", .call_name = "shoal_allgather_compressed",
        .kinds = KIND_BIT(INT8) | KIND_BIT(INT4), .device_kinds = 0, .algos = 0,
        .same_everywhere = 1,
        .exact = "every rank's input",
        .plain = "the full-precision all-gather's bytes ((n-1) x count values a rank)",
    },
    [SHOAL_COMPRESS_COLL_REDUCE_SCATTER] = {
        .name = "reducescatter", .what = "reduce-scatter",
        .call_name = "shoal_reduce_scatter_compressed",
        .kinds = KIND_BIT(INT8) | KIND_BIT(INT4) | KIND_BIT(SIGN), .device_kinds = 0,
        .algos = ALGO_BIT(AUTO) | ALGO_BIT(RING) | ALGO_BIT(TWO_SHOT), .same_everywhere = 0,
        .exact = "the exact sum (average) of each rank's block, over all ranks' results",
        .plain = "the full-precision reduce-scatter's bytes ((n-1) x count values a rank)",
    },
    [SHOAL_COMPRESS_COLL_ALLTOALL] = {
        .name = "alltoall", .what = "all-to-all", .call_name = "shoal_alltoall_compressed",
        .kinds = KIND_BIT(INT8) | KIND_BIT(INT4), .device_kinds = 0, .algos = 0,
        .same_everywhere = 0,
        .exact = "the blocks sent, over all ranks' results",
        .plain = "the full-precision all-to-all's bytes ((n-1) x count values a rank)",
    },
};
#define BENCH_COMP_NCOLLS (sizeof(bench_comp_colls) / sizeof(bench_comp_colls[0]))

static const char *const bench_comp_algos[] = {
    [SHOAL_COMPRESS_ALGO_AUTO] = "auto",
    [SHOAL_COMPRESS_ALGO_RING] = "ring",
    [SHOAL_COMPRESS_ALGO_TWO_SHOT] = "two-shot",
    [SHOAL_COMPRESS_ALGO_TREE] = "tree",
};
#define BENCH_COMP_NALGOS (sizeof(bench_comp_algos) / sizeof(bench_comp_algos[0]))

static const bench_comp_kind_t *bench_comp_kind_of(shoal_compress_kind_t kind)
{
    for (size_t i = 0; i < BENCH_COMP_NKINDS; i++)
        if (bench_comp_kinds[i].kind == kind)
            return &bench_comp_kinds[i];
    return NULL;
}

const char *shoal_bench_comp_kind_name(shoal_compress_kind_t kind)
{
    const bench_comp_kind_t *k = bench_comp_kind_of(kind);
    return k ? k->name : "?";
}

static const bench_comp_coll_t *bench_comp_coll(const shoal_bench_comp_t *c)
{
    return &bench_comp_colls[c->opt.coll];
}

const char *shoal_bench_comp_call_name(const shoal_bench_comp_t *c)
{
    return c->device ? "shoal_allreduce_compressed_stream" : bench_comp_coll(c)->call_name;
}

int shoal_bench_comp_same_everywhere(const shoal_bench_comp_t *c)
{
    return bench_comp_coll(c)->same_everywhere;
}

/* The schedules that c's kind offers on c's collective. */
static unsigned bench_comp_algos_of(const shoal_bench_comp_t *c)
{
    const bench_comp_kind_t *k = bench_comp_kind_of(c->opt.kind);
    return k ? k->algos & bench_comp_coll(c)->algos : 0;
}

/* Appends to out (of len) the names of the list's members in mask, as
 * "a, b or c"; names[i] is member i's name, NULL for no member. */
static void bench_comp_list(char *out, size_t len, unsigned mask, const char *const *names,
                            size_t n)
{
    size_t left = 0, at = strlen(out);
    for (size_t i = 0; i < n; i++)
        left += (mask >> i & 1u) && names[i];
    for (size_t i = 0; i < n && at < len; i++) {
        if (!(mask >> i & 1u) || !names[i])
            continue;
        left--;
        int w = snprintf(out + at, len - at, "%s%s", names[i],
                         left > 1 ? ", " : left == 1 ? " or " : "");
        at = w < 0 ? len : at + (size_t)w;
    }
}

/* The kinds in mask (KIND_BIT), in the table's order, as the messages
 * list them ("int8 or int4"). */
static void bench_comp_kind_list(char *out, size_t len, unsigned mask)
{
    const char *names[BENCH_COMP_NKINDS];
    for (size_t i = 0; i < BENCH_COMP_NKINDS; i++)
        names[i] = mask & (1u << bench_comp_kinds[i].kind) ? bench_comp_kinds[i].syntax : NULL;
    out[0] = '\0';
    bench_comp_list(out, len, (1u << BENCH_COMP_NKINDS) - 1, names, BENCH_COMP_NKINDS);
}

/* ---- Settings ------------------------------------------------------------ */

/* An unsigned decimal in min..max; -1 after saying why. */
static int bench_comp_uint(const char *what, const char *text, unsigned long long min,
                           unsigned long long max, unsigned long long *out_p)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || *end || errno || text[0] == '-' || text[0] == '+' || v < min ||
        v > max) {
        fprintf(stderr, "allreduce_bench: %s wants an integer in %llu..%llu, not \"%s\"\n", what,
                min, max, text);
        return -1;
    }
    *out_p = v;
    return 0;
}

static int bench_comp_no_suffix(shoal_bench_comp_t *c, const char *arg, const char *text)
{
    const char *names[BENCH_COMP_NKINDS];
    char list[128] = "";
    (void)c;
    (void)text;
    for (size_t i = 0; i < BENCH_COMP_NKINDS; i++)
        names[i] = bench_comp_kinds[i].suffix != bench_comp_no_suffix
                       ? bench_comp_kinds[i].syntax : NULL;
    bench_comp_list(list, sizeof(list), (1u << BENCH_COMP_NKINDS) - 1, names,
                    BENCH_COMP_NKINDS);
    fprintf(stderr, "allreduce_bench: --compress %s: only %s takes anything after its name\n",
            arg, list);
    return -1;
}

static int bench_comp_psgd_rank(shoal_bench_comp_t *c, const char *arg, const char *text)
{
    unsigned long long v;
    (void)arg;
    if (bench_comp_uint("--compress powersgd:RANK", text, 1, 65536, &v))
        return -1;
    c->opt.rank = (unsigned)v;
    return 0;
}

/* adaptive:budget=B: the relative error the choice keeps within, > 0. */
static int bench_comp_adapt_budget(shoal_bench_comp_t *c, const char *arg, const char *text)
{
    char *end;
    errno = 0;
    double d = strncmp(text, "budget=", 7) ? NAN : strtod(text + 7, &end);
    if (isnan(d) || end == text + 7 || *end || errno || !(d > 0) || d > 1e6) {
        fprintf(stderr, "allreduce_bench: --compress %s: adaptive takes :budget=B, a relative "
                "error above 0 (e.g. adaptive:budget=0.05)\n", arg);
        return -1;
    }
    c->opt.budget = (float)d;
    return 0;
}

/* An item of --compress-opts: its key, whether it takes "=VALUE", the
 * kinds and the collectives it applies to, and what it sets. */
typedef struct bench_comp_item {
    const char *key;
    const char *syntax; /* as the messages list it */
    int has_value;
    unsigned kinds;
    unsigned colls;
    /* val is NULL for an item without a value. 0, or -1 after saying why. */
    int (*apply)(shoal_bench_comp_t *c, const struct bench_comp_item *it, const char *val);
} bench_comp_item_t;

static int bench_comp_set_ef(shoal_bench_comp_t *c, const bench_comp_item_t *it,
                             const char *val)
{
    (void)val;
    c->opt.error_feedback = !strcmp(it->key, "ef");
    return 0;
}

static int bench_comp_set_rounding(shoal_bench_comp_t *c, const bench_comp_item_t *it,
                                   const char *val)
{
    (void)val;
    c->opt.stochastic = !strcmp(it->key, "stochastic");
    return 0;
}

static int bench_comp_set_block(shoal_bench_comp_t *c, const bench_comp_item_t *it,
                                const char *val)
{
    unsigned long long v;
    (void)it;
    if (bench_comp_uint("--compress-opts block", val, 32, 128, &v))
        return -1;
    if (v != 32 && v != 64 && v != 128) {
        fprintf(stderr, "allreduce_bench: --compress-opts block is 32, 64 or 128, not %llu\n", v);
        return -1;
    }
    c->opt.block = (unsigned)v;
    return 0;
}

static int bench_comp_set_clip(shoal_bench_comp_t *c, const bench_comp_item_t *it,
                               const char *val)
{
    char *end;
    (void)it;
    errno = 0;
    double d = strtod(val, &end);
    if (end == val || *end || errno || !isfinite(d) || d < 0 || d > 1e6) {
        fprintf(stderr, "allreduce_bench: --compress-opts clip wants a number of standard "
                "deviations >= 0 (0: no clipping), not \"%s\"\n", val);
        return -1;
    }
    c->opt.clip_sigma = (float)d;
    return 0;
}

static int bench_comp_set_rank(shoal_bench_comp_t *c, const bench_comp_item_t *it,
                               const char *val)
{
    unsigned long long v;
    (void)it;
    if (bench_comp_uint("--compress-opts rank", val, 1, 65536, &v))
        return -1;
    c->opt.rank = (unsigned)v;
    return 0;
}

static int bench_comp_set_window(shoal_bench_comp_t *c, const bench_comp_item_t *it,
                                 const char *val)
{
    unsigned long long v;
    (void)it;
    if (bench_comp_uint("--compress-opts window", val, 1, 1000000000, &v))
        return -1;
    c->opt.window = (unsigned)v;
    return 0;
}

static int bench_comp_set_warmup(shoal_bench_comp_t *c, const bench_comp_item_t *it,
                                 const char *val)
{
    unsigned long long v;
    (void)it;
    if (bench_comp_uint("--compress-opts warmup", val, 0, 1000000000, &v))
        return -1;
    c->opt.warmup_steps = (unsigned)v;
    return 0;
}

static int bench_comp_set_seed(shoal_bench_comp_t *c, const bench_comp_item_t *it,
                               const char *val)
{
    unsigned long long v;
    (void)it;
    if (bench_comp_uint("--compress-opts seed", val, 0, UINT64_MAX, &v))
        return -1;
    c->opt.seed = v;
    return 0;
}

/* A schedule that the kind offers on the collective (shoal.h): asking the
 * library for another one would only fail on every rank at the first row. */
static int bench_comp_set_algo(shoal_bench_comp_t *c, const bench_comp_item_t *it,
                               const char *val)
{
    unsigned offered = bench_comp_algos_of(c);
    (void)it;
    for (size_t a = 0; a < BENCH_COMP_NALGOS; a++) {
        if (strcmp(val, bench_comp_algos[a]))
            continue;
        if (offered & (1u << a)) {
            c->opt.algo = (shoal_compress_algo_t)a;
            return 0;
        }
    }
    char list[64] = "";
    bench_comp_list(list, sizeof(list), offered, bench_comp_algos, BENCH_COMP_NALGOS);
    fprintf(stderr, "allreduce_bench: --compress-opts algo=%s: %s's %s runs algo %s\n", val,
            shoal_bench_comp_kind_name(c->opt.kind), bench_comp_coll(c)->what, list);
    return -1;
}

/* Which items apply where follows shoal.h: error feedback everywhere but
 * in the majority vote and the all-to-all, which keep no residual; the
 * rounding where a codec rounds (TERNARY always rounds stochastically, the
 * vote never rounds); the block where there are scales; no seed where
 * nothing is random; the schedule where the collective has a choice. */
static const bench_comp_item_t bench_comp_items[] = {
    {"block", "block=32|64|128", 1,
     KIND_BIT(INT8) | KIND_BIT(INT4) | KIND_BIT(SIGN) | KIND_BIT(TERNARY), ALL_COLLS,
     bench_comp_set_block},
    {"stochastic", "stochastic", 0, KIND_BIT(INT8) | KIND_BIT(INT4) | KIND_BIT(SIGN), ALL_COLLS,
     bench_comp_set_rounding},
    {"nearest", "nearest", 0, KIND_BIT(INT8) | KIND_BIT(INT4) | KIND_BIT(SIGN), ALL_COLLS,
     bench_comp_set_rounding},
    {"ef", "ef", 0, ALL_KINDS & ~KIND_BIT(MAJORITY), ALL_COLLS & ~COLL_BIT(ALLTOALL),
     bench_comp_set_ef},
    {"noef", "noef", 0, ALL_KINDS, ALL_COLLS, bench_comp_set_ef},
    {"clip", "clip=SIGMA", 1, KIND_BIT(TERNARY), ALL_COLLS, bench_comp_set_clip},
    {"rank", "rank=N", 1, KIND_BIT(POWERSGD) | KIND_BIT(ADAPTIVE), ALL_COLLS,
     bench_comp_set_rank},
    {"window", "window=N", 1, KIND_BIT(ADAPTIVE), ALL_COLLS, bench_comp_set_window},
    {"warmup", "warmup=N", 1, KIND_BIT(POWERSGD), ALL_COLLS, bench_comp_set_warmup},
    {"seed", "seed=N", 1, ALL_KINDS & ~KIND_BIT(MAJORITY), ALL_COLLS, bench_comp_set_seed},
    {"algo", "algo=auto|ring|two-shot|tree", 1,
     KIND_BIT(INT8) | KIND_BIT(INT4) | KIND_BIT(SIGN) | KIND_BIT(TERNARY),
     COLL_BIT(ALLREDUCE) | COLL_BIT(REDUCE_SCATTER), bench_comp_set_algo},
};
#define BENCH_COMP_NITEMS (sizeof(bench_comp_items) / sizeof(bench_comp_items[0]))

static int bench_comp_item_applies(const shoal_bench_comp_t *c, const bench_comp_item_t *it)
{
    return (it->kinds & (1u << c->opt.kind)) && (it->colls & (1u << c->opt.coll));
}

/* The items in the table's order, as "a, b or c": all of them, or those
 * that apply to c (algo with the schedules that c's kind and collective
 * offer). */
static void bench_comp_item_list(char *out, size_t len, const shoal_bench_comp_t *c)
{
    const char *names[BENCH_COMP_NITEMS];
    char algo[64] = "algo=";
    for (size_t i = 0; i < BENCH_COMP_NITEMS; i++) {
        const bench_comp_item_t *it = &bench_comp_items[i];
        names[i] = !c || bench_comp_item_applies(c, it) ? it->syntax : NULL;
        if (!c || !names[i] || it->apply != bench_comp_set_algo)
            continue;
        for (size_t a = 0; a < BENCH_COMP_NALGOS; a++)
            if (bench_comp_algos_of(c) & (1u << a))
                snprintf(algo + strlen(algo), sizeof(algo) - strlen(algo), "%s%s",
                         algo[5] ? "|" : "", bench_comp_algos[a]);
        names[i] = algo;
    }
    out[0] = '\0';
    bench_comp_list(out, len, (1u << BENCH_COMP_NITEMS) - 1, names, BENCH_COMP_NITEMS);
}

/* One item of --compress-opts. */
static int bench_comp_item(shoal_bench_comp_t *c, const char *item)
{
    const char *eq = strchr(item, '=');
    size_t klen = eq ? (size_t)(eq - item) : strlen(item);
    const char *val = eq ? eq + 1 : NULL;
    char list[256];
    for (size_t i = 0; i < BENCH_COMP_NITEMS; i++) {
        const bench_comp_item_t *it = &bench_comp_items[i];
        if (strlen(it->key) != klen || strncmp(item, it->key, klen))
            continue;
        if (!val != !it->has_value) {
            if (val)
                fprintf(stderr, "allreduce_bench: --compress-opts %s: %s takes no value\n",
                        item, it->key);
            else
                fprintf(stderr, "allreduce_bench: --compress-opts %s wants a value (%s)\n",
                        item, it->syntax);
            return -1;
        }
        if (!bench_comp_item_applies(c, it)) {
            bench_comp_item_list(list, sizeof(list), c);
            if (c->opt.coll == SHOAL_COMPRESS_COLL_ALLREDUCE)
                fprintf(stderr, "allreduce_bench: --compress-opts %s does not apply to %s "
                        "(it takes %s)\n", item, shoal_bench_comp_kind_name(c->opt.kind),
                        list);
            else
                fprintf(stderr, "allreduce_bench: --compress-opts %s does not apply to %s on "
                        "the %s (it takes %s)\n", item, shoal_bench_comp_kind_name(c->opt.kind),
                        bench_comp_coll(c)->what, list);
            return -1;
        }
        return it->apply(c, it, val);
    }
    bench_comp_item_list(list, sizeof(list), NULL);
    fprintf(stderr, "allreduce_bench: unknown --compress-opts item \"%s\" (%s)\n", item, list);
    return -1;
}

static int bench_comp_shape(shoal_bench_comp_t *c, const char *shape)
{
    if (c->opt.kind != SHOAL_COMPRESS_POWERSGD && c->opt.kind != SHOAL_COMPRESS_ADAPTIVE) {
        fprintf(stderr, "allreduce_bench: --shape is the matrix of PowerSGD and of the adaptive "
                "compressor: it needs --compress powersgd or adaptive, not %s\n",
                shoal_bench_comp_kind_name(c->opt.kind));
        return -1;
    }
    const char *x = strchr(shape, 'x');
    char rows[32];
    unsigned long long r, col;
    if (!x || (size_t)(x - shape) >= sizeof(rows)) {
        fprintf(stderr, "allreduce_bench: --shape wants ROWSxCOLS (e.g. 4096x4096), not \"%s\"\n",
                shape);
        return -1;
    }
    memcpy(rows, shape, (size_t)(x - shape));
    rows[x - shape] = '\0';
    if (bench_comp_uint("--shape's rows", rows, 1, UINT32_MAX, &r) ||
        bench_comp_uint("--shape's columns", x + 1, 1, UINT32_MAX, &col))
        return -1;
    c->shape_rows = (size_t)r;
    c->shape_cols = (size_t)col;
    return 0;
}

/* The collective of --coll, and the kind of --compress KIND[:SUFFIX] that
 * it takes, into c's options (the kind's defaults, then the collective's:
 * the all-to-all keeps no residual). -1 after saying why not. */
static int bench_comp_kind(shoal_bench_comp_t *c, const char *coll, const char *arg)
{
    const bench_comp_coll_t *bc = NULL;
    char list[128];
    for (size_t i = 0; i < BENCH_COMP_NCOLLS; i++)
        if (!strcmp(coll, bench_comp_colls[i].name))
            bc = &bench_comp_colls[i];
    if (!bc) {
        const char *names[BENCH_COMP_NCOLLS];
        for (size_t i = 0; i < BENCH_COMP_NCOLLS; i++)
            names[i] = bench_comp_colls[i].name;
        list[0] = '\0';
        bench_comp_list(list, sizeof(list), (1u << BENCH_COMP_NCOLLS) - 1, names,
                        BENCH_COMP_NCOLLS);
        fprintf(stderr, "allreduce_bench: --compress times --coll %s, not --coll %s\n", list,
                coll);
        return -1;
    }
    const char *colon = strchr(arg, ':');
    size_t len = colon ? (size_t)(colon - arg) : strlen(arg);
    const bench_comp_kind_t *k = NULL;
    for (size_t i = 0; i < BENCH_COMP_NKINDS; i++)
        if (strlen(bench_comp_kinds[i].name) == len &&
            !strncmp(arg, bench_comp_kinds[i].name, len))
            k = &bench_comp_kinds[i];
    if (!k || shoal_compress_options_init(&c->opt, k->kind) != SHOAL_OK) {
        bench_comp_kind_list(list, sizeof(list), ALL_KINDS);
        fprintf(stderr, "allreduce_bench: unknown --compress kind \"%s\" (%s)\n", arg, list);
        return -1;
    }
    if (!(bc->kinds & (1u << k->kind))) {
        bench_comp_kind_list(list, sizeof(list), bc->kinds);
        fprintf(stderr, "allreduce_bench: --coll %s --compress %s: the compressed %s takes "
                "%s\n", bc->name, arg, bc->what, list);
        return -1;
    }
    c->opt.coll = (shoal_compress_coll_t)(bc - bench_comp_colls);
    if (c->opt.coll == SHOAL_COMPRESS_COLL_ALLTOALL)
        c->opt.error_feedback = 0;
    return colon ? k->suffix(c, arg, colon + 1) : 0;
}

int shoal_bench_comp_setup(shoal_bench_comp_t *c, const char *coll, const char *kind,
                           const char *opts, const char *shape)
{
    memset(c, 0, sizeof(*c));
    if (!kind) {
        if (!opts && !shape)
            return 0;
        fprintf(stderr, "allreduce_bench: %s needs --compress\n",
                opts ? "--compress-opts" : "--shape");
        return -1;
    }
    if (bench_comp_kind(c, coll, kind))
        return -1;
    if (opts) {
        char buf[BENCH_COMP_OPTS_MAX];
        if (strlen(opts) >= sizeof(buf)) {
            fprintf(stderr, "allreduce_bench: --compress-opts is longer than %d characters\n",
                    BENCH_COMP_OPTS_MAX - 1);
            return -1;
        }
        strcpy(buf, opts);
        for (char *save, *item = strtok_r(buf, ",", &save); item;
             item = strtok_r(NULL, ",", &save))
            if (bench_comp_item(c, item))
                return -1;
    }
    if (shape && bench_comp_shape(c, shape))
        return -1;
    c->on = 1;
    return 0;
}

/* The rows time shoal_allreduce_compressed_stream: the other collectives
 * have no stream-ordered form, and it takes the kinds with device kernels
 * (shoal.h). */
int shoal_bench_comp_on_device(shoal_bench_comp_t *c, int blocking)
{
    const bench_comp_coll_t *bc = bench_comp_coll(c);
    char list[64];
    if (c->opt.coll != SHOAL_COMPRESS_COLL_ALLREDUCE) {
        fprintf(stderr, "allreduce_bench: --compress with --mem device: the compressed %s has "
                "no device path (%s takes host memory; only the all-reduce has a "
                "stream-ordered form)\n", bc->what, bc->call_name);
        return -1;
    }
    if (!(bc->device_kinds & (1u << c->opt.kind))) {
        bench_comp_kind_list(list, sizeof(list), bc->device_kinds);
        fprintf(stderr, "allreduce_bench: --compress %s with --mem device: "
                "shoal_allreduce_compressed_stream takes %s (%s has no device kernels)\n",
                shoal_bench_comp_kind_name(c->opt.kind), list,
                shoal_bench_comp_kind_name(c->opt.kind));
        return -1;
    }
    c->device = 1;
    c->blocking = blocking;
    return 0;
}

void shoal_bench_comp_describe(const shoal_bench_comp_t *c, char *out, size_t len)
{
    const shoal_compress_options_t *o = &c->opt;
    const bench_comp_coll_t *bc = bench_comp_coll(c);
    int n = 0;
    switch (o->kind) {
    case SHOAL_COMPRESS_INT8:
    case SHOAL_COMPRESS_INT4:
    case SHOAL_COMPRESS_SIGN:
        n = snprintf(out, len, "%s, block %u, %s rounding", shoal_bench_comp_kind_name(o->kind),
                     o->block, o->stochastic ? "stochastic" : "nearest");
        if (bench_comp_algos_of(c) && n >= 0 && (size_t)n < len)
            n += snprintf(out + n, len - (size_t)n, ", algo %s", bench_comp_algos[o->algo]);
        break;
    case SHOAL_COMPRESS_MAJORITY:
        n = snprintf(out, len, "majority vote of signs, exact integer sums on the ring");
        break;
    case SHOAL_COMPRESS_TERNARY:
        n = snprintf(out, len, "ternary, block %u, clip %g sigma, algo %s", o->block,
                     (double)o->clip_sigma, bench_comp_algos[o->algo]);
        break;
    case SHOAL_COMPRESS_POWERSGD:
        if (c->shape_rows)
            n = snprintf(out, len, "powersgd, rank %u, warm-up %u, matrix %zux%zu", o->rank,
                         o->warmup_steps, c->shape_rows, c->shape_cols);
        else
            n = snprintf(out, len, "powersgd, rank %u, warm-up %u, the squarest matrix of "
                         "each size", o->rank, o->warmup_steps);
        break;
    case SHOAL_COMPRESS_ADAPTIVE:
        n = snprintf(out, len, "adaptive, budget %g, window %u, PowerSGD rank %u, ",
                     (double)o->budget, o->window, o->rank);
        if (n >= 0 && (size_t)n < len)
            n += c->shape_rows ? snprintf(out + n, len - (size_t)n, "matrix %zux%zu",
                                          c->shape_rows, c->shape_cols)
                               : snprintf(out + n, len - (size_t)n,
                                          "the squarest matrix of each size");
        break;
    default: /* a kind whose parameters the table does not know: its name */
        n = snprintf(out, len, "%s", shoal_bench_comp_kind_name(o->kind));
        break;
    }
    /* The vote draws no random numbers: no seed to show. */
    if (n >= 0 && (size_t)n < len)
        n += snprintf(out + n, len - (size_t)n, ", error feedback %s",
                      o->error_feedback ? "on" : "off");
    if (o->kind != SHOAL_COMPRESS_MAJORITY && n >= 0 && (size_t)n < len)
        n += snprintf(out + n, len - (size_t)n, ", seed %llu", (unsigned long long)o->seed);
    if (o->coll != SHOAL_COMPRESS_COLL_ALLREDUCE && n >= 0 && (size_t)n < len)
        n += snprintf(out + n, len - (size_t)n, "; the %s: %s", bc->what, bc->call_name);
    /* The stream form picks its own schedule (shoal.h): say which. */
    if (c->device && n >= 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, "; device memory: "
                 "shoal_allreduce_compressed_stream on each rank's stream (%s, whatever algo)",
                 o->kind == SHOAL_COMPRESS_INT8      ? "two-shot"
                 : o->kind == SHOAL_COMPRESS_TERNARY ? "the codes summed exactly"
                                                     : "the products through cuBLAS");
}

const char *shoal_bench_comp_exact_text(const shoal_bench_comp_t *c)
{
    if (c->opt.kind == SHOAL_COMPRESS_MAJORITY)
        return "the exact vote, the sign of the sum of the inputs' signs";
    return bench_comp_coll(c)->exact;
}

const char *shoal_bench_comp_plain_text(const shoal_bench_comp_t *c)
{
    return bench_comp_coll(c)->plain;
}

void shoal_bench_comp_json(FILE *f, const shoal_bench_comp_t *c)
{
    const shoal_compress_options_t *o = &c->opt;
    const bench_comp_coll_t *bc = bench_comp_coll(c);
    fprintf(f, "  \"compression\": {\"kind\": \"%s\", \"error_feedback\": %s, \"block\": %u, "
            "\"stochastic\": %s, \"clip_sigma\": %g, \"rank\": %u, \"warmup_steps\": %u, "
            "\"seed\": %llu, \"algo\": \"%s\", ", shoal_bench_comp_kind_name(o->kind),
            o->error_feedback ? "true" : "false", o->block, o->stochastic ? "true" : "false",
            (double)o->clip_sigma, o->rank, o->warmup_steps, (unsigned long long)o->seed,
            bench_comp_algos[o->algo]);
    if (c->shape_rows)
        fprintf(f, "\"shape\": \"%zux%zu\", ", c->shape_rows, c->shape_cols);
    else
        fprintf(f, "\"shape\": null, ");
    /* The texts are the tool's own: nothing in them needs escaping. */
    fprintf(f, "\"collective\": \"%s\", \"call\": \"%s\", \"rel_error_against\": \"%s\", "
            "\"ratio_of\": \"%s\"},\n", bc->name, shoal_bench_comp_call_name(c),
            shoal_bench_comp_exact_text(c), shoal_bench_comp_plain_text(c));
}

int shoal_bench_comp_layout(const shoal_bench_comp_t *c, size_t count, size_t *rows_p,
                            size_t *cols_p)
{
    if (c->shape_rows) {
        if (c->shape_cols > count / c->shape_rows || c->shape_rows * c->shape_cols != count)
            return -1;
        *rows_p = c->shape_rows;
        *cols_p = c->shape_cols;
        return 0;
    }
    if (count == 0) {
        *rows_p = *cols_p = 0;
        return 0;
    }
    size_t r = (size_t)sqrt((double)count);
    while (r > 1 && r * r > count)
        r--;
    while ((r + 1) * (r + 1) <= count)
        r++;
    while (count % r)
        r--;
    *rows_p = r;
    *cols_p = count / r;
    return 0;
}

/* ---- Inputs and the exact results ---------------------------------------- */

static double bench_comp_get(const unsigned char *buf, size_t i, shoal_dtype_t dtype)
{
    uint16_t h;
    float f;
    switch (dtype) {
    case SHOAL_FLOAT32:
        memcpy(&f, buf + i * sizeof(f), sizeof(f));
        return f;
    case SHOAL_FLOAT16:
        memcpy(&h, buf + i * sizeof(h), sizeof(h));
        return shoal_f16_to_f32(h);
    case SHOAL_BFLOAT16:
        memcpy(&h, buf + i * sizeof(h), sizeof(h));
        return shoal_bf16_to_f32(h);
    default:
        return 0;
    }
}

/* Rank r's value at index i of its send buffer before rounding to the
 * dtype: splitmix64 of the pair, spread over [-1, 1). */
static double bench_comp_raw(int r, size_t i)
{
    uint64_t z = (uint64_t)i * 0x9e3779b97f4a7c15ull + ((uint64_t)r + 1) * 0xd1b54a32d192ed03ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-52 - 1.0;
}

/* The value as the buffer holds it. */
static double bench_comp_value(shoal_dtype_t dtype, int r, size_t i)
{
    unsigned char e[8];
    shoal_dtype_set_f64(e, 0, dtype, bench_comp_raw(r, i));
    return bench_comp_get(e, 0, dtype);
}

/* This rank's input (send_count values) into buf. */
static void bench_comp_fill(const shoal_bench_comp_row_t *row, unsigned char *buf)
{
    for (size_t i = 0; i < row->send_count; i++)
        shoal_dtype_set_f64(buf, i, row->dtype, bench_comp_raw(row->rank, i));
}

/* Elements first .. first+n-1 of buf that are no longer this rank's input
 * at those indices. */
static long long bench_comp_input_changed(const shoal_bench_comp_row_t *row,
                                          const unsigned char *buf, size_t first, size_t n)
{
    size_t es = shoal_dtype_bytes(row->dtype);
    long long changed = 0;
    unsigned char e[8];
    for (size_t i = first; i < first + n; i++) {
        shoal_dtype_set_f64(e, 0, row->dtype, bench_comp_raw(row->rank, i));
        changed += memcmp(buf + i * es, e, es) != 0;
    }
    return changed;
}

/* Element i of the exact sum (or average) over the ranks of their inputs
 * at index first + i; for the majority vote the sign of the sum of their
 * signs (a zero votes 0; SUM and AVG vote alike). */
static double bench_comp_exact_sum(const shoal_bench_comp_t *c, const shoal_bench_comp_row_t *row,
                                   size_t at)
{
    double exact = 0;
    for (int r = 0; r < row->nranks; r++) {
        double v = bench_comp_value(row->dtype, r, at);
        exact += c->opt.kind == SHOAL_COMPRESS_MAJORITY ? (v > 0) - (v < 0) : v;
    }
    if (c->opt.kind == SHOAL_COMPRESS_MAJORITY)
        return (exact > 0) - (exact < 0);
    return row->op == SHOAL_AVG ? exact / row->nranks : exact;
}

/* Element i of this rank's exact result: the all-reduce's sum, the
 * reduce-scatter's sum of block `rank`, the all-gather's block j from rank
 * j's input, the all-to-all's block j from block `rank` of rank j's. */
static double bench_comp_exact(const shoal_bench_comp_t *c, const shoal_bench_comp_row_t *row,
                               size_t i)
{
    size_t mine = (size_t)row->rank * row->count;
    switch (c->opt.coll) {
    case SHOAL_COMPRESS_COLL_ALLGATHER:
        return bench_comp_value(row->dtype, (int)(i / row->count), i % row->count);
    case SHOAL_COMPRESS_COLL_ALLTOALL:
        return bench_comp_value(row->dtype, (int)(i / row->count), mine + i % row->count);
    case SHOAL_COMPRESS_COLL_REDUCE_SCATTER:
        return bench_comp_exact_sum(c, row, mine + i);
    case SHOAL_COMPRESS_COLL_ALLREDUCE:
        break;
    }
    return bench_comp_exact_sum(c, row, i);
}

/* ||got - exact||^2 and ||exact||^2 of this rank's result (recv_count
 * values), in double; a result that is not a number makes them so. */
static void bench_comp_sq_error(const shoal_bench_comp_t *c, const shoal_bench_comp_row_t *row,
                                const unsigned char *got, double sq_p[2])
{
    double e2 = 0, x2 = 0;
    for (size_t i = 0; i < row->recv_count; i++) {
        double exact = bench_comp_exact(c, row, i);
        double d = bench_comp_get(got, i, row->dtype) - exact;
        e2 += d * d;
        x2 += exact * exact;
    }
    sq_p[0] = e2;
    sq_p[1] = x2;
}

/* The relative error of squares e2 and x2; not a number counts as
 * infinite. */
static double bench_comp_rel(double e2, double x2)
{
    double rel = x2 > 0 ? sqrt(e2 / x2) : e2 > 0 ? INFINITY : 0;
    return rel >= 0 ? rel : INFINITY;
}

/* FNV-1a of the result, to see that every rank got the same. */
static uint64_t bench_comp_hash(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* ---- Timing and checking ----------------------------------------------------- */

/* Where a row's calls go. The host fills and reads row->send and
 * row->recv: the row's own buffers, which shoal takes too; or with --mem
 * device the rank's host mirrors, copied to and from the device buffers
 * (send, recv) that the stream-ordered calls take on the rank's stream. */
typedef struct {
    const shoal_bench_comp_t *c;
    const shoal_bench_comp_row_t *row; /* the buffers as the host sees them */
    shoal_bench_bufs_t *bufs;          /* --mem device; NULL for host memory */
    const void *send;                  /* the buffers shoal gets */
    void *recv;
    int blocking;                      /* --mem device: -z */
    const char *call_name;
} bench_comp_run_t;

/* In place, where the input sits in the receive buffer and where the
 * result lands, in elements, as the calls' contracts say (shoal.h): the
 * all-gather's input at block `rank`, the reduce-scatter's result there;
 * the all-reduce and the all-to-all at the start. */
static size_t bench_comp_in_at(const bench_comp_run_t *run)
{
    return run->c->opt.coll == SHOAL_COMPRESS_COLL_ALLGATHER
               ? (size_t)run->row->rank * run->row->count : 0;
}

static size_t bench_comp_out_at(const bench_comp_run_t *run)
{
    return run->c->opt.coll == SHOAL_COMPRESS_COLL_REDUCE_SCATTER
               ? (size_t)run->row->rank * run->row->count : 0;
}

/* Elements of the receive buffer a placement uses: the result out of
 * place, the larger of input and result in place; the guard follows. */
static size_t bench_comp_span(const shoal_bench_comp_row_t *row, int in_place)
{
    size_t larger = row->send_count > row->recv_count ? row->send_count : row->recv_count;
    return in_place ? larger : row->recv_count;
}

static double bench_comp_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static shoal_status_t bench_comp_fail(const shoal_bench_comp_row_t *row, const char *what,
                                      shoal_status_t s)
{
    fprintf(stderr, "# rank %d: %s: %s (%s)\n", row->rank, what, shoal_status_string(s),
            shoal_comm_last_error(row->comm));
    return s;
}

/* --mem device: bytes [off, off + len) of the send (recv 0) or receive
 * (recv 1) mirror onto the device, or back, waiting for the copy. Nothing
 * to do for host memory, where the mirrors are the buffers. */
static shoal_status_t bench_comp_to_dev(const bench_comp_run_t *run, int recv, size_t off,
                                        size_t len)
{
    return run->bufs ? shoal_bench_to_dev(run->bufs, run->row->rank, recv, off, len) : SHOAL_OK;
}

static shoal_status_t bench_comp_from_dev(const bench_comp_run_t *run, int recv, size_t off,
                                          size_t len)
{
    return run->bufs ? shoal_bench_from_dev(run->bufs, run->row->rank, recv, off, len)
                     : SHOAL_OK;
}

/* --mem device: waits for the stream and returns the error of the work
 * the calls queued there (said on stderr). Host calls are done when they
 * return. */
static shoal_status_t bench_comp_sync(const bench_comp_run_t *run, const char *what)
{
    return run->bufs ? shoal_bench_sync(run->row->comm, run->row->rank, run->bufs, what)
                     : SHOAL_OK;
}

/* The receive buffer before a call: poison, so that a result never
 * written shows; in place, this rank's input where it belongs; then the
 * guard. */
static void bench_comp_prepare(const bench_comp_run_t *run, int in_place)
{
    const shoal_bench_comp_row_t *row = run->row;
    size_t es = shoal_dtype_bytes(row->dtype);
    size_t bytes = bench_comp_span(row, in_place) * es;
    memset(row->recv, BENCH_COMP_POISON_BYTE, bytes);
    if (in_place)
        bench_comp_fill(row, row->recv + bench_comp_in_at(run) * es);
    memset(row->recv + bytes, BENCH_COMP_GUARD_BYTE, row->guard);
}

static long long bench_comp_guard_check(const shoal_bench_comp_row_t *row, int in_place)
{
    const unsigned char *g =
        row->recv + bench_comp_span(row, in_place) * shoal_dtype_bytes(row->dtype);
    long long bad = 0;
    for (size_t i = 0; i < row->guard; i++)
        bad += g[i] != BENCH_COMP_GUARD_BYTE;
    return bad;
}

/* One call; with --mem device only queued on the stream, its info written
 * once the stream has passed it. */
static shoal_status_t bench_comp_call(shoal_compressor_t comp, const bench_comp_run_t *run,
                                      int in_place, shoal_compress_info_t *info)
{
    size_t es = shoal_dtype_bytes(run->row->dtype);
    unsigned char *recv = run->recv;
    const void *src = in_place ? recv + bench_comp_in_at(run) * es : run->send;
    void *dst = in_place ? recv + bench_comp_out_at(run) * es : recv;
    switch (run->c->opt.coll) {
    case SHOAL_COMPRESS_COLL_ALLGATHER:
        return shoal_allgather_compressed(comp, src, dst, info);
    case SHOAL_COMPRESS_COLL_REDUCE_SCATTER:
        return shoal_reduce_scatter_compressed(comp, src, dst, run->row->op, info);
    case SHOAL_COMPRESS_COLL_ALLTOALL:
        return shoal_alltoall_compressed(comp, src, dst, info);
    case SHOAL_COMPRESS_COLL_ALLREDUCE:
        break;
    }
    if (run->bufs)
        return shoal_allreduce_compressed_stream(comp, src, dst, run->row->op, info,
                                                 run->bufs->stream);
    return shoal_allreduce_compressed(comp, src, dst, run->row->op, info);
}

/* Whether every rank holds bitwise the same result: the largest and the
 * smallest hash over the ranks. */
static shoal_status_t bench_comp_agree(const shoal_bench_comp_row_t *row, int *same_p)
{
    uint64_t h = bench_comp_hash(row->recv, row->recv_count * shoal_dtype_bytes(row->dtype));
    uint64_t both[2] = {h, ~h};
    shoal_status_t s = shoal_allreduce(both, both, 2, SHOAL_UINT64, SHOAL_MAX, row->comm);
    if (s != SHOAL_OK)
        return bench_comp_fail(row, "shoal_allreduce (result hashes)", s);
    *same_p = both[0] == ~both[1];
    return SHOAL_OK;
}

/* Warm-up, then the mean time of one call over the timed ones. With --mem
 * device the calls only queue their work, so the clock is read after the
 * stream has run it, as for the plain rows (allreduce_bench.c's
 * shoal_bench_time): waiting after each call with -z 1, once after the
 * loop with -z 0. */
static shoal_status_t bench_comp_time(shoal_compressor_t comp, const bench_comp_run_t *run,
                                      int in_place, shoal_bench_comp_result_t *res,
                                      shoal_compress_info_t *info)
{
    const shoal_bench_comp_row_t *row = run->row;
    char what[96];
    shoal_status_t s;
    snprintf(what, sizeof(what), "%s (warm-up)", run->call_name);
    for (int w = 0; w < row->warmup; w++) {
        s = bench_comp_call(comp, run, in_place, info);
        if (s != SHOAL_OK)
            return bench_comp_fail(row, what, s);
    }
    s = bench_comp_sync(run, what);
    if (s != SHOAL_OK)
        return s;
    int32_t one = 1;
    s = shoal_allreduce(&one, &one, 1, SHOAL_INT32, SHOAL_SUM, row->comm);
    if (s != SHOAL_OK)
        return bench_comp_fail(row, "barrier", s);
    double t0 = bench_comp_now_s();
    for (int it = 0; it < row->iters; it++) {
        s = bench_comp_call(comp, run, in_place, info);
        if (s != SHOAL_OK)
            return bench_comp_fail(row, run->call_name, s);
        if (run->blocking && (s = bench_comp_sync(run, run->call_name)) != SHOAL_OK)
            return s;
    }
    if (!run->blocking && (s = bench_comp_sync(run, run->call_name)) != SHOAL_OK)
        return s;
    res->us[in_place] = (bench_comp_now_s() - t0) * 1e6 / (double)row->iters;
    return SHOAL_OK;
}

/* One placement: warm-up, the timed calls, then with check one call on
 * fresh inputs whose result is measured into sq_p (this rank's squared
 * error and squared exact norm, bench_comp_sq_error's). The compressor is
 * reset before that call: what the timed calls left (error feedback's
 * residuals, PowerSGD's warm start) would otherwise enter the result, so
 * that its error would depend on -n and -w; measured from a fresh state it
 * is the error of one call (with PowerSGD's warmup=N, a plain all-reduce).
 * With --mem device the receive buffer's poison, input and guard go onto
 * the device before the calls, and the guard, the result and the send
 * buffer come back before they are looked at. */
static shoal_status_t bench_comp_placement(shoal_compressor_t comp, const bench_comp_run_t *run,
                                           int in_place, shoal_bench_comp_result_t *res,
                                           shoal_compress_info_t *info, double sq_p[2])
{
    const shoal_bench_comp_row_t *row = run->row;
    size_t es = shoal_dtype_bytes(row->dtype);
    size_t bytes = bench_comp_span(row, in_place) * es;
    bench_comp_prepare(run, in_place);
    shoal_status_t s = bench_comp_to_dev(run, 1, 0, bytes + row->guard);
    if (s == SHOAL_OK)
        s = bench_comp_time(comp, run, in_place, res, info);
    if (s == SHOAL_OK)
        s = bench_comp_from_dev(run, 1, bytes, row->guard);
    if (s != SHOAL_OK)
        return s;
    res->out_of_bounds += bench_comp_guard_check(row, in_place);
    if (!row->check)
        return SHOAL_OK;

    bench_comp_prepare(run, in_place);
    s = bench_comp_to_dev(run, 1, 0, bytes + row->guard);
    if (s != SHOAL_OK)
        return s;
    s = shoal_compressor_reset(comp);
    if (s != SHOAL_OK)
        return bench_comp_fail(row, "shoal_compressor_reset", s);
    char what[96];
    snprintf(what, sizeof(what), "%s (check)", run->call_name);
    s = bench_comp_call(comp, run, in_place, info);
    if (s != SHOAL_OK)
        return bench_comp_fail(row, what, s);
    s = bench_comp_sync(run, what);
    if (s == SHOAL_OK)
        s = bench_comp_from_dev(run, 1, 0, bytes + row->guard);
    if (s == SHOAL_OK && !in_place)
        s = bench_comp_from_dev(run, 0, 0, row->send_count * es);
    if (s != SHOAL_OK)
        return s;
    res->out_of_bounds += bench_comp_guard_check(row, in_place);
    size_t out_at = in_place ? bench_comp_out_at(run) : 0;
    bench_comp_sq_error(run->c, row, row->recv + out_at * es, sq_p);
    if (!in_place) {
        /* The send buffer is the caller's and read-only to shoal. */
        res->wrong += bench_comp_input_changed(row, row->send, 0, row->send_count);
    } else if (row->send_count > row->recv_count) {
        /* In place, the input around the result is the caller's too: the
         * reduce-scatter's blocks of the other ranks. */
        res->wrong += bench_comp_input_changed(row, row->recv, 0, out_at) +
                      bench_comp_input_changed(row, row->recv, out_at + row->recv_count,
                                               row->send_count - out_at - row->recv_count);
    }
    if (!shoal_bench_comp_same_everywhere(run->c))
        return SHOAL_OK;
    int same = 1;
    s = bench_comp_agree(row, &same);
    if (s != SHOAL_OK)
        return s;
    if (!same && row->rank == 0) {
        fprintf(stderr, "# %zu %s values (%s): the ranks' results differ\n", row->recv_count,
                shoal_dtype_name(row->dtype), in_place ? "in place" : "out of place");
        res->wrong++;
    }
    return SHOAL_OK;
}

/* The row's calls: on its own buffers, or with the settings' device on
 * the rank's device buffers, the host working on their mirrors. */
static int bench_comp_run_init(const shoal_bench_comp_t *c, const shoal_bench_comp_row_t *row,
                               shoal_bench_comp_row_t *host, bench_comp_run_t *run)
{
    *run = (bench_comp_run_t){c, row, NULL, row->send, row->recv, 0,
                              shoal_bench_comp_call_name(c)};
    if (!c->device)
        return 0;
    shoal_bench_bufs_t *b = shoal_bench_bufs_of(row->recv);
    if (!b || !b->dev || b->send != row->send) {
        fprintf(stderr, "# rank %d: --compress with --mem device: the row's buffers are not "
                "the rank's device buffers\n", row->rank);
        return -1;
    }
    *host = *row;
    host->send = b->hsend;
    host->recv = b->hrecv;
    run->row = host;
    run->bufs = b;
    run->blocking = c->blocking;
    return 0;
}

shoal_status_t shoal_bench_comp_row(const shoal_bench_comp_t *c, const shoal_bench_comp_row_t *row,
                                    shoal_bench_comp_result_t *res_p)
{
    shoal_bench_comp_result_t res;
    memset(&res, 0, sizeof(res));
    res.rel_error[0] = res.rel_error[1] = -1;
    shoal_bench_comp_row_t host;
    bench_comp_run_t run;
    if (bench_comp_run_init(c, row, &host, &run) != 0)
        return SHOAL_ERR_INVALID_ARG;
    shoal_compress_layout_t layout = {0, NULL, NULL};
    const shoal_compress_layout_t *lp = NULL;
    if (c->opt.kind == SHOAL_COMPRESS_POWERSGD || c->opt.kind == SHOAL_COMPRESS_ADAPTIVE) {
        if (shoal_bench_comp_layout(c, row->count, &res.rows, &res.cols) != 0) {
            if (row->rank == 0)
                fprintf(stderr, "allreduce_bench: --shape %zux%zu is not the %zu elements of "
                        "this row (%zu bytes of %s)\n", c->shape_rows, c->shape_cols,
                        row->count, row->count * shoal_dtype_bytes(row->dtype),
                        shoal_dtype_name(row->dtype));
            return SHOAL_ERR_INVALID_ARG;
        }
        if (row->count) {
            layout = (shoal_compress_layout_t){1, &res.rows, &res.cols};
            lp = &layout;
        }
    }
    shoal_compressor_t comp;
    shoal_status_t s = shoal_compressor_create(row->comm, &c->opt, row->count, row->dtype, lp,
                                               &comp);
    if (s != SHOAL_OK)
        return bench_comp_fail(row, "shoal_compressor_create", s);
    bench_comp_fill(run.row, run.row->send);
    s = bench_comp_to_dev(&run, 0, 0, row->send_count * shoal_dtype_bytes(row->dtype));
    /* With --mem device, info is the last call's once its stream has
     * passed it: every placement ends waiting for the stream. */
    shoal_compress_info_t info;
    memset(&info, 0, sizeof(info));
    double sq[4] = {0, 0, 0, 0}; /* e2 and x2 out of place, then in place */
    for (int in_place = 0; in_place < 2 && s == SHOAL_OK; in_place++)
        s = bench_comp_placement(comp, &run, in_place, &res, &info, sq + 2 * in_place);
    if (s != SHOAL_OK)
        goto out_destroy;

    /* Like the plain rows: a call lasts as long as its slowest rank. The
     * error is the worst rank's where all receive the same result, and
     * that of all the ranks' results together where each receives its
     * own. */
    double worst[4] = {res.us[0], res.us[1], bench_comp_rel(sq[0], sq[1]),
                       bench_comp_rel(sq[2], sq[3])};
    long long counts[2] = {res.wrong, res.out_of_bounds};
    uint64_t wire[2] = {info.bytes_sent, info.bytes_received};
    double ratio = info.ratio;
    s = shoal_allreduce(worst, worst, 4, SHOAL_FLOAT64, SHOAL_MAX, row->comm);
    if (s == SHOAL_OK)
        s = shoal_allreduce(sq, sq, 4, SHOAL_FLOAT64, SHOAL_SUM, row->comm);
    if (s == SHOAL_OK)
        s = shoal_allreduce(counts, counts, 2, SHOAL_INT64, SHOAL_SUM, row->comm);
    if (s == SHOAL_OK)
        s = shoal_allreduce(wire, wire, 2, SHOAL_UINT64, SHOAL_MAX, row->comm);
    if (s == SHOAL_OK)
        s = shoal_allreduce(&ratio, &ratio, 1, SHOAL_FLOAT64, SHOAL_MIN, row->comm);
    if (s != SHOAL_OK) {
        bench_comp_fail(row, "shoal_allreduce (results)", s);
        goto out_destroy;
    }
    res.us[0] = worst[0];
    res.us[1] = worst[1];
    for (int p = 0; row->check && p < 2; p++)
        res.rel_error[p] = shoal_bench_comp_same_everywhere(c)
                               ? worst[2 + p] : bench_comp_rel(sq[2 * p], sq[2 * p + 1]);
    res.wrong = counts[0];
    res.out_of_bounds = counts[1];
    res.bytes_sent = wire[0];
    res.bytes_received = wire[1];
    res.ratio = ratio;
    *res_p = res;
out_destroy:
    shoal_compressor_destroy(comp);
    return s;
}
