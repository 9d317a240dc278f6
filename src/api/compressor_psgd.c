/* PowerSGD on device tensors (shoal_allreduce_compressed_stream): the
 * products on the device through the module's gemm (cuBLAS), the rest of
 * compress/powersgd.h's math on the host, on the small factors that cross
 * anyway. Two staged calls (core/dev_stage.h), each with a host side:
 * - P: on the stream, x = input (widened) + residual, then P_t = M_t Q_t
 *   for each compressed tensor and the plain tensors' values, into the
 *   slot; on the host, their sum over the ranks; back on the device, each
 *   P_t orthonormalised there (the module's orthonormalise: the host's
 *   arithmetic, compress/psgd_elem.h);
 * - Q: on the stream, Q_t = M_t^T P_t into the slot; on the host, their
 *   sum and the state's update (shoal_psgd_keep_q, which the host keeps:
 *   checkpoints read it there); on the stream, the summed and kept Q back,
 *   the residuals x - P_t Q_t^T / n (plain tensors: x - sum / n), then the
 *   result P_t Q_t^T (plain: the sum), times 1/n for AVG, narrowed for
 *   float16 and bfloat16.
 * The plain tensors' element operations are products too (a column times
 * the device's constant 1), so the device needs no kernel of its own here.
 * The first warmup_steps calls are one staged call: x summed over the
 * ranks on the host, the residual zero. The products' sums run in the
 * order cuBLAS chooses: results agree with the host path's to rounding,
 * not bit for bit. */
#include "compressor_priv.h"

#include "core/comm.h"

#include <string.h>

static size_t len1_of(const struct shoal_compressor *c)
{
    return shoal_psgd_len1(c->psgd);
}

static size_t len2_of(const struct shoal_compressor *c)
{
    return shoal_psgd_len2(c->psgd);
}

/* The compressed tensors' records in d->deschost (NULL: only count
 * them); returns how many, and the doubles of scratch they need. */
static size_t describe(const struct shoal_compressor *c, shoal_dev_psgd_desc_t *out,
                       size_t *cols_p)
{
    size_t n = 0, cols = 0;
    for (size_t t = 0; t < shoal_psgd_ntensors(c->psgd); t++) {
        const shoal_psgd_tensor_t *tt = shoal_psgd_tensor(c->psgd, t);
        if (tt->rank == 0)
            continue;
        if (out)
            out[n] = (shoal_dev_psgd_desc_t){.off = tt->off1, .rows = tt->rows,
                                             .rank = tt->rank, .col = cols};
        n++;
        cols += tt->rows;
    }
    *cols_p = cols;
    return n;
}

shoal_status_t shoal_comp_psgd_alloc(const shoal_dev_ops_t *ops, struct shoal_compressor *c,
                                     int device)
{
    shoal_comp_dev_t *d = &c->dev;
    size_t b1 = (len1_of(c) + 1) * sizeof(float), b2 = (len2_of(c) + 1) * sizeof(float);
    size_t cols, n = describe(c, NULL, &cols);
    size_t bd = (n ? n : 1) * sizeof(shoal_dev_psgd_desc_t);
    shoal_status_t r = shoal_comp_dev_alloc(ops, c, device, b2, (void **)&d->q);
    if (r == SHOAL_OK)
        r = shoal_comp_dev_alloc(ops, c, device, b1, (void **)&d->buf1);
    if (r == SHOAL_OK)
        r = shoal_comp_dev_alloc(ops, c, device, b2, (void **)&d->buf2);
    if (r == SHOAL_OK)
        r = shoal_comp_dev_alloc(ops, c, device, sizeof(float), (void **)&d->one);
    if (r == SHOAL_OK)
        r = ops->host_alloc(b2, (void **)&d->qhost);
    if (r == SHOAL_OK)
        r = shoal_comp_dev_alloc(ops, c, device, bd, (void **)&d->desc);
    if (r == SHOAL_OK)
        r = ops->host_alloc(bd, (void **)&d->deschost);
    if (r == SHOAL_OK)
        r = shoal_comp_dev_alloc(ops, c, device, (cols ? cols : 1) * sizeof(double), (void **)&d->col);
    if (r == SHOAL_OK)
        d->ndesc = describe(c, d->deschost, &cols);
    return r;
}

