/* A compressor's record, shared by compressor.c (options, host calls,
 * checkpoints) and compressor_dev.c (stream-ordered calls on device
 * tensors, whose state lives on the device). */
#ifndef SHOAL_COMPRESSOR_PRIV_H
#define SHOAL_COMPRESSOR_PRIV_H

#include "compressor.h"

#include "base/dev.h"
#include "base/dtype.h"
#include "compress/powersgd.h"

#include <stdatomic.h>

#define COMP_MAGIC 0x73686f616c636f6dull  /* "shoalcom" */
#define STATE_MAGIC 0x73686f616c737432ull /* "shoalst2" */

/* The state on a device, from the first stream-ordered call on. */
typedef struct {
    const shoal_dev_ops_t *ops; /* NULL while the state is on the host */
    int device;
    float *res, *res_next;      /* error feedback: count floats each (or NULL) */
    float *x;                   /* fp32 input and result for float16 and bfloat16 */
    float *host;                /* pinned: the residual on its way to and from the host */
    int upload;                 /* host holds the residual the first call's stream copies in */
    float *upload_to;           /* ... into this one, the first call's last residual */
    float *scales;              /* TERNARY: the shared scales of the call being run */
    unsigned char *wire;        /* INT8 on the direct path: a staged call's payload, on
                                 * the device (compressor_dev.c), or NULL */
    /* What the first of a call's two host sides moved (TERNARY's scales,
     * POWERSGD's P), for the second's info. */
    uint64_t first_tx, first_rx;
    /* POWERSGD (compressor_psgd.c): Q, the summed and orthonormalised P
     * (with the plain tensors' sums), the summed Q, the constant 1 (a
     * product's operand), and the pinned Q with that 1 on their way in;
     * the compressed tensors' records for the orthonormalisation (device,
     * and pinned on their way in) and its scratch columns. */
    float *q, *buf1, *buf2, *one, *qhost;
    shoal_dev_psgd_desc_t *desc, *deschost;
    double *col;
    size_t ndesc;
    void *stream;               /* the last stream-ordered call's */
    size_t bytes;               /* device memory allocated (shoal_comp_dev_alloc) */
    /* A call failed after its stream side was queued: the residual the
     * stream wrote is not the call's. Cleared by set_state and reset. */
    atomic_int lost;
} shoal_comp_dev_t;

struct shoal_compressor {
    uint64_t magic;
    struct shoal_comm *comm;
    shoal_compress_options_t opt;
    size_t count;
    shoal_dtype_t dtype;
    int nranks;        /* comm's, kept: checkpoints outlive the communicator */
    /* Values of a call's input and output on this rank (the collective's
     * shape: count, or nranks x count), and of the residual (the input's,
     * or the all-to-all's none). */
    size_t nin, nout, nres;
    uint64_t hash;     /* of everything that must agree across ranks */
    int collective;    /* made by shoal_compressor_create (not per call) */
    uint64_t step;     /* successful calls so far (queued ones, on a stream) */
    float *res, *res_next;  /* error feedback, count each (or NULL); with the
                             * state on a device, res is its host copy */
    float *x;          /* fp32 input: the widened input, or PowerSGD's input plus
                        * residual; NULL when sendbuf serves */
    float *out;        /* fp32 result, when recvbuf is not fp32 */
    float *scales;     /* TERNARY: one per block */
    uint16_t *scales16; /* TERNARY: the same as bf16, for their all-reduce */
    size_t nblocks;
    shoal_psgd_t *psgd;
    float *buf1, *buf2;
    /* The all-gather's and all-to-all's wire (compressor_colls.c): what
     * this rank sends and what it receives, and the all-to-all's byte
     * counts and displacements (4 x nranks). MAJORITY: the votes. */
    unsigned char *tx, *rx;
    size_t *moves;
    float *votes;
    struct shoal_comp_adapt *adapt; /* ADAPTIVE (compressor_adapt.c) */
    /* The ticket of the host call issued and not yet ended (0: none): its
     * run clears it, or, for a call that never runs (its communicator
     * aborted or broken first, a group that failed), the call's end
     * (shoal_call_t), which clears only its own ticket. */
    atomic_uint_least64_t busy;
    atomic_uint_least64_t tickets; /* tickets handed out */
    shoal_comp_dev_t dev;
};

/* This rank's stream of stochastic rounding: the seed mixed with the rank,
 * so that ranks round independently. */
static inline uint64_t shoal_comp_rank_seed(const struct shoal_compressor *c, int rank)
{
    return c->opt.seed ^ ((uint64_t)rank + 1) * 0xd1342543de82ef95ull;
}

/* A scale as bf16, rounded up: never below f (f >= 0), so that a shared
 * scale still covers every value of its block; a finite f stays finite
 * (the largest finite bf16, a hair below the largest floats, where the
 * rounding would reach infinity; the codec clips what lies beyond). */
