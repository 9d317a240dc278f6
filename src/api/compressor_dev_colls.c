/* The compressed all-gather, reduce-scatter and all-to-all of device
 * tensors (INT8, the kind with device kernels): stagers of the staged path
 * (core/exec.h's shoal_dev_stager_t) whose stream work encodes and decodes
 * on the device, so that only the compressed wires cross between device
 * and host, and whose host side moves those wires. Each gives the bits of
 * its host form (compressor_colls.c, and the two-shot reduce-scatter of
 * algos/twoshot.c), because both run the same element math on the same
 * values in the same order.
 *
 * All-gather. Payload: this rank's wire, then every rank's. The stream
 * encodes the shard plus the residual (writing the new residual on the
 * device) into the first; the host all-gathers the wires; the stream
 * decodes every rank's wire, its own included, into the result.
 *
 * Reduce-scatter. Payload: the wires to each rank (n of them, block j of
 * the input, values j x count on, encoded with this rank's stream, its
 * residual written), the wires received, this rank's own block plus its
 * residual exactly (fp32), then the sum and a block of zeros. The host
 * all-to-alls the wires and adds every received block, decoded, to the
 * exact values, rank me-1's first, as the two-shot does; the stream
 * copies the sum into the result (AVG divided there) and zeros as the
 * residual of this rank's own block, which it never quantised.
 *
 * All-to-all. Payload: what goes to each rank at its displacement (block
 * j encoded for rank j, or its fp32 values between the ranks of one host
 * of a job on several hosts, shoal_comp_a2a_plain), then what comes from
 * each. The host all-to-all-v's the bytes; the stream decodes (or copies)
 * each received block into its place and copies this rank's own block,
 * which never leaves the device. No error feedback. */
#include "compressor_priv.h"

#include "compress/codec.h"
#include "core/comm.h"

#include <string.h>

/* The wire of count values of c's codec. */
static size_t wire_of(const struct shoal_compressor *c, size_t count)
{
    shoal_codec_t codec = shoal_comp_dev_host_codec(c, 0, 0);
    return codec.ops->wire_bytes(&codec, count);
}

/* The fp32 result of count values: recvbuf itself, or dev.x, from which
 * narrow() converts it into recvbuf. */
static float *result_of(const struct shoal_compressor *c, const shoal_call_t *call)
{
    return c->dtype == SHOAL_FLOAT32 ? call->args.recvbuf : c->dev.x;
}

static shoal_status_t narrow(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                             size_t count)
{
    const struct shoal_compressor *c = call->comp;
    if (c->dtype == SHOAL_FLOAT32 || count == 0)
        return SHOAL_OK;
    return ops->convert(call->args.recvbuf, c->dtype, c->dev.x, SHOAL_FLOAT32, count,
                        call->stream);
}

/* The host side's end: the info on success, the device state lost on
 * failure. */
static shoal_status_t run_end(struct shoal_comm *comm, const shoal_call_t *call,
                              uint64_t tx0, uint64_t rx0, shoal_status_t s)
{
    if (s == SHOAL_OK)
        shoal_comp_info(comm, call, tx0, rx0, call->comp_step);
    else
        atomic_store(&call->comp->dev.lost, 1);
    return s;
}

/* The stager's last act: the host side finds its data in the payload. */
static shoal_status_t to_payload(shoal_call_t *call, unsigned char *pay, shoal_status_t r)
{
    call->args.sendbuf = pay;
    call->args.recvbuf = pay;
    return r;
}

/* ---- all-gather ---- */

static size_t ag_need(const shoal_call_t *call)
{
    const struct shoal_compressor *c = call->comp;
    size_t w = wire_of(c, c->count);
    return shoal_comp_up64(w) + (size_t)c->nranks * w;
}

static shoal_status_t ag_pre(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                             unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    const float *x;
    shoal_status_t r = shoal_comp_dev_input(ops, call, &x);
    if (r != SHOAL_OK || c->count == 0)
        return r;
    shoal_dev_codec_args_t a = shoal_comp_dev_codec(c, c->comm->team.rank, call->comp_step,
                                                    SHOAL_DEV_CODEC_ENCODE);
    a.wire_out = pay;
    a.src = x;
    a.addend = call->args.residual_in;
    a.residual = call->args.residual;
    a.count = c->count;
    return ops->codec(&a, call->stream);
}

static shoal_status_t ag_post(const shoal_dev_ops_t *ops, shoal_call_t *call,
                              unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    size_t w = wire_of(c, c->count), es = shoal_dtype_bytes(c->dtype);
    const unsigned char *rx = pay + shoal_comp_up64(w);
    shoal_status_t r = SHOAL_OK;
    for (int j = 0; j < c->nranks && r == SHOAL_OK && c->count; j++) {
        char *out = (char *)call->args.recvbuf + (size_t)j * c->count * es;
        shoal_dev_codec_args_t a = shoal_comp_dev_codec(c, j, call->comp_step,
                                                        SHOAL_DEV_CODEC_DECODE);
        a.wire_in = rx + (size_t)j * w;
        a.dst = c->dtype == SHOAL_FLOAT32 ? (float *)(void *)out : c->dev.x;
        a.count = c->count;
        r = ops->codec(&a, call->stream);
        if (r == SHOAL_OK && c->dtype != SHOAL_FLOAT32)
            r = ops->convert(out, c->dtype, c->dev.x, SHOAL_FLOAT32, c->count, call->stream);
    }
    return to_payload(call, pay, r);
}

