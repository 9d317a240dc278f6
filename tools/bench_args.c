/* allreduce_bench's command line (bench_args.h): each flag parsed as
 * nccl-tests takes it, the settings checked against each other, and the
 * sizes of the rows. */
#include "bench_args.h"

#include "base/config.h"
#include "base/dtype.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SHOAL_BENCH_MAX_FORKS 1024
#define SHOAL_BENCH_MAX_AGG 1000000

void shoal_bench_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [options]\n"
            "  -np <n>                  fork n ranks on this machine (default: ranks from\n"
            "                           the launcher: mpirun, srun, torchrun, SHOAL_RANK...)\n"
            "  --coll <name>            collective (default allreduce): allreduce,\n"
            "                           reducescatter, allgather, broadcast, reduce,\n"
            "                           alltoall, gather, scatter, sendrecv\n"
            "  -b,--minbytes <size>     smallest size (default 32M); sizes take K, M, G\n"
            "  -e,--maxbytes <size>     largest size (default 32M)\n"
            "  -i,--stepbytes <size>    increment between sizes (default 1M)\n"
            "  -f,--stepfactor <n>      multiply sizes by n instead (default: disabled)\n"
            "  -n,--iters <n>           timed iterations (default 20)\n"
            "  -m,--agg_iters <n>       operations per group in each timed iteration; the\n"
            "                           time shown is per operation (default 1: no group)\n"
            "  -w,--warmup_iters <n>    untimed iterations before each measurement (default 1)\n"
            "  -c,--check <0/1>         check results on every rank (default 1)\n"
            "  -o,--op <sum/prod/min/max/avg/all>   reduction (default sum)\n"
            "  -d,--datatype <int8,uint8,int32,uint32,int64,uint64,half,float,double,\n"
            "                bfloat16,f8e4m3,f8e5m2,all>   element type (default float)\n"
            "  -r,--root <rank>         root of broadcast, reduce, gather, scatter\n"
            "                           (default 0; -1: every rank in turn)\n"
            "  -z,--blocking <0/1>      host and shared memory: accepted for compatibility\n"
            "                           (shoal calls complete before they return); device\n"
            "                           memory: 1 waits for the stream after each timed\n"
            "                           iteration, 0 once after the loop (default 1)\n"
            "  -J,--json <file>         rank 0 also writes the settings and results as\n"
            "                           JSON to <file>\n"
            "  --mem <host/shared/device>\n"
            "                           where the send and receive buffers come from:\n"
            "                           host: malloc (the default); shared:\n"
            "                           shoal_mem_alloc (from 256K per rank, the\n"
            "                           collectives but reduce and sendrecv write into or\n"
            "                           read from peers' buffers); device: GPU memory of\n"
            "                           device (local rank %% device count), driven through\n"
            "                           the calls' _stream forms on one stream per rank\n"
            "                           (needs the CUDA module)\n"
            "  --waits <0/1>            each rank prints at the end how long its waits\n"
            "                           lasted, for each peer's data and for room in\n"
            "                           each peer's slots (default 0)\n"
            "  --cpu <0/1>              each rank prints at the end the CPU time (user and\n"
            "                           system, every thread) one operation of each timed\n"
            "                           row took, and per byte (default 0)\n"
            "  --compress <kind>        time the compressed collective instead: with\n"
            "                           --coll allreduce (the default) int8, int4, sign,\n"
            "                           majority, ternary, powersgd or powersgd:RANK; with\n"
            "                           --coll allgather int8 or int4; reducescatter int8,\n"
            "                           int4 or sign; alltoall int8 or int4 (no error\n"
            "                           feedback). Error feedback on but for majority and\n"
            "                           alltoall; float, half or bfloat16, sum or avg, no\n"
            "                           -m. The table adds the wire bytes per rank, the\n"
            "                           ratio (the full-precision collective's bytes over\n"
            "                           them) and ||result - exact|| / ||exact|| (with -c 1;\n"
            "                           majority: against the exact vote)\n"
            "  --compress-opts <list>   block=32|64|128, stochastic, nearest, ef, noef,\n"
            "                           clip=SIGMA, rank=N, warmup=N, seed=N,\n"
            "                           algo=auto|ring|two-shot|tree, each where the kind\n"
            "                           and the collective take it\n"
            "  --shape <RxC>            PowerSGD's matrix (default: the squarest one of\n"
            "                           each size; 64M of float is 4096x4096)\n"
            "  -h,--help                this text\n"
            "SHOAL_ALGO picks the algorithm (shoal_info -a lists them); the header shows it.\n",
            prog);
}

