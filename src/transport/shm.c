/* Shared-memory transport for ranks of one host.
 *
 * Each rank creates one POSIX shared-memory segment that holds one receive
 * FIFO per other rank of its host. A sender maps its FIFO in the receiver's
 * segment and writes each message straight into the receiver's slot, so a
 * message is copied exactly once (and a reduction can write its output
 * directly into the peer's memory). Every FIFO is a single-producer,
 * single-consumer ring: the sender alone writes head and the slot lengths,
 * the receiver alone writes tail, and release/acquire ordering on those two
 * counters publishes the slot contents.
 *
 * A rank that has waited longer than SHOAL_SHM_SPIN sleeps on the futex
 * word in its segment's first page (its doorbell) instead of polling, so
 * that more ranks than cores do not starve the ones they wait for; a peer
 * that posts into its FIFO or frees a slot it sends into rings it while
 * the flag beside the word says it sleeps. A rank that has just rung a
 * sleeper polls longer before it sleeps itself (SHM_RANG_SPIN_NS, where
 * the spin is the probe's and the host's ranks do not outnumber its
 * CPUs): the sleeper it woke answers only once it is up again, which on a
 * virtual machine can take a few times the probe's median. Sleeping
 * through that wait would have the woken rank find its ringer asleep in
 * turn, and the two would hand one wake-up back and forth per collective
 * (150 us each instead of 3 on 2 ranks here) for as long as neither
 * outwaits the other.
 *
 * The segment's name lives in /dev/shm only until every local peer has
 * mapped it: the last one to map unlinks it, ready makes sure of it, and
 * close and every error path unlink it too. Names are made of the owner's
 * pid and its random tag from the open parameters, which every rank
 * knows before any segment exists: when a rank dies in the middle of
 * wireup, the others' failed wireup removes its segment as well.
 *
 * Private host memory is reached by cross-memory attach (shm_cma.c): each
 * rank probes every local peer at connect and publishes in its segment's
 * first page whether all its probes passed and its break-even size; at
 * ready, after the barrier that follows every connect, each rank reads
 * them all and so comes to the same answer as the others. */
#include "transport.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "shm_rmem.h"
#include "shm_tune.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SHOAL_SHM_MAGIC 0x73686f616c73686dull /* "shoalshm" */
/* Counters written by different processes sit this far apart: two cache
 * lines, because the adjacent-line prefetcher pulls lines in pairs. */
#define SHOAL_SHM_LINE 128
#define SHOAL_SHM_NAME_MAX 64
#define SHOAL_SHM_NAME_PREFIX "/shoal-shm-"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "shared-memory counters need lock-free 64-bit atomics");

/* A message of at most this many bytes travels whole in its slot's
 * metadata line. */
#define SHOAL_SHM_INLINE 32

/* What the sender writes about each slot, one cache line per slot. seq,
 * stored last (release), is the count of slots posted once this one is,
 * modulo 2^32: the receiver polls it, so that the line that tells it a
 * message came also brings its length, header and, up to
 * SHOAL_SHM_INLINE bytes, a copy of the message itself; a small message
 * costs the receiver one transfer of a line instead of three (head,
 * metadata, data). A stale seq is at most the count already received, so
 * it never reads as the next one. */
typedef struct {
    _Alignas(64) atomic_uint seq;
    uint32_t len;
    unsigned char hdr[SHOAL_TL_HDR_BYTES];
    unsigned char bytes[SHOAL_SHM_INLINE];
} shoal_shm_meta_t;

_Static_assert(sizeof(shoal_shm_meta_t) == 64, "slot metadata must fill one cache line");

/* Control block at the start of each FIFO; the slots follow it, page
 * aligned. What each process writes sits apart from what the other writes;
 * the slot metadata shares the sender's block with head, so a receiver that
 * sees a new head usually finds the length in the same cache line. */
typedef struct {
    /* Written once by the owner (the receiver) at open. */
    _Alignas(SHOAL_SHM_LINE) uint64_t magic;
    uint32_t owner;
    uint32_t sender;
    uint64_t nslots;
    uint64_t chunk_size;
    /* Slots released, written by the receiver only. */
    _Alignas(SHOAL_SHM_LINE) atomic_ullong tail;
    /* Slots posted, written by the sender only, after each slot's seq:
     * what a sleeping receiver and flush look at. The nslots slots'
     * metadata follows, from the next pair of lines on. */
    _Alignas(SHOAL_SHM_LINE) atomic_ullong head;
} shoal_shm_fifo_t;

#define SHOAL_SHM_META_OFF (offsetof(shoal_shm_fifo_t, head) + SHOAL_SHM_LINE)

/* First page of a segment. */
typedef struct {
    uint64_t magic;
    uint64_t nfifo;
    uint64_t nslots;
    uint64_t chunk_size;
    /* Local peers that mapped their FIFO; the last one unlinks the name. */
    atomic_ullong mapped;
    /* The owner's doorbell, a futex word: a peer that posts into one of the
     * owner's FIFOs, or frees a slot of a FIFO the owner sends into, bumps
     * it and wakes the owner if asleep says it sleeps on it. */
    _Alignas(SHOAL_SHM_LINE) atomic_uint bell;
    atomic_uint asleep;
    /* The owner's cross-memory probes, written by it during connect and
     * read by the peers at ready: 1 when one failed (or it is off), and
     * its break-even size. */
    _Alignas(SHOAL_SHM_LINE) atomic_uint cma_failed;
    atomic_ullong cma_min;
    /* What the host's first rank chose at ready (shm_tune.c), for every
     * local rank: tuned turns from TUNE_PENDING once the rest is written. */
    _Alignas(SHOAL_SHM_LINE) atomic_uint tuned;
    uint64_t tune_piece;   /* 0: keep the piece of the open */
    uint64_t tune_depth;
    uint64_t tune_spin_ns; /* 0: keep the spin of the open */
} shoal_shm_seg_t;

enum { TUNE_PENDING = 0, TUNE_DONE, TUNE_FAILED };

/* Address blob: everything a peer needs to find and check our segment. */
typedef struct {
    uint64_t magic;
    uint64_t size;
    uint64_t nslots;
    uint64_t chunk_size;
    uint64_t cma_probe;    /* the cross-memory probe buffer; 0: none */
    char name[SHOAL_SHM_NAME_MAX];
} shoal_shm_addr_t;