static const shoal_dev_stager_t ag_stager = {
    .need = ag_need,
    .pre = ag_pre,
    .post = ag_post,
};

static shoal_status_t ag_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    unsigned char *pay = call->args.recvbuf;
    size_t w = wire_of(c, c->count);
    uint64_t tx0 = comm->team.tx_bytes, rx0 = comm->team.rx_bytes;
    shoal_status_t s = SHOAL_OK;
    if (c->nranks == 1)
        memcpy(pay + shoal_comp_up64(w), pay, w);
    else
        s = shoal_comp_dev_inner(comm, call, SHOAL_COLL_ALLGATHER, pay,
                                 pay + shoal_comp_up64(w), w, SHOAL_UINT8, SHOAL_SUM);
    return run_end(comm, call, tx0, rx0, s);
}

/* ---- reduce-scatter ---- */

typedef struct {
    size_t cw;                        /* one block's wire */
    size_t w_tx, w_rx;                /* n x cw each */
    size_t mine, tmp, sum, zero;      /* count floats each */
    size_t need;
} rs_lay_t;

static rs_lay_t rs_lay(const struct shoal_compressor *c)
{
    rs_lay_t l = {.cw = wire_of(c, c->count)};
    size_t wires = shoal_comp_up64((size_t)c->nranks * l.cw);
    size_t floats = shoal_comp_up64(c->count * sizeof(float));
    l.w_rx = l.w_tx + wires;
    l.mine = l.w_rx + wires;
    l.tmp = l.mine + floats;
    l.sum = l.tmp + floats;
    l.zero = l.sum + floats;
    l.need = l.zero + floats;
    return l;
}

static size_t rs_need(const shoal_call_t *call)
{
    return rs_lay(call->comp).need;
}

static shoal_status_t rs_pre(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                             unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    int me = c->comm->team.rank;
    size_t count = c->count;
    rs_lay_t l = rs_lay(c);
    const float *x;
    shoal_status_t r = shoal_comp_dev_input(ops, call, &x);
    for (int j = 0; j < c->nranks && r == SHOAL_OK && count; j++) {
        if (j != me)
            r = shoal_comp_dev_encode_part(ops, call, x, (size_t)j * count, count,
                                           pay + l.w_tx + (size_t)j * l.cw);
    }
    if (r == SHOAL_OK && count)
        r = shoal_comp_dev_exact_part(ops, call, x, (size_t)me * count, count, pay + l.mine);
    return r;
}

static shoal_status_t rs_post(const shoal_dev_ops_t *ops, shoal_call_t *call,
                              unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    size_t count = c->count;
    rs_lay_t l = rs_lay(c);
    float *out = result_of(c, call), *res = call->args.residual;
    shoal_status_t r = SHOAL_OK;
    if (count) {
        r = ops->copy(out, pay + l.sum, count * sizeof(float), call->stream);
        if (r == SHOAL_OK && call->args.op == SHOAL_AVG && c->nranks > 1)
            r = ops->avg(out, out, count, SHOAL_FLOAT32, c->nranks, call->stream);
        if (r == SHOAL_OK)
            r = narrow(ops, call, count);
        if (r == SHOAL_OK && res)
            r = ops->copy(res + (size_t)c->comm->team.rank * count, pay + l.zero,
                          count * sizeof(float), call->stream);
    }
    return to_payload(call, pay, r);
}

static const shoal_dev_stager_t rs_stager = {
    .need = rs_need,
    .pre = rs_pre,
    .post = rs_post,
};

static shoal_status_t rs_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    unsigned char *pay = call->args.recvbuf;
    int n = c->nranks, me = comm->team.rank;
    size_t count = c->count;
    rs_lay_t l = rs_lay(c);
    float *sum = (float *)(void *)(pay + l.sum), *tmp = (float *)(void *)(pay + l.tmp);
    uint64_t tx0 = comm->team.tx_bytes, rx0 = comm->team.rx_bytes;
    shoal_status_t s = SHOAL_OK;
    memcpy(sum, pay + l.mine, count * sizeof(float));
    memset(pay + l.zero, 0, count * sizeof(float));
    if (n > 1)
        s = shoal_comp_dev_inner(comm, call, SHOAL_COLL_ALLTOALL, pay + l.w_tx, pay + l.w_rx,
                                 l.cw, SHOAL_UINT8, SHOAL_SUM);
    if (s == SHOAL_OK)
        shoal_comp_dev_owner_sum(call, sum, tmp, pay + l.w_rx, l.cw, count,
                                 (size_t)me * count);
    return run_end(comm, call, tx0, rx0, s);
}