static int shoal_bench_parse_long(const char *flag, const char *text, long min, long *out_p)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min) {
        fprintf(stderr, "allreduce_bench: %s wants an integer >= %ld, not \"%s\"\n", flag, min,
                text);
        return -1;
    }
    *out_p = v;
    return 0;
}

static int shoal_bench_parse_bytes(const char *flag, const char *text, size_t *out_p)
{
    if (shoal_config_parse_size(text, out_p) != 0) {
        fprintf(stderr, "allreduce_bench: %s wants a size such as 8, 1K, 64M, not \"%s\"\n",
                flag, text);
        return -1;
    }
    return 0;
}

static int shoal_bench_parse_op(const char *text, shoal_bench_opts_t *o)
{
    if (!strcmp(text, "all")) {
        o->nops = 0;
        for (int op = 0; op < SHOAL_OP_COUNT; op++)
            o->ops[o->nops++] = (shoal_op_t)op;
        return 0;
    }
    for (int op = 0; op < SHOAL_OP_COUNT; op++) {
        if (!strcmp(text, shoal_bench_op_names[op])) {
            o->ops[0] = (shoal_op_t)op;
            o->nops = 1;
            return 0;
        }
    }
    fprintf(stderr, "allreduce_bench: unknown op \"%s\" (sum, prod, min, max, avg, all)\n",
            text);
    return -1;
}

static int shoal_bench_parse_dtype(const char *text, shoal_bench_opts_t *o)
{
    if (!strcmp(text, "all")) {
        o->ndtypes = 0;
        for (int t = 0; t < SHOAL_DTYPE_COUNT; t++)
            o->dtypes[o->ndtypes++] = (shoal_dtype_t)t;
        return 0;
    }
    for (int t = 0; t < SHOAL_DTYPE_COUNT; t++) {
        if (!strcmp(text, shoal_bench_types[t].name)) {
            o->dtypes[0] = (shoal_dtype_t)t;
            o->ndtypes = 1;
            return 0;
        }
    }
    fprintf(stderr, "allreduce_bench: unknown datatype \"%s\" (see -h)\n", text);
    return -1;
}

static int shoal_bench_parse_mem(const char *text, shoal_bench_opts_t *o)
{
    for (int m = 0; m < SHOAL_BENCH_MEM_COUNT; m++) {
        if (!strcmp(text, shoal_bench_mem_names[m])) {
            o->mem = (shoal_bench_mem_t)m;
            return 0;
        }
    }
    fprintf(stderr, "allreduce_bench: unknown --mem \"%s\" (host: malloc, shared: "
            "shoal_mem_alloc, device: GPU memory)\n", text);
    return -1;
}

static int shoal_bench_parse_coll(const char *text, shoal_bench_opts_t *o)
{
    for (size_t c = 0; c < shoal_bench_ncolls; c++) {
        if (!strcmp(text, shoal_bench_colls[c].name)) {
            o->coll = &shoal_bench_colls[c];
            return 0;
        }
    }
    fprintf(stderr, "allreduce_bench: unknown collective \"%s\" (", text);
    for (size_t c = 0; c < shoal_bench_ncolls; c++)
        fprintf(stderr, "%s%s", c ? ", " : "", shoal_bench_colls[c].name);
    fprintf(stderr, ")\n");
    return -1;
}

/* key names the flag inside the parser; has_short says whether "-<key>"
 * is accepted too. --coll has no short form: nccl-tests has one program per
 * collective, and the letters it uses (-C is report_cputime) stay free. */
typedef struct {
    char key;
    int has_short;
    const char *long_name;
} shoal_bench_flag_t;

static const shoal_bench_flag_t shoal_bench_flags[] = {
    {'b', 1, "minbytes"}, {'e', 1, "maxbytes"},  {'i', 1, "stepbytes"},
    {'f', 1, "stepfactor"}, {'n', 1, "iters"},   {'m', 1, "agg_iters"},
    {'w', 1, "warmup_iters"}, {'c', 1, "check"}, {'o', 1, "op"},
    {'d', 1, "datatype"}, {'r', 1, "root"},      {'z', 1, "blocking"},
    {'K', 0, "coll"},     {'J', 1, "json"},      {'h', 1, "help"},
    {'X', 0, "compress"}, {'Y', 0, "compress-opts"}, {'S', 0, "shape"},
    {'M', 0, "mem"},      {'W', 0, "waits"},   {'U', 0, "cpu"},
};

