/* The compressed all-gather and all-to-all (shoal.h), and the majority
 * vote's all-reduce: each is an encode, one inner collective of bytes on
 * the compressor's communicator, and a decode.
 *
 * All-gather: on one host, or with one rank on every host, the codec ring
 * of ring_rsag.c, which encodes each piece of this rank's shard once and
 * decodes every piece as it passes, overlapping both with the wire. Across
 * hosts with several ranks on one, where the plain all-gather's hierarchy
 * sends each shard across hosts once: this rank's count values (plus the
 * residual) encoded once into tx, wire_bytes(count) bytes, and decoded
 * from there into its own block before the bytes move; an all-gather of
 * those bytes into rx (the hierarchy's, as the cost model picks); every
 * rank decodes every other rank's wire. Both ways every rank decodes the
 * same bytes, its own included, so all hold the same bits, those of
 * encoding the shard whole. The inner call carries
 * SHOAL_SIG_COMP_ALLGATHER: a plain all-gather on another rank is a
 * mismatch, not a mix-up.
 *
 * All-to-all: block j of the input encoded for rank j into tx at its
 * displacement, an all-to-all-v of the bytes (counts per peer: a block's
 * wire, or, across one host's ranks when the job spans several hosts, its
 * fp32 bytes unchanged), then each received block decoded (or copied) into
 * its place. A rank's block to itself never leaves it and is copied
 * exactly. Stochastic rounding's stream index is the value's index in the
 * input, so no two blocks of a rank draw the same numbers.
 *
 * Majority vote: the votes sign(x) in {-1, 0, +1} (NaN votes 0) go through
 * the ternary codec with every scale 1, whose codes are then the votes
 * themselves and whose ring sums are exact small integers; the result is
 * the sign of the sum, the same on every rank. */
#include "compressor.h"
#include "compressor_priv.h"

#include "compress/codec.h"

#include <stdlib.h>
#include <string.h>

int shoal_comp_a2a_plain(const struct shoal_comm *comm, int j)
{
    const shoal_cluster_t *cl = &comm->team.cluster;
    return comm->team.nhosts > 1 && cl->host_of[j] == cl->host_of[comm->team.rank];
}

shoal_status_t shoal_comp_colls_alloc(struct shoal_compressor *c)
{
    size_t n = (size_t)c->nranks;
    if (c->opt.kind == SHOAL_COMPRESS_MAJORITY) {
        if (!(c->votes = malloc((c->count ? c->count : 1) * sizeof(float))))
            return SHOAL_ERR_NO_MEMORY;
        for (size_t b = 0; b < c->nblocks; b++)
            c->scales[b] = 1.0f;
        return SHOAL_OK;
    }
    if (c->opt.coll != SHOAL_COMPRESS_COLL_ALLGATHER &&
        c->opt.coll != SHOAL_COMPRESS_COLL_ALLTOALL)
        return SHOAL_OK;
    shoal_codec_t codec = shoal_comp_codec(c, 0);
    size_t wire = codec.ops->wire_bytes(&codec, c->count);
    /* An all-to-all block may go as fp32, which is never smaller. */
    if (c->opt.coll == SHOAL_COMPRESS_COLL_ALLTOALL && c->count * sizeof(float) > wire)
        wire = c->count * sizeof(float);
    if (wire && n > SIZE_MAX / wire)
        return SHOAL_ERR_NO_MEMORY;
    size_t tx = c->opt.coll == SHOAL_COMPRESS_COLL_ALLGATHER ? wire : n * wire;
    c->tx = malloc(tx ? tx : 1);
    size_t rx = n * wire;
    c->rx = malloc(rx ? rx : 1);
    if (c->opt.coll == SHOAL_COMPRESS_COLL_ALLTOALL)
        c->moves = calloc(4 * n, sizeof(size_t));
    if (!c->tx || !c->rx || (c->opt.coll == SHOAL_COMPRESS_COLL_ALLTOALL && !c->moves))
        return SHOAL_ERR_NO_MEMORY;
    return SHOAL_OK;
}

void shoal_comp_colls_free(struct shoal_compressor *c)
{
    free(c->tx);
    free(c->rx);
    free(c->moves);
    free(c->votes);
    c->tx = c->rx = NULL;
    c->moves = NULL;
    c->votes = NULL;
}