_Static_assert(sizeof(shoal_shm_addr_t) <= SHOAL_TL_ADDR_MAX, "shm address too big");

typedef struct {
    shoal_tl_ctx_t base;
    char name[SHOAL_SHM_NAME_MAX];
    int linked;            /* name still present in /dev/shm */
    unsigned char *seg;    /* our segment: header page, then our receive FIFOs */
    size_t seg_len;
    size_t page;
    size_t nfifo;
    size_t ctrl_len;       /* control block of one FIFO, page-rounded */
    size_t stride;         /* bytes of one FIFO: control block + slots */
    size_t nslots;         /* slot metadata entries of one FIFO: the most slots */
    size_t ring;           /* bytes of slots of one FIFO */
    size_t chunk;          /* the piece it opened with (slot bytes until ready) */
    size_t depth;          /* slots it opened with */
    int tune_piece;        /* the probe at ready chooses piece and depth */
    uint64_t spin_ns;      /* how long a wait polls before it sleeps */
    uint64_t rang_spin_ns; /* how long after waking a peer a wait polls */
    atomic_ullong rang_ns; /* when this rank last woke a sleeping peer */
    uint64_t seen;         /* FIFO activity when the last sleep call returned */
    struct shoal_shm_ep **eps; /* connected endpoints by peer, for the activity sum */
    shoal_shm_cma_t cma;   /* this rank's probe */
    /* Agreed at ready: cross-memory keys from this many bytes; UINT64_MAX:
     * none. */
    uint64_t cma_min;
} shoal_shm_ctx_t;

/* One endpoint carries both directions; the two halves never share state. */
typedef struct shoal_shm_ep {
    shoal_ep_t base;
    size_t nslots;
    size_t chunk;

    /* Sending: our FIFO inside the peer's segment. */
    shoal_shm_fifo_t *tx;
    shoal_shm_meta_t *tx_meta;
    unsigned char *tx_data;
    uint64_t tx_head;      /* slots we posted (tx->head mirrors it) */
    uint64_t tx_tail;      /* last tx->tail we read */
    size_t tx_idx;         /* tx_head % nslots, kept to avoid a division */
    void *tx_map;
    size_t tx_map_len;
    shoal_shm_seg_t *peer_hdr; /* the peer's first page: its doorbell */

    /* Receiving: the peer's FIFO inside our segment. */
    shoal_shm_fifo_t *rx;
    const shoal_shm_meta_t *rx_meta;
    const unsigned char *rx_data;
    uint64_t rx_tail;      /* slots we released (rx->tail mirrors it) */
    uint64_t rx_head;      /* slots we know were posted (from their seq) */
    size_t rx_idx;         /* rx_tail % nslots */

    /* Peer memory attached for zero-copy writes (shm_rmem.c). */
    shoal_shm_rcache_t rcache;
} shoal_shm_ep_t;

/* How long after waking a sleeping peer this rank's waits poll before
 * they sleep, where the spin is the probe's: longer than any wake-up seen
 * here (the probe's median was 25 to 50 us, single ones took 150). */
#define SHM_RANG_SPIN_NS 1000000u

static int shoal_shm_local_index(const shoal_tl_params_t *par, int rank)
{
    int idx = 0;
    for (int q = 0; q < rank; q++)
        idx += par->host_of[q] == par->host_of[rank];
    return idx;
}

/* Index of sender's FIFO in owner's segment: the owner's local peers in rank
 * order, skipping the owner itself. */
static size_t shoal_shm_fifo_index(const shoal_tl_params_t *par, int owner, int sender)
{
    int o = shoal_shm_local_index(par, owner);
    int s = shoal_shm_local_index(par, sender);
    return (size_t)(s > o ? s - 1 : s);
}

static size_t shoal_shm_round_up(size_t v, size_t align)
{
    return (v + align - 1) / align * align;
}

static shoal_shm_meta_t *shoal_shm_fifo_meta(shoal_shm_fifo_t *fifo)
{
    return (shoal_shm_meta_t *)((unsigned char *)fifo + SHOAL_SHM_META_OFF);
}

static shoal_status_t shoal_shm_query(const shoal_tl_params_t *par, int peer,
                                      shoal_tl_caps_t *caps_p)
{
    caps_p->reachable = shoal_config_get()->shm.enable && peer != par->rank &&
                        par->host_of[peer] == par->host_of[par->rank];
    caps_p->latency_us = 0.5;
    caps_p->bandwidth_gbs = 10.0;
    return SHOAL_OK;
}

/* Slots of one FIFO: the depth and the bytes of slots. Settings decide
 * them, or, where the piece is left to the probe at ready, its FIFOs keep
 * SHOAL_SHM_RING_BYTES (or SHOAL_SHM_NSLOTS of the largest piece) and
 * have metadata for as many slots as the smallest piece fills. Then
 * sizes of one FIFO and of the whole segment; refuses settings whose
 * product overflows. */
static shoal_status_t shoal_shm_layout(shoal_shm_ctx_t *ctx, size_t nfifo, size_t forced)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t meta, slots, stride, fifos, seg;
    /* A slot's length travels in 32 bits (shoal_shm_meta_t). */
    if (ctx->chunk > UINT32_MAX)
        goto err_too_big;
    if (ctx->tune_piece && !forced) {
        slots = SHOAL_SHM_RING_BYTES;
        ctx->nslots = slots / SHOAL_SHM_PIECE_MIN;
        ctx->depth = slots / ctx->chunk;
    } else {
        ctx->depth = ctx->nslots = forced ? forced : SHOAL_SHM_NSLOTS_DEFAULT;
        if (__builtin_mul_overflow(ctx->depth,
                                   ctx->tune_piece ? SHOAL_SHM_PIECE_MAX : ctx->chunk, &slots))
            goto err_too_big;
    }
    ctx->ring = slots;
    if (__builtin_mul_overflow(ctx->nslots, sizeof(shoal_shm_meta_t), &meta))
        goto err_too_big;
    ctx->ctrl_len = shoal_shm_round_up(SHOAL_SHM_META_OFF + meta, page);
    if (__builtin_add_overflow(ctx->ctrl_len, slots, &stride) ||
        stride > SIZE_MAX - page)
        goto err_too_big;
    stride = shoal_shm_round_up(stride, page);
    if (__builtin_mul_overflow(stride, nfifo, &fifos) ||
        __builtin_add_overflow(fifos, page, &seg) || seg > (size_t)INT64_MAX)
        goto err_too_big;
    ctx->page = page;
    ctx->nfifo = nfifo;
    ctx->stride = stride;
    ctx->seg_len = seg;
    return SHOAL_OK;