#define SHOAL_BENCH_NFLAGS (sizeof(shoal_bench_flags) / sizeof(shoal_bench_flags[0]))

/* Applies one flag with its value. */
static int shoal_bench_apply(char flag, const char *val, shoal_bench_opts_t *o)
{
    char name[3] = {'-', flag, '\0'};
    long v;
    switch (flag) {
    case 'b': return shoal_bench_parse_bytes(name, val, &o->min_bytes);
    case 'e': return shoal_bench_parse_bytes(name, val, &o->max_bytes);
    case 'i': return shoal_bench_parse_bytes(name, val, &o->step_bytes);
    case 'f': return shoal_bench_parse_long(name, val, 1, &o->step_factor);
    case 'n':
        if (shoal_bench_parse_long(name, val, 1, &v) || v > 1000000000)
            return -1;
        o->iters = (int)v;
        return 0;
    case 'm':
        if (shoal_bench_parse_long(name, val, 1, &v))
            return -1;
        if (v > SHOAL_BENCH_MAX_AGG) {
            fprintf(stderr, "allreduce_bench: -m %ld is more than %d\n", v,
                    SHOAL_BENCH_MAX_AGG);
            return -1;
        }
        o->agg_iters = (int)v;
        return 0;
    case 'w':
        if (shoal_bench_parse_long(name, val, 0, &v) || v > 1000000000)
            return -1;
        o->warmup = (int)v;
        return 0;
    case 'c':
        if (shoal_bench_parse_long(name, val, 0, &v))
            return -1;
        o->check = v != 0;
        return 0;
    case 'r':
        if (shoal_bench_parse_long(name, val, -1, &v) || v > INT_MAX)
            return -1;
        o->root = (int)v;
        return 0;
    case 'z':
        if (shoal_bench_parse_long(name, val, 0, &v))
            return -1;
        o->blocking = v != 0;
        return 0;
    case 'o': return shoal_bench_parse_op(val, o);
    case 'd': return shoal_bench_parse_dtype(val, o);
    case 'K': return shoal_bench_parse_coll(val, o);
    case 'J': o->json_path = val; return 0;
    case 'X': o->comp_kind = val; return 0;
    case 'Y': o->comp_opts = val; return 0;
    case 'S': o->comp_shape = val; return 0;
    case 'M': return shoal_bench_parse_mem(val, o);
    case 'W':
        if (shoal_bench_parse_long("--waits", val, 0, &v))
            return -1;
        o->waits = v != 0;
        return 0;
    case 'U':
        if (shoal_bench_parse_long("--cpu", val, 0, &v))
            return -1;
        o->cpu = v != 0;
        return 0;
    }
    return -1;
}

/* What --compress cannot time (beyond what shoal_bench_comp_setup
 * refuses: a collective without a compressed form, a kind the collective
 * does not take): a type or op that the compressors do not take, groups
 * (one call per compressor at a time), a --shape that some row's count
 * does not fill, device buffers of a collective or kind that the
 * stream-ordered call does not take. With --mem device the rows time that
 * call, and -z says when they wait for the stream. */
static int shoal_bench_comp_check(shoal_bench_opts_t *o)
{
    if (o->mem == SHOAL_BENCH_MEM_DEVICE && shoal_bench_comp_on_device(&o->comp, o->blocking))
        return -1;
    for (int t = 0; t < o->ndtypes; t++) {
        shoal_dtype_t d = o->dtypes[t];
        if (d != SHOAL_FLOAT32 && d != SHOAL_FLOAT16 && d != SHOAL_BFLOAT16) {
            fprintf(stderr, "allreduce_bench: --compress takes -d float, half or bfloat16, "
                    "not %s\n", shoal_bench_types[d].name);
            return -1;
        }
    }
    /* The all-gather and the all-to-all reduce nothing: -o is not theirs,
     * as for the plain rows. */
    for (int p = 0; o->coll->reduces && p < o->nops; p++) {
        if (o->ops[p] != SHOAL_SUM && o->ops[p] != SHOAL_AVG) {
            fprintf(stderr, "allreduce_bench: --compress takes -o sum or avg, not %s\n",
                    shoal_bench_op_names[o->ops[p]]);
            return -1;
        }
    }
    if (o->agg_iters != 1) {
        fprintf(stderr, "allreduce_bench: --compress takes no -m: a compressor runs one call "
                "at a time\n");
        return -1;
    }
    if (!o->comp.shape_rows)
        return 0;
    size_t size = o->min_bytes; /* every row, as shoal_bench_sizes goes through them */
    do {
        for (int t = 0; t < o->ndtypes; t++) {
            size_t count = size / shoal_dtype_bytes(o->dtypes[t]), rows, cols;
            if (shoal_bench_comp_layout(&o->comp, count, &rows, &cols) != 0) {
                fprintf(stderr, "allreduce_bench: --shape %zux%zu is not the %zu elements of "
                        "the %zu-byte row of %s\n", o->comp.shape_rows, o->comp.shape_cols,
                        count, size, shoal_bench_types[o->dtypes[t]].name);
                return -1;
            }
        }
        size = shoal_bench_next_size(o, size);
    } while (size != 0);
    return 0;
}