static inline uint16_t shoal_comp_scale_bf16_up(float f)
{
    uint32_t u = shoal_f32_bits(f);
    if ((u & 0x7fffffffu) >= 0x7f800000u)
        return shoal_f32_to_bf16(f);
    uint32_t up = (u + 0xffffu) >> 16;
    return (uint16_t)((up & 0x7f80u) == 0x7f80u ? 0x7f7fu : up);
}

/* x rounded up to a cache line: the regions of a staged call's payload. */
static inline size_t shoal_comp_up64(size_t x)
{
    return (x + 63) & ~(size_t)63;
}

/* One all-reduce job of a kind on count values (the compressor's whole
 * tensor, or for ADAPTIVE one tensor of its layout) with its buffers:
 * TERNARY's scales (nblocks of block values), POWERSGD's state and
 * buffers (warm-up: plain calls while the step is below it), and x, count
 * floats for the input plus the residual where a run writes it. */
typedef struct {
    shoal_compress_kind_t kind;
    unsigned block;
    size_t count;
    float *scales;
    uint16_t *scales16;
    size_t nblocks;
    shoal_psgd_t *psgd;
    float *buf1, *buf2, *x;
    uint64_t warmup;
} shoal_comp_job_t;

/* The job of c's own kind on its whole tensor. */
shoal_comp_job_t shoal_comp_own_job(struct shoal_compressor *c);
/* The codec of job (INT8, INT4, SIGN, TERNARY without its scales) on rank,
 * at c's step; shoal_comp_codec: that of c's own kind and block. */
shoal_codec_t shoal_comp_job_codec(const struct shoal_compressor *c,
                                   const shoal_comp_job_t *job, int rank);
shoal_codec_t shoal_comp_codec(const struct shoal_compressor *c, int rank);
/* The runs of a job for call: x (or m) its fp32 input, res_in and res the
 * last and the new residual of its values (NULL without error feedback),
 * out its output. plain: a full-precision all-reduce of the input plus
 * the residual, which leaves a residual of 0; codec: INT8, INT4, SIGN or
 * TERNARY (the shared scales first); powersgd. */
shoal_status_t shoal_comp_run_plain(struct shoal_comm *comm, const shoal_call_t *call,
                                    const shoal_comp_job_t *job, const float *m,
                                    const float *res_in, float *out, float *res);
shoal_status_t shoal_comp_run_codec(struct shoal_comm *comm, const shoal_call_t *call,
                                    const shoal_comp_job_t *job, const float *x,
                                    const float *res_in, float *out, float *res);
shoal_status_t shoal_comp_run_powersgd(struct shoal_comm *comm, const shoal_call_t *call,
                                       const shoal_comp_job_t *job, const float *m,
                                       const float *res_in, float *out, float *res);

/* compressor_adapt.c: ADAPTIVE's record (choices, per-tensor state), made
 * with the compressor from its layout; its run; its part of a checkpoint
 * (bytes, save, load: SHOAL_ERR_INVALID_ARG for choices it cannot hold,
 * changing nothing then); reset to no choice; the choices for the API. */
struct shoal_comp_adapt;
shoal_status_t shoal_comp_adapt_new(struct shoal_compressor *c,
                                    const shoal_compress_layout_t *layout);
void shoal_comp_adapt_free(struct shoal_compressor *c);
shoal_status_t shoal_comp_run_adaptive(struct shoal_comm *comm, const shoal_call_t *call,
                                       const float *x, const float *res_in, float *out,
                                       float *res);
size_t shoal_comp_adapt_state_bytes(const struct shoal_compressor *c);
void shoal_comp_adapt_save(const struct shoal_compressor *c, void *buf);
shoal_status_t shoal_comp_adapt_load(struct shoal_compressor *c, const void *buf);
void shoal_comp_adapt_reset(struct shoal_compressor *c);
double shoal_comp_adapt_error(const struct shoal_compressor *c);
/* dst[0..n) = src (of dtype) as fp32, plus add[i] when add is not NULL;
 * and back to float16 or bfloat16. */
void shoal_comp_widen(float *dst, const void *src, size_t n, shoal_dtype_t dtype,
                      const float *add);
void shoal_comp_narrow(void *dst, const float *src, size_t n, shoal_dtype_t dtype);

/* compressor_colls.c: the buffers of c's collective, on top of
 * comp_new's (0 or SHOAL_ERR_NO_MEMORY); and its runs. x: the fp32 input
 * (nin values); res_in, res: the last and the new residual (NULL without
 * error feedback); out: the fp32 output (nout values). */
shoal_status_t shoal_comp_colls_alloc(struct shoal_compressor *c);
void shoal_comp_colls_free(struct shoal_compressor *c);
shoal_status_t shoal_comp_run_allgather(struct shoal_comm *comm, const shoal_call_t *call,
                                        const float *x, const float *res_in, float *out,
                                        float *res);
shoal_status_t shoal_comp_run_alltoall(struct shoal_comm *comm, const shoal_call_t *call,
                                       const float *x, float *out);
shoal_status_t shoal_comp_run_vote(struct shoal_comm *comm, const shoal_call_t *call,
                                   const float *x, float *out);
/* Whether the all-to-all's block to rank j travels as fp32 (between the
 * ranks of one host of a job on several hosts), not as the codec's wire. */