shoal_status_t shoal_comp_run_allgather(struct shoal_comm *comm, const shoal_call_t *call,
                                        const float *x, const float *res_in, float *out,
                                        float *res)
{
    struct shoal_compressor *c = call->comp;
    shoal_codec_t codec = shoal_comp_codec(c, comm->team.rank);
    size_t wire = codec.ops->wire_bytes(&codec, c->count);
    int me = comm->team.rank;
    const shoal_team_t *team = &comm->team;
    if (team->nranks > 1 && (team->nhosts == 1 || team->cluster.max_local == 1)) {
        shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLGATHER, .sendbuf = x, .recvbuf = out,
                                  .count = c->count, .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM,
                                  .codec = &codec, .residual = res, .residual_in = res_in};
        return shoal_comp_inner(comm, call, &args, SHOAL_SIG_COMP_ALLGATHER);
    }
    codec.ops->encode(&codec, c->tx, x, res_in, res, c->count, 0);
    /* This rank's own block from its own wire before the wire moves: in
     * place, x is that block, and it has been read. */
    codec.ops->decode(&codec, out + (size_t)me * c->count, c->tx, c->count, 0);
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLGATHER, .sendbuf = c->tx, .recvbuf = c->rx,
                              .count = wire, .dtype = SHOAL_UINT8, .op = SHOAL_SUM};
    shoal_status_t s = shoal_comp_inner(comm, call, &args, SHOAL_SIG_COMP_ALLGATHER);
    for (int j = 0; s == SHOAL_OK && j < c->nranks; j++) {
        if (j != me)
            codec.ops->decode(&codec, out + (size_t)j * c->count, c->rx + (size_t)j * wire,
                              c->count, 0);
    }
    return s;
}

shoal_status_t shoal_comp_run_alltoall(struct shoal_comm *comm, const shoal_call_t *call,
                                       const float *x, float *out)
{
    struct shoal_compressor *c = call->comp;
    int n = c->nranks, me = comm->team.rank;
    size_t count = c->count, plain = count * sizeof(float);
    shoal_codec_t codec = shoal_comp_codec(c, me);
    size_t wire = codec.ops->wire_bytes(&codec, count);
    size_t *scount = c->moves, *sdispl = scount + n, *rcount = sdispl + n, *rdispl = rcount + n;
    size_t sat = 0, rat = 0;
    for (int j = 0; j < n; j++) {
        size_t bytes = j == me ? 0 : shoal_comp_a2a_plain(comm, j) ? plain : wire;
        scount[j] = rcount[j] = bytes;
        sdispl[j] = sat;
        rdispl[j] = rat;
        sat += bytes;
        rat += bytes;
    }
    for (int j = 0; j < n; j++) {
        const float *blk = x + (size_t)j * count;
        if (j == me)
            continue;
        if (shoal_comp_a2a_plain(comm, j))
            memcpy(c->tx + sdispl[j], blk, plain);
        else
            codec.ops->encode(&codec, c->tx + sdispl[j], blk, NULL, NULL, count,
                              (size_t)j * count);
    }
    /* The input is read: in place, this rank's own block may land now. */
    if (out + (size_t)me * count != x + (size_t)me * count)
        memmove(out + (size_t)me * count, x + (size_t)me * count, plain);
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLTOALLV, .sendbuf = c->tx, .recvbuf = c->rx,
                              .dtype = SHOAL_UINT8, .op = SHOAL_SUM, .sendcounts = scount,
                              .sdispls = sdispl, .recvcounts = rcount, .rdispls = rdispl};
    shoal_status_t s = shoal_comp_inner(comm, call, &args, SHOAL_SIG_COMP_ALLTOALL);
    for (int j = 0; s == SHOAL_OK && j < n; j++) {
        float *blk = out + (size_t)j * count;
        if (j == me)
            continue;
        if (shoal_comp_a2a_plain(comm, j))
            memcpy(blk, c->rx + rdispl[j], plain);
        else
            codec.ops->decode(&codec, blk, c->rx + rdispl[j], count, (size_t)me * count);
    }
    return s;
}

shoal_status_t shoal_comp_run_vote(struct shoal_comm *comm, const shoal_call_t *call,
                                   const float *x, float *out)
{
    struct shoal_compressor *c = call->comp;
    int n = comm->team.nranks;
    for (size_t i = 0; i < c->count; i++)
        c->votes[i] = x[i] > 0.0f ? 1.0f : x[i] < 0.0f ? -1.0f : 0.0f;
    /* A vote of magnitude 1 under scale 1 is its own code, whatever the
     * rounding: nearest keeps the codec's random stream out of it. */
    shoal_codec_t codec = {
        .ops = &shoal_codec_ternary, .block = c->opt.block, .round = SHOAL_ROUND_NEAREST,
        .scales = c->scales, .packed = n <= 7, .wide = n > 127,
    };
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = c->votes, .recvbuf = out,
                              .count = c->count, .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM,
                              .codec = &codec, .codec_algo = SHOAL_COMPRESS_ALGO_RING};
    shoal_status_t s = shoal_comp_inner(comm, call, &args, 0);
    for (size_t i = 0; s == SHOAL_OK && i < c->count; i++)
        out[i] = out[i] > 0.0f ? 1.0f : out[i] < 0.0f ? -1.0f : 0.0f;
    return s;
}