void shoal_comp_psgd_free(const shoal_dev_ops_t *ops, struct shoal_compressor *c)
{
    shoal_comp_dev_t *d = &c->dev;
    void **dev[] = {(void **)&d->q,    (void **)&d->buf1, (void **)&d->buf2,
                    (void **)&d->one,  (void **)&d->desc, (void **)&d->col};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
        if (*dev[i])
            ops->mem_free(*dev[i]);
        *dev[i] = NULL;
    }
    if (d->qhost)
        ops->host_free(d->qhost);
    if (d->deschost)
        ops->host_free(d->deschost);
    d->qhost = NULL;
    d->deschost = NULL;
    d->ndesc = 0;
}

void shoal_comp_psgd_stage_state(struct shoal_compressor *c)
{
    size_t len2 = len2_of(c);
    memcpy(c->dev.qhost, shoal_psgd_state(c->psgd), len2 * sizeof(float));
    c->dev.qhost[len2] = 1.0f;
}

shoal_status_t shoal_comp_psgd_upload(const shoal_dev_ops_t *ops, struct shoal_compressor *c,
                                      void *stream)
{
    size_t len2 = len2_of(c);
    const shoal_comp_dev_t *d = &c->dev;
    shoal_status_t r = ops->copy(d->q, d->qhost, len2 * sizeof(float), stream);
    if (r == SHOAL_OK)
        r = ops->copy(d->one, d->qhost + len2, sizeof(float), stream);
    return r == SHOAL_OK ? ops->copy(d->desc, d->deschost,
                                     d->ndesc * sizeof(shoal_dev_psgd_desc_t), stream)
                         : r;
}

/* The fp32 x on the device: the input itself (float32 without error
 * feedback), else the device's x. */
static const float *x_of(const shoal_call_t *call)
{
    const struct shoal_compressor *c = call->comp;
    return c->dtype == SHOAL_FLOAT32 && !call->args.residual_in ? call->args.sendbuf
                                                                 : c->dev.x;
}

/* x = input (widened) + residual, queued. */
static shoal_status_t make_x(const shoal_dev_ops_t *ops, const shoal_call_t *call)
{
    const struct shoal_compressor *c = call->comp;
    const float *m;
    shoal_status_t r = shoal_comp_dev_input(ops, call, &m);
    if (r == SHOAL_OK && call->args.residual_in)
        r = ops->reduce(c->dev.x, m, call->args.residual_in, c->count, SHOAL_FLOAT32, SHOAL_SUM,
                        call->stream);
    return r;
}

/* The result out of out32 (recvbuf, or the device's x for float16 and
 * bfloat16) into recvbuf. */
static float *out_of(const shoal_call_t *call)
{
    const struct shoal_compressor *c = call->comp;
    return c->dtype == SHOAL_FLOAT32 ? call->args.recvbuf : c->dev.x;
}

static shoal_status_t narrow(const shoal_dev_ops_t *ops, const shoal_call_t *call)
{
    const struct shoal_compressor *c = call->comp;
    if (c->dtype == SHOAL_FLOAT32)
        return SHOAL_OK;
    return ops->convert(call->args.recvbuf, c->dtype, c->dev.x, SHOAL_FLOAT32, c->count,
                        call->stream);
}

static void point_at(shoal_call_t *call, unsigned char *pay)
{
    call->args.sendbuf = pay;
    call->args.recvbuf = pay;
}

static void failed(struct shoal_compressor *c, shoal_status_t s)
{
    if (s != SHOAL_OK)
        atomic_store(&c->dev.lost, 1);
}

/* ---- warm-up: x summed over the ranks, the residual zero ---- */

static size_t warm_need(const shoal_call_t *call)
{
    return 2 * shoal_comp_up64(call->comp->count * sizeof(float));
}

static shoal_status_t warm_pre(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                               unsigned char *pay)
{
    shoal_status_t r = make_x(ops, call);
    return r == SHOAL_OK ? ops->copy(pay, x_of(call), call->comp->count * sizeof(float),
                                     call->stream)
                         : r;
}

static shoal_status_t warm_post(const shoal_dev_ops_t *ops, shoal_call_t *call,
                                unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    size_t bytes = c->count * sizeof(float);
    shoal_status_t r = ops->copy(out_of(call), pay, bytes, call->stream);
    if (r == SHOAL_OK)
        r = narrow(ops, call);
    if (r == SHOAL_OK && call->args.residual)
        r = ops->copy(call->args.residual, pay + shoal_comp_up64(bytes), bytes, call->stream);
    point_at(call, pay);
    return r;
}