err_too_big:
    shoal_error(SHM, "SHOAL_SHM_NSLOTS=%zu x SHOAL_CHUNK_SIZE=%zu x %zu peers is too large",
                ctx->depth, ctx->chunk, nfifo);
    return SHOAL_ERR_INVALID_ARG;
}

/* The name of rank's segment. The pid tells operators whose segment it
 * is; the random tag makes the name unguessable so that nobody outside the
 * job can pre-create or open it. */
static void shoal_shm_name(const shoal_tl_params_t *par, int rank,
                           char name[SHOAL_SHM_NAME_MAX])
{
    int n = snprintf(name, SHOAL_SHM_NAME_MAX, SHOAL_SHM_NAME_PREFIX "%lu-",
                     (unsigned long)par->pids[rank]);
    for (size_t i = 0; i < SHOAL_TL_TAG_BYTES; i++)
        n += snprintf(name + n, SHOAL_SHM_NAME_MAX - (size_t)n, "%02x", par->tags[rank][i]);
}

/* Our receive FIFO for the local peer of index idx. */
static shoal_shm_fifo_t *shoal_shm_own_fifo(const shoal_shm_ctx_t *ctx, size_t idx)
{
    return (shoal_shm_fifo_t *)(ctx->seg + ctx->page + idx * ctx->stride);
}

/* Fill in the header and the control blocks of our receive FIFOs, one per
 * local peer. */
static void shoal_shm_init_seg(shoal_shm_ctx_t *ctx, const shoal_tl_params_t *par)
{
    shoal_shm_seg_t *hdr = (shoal_shm_seg_t *)ctx->seg;
    hdr->magic = SHOAL_SHM_MAGIC;
    hdr->nfifo = ctx->nfifo;
    hdr->nslots = ctx->nslots;
    hdr->chunk_size = ctx->chunk;
    atomic_init(&hdr->mapped, 0);
    atomic_init(&hdr->bell, 0);
    atomic_init(&hdr->asleep, 0);
    atomic_init(&hdr->cma_failed, ctx->cma.failed ? 1u : 0u);
    atomic_init(&hdr->cma_min, ctx->cma.min_bytes);
    atomic_init(&hdr->tuned, TUNE_PENDING);
    size_t idx = 0;
    for (int q = 0; q < par->nranks; q++) {
        if (q == par->rank || par->host_of[q] != par->host_of[par->rank])
            continue;
        shoal_shm_fifo_t *fifo = shoal_shm_own_fifo(ctx, idx);
        fifo->magic = SHOAL_SHM_MAGIC;
        fifo->owner = (uint32_t)par->rank;
        fifo->sender = (uint32_t)q;
        fifo->nslots = ctx->nslots;
        fifo->chunk_size = ctx->chunk;
        atomic_init(&fifo->head, 0);
        atomic_init(&fifo->tail, 0);
        idx++;
    }
}

static shoal_status_t shoal_shm_open(const shoal_tl_params_t *par, shoal_tl_ctx_t **ctx_p)
{
    const shoal_config_t *cfg = shoal_config_get();
    if (!cfg->shm.enable)
        return SHOAL_ERR_UNSUPPORTED;
    size_t nfifo = 0;
    for (int q = 0; q < par->nranks; q++)
        nfifo += q != par->rank && par->host_of[q] == par->host_of[par->rank];
    if (nfifo == 0)
        return SHOAL_ERR_UNSUPPORTED; /* alone on this host */

    int fd = -1;
    shoal_status_t s = SHOAL_ERR_NO_MEMORY;
    shoal_shm_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        shoal_error(SHM, "shm open: out of memory");
        goto err;
    }
    ctx->base.params = *par;
    ctx->base.ops = &shoal_shm_ops;
    ctx->eps = calloc((size_t)par->nranks, sizeof(*ctx->eps));
    if (!ctx->eps) {
        shoal_error(SHM, "shm open: out of memory");
        goto err_free_ctx;
    }
    ctx->chunk = par->chunk_size;
    /* The probe chooses the piece only where it is free to (no
     * SHOAL_CHUNK_SIZE) and every rank is on this host, so that one
     * rank's choice holds for the whole communicator. */
    ctx->tune_piece = cfg->algo.chunk_size == 0 && nfifo + 1 == (size_t)par->nranks &&
                      par->chunk_size <= SHOAL_SHM_PIECE_MAX;
    int spin_auto = cfg->shm.spin_ns == SHOAL_SHM_SPIN_AUTO;
    ctx->spin_ns = spin_auto ? SHOAL_SHM_SPIN_DEFAULT : cfg->shm.spin_ns;
    /* Where ranks outnumber CPUs, the polling would take the CPU from the
     * ranks that share it. */
    if (spin_auto && !shoal_tl_crowded(par))
        ctx->rang_spin_ns = SHM_RANG_SPIN_NS;
    ctx->cma_min = UINT64_MAX;
    s = shoal_shm_layout(ctx, nfifo, cfg->shm.nslots);
    if (s != SHOAL_OK)
        goto err_free_ctx;
    s = shoal_shm_cma_open(&ctx->cma, par);
    if (s != SHOAL_OK)
        goto err_free_ctx;
    shoal_shm_name(par, par->rank, ctx->name);

    fd = shm_open(ctx->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        shoal_error(SHM, "shm_open(%s): %s", ctx->name, strerror(errno));
        s = SHOAL_ERR_SYSTEM;
        goto err_free_ctx;
    }
    ctx->linked = 1;
    if (ftruncate(fd, (off_t)ctx->seg_len) != 0) {
        shoal_error(SHM, "ftruncate(%s, %zu): %s", ctx->name, ctx->seg_len, strerror(errno));
        s = SHOAL_ERR_SYSTEM;
        goto err_close_fd;
    }
    /* Reserve the pages now: on a full /dev/shm a sparse segment would
     * fail later with SIGBUS in the middle of a copy. */
    int rc = posix_fallocate(fd, 0, (off_t)ctx->seg_len);
    if (rc != 0) {
        shoal_error(SHM, "cannot reserve %zu bytes in /dev/shm for %s (%zu peers x %zu "
                    "B; lower SHOAL_SHM_NSLOTS or SHOAL_CHUNK_SIZE): %s",
                    ctx->seg_len, ctx->name, nfifo, ctx->ring, strerror(rc));
        s = SHOAL_ERR_NO_MEMORY;
        goto err_close_fd;
    }
    void *seg = mmap(NULL, ctx->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                     fd, 0);
    if (seg == MAP_FAILED) {
        shoal_error(SHM, "mmap(%s, %zu): %s", ctx->name, ctx->seg_len, strerror(errno));
        s = SHOAL_ERR_SYSTEM;
        goto err_close_fd;
    }
    close(fd);
    ctx->seg = seg;
    shoal_shm_init_seg(ctx, par);
    shoal_debug(SHM, "rank %d: segment %s, %zu FIFOs of %zu B", par->rank, ctx->name, nfifo,
                ctx->ring);
    *ctx_p = &ctx->base;
    return SHOAL_OK;