int shoal_comp_a2a_plain(const struct shoal_comm *comm, int j);
/* One inner call on comm for call: kind's collective of count values of
 * dtype (with codec: the residuals as args.residual and residual_in),
 * under sig_kind (0: the call's own). */
shoal_status_t shoal_comp_inner(struct shoal_comm *comm, const shoal_call_t *call,
                                const shoal_coll_args_t *args, unsigned sig_kind);

/* call->info (when set) after a successful call: the bytes comm's links
 * moved since tx0 and rx0, and the compressor's step as of the call. */
void shoal_comp_info(struct shoal_comm *comm, const shoal_call_t *call, uint64_t tx0,
                     uint64_t rx0, uint64_t step);
/* The same with the bytes given: what crossed device to device. */
void shoal_comp_info_moved(const shoal_call_t *call, uint64_t sent, uint64_t received,
                           uint64_t step);

/* compressor_dev.c. Check and queue call, a stream-ordered call on c
 * whose op the caller checked: the state moved to its buffers' device on
 * the first call, the stream work of the compressor's kind. */
shoal_status_t shoal_comp_dev_issue(struct shoal_compressor *c, shoal_call_t *call);
/* For compressor_psgd.c: an inner call on the payload (the compressor's
 * signature kind); the state's first copy in, queued by the first call's
 * stream work. */
shoal_status_t shoal_comp_dev_inner(struct shoal_comm *comm, const shoal_call_t *call,
                                    shoal_coll_kind_t kind, const void *send, void *recv,
                                    size_t count, shoal_dtype_t dtype, shoal_op_t op);
shoal_status_t shoal_comp_dev_upload(const shoal_dev_ops_t *ops, const shoal_call_t *call);
/* A call's first stream work: the upload above, then its input as fp32
 * (float16 and bfloat16 widened into dev.x); *x_p says where it is. */
shoal_status_t shoal_comp_dev_input(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                                    const float **x_p);
/* Device memory for c's state on device, counted in c->dev.bytes. */
shoal_status_t shoal_comp_dev_alloc(const shoal_dev_ops_t *ops, struct shoal_compressor *c,
                                    int device, size_t bytes, void **p);
/* The host codec of c's INT8 on rank at step (a device call's step, not
 * c->step, which the issuing thread moves on), and the device codec's
 * arguments of the same, for op. */
shoal_codec_t shoal_comp_dev_host_codec(const struct shoal_compressor *c, int rank,
                                        uint64_t step);
shoal_dev_codec_args_t shoal_comp_dev_codec(const struct shoal_compressor *c, int rank,
                                            uint64_t step, shoal_dev_codec_op_t op);
/* The two-shot's parts on the device and host, for a stager (INT8):
 * encode_part queues x[lo, lo + len) plus the call's last residual
 * encoded with this rank's stream into wire, writing the new residual;
 * exact_part queues the same values exactly (fp32) into dst; owner_sum
 * adds to sum (len values from first) every other rank's wire among
 * wires (cw bytes apart, by rank), decoded through tmp, rank me-1 first,
 * as the host two-shot does. */
shoal_status_t shoal_comp_dev_encode_part(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                                          const float *x, size_t lo, size_t len, void *wire);
shoal_status_t shoal_comp_dev_exact_part(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                                         const float *x, size_t lo, size_t len, void *dst);
void shoal_comp_dev_owner_sum(const shoal_call_t *call, float *sum, float *tmp,
                              const unsigned char *wires, size_t cw, size_t len, size_t first);
/* compressor_dev_colls.c: the stager and host side of c's all-gather,
 * reduce-scatter or all-to-all on device tensors (INT8) into call. */
void shoal_comp_dev_colls_pick(const struct shoal_compressor *c, shoal_call_t *call);

/* compressor_psgd.c: PowerSGD on device tensors. Its device buffers (made
 * with the rest of the state, freed with it); Q and the constant 1 into
 * their pinned copy, for the next upload; that upload on stream; queue a
 * prepared call (one staged call in warm-up, else two). */
shoal_status_t shoal_comp_psgd_alloc(const shoal_dev_ops_t *ops, struct shoal_compressor *c,
                                     int device);
void shoal_comp_psgd_free(const shoal_dev_ops_t *ops, struct shoal_compressor *c);
void shoal_comp_psgd_stage_state(struct shoal_compressor *c);
shoal_status_t shoal_comp_psgd_upload(const shoal_dev_ops_t *ops, struct shoal_compressor *c,
                                      void *stream);
shoal_status_t shoal_comp_psgd_issue(struct shoal_compressor *c, shoal_call_t *call);
/* With the state on a device: wait for the last call's stream, then copy
 * the device residual into c->res (pull) or c->res into it (push).
 * SHOAL_OK at once while the state is on the host. */
shoal_status_t shoal_comp_dev_pull(struct shoal_compressor *c);
shoal_status_t shoal_comp_dev_push(struct shoal_compressor *c);
/* Free the device state, after the last call's stream. */
void shoal_comp_dev_free(struct shoal_compressor *c);

#endif
