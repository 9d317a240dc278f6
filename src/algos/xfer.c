/* The message engine: any number of messages to and from any peers, moved
 * piece by piece in passes. A pass offers every unfinished message the
 * chance to move as many pieces as its endpoint takes right now, so no
 * message waits on another: two ranks that each send a long message to the
 * other before receiving cannot deadlock, since every pass drains what has
 * arrived as well as filling what is free. */
#include "prims.h"

#include "base/clock.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-peer flags up to this many ranks live on the stack. */
#define XFER_STACK_RANKS 1024

/* Peers named in a timeout message before the rest are only counted. */
#define XFER_NAMED_MAX 16

#define WORD_BITS 64

/* One bit per peer and direction: set while a pass has met an unfinished
 * message for that peer, which holds back the later ones behind it. */
typedef struct {
    uint64_t *send, *recv;
    size_t words;
} xfer_flags_t;

static int flag_test(const uint64_t *bits, int peer)
{
    return (bits[(unsigned)peer / WORD_BITS] >> ((unsigned)peer % WORD_BITS)) & 1;
}

static int flag_test_set(uint64_t *bits, int peer)
{
    uint64_t m = 1ull << ((unsigned)peer % WORD_BITS);
    uint64_t *w = &bits[(unsigned)peer / WORD_BITS];
    int was = (*w & m) != 0;
    *w |= m;
    return was;
}

static void flags_clear(xfer_flags_t *f)
{
    memset(f->send, 0, f->words * sizeof(uint64_t));
    memset(f->recv, 0, f->words * sizeof(uint64_t));
}

static size_t piece_len(const shoal_team_t *team, const shoal_xfer_t *x)
{
    size_t rem = x->bytes - x->done;
    return rem < team->chunk_size ? rem : team->chunk_size;
}

/* Moves pieces of x into its endpoint's free send slots; *moved_p set if
 * any did. SHOAL_OK also when the FIFO filled before x finished. */
static shoal_status_t xfer_send_some(shoal_team_t *team, shoal_xfer_t *x, int *moved_p)
{
    shoal_ep_t *ep = x->ep;
    while (!shoal_xfer_complete(x)) {
        void *slot;
        size_t cap;
        shoal_status_t s = ep->ops->send_slot(ep, &slot, &cap);
        if (s == SHOAL_INPROGRESS)
            return SHOAL_OK;
        if (s != SHOAL_OK)
            return s;
        size_t len = piece_len(team, x);
        if (cap < len) {
            shoal_error(ALGO, "rank %d: piece of %zu B exceeds the %zu B slot to rank %d",
                        team->rank, len, cap, ep->peer);
            return SHOAL_ERR_INTERNAL;
        }
        /* An empty piece may come from a NULL buffer: no arithmetic on it. */
        if (len)
            shoal_move(team, slot, (const char *)x->buf + x->done, len);
        team->tx_bytes += len;
        s = ep->ops->send_post(ep, len, team->hdr);
        if (s != SHOAL_OK)
            return s;
        x->done += len;
        x->started = 1;
        *moved_p = 1;
    }
    return SHOAL_OK;
}

/* Takes the pieces of x that have arrived, copying or reducing each into
 * place. A piece whose length is not the one due means the peer sent a
 * message of another size: that is an error, never a silent mix-up. */
static shoal_status_t xfer_recv_some(shoal_team_t *team, shoal_xfer_t *x, int *moved_p)
{
    shoal_ep_t *ep = x->ep;
    while (!shoal_xfer_complete(x)) {
        const void *in;
        size_t len;
        unsigned char hdr[SHOAL_TL_HDR_BYTES];
        shoal_status_t s = shoal_team_recv_slot(team, ep, &in, &len, hdr);
        if (s == SHOAL_INPROGRESS)
            return SHOAL_OK;
        if (s != SHOAL_OK)
            return s;
        if (memcmp(hdr, team->hdr, sizeof(hdr)))
            return shoal_team_mismatch(team, ep->peer, hdr);
        size_t want = piece_len(team, x);
        if (len != want) {
            shoal_team_cause(team, "rank %d got a piece of %zu B from rank %d where %zu B "
                              "were due (at byte %zu of a %zu-B message): the two ranks "
                              "disagree on the message's size", team->rank, len, ep->peer,
                              want, x->done, x->bytes);
            return SHOAL_ERR_MISMATCH;
        }
        team->rx_bytes += len;
        if (len) {
            char *dst = (char *)x->buf + x->done;
            if (x->reduce)
                shoal_combine(team, x->reduce, dst, in, dst, len / x->esize, x->esize);
            else
                shoal_move_out(team, dst, in, len);
        }
        s = ep->ops->recv_release(ep);
        if (s != SHOAL_OK)
            return s;
        x->done += len;
        x->started = 1;
        *moved_p = 1;
    }
    return SHOAL_OK;
}