err_close_fd:
    close(fd);
    shm_unlink(ctx->name);
err_free_ctx:
    shoal_shm_cma_close(&ctx->cma);
    free(ctx->eps);
    free(ctx);
err:
    return s;
}

static shoal_status_t shoal_shm_addr_pack(shoal_tl_ctx_t *base, void *blob, size_t *len_p)
{
    shoal_shm_ctx_t *ctx = (shoal_shm_ctx_t *)base;
    shoal_shm_addr_t addr;
    if (*len_p < sizeof(addr))
        return SHOAL_ERR_INVALID_ARG;
    memset(&addr, 0, sizeof(addr));
    addr.magic = SHOAL_SHM_MAGIC;
    addr.size = ctx->seg_len;
    addr.nslots = ctx->nslots;
    addr.chunk_size = ctx->chunk;
    addr.cma_probe = shoal_shm_cma_probe_addr(&ctx->cma);
    memcpy(addr.name, ctx->name, sizeof(addr.name));
    memcpy(blob, &addr, sizeof(addr));
    *len_p = sizeof(addr);
    return SHOAL_OK;
}

/* The peer's blob must describe a segment laid out exactly as ours: same
 * host, so same number of local peers, and same settings. */
static shoal_status_t shoal_shm_check_addr(const shoal_shm_ctx_t *ctx, int peer,
                                           const shoal_shm_addr_t *addr)
{
    if (addr->magic != SHOAL_SHM_MAGIC ||
        memchr(addr->name, '\0', sizeof(addr->name)) == NULL ||
        strncmp(addr->name, SHOAL_SHM_NAME_PREFIX, strlen(SHOAL_SHM_NAME_PREFIX)) != 0) {
        shoal_error(SHM, "rank %d sent a malformed shared-memory address", peer);
        return SHOAL_ERR_INTERNAL;
    }
    if (addr->nslots != ctx->nslots || addr->chunk_size != ctx->chunk ||
        addr->size != ctx->seg_len) {
        shoal_error(SHM, "rank %d uses %llu slots of %llu B (%llu-B segment), rank %d %zu of "
                    "%zu B (%zu B): SHOAL_SHM_NSLOTS and SHOAL_CHUNK_SIZE must agree", peer,
                    (unsigned long long)addr->nslots, (unsigned long long)addr->chunk_size,
                    (unsigned long long)addr->size, ctx->base.params.rank, ctx->nslots,
                    ctx->chunk, ctx->seg_len);
        return SHOAL_ERR_INVALID_ARG;
    }
    return SHOAL_OK;
}

/* Map our FIFO inside peer's segment, after checking the segment is the
 * size the blob announced and laid out as ours. */