static shoal_status_t warm_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    unsigned char *pay = call->args.recvbuf;
    uint64_t tx0 = comm->team.tx_bytes, rx0 = comm->team.rx_bytes;
    memset(pay + shoal_comp_up64(c->count * sizeof(float)), 0, c->count * sizeof(float));
    shoal_status_t s = shoal_comp_dev_inner(comm, call, SHOAL_COLL_ALLREDUCE, pay, pay, c->count,
                                            SHOAL_FLOAT32, call->args.op);
    if (s == SHOAL_OK)
        shoal_comp_info(comm, call, tx0, rx0, call->comp_step);
    failed(c, s);
    return s;
}

static const shoal_dev_stager_t warm_stager = {
    .need = warm_need, .pre = warm_pre, .post = warm_post,
};

/* ---- P: the products M Q and the plain values, summed; orthonormalised
 * on the device ---- */

static size_t p_need(const shoal_call_t *call)
{
    return shoal_comp_up64(len1_of(call->comp) * sizeof(float));
}

static shoal_status_t p_pre(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                            unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    const shoal_comp_dev_t *d = &c->dev;
    shoal_status_t r = make_x(ops, call);
    const float *x = x_of(call);
    for (size_t t = 0; t < shoal_psgd_ntensors(c->psgd) && r == SHOAL_OK; t++) {
        const shoal_psgd_tensor_t *tt = shoal_psgd_tensor(c->psgd, t);
        if (tt->rank == 0)
            r = ops->copy(d->buf1 + tt->off1, x + tt->off, tt->rows * tt->cols * sizeof(float),
                          call->stream);
        else
            r = ops->gemm(0, 0, tt->rows, tt->rank, tt->cols, 1.0f, x + tt->off, tt->cols,
                          d->q + tt->off2, tt->rank, 0.0f, d->buf1 + tt->off1, tt->rank,
                          call->stream);
    }
    if (r == SHOAL_OK)
        r = ops->copy(pay, d->buf1, len1_of(c) * sizeof(float), call->stream);
    return r;
}

static shoal_status_t p_post(const shoal_dev_ops_t *ops, shoal_call_t *call, unsigned char *pay)
{
    const shoal_comp_dev_t *d = &call->comp->dev;
    shoal_status_t r = ops->copy(d->buf1, pay, len1_of(call->comp) * sizeof(float), call->stream);
    if (r == SHOAL_OK)
        r = ops->orthonormalise(d->buf1, d->desc, d->ndesc, d->col, call->stream);
    point_at(call, pay);
    return r;
}

static shoal_status_t p_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    float *buf1 = call->args.recvbuf;
    uint64_t tx0 = comm->team.tx_bytes, rx0 = comm->team.rx_bytes;
    shoal_status_t s = shoal_comp_dev_inner(comm, call, SHOAL_COLL_ALLREDUCE, buf1, buf1,
                                            len1_of(c), SHOAL_FLOAT32, SHOAL_SUM);
    c->dev.first_tx = comm->team.tx_bytes - tx0;
    c->dev.first_rx = comm->team.rx_bytes - rx0;
    failed(c, s);
    return s;
}

static const shoal_dev_stager_t p_stager = {
    .need = p_need, .pre = p_pre, .post = p_post,
};

/* ---- Q: the products M^T P, summed, kept; the result and residuals ---- */

/* The slot: the summed Q, then the state the host kept from it. */
static size_t q_need(const shoal_call_t *call)
{
    return 2 * shoal_comp_up64(len2_of(call->comp) * sizeof(float));
}

static shoal_status_t q_pre(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                            unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    const shoal_comp_dev_t *d = &c->dev;
    const float *x = x_of(call);
    shoal_status_t r = SHOAL_OK;
    for (size_t t = 0; t < shoal_psgd_ntensors(c->psgd) && r == SHOAL_OK; t++) {
        const shoal_psgd_tensor_t *tt = shoal_psgd_tensor(c->psgd, t);
        if (tt->rank > 0)
            r = ops->gemm(1, 0, tt->cols, tt->rank, tt->rows, 1.0f, x + tt->off, tt->cols,
                          d->buf1 + tt->off1, tt->rank, 0.0f, d->buf2 + tt->off2, tt->rank,
                          call->stream);
    }
    if (r == SHOAL_OK)
        r = ops->copy(pay, d->buf2, len2_of(c) * sizeof(float), call->stream);
    return r;
}