/* One pass over msgs[*first_p..n): each message that is first unfinished
 * for its peer moves what it can. *first_p skips the finished prefix, so
 * long runs of done messages cost nothing on later passes. Returns the
 * count still unfinished in *left_p. */
static shoal_status_t xfer_pass(shoal_team_t *team, shoal_xfer_t *msgs, size_t n,
                                size_t *first_p, uint64_t *flags, int send, int *moved_p,
                                size_t *left_p)
{
    size_t left = 0;
    while (*first_p < n && shoal_xfer_complete(&msgs[*first_p]))
        ++*first_p;
    for (size_t i = *first_p; i < n; i++) {
        shoal_xfer_t *x = &msgs[i];
        if (shoal_xfer_complete(x))
            continue;
        if (flag_test(flags, x->ep->peer)) {
            left++;
            continue;
        }
        shoal_status_t s = send ? xfer_send_some(team, x, moved_p)
                                : xfer_recv_some(team, x, moved_p);
        if (s != SHOAL_OK)
            return s;
        if (!shoal_xfer_complete(x)) {
            /* Later messages of this peer and direction wait behind x. */
            flag_test_set(flags, x->ep->peer);
            left++;
        }
    }
    *left_p = left;
    return SHOAL_OK;
}

/* Appends " R" to out for the peer of each unfinished message of
 * msgs[from..n) (of every one there when all): each peer once, through the
 * bits of seen, and XFER_NAMED_MAX at most, then a count of the rest. */
static void owed_peers(char *out, size_t cap, const shoal_xfer_t *msgs, size_t from, size_t n,
                       int all, uint64_t *seen)
{
    size_t len = strlen(out), named = 0, more = 0;
    for (size_t i = from; i < n; i++) {
        if ((!all && shoal_xfer_complete(&msgs[i])) || flag_test_set(seen, msgs[i].ep->peer))
            continue;
        if (named++ < XFER_NAMED_MAX && len < cap)
            len += (size_t)snprintf(out + len, cap - len, " %d", msgs[i].ep->peer);
        else
            more++;
    }
    if (more && len < cap)
        snprintf(out + len, cap - len, " and %zu more", more);
    if (!*out)
        snprintf(out, cap, " none");
}

/* Every message moved: wait until each send endpoint has pushed what was
 * posted to it, so no peer waits on bytes left in this process. */
static shoal_status_t xfer_flush(shoal_team_t *team, shoal_xfer_t *sends, size_t nsends,
                                 uint64_t deadline_ns, size_t *unflushed_p)
{
    shoal_idle_t wait = {0, 0};
    size_t i = 0;
    while (i < nsends) {
        shoal_ep_t *ep = sends[i].ep;
        shoal_status_t s = ep->ops->flush(ep);
        if (s == SHOAL_OK) {
            i++;
            continue;
        }
        if (s == SHOAL_INPROGRESS)
            s = shoal_prims_idle(team, deadline_ns, &wait);
        if (s != SHOAL_OK) {
            *unflushed_p = i;
            return s;
        }
    }
    return SHOAL_OK;
}

/* Messages a caller got wrong: no endpoint (a self message, or a peer no
 * transport reaches) or a reduction without an element size. */
static shoal_status_t xfer_check(const shoal_team_t *team, const shoal_xfer_t *msgs,
                                 size_t n, int send)
{
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].ep || (!send && msgs[i].reduce && msgs[i].esize == 0)) {
            shoal_error(ALGO, "rank %d: %s %zu has %s", team->rank, send ? "send" : "receive",
                        i, msgs[i].ep ? "a reduction but no element size" : "no endpoint");
            return SHOAL_ERR_INTERNAL;
        }
    }
    return SHOAL_OK;
}

/* The flags of one call: on the stack up to XFER_STACK_RANKS ranks (the
 * caller's `stack`), else the one allocation of the call. */
static shoal_status_t flags_init(const shoal_team_t *team, uint64_t *stack,
                                 xfer_flags_t *f)
{
    f->words = ((size_t)team->nranks + WORD_BITS - 1) / WORD_BITS;
    f->send = stack;
    if (team->nranks > XFER_STACK_RANKS) {
        f->send = malloc(2 * f->words * sizeof(uint64_t));
        if (!f->send) {
            shoal_error(ALGO, "rank %d: no memory for the flags of %d peers", team->rank,
                        team->nranks);
            return SHOAL_ERR_NO_MEMORY;
        }
    }
    f->recv = f->send + f->words;
    return SHOAL_OK;
}