/* Flags as nccl-tests takes them: "-b 8", "-b8", "--minbytes 8",
 * "--minbytes=8"; and "-np 4", which getopt cannot express.
 * Returns 0 to run, 1 after -h, -1 on a bad command line. */
int shoal_bench_parse_args(int argc, char **argv, shoal_bench_opts_t *o)
{
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        const char *val = NULL;
        char flag = 0;
        if (!strcmp(arg, "-np") || !strcmp(arg, "--np")) {
            long v;
            if (a + 1 >= argc || shoal_bench_parse_long("-np", argv[++a], 1, &v))
                return -1;
            if (v > SHOAL_BENCH_MAX_FORKS) {
                fprintf(stderr, "allreduce_bench: -np %ld is more than %d\n", v,
                        SHOAL_BENCH_MAX_FORKS);
                return -1;
            }
            o->nprocs = (int)v;
            continue;
        }
        if (arg[0] == '-' && arg[1] == '-') {
            const char *eq = strchr(arg + 2, '=');
            size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
            for (size_t f = 0; f < SHOAL_BENCH_NFLAGS; f++) {
                const char *ln = shoal_bench_flags[f].long_name;
                if (strlen(ln) == len && !strncmp(arg + 2, ln, len))
                    flag = shoal_bench_flags[f].key;
            }
            val = eq ? eq + 1 : NULL;
        } else if (arg[0] == '-' && arg[1]) {
            for (size_t f = 0; f < SHOAL_BENCH_NFLAGS; f++)
                if (shoal_bench_flags[f].has_short && shoal_bench_flags[f].key == arg[1])
                    flag = arg[1];
            val = arg[2] ? arg + 2 : NULL;
        }
        if (!flag) {
            fprintf(stderr, "allreduce_bench: unknown argument \"%s\"\n", arg);
            return -1;
        }
        if (flag == 'h')
            return 1;
        if (!val) {
            if (a + 1 >= argc) {
                fprintf(stderr, "allreduce_bench: %s needs a value\n", arg);
                return -1;
            }
            val = argv[++a];
        }
        if (shoal_bench_apply(flag, val, o))
            return -1;
    }
    /* With -np the ranks are known now; from a launcher, each rank checks
     * once it knows their number (shoal_bench_rank). */
    if (o->nprocs && o->coll->rooted && o->root >= o->nprocs) {
        fprintf(stderr, "allreduce_bench: -r %d is no rank of %d\n", o->root, o->nprocs);
        return -1;
    }
    if (o->max_bytes < o->min_bytes) {
        fprintf(stderr, "allreduce_bench: maxbytes %zu is below minbytes %zu\n", o->max_bytes,
                o->min_bytes);
        return -1;
    }
    if (o->step_factor <= 1 && o->step_bytes == 0) {
        fprintf(stderr, "allreduce_bench: stepbytes must be > 0 without a step factor\n");
        return -1;
    }
    if (shoal_bench_comp_setup(&o->comp, o->coll->name, o->comp_kind, o->comp_opts,
                               o->comp_shape) ||
        (o->comp.on && shoal_bench_comp_check(o)))
        return -1;
    return 0;
}

/* Next row's size; 0 after the last. Multiplying from 0 starts at 1. */
size_t shoal_bench_next_size(const shoal_bench_opts_t *o, size_t size)
{
    size_t next;
    if (o->step_factor > 1) {
        if (size > SIZE_MAX / (size_t)o->step_factor)
            return 0;
        next = size ? size * (size_t)o->step_factor : 1;
    } else {
        if (size > SIZE_MAX - o->step_bytes)
            return 0;
        next = size + o->step_bytes;
    }
    return next <= o->max_bytes ? next : 0;
}
