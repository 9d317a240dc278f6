/* Operation signatures as text, for mismatch errors and the flight
 * recorder: what a rank believed it was running, in the words of the API. */
#include "sig.h"

#include "algos/algo.h"
#include "base/dtype.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends to a bounded buffer; once it is full, later pieces are dropped
 * and the text stays NUL-terminated. */
typedef struct {
    char *buf;
    size_t cap;
    size_t len;
} sig_text_t;

static void sig_put(sig_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sig_put(sig_text_t *t, const char *fmt, ...)
{
    if (t->len + 1 >= t->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    t->len = (size_t)n < t->cap - t->len ? t->len + (size_t)n : t->cap - 1;
}

/* Only these kinds apply their op; the others carry SUM as a placeholder,
 * which would read as if they reduced. */
static int sig_reduces(unsigned kind)
{
    return kind == SHOAL_COLL_ALLREDUCE || kind == SHOAL_COLL_REDUCE_SCATTER ||
           kind == SHOAL_COLL_REDUCE || kind == SHOAL_SIG_ALLREDUCE_CODEC ||
           kind == SHOAL_SIG_COMPRESSOR || kind == SHOAL_SIG_RS_CODEC;
}

static void sig_put_count(sig_text_t *t, const shoal_sig_t *sig)
{
    const char *dtype = shoal_dtype_name((shoal_dtype_t)sig->dtype);
    if (sig->count == SHOAL_SIG_COUNT_ANY)
        sig_put(t, " of any count x %s", dtype);
    else
        sig_put(t, " of %llu x %s", (unsigned long long)sig->count, dtype);
}

/* FNV-1a, 32 bits, over bytes. */
static uint32_t sig_fnv(uint32_t h, const void *bytes, size_t len)
{
    const unsigned char *b = bytes;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

uint32_t shoal_sig_codec_id(const char *name, size_t block, int round, int bits, int algo)
{
    /* Fixed-width fields, so that the id is the same whatever the types'
     * sizes; the name with its NUL, so that it cannot run into them. */
    uint32_t fields[4] = {(uint32_t)block, (uint32_t)round, (uint32_t)bits, (uint32_t)algo};
    uint32_t h = sig_fnv(2166136261u, name, strlen(name) + 1);
    return sig_fnv(h, fields, sizeof(fields));
}

const char *shoal_sig_format(const shoal_sig_t *sig, char *buf, size_t cap)
{
    sig_text_t t = {.buf = buf, .cap = cap, .len = 0};
    if (cap == 0)
        return buf;
    buf[0] = '\0';
    unsigned kind = sig->kind;
    if (kind == SHOAL_SIG_BARRIER) {
        sig_put(&t, "barrier #%llu", (unsigned long long)sig->seq);
        return buf;
    }
    int p2p = kind == SHOAL_SIG_P2P || kind == SHOAL_COLL_SEND || kind == SHOAL_COLL_RECV ||
              kind == SHOAL_SIG_RMA;
    if (kind == SHOAL_SIG_P2P)
        sig_put(&t, "send/recv");
    else if (kind == SHOAL_SIG_ALLREDUCE_CODEC)
        sig_put(&t, "compressed allreduce");
    else if (kind == SHOAL_SIG_RS_CODEC)
        sig_put(&t, "compressed reducescatter");
    else if (kind == SHOAL_SIG_COMPRESSOR)
        sig_put(&t, "compressor's allreduce");
    else if (kind == SHOAL_SIG_COMP_ALLGATHER)
        sig_put(&t, "compressed allgather");
    else if (kind == SHOAL_SIG_COMP_ALLTOALL)
        sig_put(&t, "compressed alltoall");
    else if (kind == SHOAL_SIG_RMA)
        sig_put(&t, "one-sided");
    else if (kind < SHOAL_COLL_KIND_COUNT)
        sig_put(&t, "%s", shoal_coll_kind_name((shoal_coll_kind_t)kind));
    else
        sig_put(&t, "kind %u", kind);
    /* Point-to-point calls are not numbered (seq 0): no "#0" that would
     * suggest they were. */
    if (!p2p || sig->seq != 0)
        sig_put(&t, " #%llu", (unsigned long long)sig->seq);
    sig_put_count(&t, sig);
    if (sig_reduces(kind))
        sig_put(&t, " %s", shoal_op_name(shoal_op_of_sig_code(sig->op)));
    if (kind == SHOAL_SIG_ALLREDUCE_CODEC || kind == SHOAL_SIG_RS_CODEC)
        sig_put(&t, " codec %08x", (unsigned)(uint32_t)sig->root);
    else if (sig->root >= 0)
        sig_put(&t, p2p ? " peer %d" : " root %d", (int)sig->root);
    return buf;
}