/* The residuals of every tensor first (they read x, which the result may
 * overwrite), then the results. */
static shoal_status_t q_post(const shoal_dev_ops_t *ops, shoal_call_t *call, unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    const shoal_comp_dev_t *d = &c->dev;
    size_t len2 = len2_of(c), nt = shoal_psgd_ntensors(c->psgd);
    const float *x = x_of(call);
    float *res = call->args.residual, *out = out_of(call);
    float minus = -1.0f / (float)c->nranks;
    float scale = call->args.op == SHOAL_AVG ? 1.0f / (float)c->nranks : 1.0f;
    void *st = call->stream;
    shoal_status_t r = ops->copy(d->buf2, pay, len2 * sizeof(float), st);
    if (r == SHOAL_OK)
        r = ops->copy(d->q, pay + shoal_comp_up64(len2 * sizeof(float)), len2 * sizeof(float), st);
    for (size_t t = 0; res && t < nt && r == SHOAL_OK; t++) {
        const shoal_psgd_tensor_t *tt = shoal_psgd_tensor(c->psgd, t);
        size_t n = tt->rows * tt->cols;
        r = ops->copy(res + tt->off, x + tt->off, n * sizeof(float), st);
        if (r == SHOAL_OK && tt->rank == 0)
            r = ops->gemm(0, 0, n, 1, 1, minus, d->buf1 + tt->off1, 1, d->one, 1, 1.0f,
                          res + tt->off, 1, st);
        else if (r == SHOAL_OK)
            r = ops->gemm(0, 1, tt->rows, tt->cols, tt->rank, minus, d->buf1 + tt->off1,
                          tt->rank, d->buf2 + tt->off2, tt->rank, 1.0f, res + tt->off,
                          tt->cols, st);
    }
    for (size_t t = 0; t < nt && r == SHOAL_OK; t++) {
        const shoal_psgd_tensor_t *tt = shoal_psgd_tensor(c->psgd, t);
        if (tt->rank == 0)
            r = ops->gemm(0, 0, tt->rows * tt->cols, 1, 1, scale, d->buf1 + tt->off1, 1, d->one,
                          1, 0.0f, out + tt->off, 1, st);
        else
            r = ops->gemm(0, 1, tt->rows, tt->cols, tt->rank, scale, d->buf1 + tt->off1,
                          tt->rank, d->buf2 + tt->off2, tt->rank, 0.0f, out + tt->off,
                          tt->cols, st);
    }
    if (r == SHOAL_OK)
        r = narrow(ops, call);
    point_at(call, pay);
    return r;
}

static shoal_status_t q_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    unsigned char *pay = call->args.recvbuf;
    size_t len2 = len2_of(c);
    float *buf2 = (float *)pay;
    uint64_t tx0 = comm->team.tx_bytes - c->dev.first_tx;
    uint64_t rx0 = comm->team.rx_bytes - c->dev.first_rx;
    shoal_status_t s = SHOAL_OK;
    if (len2 > 0)
        s = shoal_comp_dev_inner(comm, call, SHOAL_COLL_ALLREDUCE, buf2, buf2, len2,
                                 SHOAL_FLOAT32, SHOAL_SUM);
    if (s == SHOAL_OK) {
        shoal_psgd_keep_q(c->psgd, buf2);
        memcpy(pay + shoal_comp_up64(len2 * sizeof(float)), shoal_psgd_state(c->psgd),
               len2 * sizeof(float));
        shoal_comp_info(comm, call, tx0, rx0, call->comp_step);
    }
    failed(c, s);
    return s;
}

static const shoal_dev_stager_t q_stager = {
    .need = q_need, .pre = q_pre, .post = q_post,
};

shoal_status_t shoal_comp_psgd_issue(struct shoal_compressor *c, shoal_call_t *call)
{
    if (c->step < c->opt.warmup_steps) {
        call->stager = &warm_stager;
        call->run = warm_run;
        return shoal_call_issue(c->comm, call, 0, NULL);
    }
    shoal_call_t p = *call;
    p.stager = &p_stager;
    p.run = p_run;
    p.info = NULL;
    shoal_status_t s = shoal_call_issue(c->comm, &p, 0, NULL);
    if (s != SHOAL_OK)
        return s;
    call->stager = &q_stager;
    call->run = q_run;
    return shoal_call_issue(c->comm, call, 0, NULL);
}