static void flags_fini(xfer_flags_t *f, uint64_t *stack)
{
    if (f->send != stack)
        free(f->send);
}

/* One pass over both directions. Receives go first: releasing slots lets
 * the peers' sends move, which is what they wait on. */
static shoal_status_t xfer_passes(shoal_team_t *team, xfer_flags_t *f,
                                  shoal_xfer_t *sends, size_t nsends, size_t *sfirst_p,
                                  size_t *sleft_p, shoal_xfer_t *recvs, size_t nrecvs,
                                  size_t *rfirst_p, size_t *rleft_p, int *moved_p)
{
    flags_clear(f);
    shoal_status_t s = xfer_pass(team, recvs, nrecvs, rfirst_p, f->recv, 0, moved_p, rleft_p);
    if (s == SHOAL_OK)
        s = xfer_pass(team, sends, nsends, sfirst_p, f->send, 1, moved_p, sleft_p);
    return s;
}

#define XFER_STACK_WORDS (2 * (XFER_STACK_RANKS / WORD_BITS))

shoal_status_t shoal_xfer_step(shoal_team_t *team, shoal_xfer_t *sends, size_t nsends,
                               shoal_xfer_t *recvs, size_t nrecvs, int *moved_p)
{
    uint64_t stack[XFER_STACK_WORDS];
    xfer_flags_t f;
    size_t sfirst = 0, rfirst = 0, sleft, rleft;
    int moved = 0;
    shoal_status_t s = xfer_check(team, sends, nsends, 1);
    if (s == SHOAL_OK)
        s = xfer_check(team, recvs, nrecvs, 0);
    if (s == SHOAL_OK)
        s = flags_init(team, stack, &f);
    if (s != SHOAL_OK)
        return s;
    s = xfer_passes(team, &f, sends, nsends, &sfirst, &sleft, recvs, nrecvs, &rfirst, &rleft,
                    &moved);
    flags_fini(&f, stack);
    /* Progress pushes what the sends posted and pulls what peers sent. */
    if (s == SHOAL_OK)
        s = shoal_team_progress(team);
    *moved_p = moved;
    return s;
}

shoal_status_t shoal_xfer_run(shoal_team_t *team, shoal_xfer_t *sends, size_t nsends,
                              shoal_xfer_t *recvs, size_t nrecvs, uint64_t deadline_ns)
{
    uint64_t stack[XFER_STACK_WORDS];
    xfer_flags_t f;
    shoal_status_t s = xfer_check(team, sends, nsends, 1);
    if (s == SHOAL_OK)
        s = xfer_check(team, recvs, nrecvs, 0);
    if (s == SHOAL_OK)
        s = flags_init(team, stack, &f);
    if (s != SHOAL_OK)
        return s;

    size_t sfirst = 0, rfirst = 0, sleft = 1, rleft = 1;
    shoal_idle_t wait = {0, 0};
    while (sleft + rleft > 0) {
        int moved = 0;
        s = xfer_passes(team, &f, sends, nsends, &sfirst, &sleft, recvs, nrecvs, &rfirst,
                        &rleft, &moved);
        if (s == SHOAL_OK && !moved && sleft + rleft > 0)
            s = shoal_prims_idle(team, deadline_ns, &wait);
        /* The deadline holds for every message, also while others move. */
        else if (s == SHOAL_OK && sleft + rleft > 0 && shoal_deadline_passed(deadline_ns))
            s = SHOAL_ERR_TIMEOUT;
        if (s != SHOAL_OK)
            break;
    }
    if (s == SHOAL_OK) {
        size_t unflushed = 0;
        s = xfer_flush(team, sends, nsends, deadline_ns, &unflushed);
        if (s == SHOAL_ERR_TIMEOUT) {
            char to[160] = "";
            flags_clear(&f);
            owed_peers(to, sizeof(to), sends, unflushed, nsends, 1, f.send);
            shoal_team_cause(team, "rank %d waited until the deadline to push data to "
                              "rank(s)%s", team->rank, to);
        }
    } else if (s == SHOAL_ERR_TIMEOUT) {
        char to[160] = "", from[160] = "";
        flags_clear(&f);
        owed_peers(to, sizeof(to), sends, sfirst, nsends, 0, f.send);
        owed_peers(from, sizeof(from), recvs, rfirst, nrecvs, 0, f.recv);
        shoal_team_cause(team, "rank %d waited until the deadline: %zu send(s) and %zu "
                          "receive(s) unfinished; still owed: sends to rank(s)%s, receives "
                          "from rank(s)%s", team->rank, sleft, rleft, to, from);
    }
    flags_fini(&f, stack);
    return s;
}