static shoal_status_t shoal_shm_map_peer(shoal_shm_ctx_t *ctx, int peer,
                                         const shoal_shm_addr_t *addr, void **map_p,
                                         shoal_shm_seg_t **hdr_p)
{
    const shoal_tl_params_t *par = &ctx->base.params;
    int fd = shm_open(addr->name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        shoal_error(SHM, "rank %d: shm_open(%s) of rank %d: %s (is /dev/shm shared "
                    "between the two?)", par->rank, addr->name, peer, strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    shoal_status_t s = SHOAL_ERR_SYSTEM;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        shoal_error(SHM, "fstat(%s): %s", addr->name, strerror(errno));
        goto out_close_fd;
    }
    if ((uint64_t)st.st_size != addr->size) {
        shoal_error(SHM, "segment %s of rank %d holds %lld B, its address says %llu B",
                    addr->name, peer, (long long)st.st_size,
                    (unsigned long long)addr->size);
        s = SHOAL_ERR_INTERNAL;
        goto out_close_fd;
    }
    shoal_shm_seg_t *hdr = mmap(NULL, ctx->page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (hdr == MAP_FAILED) {
        shoal_error(SHM, "mmap(%s) of rank %d: %s", addr->name, peer, strerror(errno));
        goto out_close_fd;
    }
    s = SHOAL_ERR_INTERNAL;
    if (hdr->magic != SHOAL_SHM_MAGIC || hdr->nfifo != ctx->nfifo ||
        hdr->nslots != ctx->nslots || hdr->chunk_size != ctx->chunk) {
        shoal_error(SHM, "segment %s of rank %d is not laid out as its address says",
                    addr->name, peer);
        goto out_unmap_hdr;
    }
    size_t off = ctx->page + shoal_shm_fifo_index(par, peer, par->rank) * ctx->stride;
    void *map = mmap(NULL, ctx->stride, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                     fd, (off_t)off);
    if (map == MAP_FAILED) {
        shoal_error(SHM, "mmap(%s) of rank %d: %s", addr->name, peer, strerror(errno));
        s = SHOAL_ERR_SYSTEM;
        goto out_unmap_hdr;
    }
    const shoal_shm_fifo_t *fifo = map;
    if (fifo->magic != SHOAL_SHM_MAGIC || fifo->owner != (uint32_t)peer ||
        fifo->sender != (uint32_t)par->rank || fifo->nslots != ctx->nslots ||
        fifo->chunk_size != ctx->chunk) {
        shoal_error(SHM, "segment %s of rank %d: FIFO at offset %zu is not the one for rank %d",
                    addr->name, peer, off, par->rank);
        munmap(map, ctx->stride);
        goto out_unmap_hdr;
    }
    /* Nobody else needs the name now: leave nothing for a crash to strand. */
    if (atomic_fetch_add_explicit(&hdr->mapped, 1, memory_order_acq_rel) + 1 == hdr->nfifo &&
        shm_unlink(addr->name) != 0 && errno != ENOENT)
        shoal_warn(SHM, "shm_unlink(%s): %s", addr->name, strerror(errno));
    *map_p = map;
    *hdr_p = hdr;
    close(fd);
    return SHOAL_OK;
out_unmap_hdr:
    munmap(hdr, ctx->page);
out_close_fd:
    close(fd);
    return s;
}

static shoal_status_t shoal_shm_connect(shoal_tl_ctx_t *base, int peer, const void *blob,
                                        size_t len, uint64_t deadline_ns, shoal_ep_t **ep_p)
{
    shoal_shm_ctx_t *ctx = (shoal_shm_ctx_t *)base;
    const shoal_tl_params_t *par = &base->params;
    shoal_shm_addr_t addr;
    if (len != sizeof(addr)) {
        shoal_error(SHM, "rank %d sent a %zu-byte shared-memory address, expected %zu", peer,
                    len, sizeof(addr));
        return SHOAL_ERR_INTERNAL;
    }
    memcpy(&addr, blob, sizeof(addr));
    shoal_status_t s = shoal_shm_check_addr(ctx, peer, &addr);
    if (s != SHOAL_OK)
        return s;

    shoal_shm_ep_t *ep = calloc(1, sizeof(*ep));
    if (!ep) {
        shoal_error(SHM, "shm connect: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    s = shoal_shm_map_peer(ctx, peer, &addr, &ep->tx_map, &ep->peer_hdr);
    if (s != SHOAL_OK)
        goto err_free_ep;
    ep->base.ops = &shoal_shm_ops;
    ep->base.ctx = base;
    ep->base.peer = peer;
    ep->nslots = ctx->depth;
    ep->chunk = ctx->chunk;
    ep->tx_map_len = ctx->stride;
    ep->tx = ep->tx_map;
    ep->tx_meta = shoal_shm_fifo_meta(ep->tx);
    ep->tx_data = (unsigned char *)ep->tx_map + ctx->ctrl_len;
    ep->rx = shoal_shm_own_fifo(ctx, shoal_shm_fifo_index(par, par->rank, peer));
    ep->rx_meta = shoal_shm_fifo_meta(ep->rx);
    ep->rx_data = (const unsigned char *)ep->rx + ctx->ctrl_len;
    ctx->eps[peer] = ep;
    /* Probe and publish; the peers read it after the barrier. */
    shoal_shm_cma_probe(&ctx->cma, par, peer, addr.cma_probe);
    shoal_shm_seg_t *own = (shoal_shm_seg_t *)ctx->seg;
    atomic_store_explicit(&own->cma_failed, ctx->cma.failed ? 1u : 0u, memory_order_release);
    atomic_store_explicit(&own->cma_min, ctx->cma.min_bytes, memory_order_release);
    *ep_p = &ep->base;
    return SHOAL_OK;

err_free_ep:
    free(ep);
    return s;
}

static shoal_status_t shoal_shm_tune(shoal_shm_ctx_t *ctx);

static shoal_status_t shoal_shm_ready(shoal_tl_ctx_t *base)
{
    shoal_shm_ctx_t *ctx = (shoal_shm_ctx_t *)base;
    /* Normally the last peer to map it has unlinked it already. */
    if (ctx->linked && shm_unlink(ctx->name) != 0 && errno != ENOENT) {
        shoal_error(SHM, "shm_unlink(%s): %s", ctx->name, strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    ctx->linked = 0;
    /* Every local rank has probed all the others by now: the same figures
     * give every rank the same answer. */
    const shoal_shm_seg_t *own = (const shoal_shm_seg_t *)ctx->seg;
    int failed = (int)atomic_load_explicit(&own->cma_failed, memory_order_acquire);
    uint64_t min = atomic_load_explicit(&own->cma_min, memory_order_acquire);
    for (int q = 0; q < base->params.nranks; q++) {
        const shoal_shm_ep_t *ep = ctx->eps[q];
        if (!ep)
            continue;
        failed |= (int)atomic_load_explicit(&ep->peer_hdr->cma_failed, memory_order_acquire);
        uint64_t m = atomic_load_explicit(&ep->peer_hdr->cma_min, memory_order_acquire);
        min = m > min ? m : min;
    }
    ctx->cma_min = failed ? UINT64_MAX : min;
    shoal_shm_cma_close(&ctx->cma);
    if (ctx->cma_min != UINT64_MAX)
        shoal_debug(SHM, "rank %d: cross-memory attach from %llu B", base->params.rank,
                    (unsigned long long)ctx->cma_min);
    return shoal_shm_tune(ctx);
}

/* Lay ep's two FIFOs out as depth slots of piece bytes. Only while both
 * are empty, or hold only messages already read: the positions follow
 * from the counters, which both ends now divide alike. */
static void shoal_shm_geometry(shoal_ep_t *base, size_t piece, size_t depth)
{
    shoal_shm_ep_t *ep = (shoal_shm_ep_t *)base;
    ep->chunk = piece;
    ep->nslots = depth;
    ep->tx_tail = atomic_load_explicit(&ep->tx->tail, memory_order_acquire);
    ep->tx_idx = (size_t)(ep->tx_head % depth);
    ep->rx_idx = (size_t)(ep->rx_tail % depth);
}

/* The probe (shm_tune.c) between the host's first two ranks; the first
 * publishes its choice in its segment's first page and every local rank,
 * itself included, takes it from there, so that all lay their FIFOs out
 * alike. */
static shoal_status_t shoal_shm_tune(shoal_shm_ctx_t *ctx)
{
    const shoal_config_t *conf = shoal_config_get();
    const shoal_tl_params_t *par = &ctx->base.params;
    int auto_spin = conf->shm.spin_ns == SHOAL_SHM_SPIN_AUTO;
    if (!ctx->tune_piece && !auto_spin)
        return SHOAL_OK;
    int first = -1, second = -1;
    for (int q = 0; q < par->nranks && second < 0; q++) {
        if (par->host_of[q] != par->host_of[par->rank])
            continue;
        if (first < 0)
            first = q;
        else
            second = q;
    }
    shoal_shm_tune_cfg_t cfg = {.ring = ctx->ring,
                                .depth = conf->shm.nslots,
                                .pieces = ctx->tune_piece,
                                .force_piece = conf->shm.test_piece,
                                .deadline_ns = shoal_deadline_after(par->timeout_ns),
                                .geometry = shoal_shm_geometry};
    shoal_shm_seg_t *hdr;
    shoal_status_t s;
    int fail = conf->shm.test_probe_fail == par->rank;
    if (fail)
        shoal_error(SHM, "rank %d: SHOAL_TEST_SHM_PROBE_FAIL: its part of the probe fails",
                    par->rank);
    if (par->rank == first) {
        hdr = (shoal_shm_seg_t *)ctx->seg;
        shoal_shm_tune_t r;
        cfg.ep = &ctx->eps[second]->base;
        s = fail ? SHOAL_ERR_INTERNAL : shoal_shm_tune_lead(&cfg, &r);
        if (s == SHOAL_OK) {
            hdr->tune_piece = r.piece;
            hdr->tune_depth = r.depth;
            hdr->tune_spin_ns = auto_spin ? shoal_shm_tune_spin(r.wake_ns) : 0;
            shoal_info(SHM, "rank %d: probe with rank %d: sleep and wake-up %.1f us; 4 MiB in "
                       "pieces of 64/128/256/512 KiB: %.0f/%.0f/%.0f/%.0f us; piece %zu KiB x "
                       "%zu slots, spin %.1f us", par->rank, second, (double)r.wake_ns * 1e-3,
                       (double)r.stream_ns[0] * 1e-3, (double)r.stream_ns[1] * 1e-3,
                       (double)r.stream_ns[2] * 1e-3, (double)r.stream_ns[3] * 1e-3,
                       (r.piece ? r.piece : ctx->chunk) >> 10, r.piece ? r.depth : ctx->depth,
                       (double)(auto_spin ? hdr->tune_spin_ns : ctx->spin_ns) * 1e-3);
        }
        atomic_store_explicit(&hdr->tuned, s == SHOAL_OK ? TUNE_DONE : TUNE_FAILED,
                              memory_order_release);
        if (s != SHOAL_OK)
            return s;
    } else {
        if (par->rank == second) {
            cfg.ep = &ctx->eps[first]->base;
            s = fail ? SHOAL_ERR_INTERNAL : shoal_shm_tune_follow(&cfg);
            if (s != SHOAL_OK)
                return s;
        }
        hdr = ctx->eps[first]->peer_hdr;
        unsigned tuned;
        while ((tuned = atomic_load_explicit(&hdr->tuned, memory_order_acquire)) ==
               TUNE_PENDING) {
            if (shoal_deadline_passed(cfg.deadline_ns)) {
                shoal_error(SHM, "rank %d: rank %d did not finish the shared-memory probe before "
                            "the deadline", par->rank, first);
                return SHOAL_ERR_TIMEOUT;
            }
            struct timespec nap = {0, 20000};
            nanosleep(&nap, NULL);
        }
        if (tuned != TUNE_DONE) {
            shoal_error(SHM, "rank %d: the shared-memory probe of rank %d failed", par->rank,
                        first);
            return SHOAL_ERR_PEER;
        }
    }
    if (hdr->tune_piece) {
        ctx->base.piece = (size_t)hdr->tune_piece;
        for (int q = 0; q < par->nranks; q++) {
            if (ctx->eps[q])
                shoal_shm_geometry(&ctx->eps[q]->base, (size_t)hdr->tune_piece,
                                   (size_t)hdr->tune_depth);
        }
    }
    if (hdr->tune_spin_ns)
        ctx->spin_ns = hdr->tune_spin_ns;
    /* The probe's bytes are not the communicator's. */
    shoal_shm_ep_t *partner = par->rank == first ? ctx->eps[second]
                              : par->rank == second ? ctx->eps[first] : NULL;
    if (partner) {
        atomic_store_explicit(&partner->base.tx_bytes, 0, memory_order_relaxed);
        atomic_store_explicit(&partner->base.rx_bytes, 0, memory_order_relaxed);
    }
    return SHOAL_OK;
}

/* Wake the owner of hdr if it sleeps, after a sequentially consistent
 * store of head or tail it may wait for. With shoal_shm_sleep's store of
 * asleep and loads of head and tail, also sequentially consistent, either
 * the sleeper sees our store or we see its flag. */
static inline void shoal_shm_ring(shoal_shm_ctx_t *ctx, shoal_shm_seg_t *hdr)
{
    if (atomic_load_explicit(&hdr->asleep, memory_order_seq_cst)) {
        atomic_fetch_add_explicit(&hdr->bell, 1, memory_order_relaxed);
        syscall(SYS_futex, &hdr->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        atomic_store_explicit(&ctx->rang_ns, shoal_now_ns(), memory_order_relaxed);
    }
}

/* Everything peers have done to this rank's FIFOs, as one number that
 * only grows: pieces posted to it plus slots it sent into freed. */
static uint64_t shoal_shm_activity(const shoal_shm_ctx_t *ctx)
{
    uint64_t sum = 0;
    for (int q = 0; q < ctx->base.params.nranks; q++) {
        const shoal_shm_ep_t *ep = ctx->eps[q];
        if (!ep)
            continue;
        sum += atomic_load_explicit(&ep->rx->head, memory_order_seq_cst) +
               atomic_load_explicit(&ep->tx->tail, memory_order_seq_cst);
    }
    return sum;
}

/* Sleep on the doorbell unless a peer did something since the last call
 * returned (the caller's last check may not have seen it). A peer that
 * acts after we raise asleep either shows in the activity we read next,
 * or sees the flag and rings (shoal_shm_ring). */
static shoal_status_t shoal_shm_sleep(shoal_tl_ctx_t *base, uint64_t waited_ns,
                                      uint64_t timeout_ns)
{
    shoal_shm_ctx_t *ctx = (shoal_shm_ctx_t *)base;
    if (waited_ns < ctx->spin_ns)
        return SHOAL_INPROGRESS;
    if (ctx->rang_spin_ns &&
        shoal_now_ns() - atomic_load_explicit(&ctx->rang_ns, memory_order_relaxed) <
            ctx->rang_spin_ns)
        return SHOAL_INPROGRESS;
    shoal_shm_seg_t *hdr = (shoal_shm_seg_t *)ctx->seg;
    atomic_store_explicit(&hdr->asleep, 1, memory_order_seq_cst);
    unsigned token = atomic_load_explicit(&hdr->bell, memory_order_relaxed);
    uint64_t now = shoal_shm_activity(ctx);
    if (now == ctx->seen) {
        struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000u),
                              .tv_nsec = (long)(timeout_ns % 1000000000u)};
        syscall(SYS_futex, &hdr->bell, FUTEX_WAIT, token, &ts, NULL, 0);
        now = shoal_shm_activity(ctx);
    }
    atomic_store_explicit(&hdr->asleep, 0, memory_order_relaxed);
    ctx->seen = now;
    return SHOAL_OK;
}

static shoal_status_t shoal_shm_send_slot(shoal_ep_t *base, void **buf_p, size_t *cap_p)
{
    shoal_shm_ep_t *ep = (shoal_shm_ep_t *)base;
    if (ep->tx_head - ep->tx_tail == ep->nslots) {
        /* Acquire: the receiver is done reading the slot we will reuse. */
        ep->tx_tail = atomic_load_explicit(&ep->tx->tail, memory_order_acquire);
        if (ep->tx_head - ep->tx_tail == ep->nslots)
            return SHOAL_INPROGRESS;
    }
    *buf_p = ep->tx_data + ep->tx_idx * ep->chunk;
    *cap_p = ep->chunk;
    return SHOAL_OK;
}

static shoal_status_t shoal_shm_send_post(shoal_ep_t *base, size_t len, const void *hdr)
{
    shoal_shm_ep_t *ep = (shoal_shm_ep_t *)base;
    if (len > ep->chunk) {
        shoal_error(SHM, "send_post of %zu B to rank %d exceeds the %zu-B slot", len,
                    base->peer, ep->chunk);
        return SHOAL_ERR_INVALID_ARG;
    }
    if (ep->tx_head - ep->tx_tail >= ep->nslots) {
        shoal_error(SHM, "send_post to rank %d without a free slot", base->peer);
        return SHOAL_ERR_INTERNAL;
    }
    shoal_shm_meta_t *meta = &ep->tx_meta[ep->tx_idx];
    meta->len = (uint32_t)len;
    if (hdr)
        memcpy(meta->hdr, hdr, SHOAL_TL_HDR_BYTES);
    else
        memset(meta->hdr, 0, SHOAL_TL_HDR_BYTES);
    if (len <= SHOAL_SHM_INLINE)
        memcpy(meta->bytes, ep->tx_data + ep->tx_idx * ep->chunk, len);
    atomic_store_explicit(&base->tx_bytes, base->tx_bytes + len, memory_order_relaxed);
    /* Release: the slot's bytes and metadata are visible before its seq;
     * the count after it, sequentially consistent for the doorbell
     * (shoal_shm_ring). */
    atomic_store_explicit(&meta->seq, (unsigned)(ep->tx_head + 1), memory_order_release);
    atomic_store_explicit(&ep->tx->head, ++ep->tx_head, memory_order_seq_cst);
    if (++ep->tx_idx == ep->nslots)
        ep->tx_idx = 0;
    shoal_shm_ring((shoal_shm_ctx_t *)base->ctx, ep->peer_hdr);
    return SHOAL_OK;
}

static shoal_status_t shoal_shm_recv_slot(shoal_ep_t *base, const void **buf_p, size_t *len_p,
                                          void *hdr_p)
{
    shoal_shm_ep_t *ep = (shoal_shm_ep_t *)base;
    const shoal_shm_meta_t *meta = &ep->rx_meta[ep->rx_idx];
    if (ep->rx_tail == ep->rx_head) {
        /* Acquire: the slot's bytes and metadata, written before. */
        if (atomic_load_explicit(&meta->seq, memory_order_acquire) !=
            (unsigned)(ep->rx_tail + 1)) {
            return SHOAL_INPROGRESS;
        }
        ep->rx_head = ep->rx_tail + 1;
    }
    uint64_t len = meta->len;
    if (len > ep->chunk) {
        shoal_error(SHM, "rank %d posted a %llu-B message into a %zu-B slot", base->peer,
                    (unsigned long long)len, ep->chunk);
        return SHOAL_ERR_PEER;
    }
    *buf_p = len <= SHOAL_SHM_INLINE ? meta->bytes : ep->rx_data + ep->rx_idx * ep->chunk;
    *len_p = (size_t)len;
    if (hdr_p)
        memcpy(hdr_p, meta->hdr, SHOAL_TL_HDR_BYTES);
    return SHOAL_OK;
}

static shoal_status_t shoal_shm_recv_release(shoal_ep_t *base)
{
    shoal_shm_ep_t *ep = (shoal_shm_ep_t *)base;
    if (ep->rx_tail == ep->rx_head) {
        shoal_error(SHM, "recv_release from rank %d without a received slot", base->peer);
        return SHOAL_ERR_INTERNAL;
    }
    atomic_store_explicit(&base->rx_bytes, base->rx_bytes + ep->rx_meta[ep->rx_idx].len,
                          memory_order_relaxed);
    /* Release: our reads of the slot finish before the sender may reuse it;
     * sequentially consistent for the doorbell (shoal_shm_ring). */
    atomic_store_explicit(&ep->rx->tail, ++ep->rx_tail, memory_order_seq_cst);
    if (++ep->rx_idx == ep->nslots)
        ep->rx_idx = 0;
    shoal_shm_ring((shoal_shm_ctx_t *)base->ctx, ep->peer_hdr);
    return SHOAL_OK;
}

static shoal_status_t shoal_shm_rkey_attach(shoal_ep_t *base, const void *blob, size_t len,
                                            const shoal_rmem_t **rmem_p)
{
    shoal_shm_ep_t *ep = (shoal_shm_ep_t *)base;
    if (!base || !blob || !rmem_p)
        return SHOAL_ERR_UNSUPPORTED;
    const shoal_tl_params_t *par = &base->ctx->params;
    return shoal_shm_rcache_attach(&ep->rcache, base->peer, par->pids[base->peer], blob, len,
                                   rmem_p);
}

static shoal_status_t shoal_shm_rkey_pack_ctx(shoal_tl_ctx_t *base, const shoal_mem_t *mem,
                                              const void *addr, size_t len, void *blob,
                                              size_t *len_p)
{
    const shoal_shm_ctx_t *ctx = (const shoal_shm_ctx_t *)base;
    return shoal_shm_rkey_pack(base, ctx ? ctx->cma_min : UINT64_MAX, mem, addr, len, blob,
                               len_p);
}

/* The bytes go straight into the peer's memory; the signal is an empty
 * message behind them in the FIFO, whose release store of head also
 * publishes the copy. The slot is taken first, so that a full FIFO leaves
 * nothing half done. */
static shoal_status_t shoal_shm_put_signal(shoal_ep_t *base, const void *src,
                                           const shoal_mem_t *local, const shoal_rmem_t *remote,
                                           size_t remote_off, size_t len, const void *hdr)
{
    (void)local; /* a plain load reads our own memory */
    if (!base || !remote || (!src && len > 0))
        return SHOAL_ERR_UNSUPPORTED;
    if (remote_off > remote->len || len > remote->len - remote_off) {
        shoal_error(SHM, "put of %zu B at offset %zu to rank %d overruns its %zu-B region", len,
                    remote_off, base->peer, remote->len);
        return SHOAL_ERR_INVALID_ARG;
    }
    void *slot;
    size_t cap;
    shoal_status_t s = shoal_shm_send_slot(base, &slot, &cap);
    if (s != SHOAL_OK)
        return s;
    const shoal_shm_rentry_t *e = shoal_shm_rentry_of(remote);
    if (len && e->pid) {
        s = shoal_shm_cma_write(base->peer, e->pid, e->raddr + remote_off, src, len);
        if (s != SHOAL_OK)
            return s;
    } else if (len) {
        memcpy((char *)remote->addr + remote_off, src, len);
    }
    s = shoal_shm_send_post(base, 0, hdr);
    if (s != SHOAL_OK)
        return s;
    atomic_store_explicit(&base->puts, base->puts + 1, memory_order_relaxed);
    atomic_store_explicit(&base->put_bytes, base->put_bytes + len, memory_order_relaxed);
    return SHOAL_OK;
}

/* A mapped peer block is read with a plain copy, private memory by
 * cross-memory attach. */
static shoal_status_t shoal_shm_get(shoal_ep_t *base, void *dst, const shoal_rmem_t *remote,
                                    size_t remote_off, size_t len)
{
    if (!base || !remote || (!dst && len > 0))
        return SHOAL_ERR_UNSUPPORTED;
    if (remote_off > remote->len || len > remote->len - remote_off) {
        shoal_error(SHM, "get of %zu B at offset %zu from rank %d overruns its %zu-B region",
                    len, remote_off, base->peer, remote->len);
        return SHOAL_ERR_INVALID_ARG;
    }
    const shoal_shm_rentry_t *e = shoal_shm_rentry_of(remote);
    if (len && e->pid) {
        shoal_status_t s = shoal_shm_cma_read(base->peer, e->pid, e->raddr + remote_off, dst,
                                              len);
        if (s != SHOAL_OK)
            return s;
    } else if (len) {
        memcpy(dst, (const char *)remote->addr + remote_off, len);
    }
    atomic_store_explicit(&base->gets, base->gets + 1, memory_order_relaxed);
    atomic_store_explicit(&base->get_bytes, base->get_bytes + len, memory_order_relaxed);
    return SHOAL_OK;
}

static void shoal_shm_disconnect(shoal_ep_t *base)
{
    shoal_shm_ep_t *ep = (shoal_shm_ep_t *)base;
    shoal_shm_ctx_t *ctx = (shoal_shm_ctx_t *)base->ctx;
    ctx->eps[base->peer] = NULL;
    shoal_shm_rcache_clear(&ep->rcache);
    munmap(ep->tx_map, ep->tx_map_len);
    munmap(ep->peer_hdr, ctx->page);
    free(ep);
}

static void shoal_shm_close(shoal_tl_ctx_t *base)
{
    shoal_shm_ctx_t *ctx = (shoal_shm_ctx_t *)base;
    /* Wireup failed before ready: no name must outlive it, neither ours
     * nor that of a local peer which died before the others mapped its
     * segment (peers still alive have failed too, and unlink their own). */
    if (ctx->linked) {
        const shoal_tl_params_t *par = &base->params;
        for (int q = 0; q < par->nranks; q++) {
            if (par->host_of[q] != par->host_of[par->rank])
                continue;
            char name[SHOAL_SHM_NAME_MAX];
            shoal_shm_name(par, q, name);
            if (shm_unlink(name) == 0 && q != par->rank)
                shoal_info(SHM, "rank %d removed the segment %s of rank %d (pid %lu)",
                           par->rank, name, q, (unsigned long)par->pids[q]);
        }
    }
    munmap(ctx->seg, ctx->seg_len);
    shoal_shm_cma_close(&ctx->cma);
    free(ctx->eps);
    free(ctx);
}

const shoal_transport_ops_t shoal_shm_ops = {
    .size = sizeof(shoal_transport_ops_t),
    .name = "shm",
    .query = shoal_shm_query,
    .open = shoal_shm_open,
    .addr_pack = shoal_shm_addr_pack,
    .connect = shoal_shm_connect,
    .ready = shoal_shm_ready,
    .send_slot = shoal_shm_send_slot,
    .send_post = shoal_shm_send_post,
    .recv_slot = shoal_shm_recv_slot,
    .recv_release = shoal_shm_recv_release,
    .flush = shoal_tl_stub_flush, /* posted bytes already sit in the peer's memory */
    .progress = shoal_tl_stub_progress,
    .sleep = shoal_shm_sleep,
    .mem_reg = shoal_tl_host_mem_reg,
    .mem_dereg = shoal_tl_host_mem_dereg,
    .rkey_pack = shoal_shm_rkey_pack_ctx,
    .rkey_attach = shoal_shm_rkey_attach,
    .put_signal = shoal_shm_put_signal,
    .get = shoal_shm_get,
    .disconnect = shoal_shm_disconnect,
    .close = shoal_shm_close,
};
