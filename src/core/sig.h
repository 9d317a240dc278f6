/* Operation signatures: what a rank believes the current operation is.
 * Every piece a rank sends carries its signature; the receiver compares it
 * with its own before it reads a byte of the piece, so calls that differ
 * across ranks become a mismatch error naming both sides instead of a hang
 * or a silent mix-up of buffers. */
#ifndef SHOAL_SIG_H
#define SHOAL_SIG_H

#include <stddef.h>
#include <stdint.h>

/* What kind of operation a signature describes, beyond the collectives of
 * shoal_coll_kind_t (algo.h), whose values it shares. */
#define SHOAL_SIG_P2P 0xf0u     /* point to point (and groups of them) */
#define SHOAL_SIG_BARRIER 0xf1u
#define SHOAL_SIG_ALLREDUCE_CODEC 0xf2u /* compressed all-reduce (compress_call.h) */
#define SHOAL_SIG_COMPRESSOR 0xf3u /* a compressor's inner call (compressor.h) */
#define SHOAL_SIG_RS_CODEC 0xf4u   /* compressed reduce-scatter */
#define SHOAL_SIG_COMP_ALLGATHER 0xf5u /* a compressor's all-gather of wire bytes */
#define SHOAL_SIG_COMP_ALLTOALL 0xf6u  /* a compressor's all-to-all of wire bytes */
/* A one-sided message (core/rma.h), not part of any operation: its kind
 * is the one every receive recognises (algos/team.h: SHOAL_HDR_KIND_RMA) */
#define SHOAL_SIG_RMA 0xf7u
/* count of a call whose per-peer counts differ (all-to-all-v): not compared */
#define SHOAL_SIG_COUNT_ANY UINT64_MAX

typedef struct {
    uint64_t seq;   /* collectives this communicator ran before it (0 for p2p) */
    uint64_t count; /* elements (per rank, as the call's count argument) */
    uint8_t kind;   /* shoal_coll_kind_t, or SHOAL_SIG_P2P / _BARRIER */
    uint8_t dtype;
    uint8_t op;     /* shoal_op_t; pre-multiplied sums as SHOAL_SUM */
    uint8_t pad;
    /* The root or peer, -1 when the call has none; for
     * SHOAL_SIG_ALLREDUCE_CODEC and _RS_CODEC, the codec id
     * (shoal_sig_codec_id). */
    int32_t root;
} shoal_sig_t;

_Static_assert(sizeof(shoal_sig_t) == 24, "signatures travel in 24 bytes");

static inline int shoal_sig_equal(const shoal_sig_t *a, const shoal_sig_t *b)
{
    return a->seq == b->seq && a->count == b->count && a->kind == b->kind &&
           a->dtype == b->dtype && a->op == b->op && a->root == b->root;
}

/* A 32-bit hash of the settings a compressed all-reduce must agree on
 * across ranks: the codec's name, block, rounding, wire width in bits (4,
 * 8 or 16) and the schedule asked for (shoal_compress_algo_t). */
uint32_t shoal_sig_codec_id(const char *name, size_t block, int round, int bits, int algo);

/* "allreduce #12 of 100 x float32 sum" (root when it has one; codec id for
 * a compressed all-reduce). Returns buf. */
const char *shoal_sig_format(const shoal_sig_t *sig, char *buf, size_t cap);

#define SHOAL_SIG_STR_MAX 96

#endif