/* ---- all-to-all ---- */

/* The bytes between this rank and rank j (each way): none to itself. */
static size_t a2a_bytes(const struct shoal_compressor *c, int j)
{
    if (j == c->comm->team.rank)
        return 0;
    return shoal_comp_a2a_plain(c->comm, j) ? c->count * sizeof(float) : wire_of(c, c->count);
}

/* Bytes of either half of the payload: every rank's, in rank order. */
static size_t a2a_total(const struct shoal_compressor *c)
{
    size_t at = 0;
    for (int k = 0; k < c->nranks; k++)
        at += a2a_bytes(c, k);
    return at;
}

static size_t a2a_need(const shoal_call_t *call)
{
    return 2 * shoal_comp_up64(a2a_total(call->comp));
}

static shoal_status_t a2a_pre(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                              unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    size_t count = c->count, at = 0;
    const float *x;
    shoal_status_t r = shoal_comp_dev_input(ops, call, &x);
    for (int j = 0; j < c->nranks && r == SHOAL_OK && count; at += a2a_bytes(c, j), j++) {
        size_t lo = (size_t)j * count;
        if (j == c->comm->team.rank)
            continue;
        /* No residual: the all-to-all keeps none. */
        r = shoal_comp_a2a_plain(c->comm, j)
                ? ops->copy(pay + at, x + lo, count * sizeof(float), call->stream)
                : shoal_comp_dev_encode_part(ops, call, x, lo, count, pay + at);
    }
    return r;
}

static shoal_status_t a2a_post(const shoal_dev_ops_t *ops, shoal_call_t *call,
                               unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    int me = c->comm->team.rank;
    size_t count = c->count, at = 0;
    const unsigned char *rx = pay + shoal_comp_up64(a2a_total(c));
    float *out = result_of(c, call);
    shoal_status_t r = SHOAL_OK;
    for (int j = 0; j < c->nranks && r == SHOAL_OK && count; at += a2a_bytes(c, j), j++) {
        float *blk = out + (size_t)j * count;
        if (j == me) {
            /* float16 and bfloat16: dev.x holds it widened already. */
            const float *own = call->args.sendbuf;
            if (c->dtype == SHOAL_FLOAT32 && own + (size_t)me * count != blk)
                r = ops->copy(blk, own + (size_t)me * count, count * sizeof(float),
                              call->stream);
        } else if (shoal_comp_a2a_plain(c->comm, j)) {
            r = ops->copy(blk, rx + at, count * sizeof(float), call->stream);
        } else {
            shoal_dev_codec_args_t a = shoal_comp_dev_codec(c, j, call->comp_step,
                                                            SHOAL_DEV_CODEC_DECODE);
            a.wire_in = rx + at;
            a.dst = blk;
            a.count = count;
            a.first = (size_t)me * count;
            r = ops->codec(&a, call->stream);
        }
    }
    if (r == SHOAL_OK)
        r = narrow(ops, call, c->nout);
    return to_payload(call, pay, r);
}

static const shoal_dev_stager_t a2a_stager = {
    .need = a2a_need,
    .pre = a2a_pre,
    .post = a2a_post,
};

static shoal_status_t a2a_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    unsigned char *pay = call->args.recvbuf;
    int n = c->nranks;
    size_t *scount = c->moves, *sdispl = scount + n, *rcount = sdispl + n, *rdispl = rcount + n;
    size_t total = 0;
    uint64_t tx0 = comm->team.tx_bytes, rx0 = comm->team.rx_bytes;
    shoal_status_t s = SHOAL_OK;
    for (int j = 0; j < n; j++) {
        scount[j] = rcount[j] = a2a_bytes(c, j);
        sdispl[j] = rdispl[j] = total;
        total += scount[j];
    }
    if (n > 1) {
        shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLTOALLV, .sendbuf = pay,
                                  .recvbuf = pay + shoal_comp_up64(total),
                                  .dtype = SHOAL_UINT8, .op = SHOAL_SUM, .sendcounts = scount,
                                  .sdispls = sdispl, .recvcounts = rcount, .rdispls = rdispl};
        s = shoal_comp_inner(comm, call, &args, SHOAL_SIG_COMP_ALLTOALL);
    }
    return run_end(comm, call, tx0, rx0, s);
}

void shoal_comp_dev_colls_pick(const struct shoal_compressor *c, shoal_call_t *call)
{
    switch (c->opt.coll) {
    case SHOAL_COMPRESS_COLL_ALLGATHER:
        call->stager = &ag_stager;
        call->run = ag_run;
        break;
    case SHOAL_COMPRESS_COLL_REDUCE_SCATTER:
        call->stager = &rs_stager;
        call->run = rs_run;
        break;
    case SHOAL_COMPRESS_COLL_ALLTOALL:
        call->stager = &a2a_stager;
        call->run = a2a_run;
        break;
    default:
        break;
    }
}
