/* Split: the ranks of one color form a new communicator, ordered by
 * (key, old rank).
 *
 * The child's unique id never travels: it would carry the child's secret
 * in clear over the parent's bootstrap connections, where anyone who reads
 * them could join the child. Only addresses travel. The first member of
 * each color opens a listener on its bootstrap address and every rank
 * learns its address in an all-gather; every member derives the secret
 *
 *   HMAC-SHA256(parent secret, "shoal-split" || split number || color)
 *
 * (integers big-endian, 32 bits) on its own, as shrink does (shrink.c). The
 * split number counts the splits of the parent, the same on every rank, so
 * that no two children of one parent share a secret. The first member lends
 * its listener to the bootstrap's listener table under the child's id, and
 * its shoal_comm_init as rank 0 accepts on it. */
#include "comm.h"

#include "base/cancel.h"
#include "base/log.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char shoal_split_label[] = "shoal-split";

/* Member of a split: (color, key, old rank) of every rank of the parent. */
typedef struct {
    int color;
    int key;
    int rank;
} split_entry_t;

static int split_entry_cmp(const void *a, const void *b)
{
    const split_entry_t *x = a, *y = b;
    if (x->color != y->color)
        return x->color < y->color ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static void split_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The child's secret (see the top of this file). */
static shoal_status_t split_secret(struct shoal_comm *comm, uint32_t nsplit, int color,
                                   uint8_t secret[SHOAL_SECRET_BYTES])
{
    uint8_t msg[sizeof(shoal_split_label) - 1 + 8];
    size_t label_len = sizeof(shoal_split_label) - 1;
    memcpy(msg, shoal_split_label, label_len);
    split_put_u32(msg + label_len, nsplit);
    split_put_u32(msg + label_len + 4, (uint32_t)color);
    unsigned mac_len = 0;
    if (!HMAC(EVP_sha256(), shoal_bootstrap_secret(comm->bootstrap), SHOAL_SECRET_BYTES, msg,
              sizeof(msg), secret, &mac_len) || mac_len != SHOAL_SECRET_BYTES)
        return shoal_comm_fail(comm, SHOAL_ERR_SYSTEM, "shoal_comm_split: HMAC-SHA256: %s",
                               ERR_reason_error_string(ERR_get_error()));
    return SHOAL_OK;
}

/* The first member of a color: a listener on the address the others reach
 * this rank at (the bootstrap's), packed into addr. */
static shoal_status_t split_listen(struct shoal_comm *comm, int *fd_p,
                                   uint8_t addr[SHOAL_BOOT_ADDR_BYTES])
{
    shoal_sockaddr_t local = *shoal_bootstrap_local_addr(comm->bootstrap);
    shoal_sock_set_port(&local, 0);
    shoal_status_t s = shoal_sock_listen(&local, fd_p);
    if (s != SHOAL_OK)
        return shoal_comm_fail(comm, s, "shoal_comm_split: cannot open the new root's listener");
    shoal_bootstrap_addr_pack(&local, addr);
    return SHOAL_OK;
}

shoal_status_t shoal_comm_split(shoal_comm_t comm, int color, int key, shoal_comm_t *newcomm_p)
{
    shoal_status_t s = shoal_comm_enter(comm, "shoal_comm_split");
    if (s != SHOAL_OK)
        return s;
    int n = comm->team.nranks;
    split_entry_t *all = NULL;
    uint8_t(*addrs)[SHOAL_BOOT_ADDR_BYTES] = NULL;
    int lfd = -1;
    uint8_t secret[SHOAL_SECRET_BYTES];
    shoal_unique_id_t id;
    memset(&id, 0, sizeof(id));
    if (!newcomm_p || (color < 0 && color != SHOAL_SPLIT_NOCOLOR)) {
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                            newcomm_p ? "shoal_comm_split: color %d is negative (only SHOAL_SPLIT_NOCOLOR is)"
                                      : "shoal_comm_split: newcomm_p is NULL (color %d)",
                            color);
        goto out_free;
    }
    all = calloc((size_t)n, sizeof(*all));
    addrs = calloc((size_t)n, sizeof(*addrs));
    if (!all || !addrs) {
        s = shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "shoal_comm_split: out of memory");
        goto out_free;
    }
    uint32_t nsplit = comm->nsplits++;
    all[comm->team.rank] = (split_entry_t){color, key, comm->team.rank};
    s = shoal_bootstrap_allgather(comm->bootstrap, all, sizeof(*all));
    if (s != SHOAL_OK)
        goto err_broken;
    qsort(all, (size_t)n, sizeof(*all), split_entry_cmp);

    int first = -1, newrank = -1, newsize = 0;
    for (int i = 0; i < n; i++) {
        if (all[i].color != color)
            continue;
        if (first < 0)
            first = all[i].rank;
        if (all[i].rank == comm->team.rank)
            newrank = newsize;
        newsize++;
    }
    /* A first member that cannot listen still takes part in the exchange,
     * with no address: its peers fail to read one, rather than wait. */
    if (color != SHOAL_SPLIT_NOCOLOR && first == comm->team.rank)
        s = split_listen(comm, &lfd, addrs[comm->team.rank]);
    shoal_status_t sg = shoal_bootstrap_allgather(comm->bootstrap, addrs, sizeof(*addrs));
    if (sg != SHOAL_OK) {
        s = sg;
        goto err_broken;
    }
    if (s != SHOAL_OK || color == SHOAL_SPLIT_NOCOLOR) {
        if (s == SHOAL_OK)
            *newcomm_p = NULL;
        goto out_free;
    }

    shoal_sockaddr_t root;
    s = shoal_bootstrap_addr_unpack(addrs[first], &root);
    if (s == SHOAL_OK)
        s = split_secret(comm, nsplit, color, secret);
    if (s == SHOAL_OK)
        s = shoal_bootstrap_id_make(&root, secret, &id);
    if (s == SHOAL_OK && lfd >= 0)
        s = shoal_bootstrap_listener_offer(&id, lfd);
    if (s != SHOAL_OK) {
        shoal_comm_fail(comm, s, "shoal_comm_split: color %d: no id for the new communicator "
                        "(rank %d's listener)", color, first);
        goto out_free;
    }
    /* The new communicator's init waits for its peers: an abort of comm
     * from another thread (which waits for this call to leave) cuts it
     * short, so that the abort need not wait for the init's deadline. */
    shoal_cancel_scope_t scope;
    shoal_cancel_push(&comm->team.aborted, &scope);
    s = shoal_comm_init(newsize, &id, newrank, newcomm_p);
    shoal_cancel_pop(&scope);
    if (s != SHOAL_OK) {
        if (lfd >= 0)
            shoal_bootstrap_listener_withdraw(&id);
        shoal_comm_fail(comm, s, "shoal_comm_split: color %d: %s", color,
                        shoal_comm_last_error(NULL));
    }
    goto out_free;

err_broken:
    shoal_comm_set_error(comm, s);
    shoal_comm_fail(comm, s, "shoal_comm_split: exchange with the other ranks failed");
out_free:
    if (lfd >= 0)
        close(lfd);
    OPENSSL_cleanse(secret, sizeof(secret));
    OPENSSL_cleanse(&id, sizeof(id));
    free(all);
    free(addrs);
    shoal_comm_leave(comm);
    return s;
}
