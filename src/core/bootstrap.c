/* Bootstrap: every rank joins rank 0 (the root named in the unique id) over
 * an authenticated connection, and the resulting star carries the control
 * collectives. Control data is small (addresses, host names), so routing it
 * through rank 0 costs little and keeps failure handling in one place: rank
 * 0 sees every connection, names the rank that broke, and tells the others.
 *
 * Every message on the star starts with a header of op, sequence number and
 * length, checked on receipt, so ranks that disagree about which collective
 * comes next get an error instead of each other's bytes.
 *
 * With SHOAL_BOOTSTRAP_MAC, every message also carries HMAC-SHA256 tags,
 * keyed by the connection's session key from the handshake (auth.h): one
 * after the header, checked before the header is believed, and one after
 * a non-empty payload,
 *
 *   tag = HMAC(session key, kind ('h' or 'p') || sender's rank ||
 *              receiver's rank || message number on this connection || data)
 *
 * so that a message changed, replayed, reordered or reflected on the wire
 * fails with SHOAL_ERR_AUTH naming the peer. The numbers count messages in
 * each direction, the same on both ends. Ranks must agree on the setting:
 * the hello carries it and rank 0 refuses a rank that differs.
 */
#include "bootstrap.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

/* Unique id layout (big-endian integers):
 *   0 magic, 4 version, 8 address family (4 or 6), 10 port, 12 IPv6 scope,
 *   16 address (4 or 16 bytes), 32 secret (32 bytes), 64 origin of the
 *   secret (shoal_secret_origin_t), 68 salt of its derivation (16 bytes),
 *   84.. zero. Ids that predate the origin hold zeros there: random. */
#define SHOAL_BOOT_ID_MAGIC 0x53484944u /* "SHID" */
#define SHOAL_BOOT_ID_VERSION 1u
#define SHOAL_BOOT_ID_FAMILY 8 /* a packed address, SHOAL_BOOT_ADDR_BYTES long */
#define SHOAL_BOOT_ID_SECRET 32
#define SHOAL_BOOT_ID_ORIGIN 64
#define SHOAL_BOOT_ID_SALT 68
_Static_assert(SHOAL_BOOT_ID_SALT + SHOAL_SALT_BYTES <= SHOAL_UNIQUE_ID_BYTES,
               "the unique id has no room for the salt");

/* Handshakes a rank tries before giving up on a root that keeps closing
 * its connection early (a busy acceptor drops the slowest, auth.c). */
#define SHOAL_BOOT_CONNECT_ATTEMPTS 5

/* Hello after authentication: magic, version, rank, nranks, flags. */
#define SHOAL_BOOT_HELLO_MAGIC 0x53484248u /* "SHBH" */
#define SHOAL_BOOT_HELLO_VERSION 3u
/* Join verdict, rank 0's answer to a hello: the verdict, then (a timeout)
 * the first missing rank and how many are missing, else zeros. */
#define SHOAL_BOOT_VERDICT_BYTES 12
#define SHOAL_BOOT_HELLO_BYTES 20
#define SHOAL_BOOT_HELLO_MAC 1u /* flag: this rank tags its messages */

/* A message's tag (SHOAL_BOOTSTRAP_MAC), and the most bytes of a message
 * sent in one piece. */
#define SHOAL_BOOT_TAG_BYTES 32
#define SHOAL_BOOT_SMALL 1024

/* Message header: op, sequence number, payload length (64 bits). */
#define SHOAL_BOOT_HDR_BYTES 16

/* How long rank 0 spends telling the others about a failure: they are
 * healthy, so a few bytes go through at once unless they stopped reading. */
#define SHOAL_BOOT_NOTIFY_NS 1000000000ull

typedef enum {
    SHOAL_BOOT_OP_JOIN = 1,      /* payload: u32 verdict */
    SHOAL_BOOT_OP_ALLGATHER = 2,
    SHOAL_BOOT_OP_BCAST = 3,
    SHOAL_BOOT_OP_BARRIER = 4,
    SHOAL_BOOT_OP_FAIL = 5,      /* payload: u32 culprit, u32 status, text */
    SHOAL_BOOT_OP_BYE = 6,       /* no payload: the sender leaves on purpose */
} shoal_boot_op_t;

/* A failure notice: culprit and status, then up to this much text. */
#define SHOAL_BOOT_FAIL_FIXED 8
#define SHOAL_BOOT_FAIL_TEXT_MAX 480

typedef enum {
    SHOAL_BOOT_JOIN_OK = 0,
    SHOAL_BOOT_JOIN_TIMEOUT,     /* not every rank arrived in time */
    SHOAL_BOOT_JOIN_BAD_HELLO,
    SHOAL_BOOT_JOIN_BAD_RANK,
    SHOAL_BOOT_JOIN_BAD_NRANKS,
    SHOAL_BOOT_JOIN_DUPLICATE,
    SHOAL_BOOT_JOIN_BAD_MAC,
    SHOAL_BOOT_JOIN_COUNT
} shoal_boot_verdict_t;

static const char *const shoal_boot_verdict_text[SHOAL_BOOT_JOIN_COUNT] = {
    "accepted",
    "timed out waiting for the other ranks",
    "malformed hello",
    "rank out of range",
    "number of ranks differs from rank 0's",
    "rank already joined",
    "SHOAL_BOOTSTRAP_MAC differs from rank 0's",
};

/* One connection's integrity state: its session key and the messages sent
 * and received on it so far. */
typedef struct {
    uint8_t key[SHOAL_SECRET_BYTES];
    uint64_t tx;
    uint64_t rx;
} shoal_boot_link_t;

struct shoal_bootstrap {
    int rank;
    int nranks;
    uint64_t timeout_ns;
    uint32_t seq;                /* collectives so far, the same on every rank */
    int *fds;                    /* rank 0: fds[r] to rank r; others: fds[0] */
    shoal_status_t status;       /* sticky failure of an earlier call */
    /* One user at a time: the collectives take it, shoal_bootstrap_poll
     * only tries it. */
    pthread_mutex_t lock;
    uint8_t *gone;               /* gone[r]: rank r said goodbye, its end is not watched */
    struct pollfd *pfds;         /* shoal_bootstrap_poll's scratch, nranks entries */
    int *pfd_rank;
    atomic_int aborted;
    uint8_t secret[SHOAL_SECRET_BYTES];
    uint32_t origin;             /* shoal_secret_origin_t, from the id */
    int mac;                     /* SHOAL_BOOTSTRAP_MAC: messages carry tags */
    shoal_boot_link_t *links;    /* per rank, as fds */
    EVP_MAC_CTX *mac_ctx;        /* HMAC-SHA256, when mac */
    shoal_sockaddr_t local_addr;
};

/* ---- byte order --------------------------------------------------------- */

static void shoal_boot_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static uint16_t shoal_boot_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static void shoal_boot_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t shoal_boot_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void shoal_boot_put_u64(uint8_t *p, uint64_t v)
{
    shoal_boot_put_u32(p, (uint32_t)(v >> 32));
    shoal_boot_put_u32(p + 4, (uint32_t)v);
}

static uint64_t shoal_boot_get_u64(const uint8_t *p)
{
    return (uint64_t)shoal_boot_get_u32(p) << 32 | shoal_boot_get_u32(p + 4);
}

/* ---- unique id ---------------------------------------------------------- */

/* A packed address (SHOAL_BOOT_ADDR_BYTES, big-endian): family (4 or 6),
 * port, IPv6 scope, address (4 or 16 bytes). The unique id holds one at
 * SHOAL_BOOT_ID_FAMILY. */
#define SHOAL_BOOT_ADDR_FAMILY 0
#define SHOAL_BOOT_ADDR_PORT 2
#define SHOAL_BOOT_ADDR_SCOPE 4
#define SHOAL_BOOT_ADDR_ADDR 8

static void shoal_boot_addr_put(uint8_t *b, const shoal_sockaddr_t *addr)
{
    memset(b, 0, SHOAL_BOOT_ADDR_BYTES);
    shoal_boot_put_u16(b + SHOAL_BOOT_ADDR_PORT, shoal_sock_port(addr));
    if (addr->u.sa.sa_family == AF_INET) {
        shoal_boot_put_u16(b + SHOAL_BOOT_ADDR_FAMILY, 4);
        memcpy(b + SHOAL_BOOT_ADDR_ADDR, &addr->u.sin.sin_addr, 4);
    } else {
        shoal_boot_put_u16(b + SHOAL_BOOT_ADDR_FAMILY, 6);
        shoal_boot_put_u32(b + SHOAL_BOOT_ADDR_SCOPE, addr->u.sin6.sin6_scope_id);
        memcpy(b + SHOAL_BOOT_ADDR_ADDR, &addr->u.sin6.sin6_addr, 16);
    }
}

static shoal_status_t shoal_boot_addr_get(const uint8_t *b, shoal_sockaddr_t *addr_p)
{
    shoal_sockaddr_t addr;
    memset(&addr, 0, sizeof(addr));
    uint16_t family = shoal_boot_get_u16(b + SHOAL_BOOT_ADDR_FAMILY);
    if (family == 4) {
        addr.u.sin.sin_family = AF_INET;
        memcpy(&addr.u.sin.sin_addr, b + SHOAL_BOOT_ADDR_ADDR, 4);
    } else if (family == 6) {
        addr.u.sin6.sin6_family = AF_INET6;
        addr.u.sin6.sin6_scope_id = shoal_boot_get_u32(b + SHOAL_BOOT_ADDR_SCOPE);
        memcpy(&addr.u.sin6.sin6_addr, b + SHOAL_BOOT_ADDR_ADDR, 16);
    } else {
        shoal_error(BOOT, "packed address names address family %u", family);
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_sock_set_port(&addr, shoal_boot_get_u16(b + SHOAL_BOOT_ADDR_PORT));
    *addr_p = addr;
    return SHOAL_OK;
}

void shoal_bootstrap_addr_pack(const shoal_sockaddr_t *addr, uint8_t out[SHOAL_BOOT_ADDR_BYTES])
{
    shoal_boot_addr_put(out, addr);
}

shoal_status_t shoal_bootstrap_addr_unpack(const uint8_t in[SHOAL_BOOT_ADDR_BYTES],
                                           shoal_sockaddr_t *addr_p)
{
    return shoal_boot_addr_get(in, addr_p);
}

shoal_status_t shoal_bootstrap_id_make(const shoal_sockaddr_t *root,
                                       const uint8_t secret[SHOAL_SECRET_BYTES],
                                       shoal_unique_id_t *id_p)
{
    if (!root || !secret || !id_p ||
        (root->u.sa.sa_family != AF_INET && root->u.sa.sa_family != AF_INET6)) {
        shoal_error(BOOT, "bootstrap id: invalid argument");
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_unique_id_t id;
    memset(&id, 0, sizeof(id));
    uint8_t *b = id.bytes;
    shoal_boot_put_u32(b, SHOAL_BOOT_ID_MAGIC);
    shoal_boot_put_u32(b + 4, SHOAL_BOOT_ID_VERSION);
    shoal_boot_addr_put(b + SHOAL_BOOT_ID_FAMILY, root);
    memcpy(b + SHOAL_BOOT_ID_SECRET, secret, SHOAL_SECRET_BYTES);
    *id_p = id;
    return SHOAL_OK;
}

void shoal_bootstrap_id_set_origin(shoal_unique_id_t *id, shoal_secret_origin_t origin,
                                   const uint8_t salt[SHOAL_SALT_BYTES])
{
    shoal_boot_put_u32(id->bytes + SHOAL_BOOT_ID_ORIGIN, (uint32_t)origin);
    memcpy(id->bytes + SHOAL_BOOT_ID_SALT, salt, SHOAL_SALT_BYTES);
}

static shoal_status_t shoal_boot_id_parse(const shoal_unique_id_t *id, shoal_sockaddr_t *root_p,
                                          uint8_t secret[SHOAL_SECRET_BYTES])
{
    const uint8_t *b = id->bytes;
    if (shoal_boot_get_u32(b) != SHOAL_BOOT_ID_MAGIC ||
        shoal_boot_get_u32(b + 4) != SHOAL_BOOT_ID_VERSION) {
        shoal_error(BOOT, "not a shoal unique id (magic %08x version %u)",
                    shoal_boot_get_u32(b), shoal_boot_get_u32(b + 4));
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_status_t s = shoal_boot_addr_get(b + SHOAL_BOOT_ID_FAMILY, root_p);
    if (s != SHOAL_OK)
        return s;
    memcpy(secret, b + SHOAL_BOOT_ID_SECRET, SHOAL_SECRET_BYTES);
    return SHOAL_OK;
}

/* Listeners opened by shoal_bootstrap_id_create, newest first, waiting for
 * this process's (or a forked child's) rank 0 to take them. */
typedef struct shoal_boot_listener {
    struct shoal_boot_listener *next;
    shoal_unique_id_t id;
    int fd;
} shoal_boot_listener_t;

/* A process that creates ids for forked children (test drivers, benches)
 * never takes them itself: past this many, its oldest listener is closed.
 * Children forked earlier keep their own copy of it, so they are unharmed. */
#define SHOAL_BOOT_MAX_LISTENERS 128

static pthread_mutex_t shoal_boot_listeners_lock = PTHREAD_MUTEX_INITIALIZER;
static shoal_boot_listener_t *shoal_boot_listeners;
static pthread_once_t shoal_boot_atfork_once = PTHREAD_ONCE_INIT;

/* A child forked while another thread held the table lock would find it
 * locked forever; holding it across fork() keeps it consistent. */
static void shoal_boot_atfork_lock(void)
{
    pthread_mutex_lock(&shoal_boot_listeners_lock);
}

static void shoal_boot_atfork_unlock(void)
{
    pthread_mutex_unlock(&shoal_boot_listeners_lock);
}

static void shoal_boot_atfork_register(void)
{
    pthread_atfork(shoal_boot_atfork_lock, shoal_boot_atfork_unlock,
                   shoal_boot_atfork_unlock);
}

static void shoal_boot_listener_put(shoal_boot_listener_t *l)
{
    pthread_once(&shoal_boot_atfork_once, shoal_boot_atfork_register);
    shoal_boot_listener_t *evicted = NULL;
    pthread_mutex_lock(&shoal_boot_listeners_lock);
    l->next = shoal_boot_listeners;
    shoal_boot_listeners = l;
    int n = 1;
    for (shoal_boot_listener_t *p = l; p->next; p = p->next, n++) {
        if (n == SHOAL_BOOT_MAX_LISTENERS) {
            evicted = p->next;
            p->next = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&shoal_boot_listeners_lock);
    while (evicted) {
        shoal_boot_listener_t *next = evicted->next;
        shoal_info(BOOT, "%d unique ids created here are unused; closing the oldest "
                   "listener", SHOAL_BOOT_MAX_LISTENERS);
        close(evicted->fd);
        free(evicted);
        evicted = next;
    }
}

/* The listening fd created for id, removed from the table; -1 if none. */
static int shoal_boot_listener_take(const shoal_unique_id_t *id)
{
    int fd = -1;
    pthread_mutex_lock(&shoal_boot_listeners_lock);
    for (shoal_boot_listener_t **pp = &shoal_boot_listeners; *pp; pp = &(*pp)->next) {
        if (!memcmp((*pp)->id.bytes, id->bytes, sizeof(id->bytes))) {
            shoal_boot_listener_t *l = *pp;
            *pp = l->next;
            fd = l->fd;
            free(l);
            break;
        }
    }
    pthread_mutex_unlock(&shoal_boot_listeners_lock);
    return fd;
}

shoal_status_t shoal_bootstrap_listener_offer(const shoal_unique_id_t *id, int listen_fd)
{
    shoal_boot_listener_t *l = calloc(1, sizeof(*l));
    if (!l) {
        shoal_error(BOOT, "bootstrap listener: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    /* The caller keeps its socket: rank 0 closes what it takes. */
    l->fd = fcntl(listen_fd, F_DUPFD_CLOEXEC, 0);
    if (l->fd < 0) {
        shoal_error(BOOT, "bootstrap listener: dup of socket %d: %s", listen_fd,
                    strerror(errno));
        free(l);
        return SHOAL_ERR_SYSTEM;
    }
    l->id = *id;
    shoal_boot_listener_put(l);
    return SHOAL_OK;
}

void shoal_bootstrap_listener_withdraw(const shoal_unique_id_t *id)
{
    int fd = shoal_boot_listener_take(id);
    if (fd >= 0)
        close(fd);
}

shoal_status_t shoal_bootstrap_id_create(shoal_unique_id_t *id_p)
{
    if (!id_p) {
        shoal_error(BOOT, "bootstrap id: NULL id");
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_sockaddr_t addr;
    shoal_status_t s = shoal_sock_pick_addr(&addr);
    if (s != SHOAL_OK)
        return s;
    uint8_t secret[SHOAL_SECRET_BYTES];
    s = shoal_auth_random(secret, sizeof(secret));
    if (s != SHOAL_OK)
        return s;
    shoal_boot_listener_t *l = calloc(1, sizeof(*l));
    if (!l) {
        shoal_error(BOOT, "bootstrap id: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    s = shoal_sock_listen(&addr, &l->fd);
    if (s != SHOAL_OK)
        goto err_free;
    s = shoal_bootstrap_id_make(&addr, secret, &l->id);
    if (s != SHOAL_OK)
        goto err_close_fd;
    shoal_unique_id_t id = l->id;
    shoal_boot_listener_put(l);
    char text[SHOAL_SOCKADDR_STRLEN];
    shoal_info(BOOT, "unique id created: root listens on %s", shoal_sock_str(&addr, text));
    *id_p = id;
    return SHOAL_OK;

err_close_fd:
    close(l->fd);
err_free:
    free(l);
    return s;
}

/* ---- integrity ---------------------------------------------------------- */

static EVP_MAC *shoal_boot_hmac;
static pthread_once_t shoal_boot_hmac_once = PTHREAD_ONCE_INIT;

static void shoal_boot_hmac_fetch(void)
{
    shoal_boot_hmac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
}

/* An HMAC-SHA256 context for bs's tags. */
static shoal_status_t shoal_boot_mac_open(shoal_bootstrap_t *bs)
{
    pthread_once(&shoal_boot_hmac_once, shoal_boot_hmac_fetch);
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    bs->mac_ctx = shoal_boot_hmac ? EVP_MAC_CTX_new(shoal_boot_hmac) : NULL;
    if (!bs->mac_ctx || EVP_MAC_CTX_set_params(bs->mac_ctx, params) != 1) {
        shoal_error(BOOT, "bootstrap: no HMAC-SHA256 for SHOAL_BOOTSTRAP_MAC: %s",
                    ERR_reason_error_string(ERR_get_error()));
        return SHOAL_ERR_SYSTEM;
    }
    return SHOAL_OK;
}

/* The keys, wiped, and the HMAC context. */
static void shoal_boot_links_free(shoal_bootstrap_t *bs)
{
    if (bs->links)
        OPENSSL_cleanse(bs->links, (size_t)bs->nranks * sizeof(*bs->links));
    free(bs->links);
    EVP_MAC_CTX_free(bs->mac_ctx);
}

/* tag = HMAC(key, kind || from || to || number || data): see the top. */
static shoal_status_t shoal_boot_tag(shoal_bootstrap_t *bs, const uint8_t *key, char kind,
                                     int from, int to, uint64_t number, const void *data,
                                     size_t len, uint8_t tag[SHOAL_BOOT_TAG_BYTES])
{
    uint8_t pre[17];
    pre[0] = (uint8_t)kind;
    shoal_boot_put_u32(pre + 1, (uint32_t)from);
    shoal_boot_put_u32(pre + 5, (uint32_t)to);
    shoal_boot_put_u64(pre + 9, number);
    size_t out = 0;
    if (EVP_MAC_init(bs->mac_ctx, key, SHOAL_SECRET_BYTES, NULL) != 1 ||
        EVP_MAC_update(bs->mac_ctx, pre, sizeof(pre)) != 1 ||
        (len > 0 && EVP_MAC_update(bs->mac_ctx, data, len) != 1) ||
        EVP_MAC_final(bs->mac_ctx, tag, &out, SHOAL_BOOT_TAG_BYTES) != 1 ||
        out != SHOAL_BOOT_TAG_BYTES) {
        shoal_error(BOOT, "bootstrap: HMAC-SHA256: %s", ERR_reason_error_string(ERR_get_error()));
        return SHOAL_ERR_SYSTEM;
    }
    return SHOAL_OK;
}

/* Check the tag of data received from peer as message number `number`:
 * SHOAL_ERR_AUTH (logged, naming peer) when it does not match. */
static shoal_status_t shoal_boot_check_tag(shoal_bootstrap_t *bs, int peer, char kind,
                                           uint64_t number, const void *data, size_t len,
                                           const uint8_t *tag, const char *what)
{
    uint8_t expect[SHOAL_BOOT_TAG_BYTES];
    shoal_status_t s = shoal_boot_tag(bs, bs->links[peer].key, kind, peer, bs->rank, number,
                                      data, len, expect);
    if (s != SHOAL_OK)
        return s;
    if (CRYPTO_memcmp(expect, tag, SHOAL_BOOT_TAG_BYTES) != 0) {
        shoal_error(BOOT, "bootstrap %s on rank %d: the %s of message %llu from rank %d fails "
                    "its integrity check (SHOAL_BOOTSTRAP_MAC): changed in transit, or not "
                    "sent by rank %d", what, bs->rank, kind == 'h' ? "header" : "payload",
                    (unsigned long long)number, peer, peer);
        return SHOAL_ERR_AUTH;
    }
    return SHOAL_OK;
}

/* The bytes of a whole message in out (header, its tag, payload, its tag;
 * no tags without mac): what shoal_boot_put_msg sends. Returns the length. */
static shoal_status_t shoal_boot_frame(shoal_bootstrap_t *bs, int mac, const uint8_t *key,
                                       uint64_t number, int to, uint32_t op, uint32_t seq,
                                       const void *payload, size_t len, uint8_t *out,
                                       size_t *out_len)
{
    uint8_t *hdr = out;
    shoal_boot_put_u32(hdr, op);
    shoal_boot_put_u32(hdr + 4, seq);
    shoal_boot_put_u64(hdr + 8, len);
    size_t n = SHOAL_BOOT_HDR_BYTES;
    shoal_status_t s = SHOAL_OK;
    if (mac) {
        s = shoal_boot_tag(bs, key, 'h', bs->rank, to, number, hdr, SHOAL_BOOT_HDR_BYTES,
                           out + n);
        n += SHOAL_BOOT_TAG_BYTES;
    }
    if (len > 0)
        memcpy(out + n, payload, len);
    n += len;
    if (s == SHOAL_OK && mac && len > 0) {
        s = shoal_boot_tag(bs, key, 'p', bs->rank, to, number, payload, len, out + n);
        n += SHOAL_BOOT_TAG_BYTES;
    }
    *out_len = n;
    return s;
}

/* Send one message on fd, counting it in *number. Small messages go in
 * one piece; a large payload is sent from where it is. */
static shoal_status_t shoal_boot_put_msg(shoal_bootstrap_t *bs, int fd, int mac,
                                         const uint8_t *key, uint64_t *number, int to,
                                         uint32_t op, uint32_t seq, const void *payload,
                                         size_t len, uint64_t deadline_ns)
{
    uint8_t buf[SHOAL_BOOT_HDR_BYTES + 2 * SHOAL_BOOT_TAG_BYTES + SHOAL_BOOT_SMALL];
    size_t n;
    shoal_status_t s;
    if (len <= SHOAL_BOOT_SMALL) {
        s = shoal_boot_frame(bs, mac, key, *number, to, op, seq, payload, len, buf, &n);
        if (s == SHOAL_OK)
            s = shoal_sock_send_all(fd, buf, n, deadline_ns);
    } else {
        s = shoal_boot_frame(bs, mac, key, *number, to, op, seq, NULL, 0, buf, &n);
        /* The header alone: its length field still says len. */
        shoal_boot_put_u64(buf + 8, len);
        if (s == SHOAL_OK && mac)
            s = shoal_boot_tag(bs, key, 'h', bs->rank, to, *number, buf, SHOAL_BOOT_HDR_BYTES,
                               buf + SHOAL_BOOT_HDR_BYTES);
        if (s == SHOAL_OK)
            s = shoal_sock_send_all(fd, buf, n, deadline_ns);
        if (s == SHOAL_OK)
            s = shoal_sock_send_all(fd, payload, len, deadline_ns);
        if (s == SHOAL_OK && mac)
            s = shoal_boot_tag(bs, key, 'p', bs->rank, to, *number, payload, len, buf);
        if (s == SHOAL_OK && mac)
            s = shoal_sock_send_all(fd, buf, SHOAL_BOOT_TAG_BYTES, deadline_ns);
    }
    (*number)++;
    return s;
}

/* Bytes of a header as it travels: with its tag under mac. */
static size_t shoal_boot_hdr_block(const shoal_bootstrap_t *bs)
{
    return SHOAL_BOOT_HDR_BYTES + (bs->mac ? SHOAL_BOOT_TAG_BYTES : 0);
}

/* ---- messages ----------------------------------------------------------- */

static const char *shoal_boot_op_name(uint32_t op)
{
    switch (op) {
    case SHOAL_BOOT_OP_JOIN: return "join";
    case SHOAL_BOOT_OP_ALLGATHER: return "allgather";
    case SHOAL_BOOT_OP_BCAST: return "bcast";
    case SHOAL_BOOT_OP_BARRIER: return "barrier";
    case SHOAL_BOOT_OP_FAIL: return "failure notice";
    case SHOAL_BOOT_OP_BYE: return "goodbye";
    default: return "unknown op";
    }
}

static int shoal_boot_is_aborted(shoal_bootstrap_t *bs)
{
    return atomic_load_explicit(&bs->aborted, memory_order_acquire);
}

/* Turn a socket failure with peer into this call's status, logged once and
 * naming the rank. */
static shoal_status_t shoal_boot_io_fail(shoal_bootstrap_t *bs, shoal_status_t s, int peer,
                                         uint32_t op)
{
    if (shoal_boot_is_aborted(bs) || s == SHOAL_ERR_ABORTED) {
        /* bs, or the object this thread's wait was for (base/cancel.h). */
        shoal_debug(BOOT, "bootstrap %s on rank %d: aborted", shoal_boot_op_name(op), bs->rank);
        return SHOAL_ERR_ABORTED;
    }
    if (op == SHOAL_BOOT_OP_JOIN && s == SHOAL_ERR_TIMEOUT)
        shoal_error(BOOT, "bootstrap init on rank %d: timed out waiting for all ranks to "
                    "join at rank 0", bs->rank);
    else if (s == SHOAL_ERR_PEER)
        shoal_error(BOOT, "bootstrap %s on rank %d: the connection to rank %d broke "
                    "(rank %d exited or failed)", shoal_boot_op_name(op), bs->rank, peer, peer);
    else if (s == SHOAL_ERR_TIMEOUT)
        shoal_error(BOOT, "bootstrap %s on rank %d: timed out waiting for rank %d",
                    shoal_boot_op_name(op), bs->rank, peer);
    else
        shoal_error(BOOT, "bootstrap %s on rank %d: exchange with rank %d failed: %s",
                    shoal_boot_op_name(op), bs->rank, peer, shoal_status_string(s));
    return s;
}

/* Decode a failure notice's payload: the rank at fault, the status (an
 * unknown one becomes SHOAL_ERR_PEER) and the sender's description, made
 * printable, into text (cap > 0 bytes, NUL-terminated). SHOAL_ERR_INTERNAL
 * for a payload of the wrong size. */
static shoal_status_t shoal_boot_fail_parse(const uint8_t *body, size_t len, int nranks,
                                            int *culprit_p, shoal_status_t *status_p,
                                            char *text, size_t cap)
{
    if (len < SHOAL_BOOT_FAIL_FIXED || len > SHOAL_BOOT_FAIL_FIXED + SHOAL_BOOT_FAIL_TEXT_MAX)
        return SHOAL_ERR_INTERNAL;
    uint32_t culprit = shoal_boot_get_u32(body);
    uint32_t status = shoal_boot_get_u32(body + 4);
    *culprit_p = culprit < (uint32_t)nranks ? (int)culprit : -1;
    *status_p = status > SHOAL_INPROGRESS && status < SHOAL_STATUS_COUNT ? (shoal_status_t)status
                                                                         : SHOAL_ERR_PEER;
    size_t n = len - SHOAL_BOOT_FAIL_FIXED;
    if (n >= cap)
        n = cap - 1;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = body[SHOAL_BOOT_FAIL_FIXED + i];
        text[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    text[n] = '\0';
    return SHOAL_OK;
}

/* A failure notice from peer in place of the expected message. */
static shoal_status_t shoal_boot_recv_fail(shoal_bootstrap_t *bs, int peer, uint64_t len,
                                           uint32_t op, uint64_t deadline_ns)
{
    uint8_t body[SHOAL_BOOT_FAIL_FIXED + SHOAL_BOOT_FAIL_TEXT_MAX + SHOAL_BOOT_TAG_BYTES];
    char text[SHOAL_BOOT_FAIL_TEXT_MAX + 1];
    int culprit;
    shoal_status_t status;
    if (len < SHOAL_BOOT_FAIL_FIXED || len > SHOAL_BOOT_FAIL_FIXED + SHOAL_BOOT_FAIL_TEXT_MAX) {
        shoal_error(BOOT, "bootstrap %s on rank %d: malformed failure notice from rank %d",
                    shoal_boot_op_name(op), bs->rank, peer);
        return SHOAL_ERR_INTERNAL;
    }
    size_t tag = bs->mac ? SHOAL_BOOT_TAG_BYTES : 0;
    shoal_status_t s = shoal_sock_recv_all(bs->fds[peer], body, (size_t)len + tag, deadline_ns);
    if (s != SHOAL_OK)
        return shoal_boot_io_fail(bs, s, peer, op);
    if (bs->mac) {
        s = shoal_boot_check_tag(bs, peer, 'p', bs->links[peer].rx, body, (size_t)len,
                                 body + len, shoal_boot_op_name(op));
        if (s != SHOAL_OK)
            return s;
    }
    bs->links[peer].rx++;
    shoal_boot_fail_parse(body, (size_t)len, bs->nranks, &culprit, &status, text, sizeof(text));
    shoal_error(BOOT, "bootstrap %s on rank %d: failed because of rank %d (%s), as rank %d "
                "reports: %s", shoal_boot_op_name(op), bs->rank, culprit,
                shoal_status_string(status), peer, text);
    return status;
}

static shoal_status_t shoal_boot_send(shoal_bootstrap_t *bs, int peer, uint32_t op,
                                      uint32_t seq, const void *payload, size_t len,
                                      uint64_t deadline_ns)
{
    shoal_boot_link_t *l = &bs->links[peer];
    shoal_status_t s = shoal_boot_put_msg(bs, bs->fds[peer], bs->mac, l->key, &l->tx, peer, op,
                                          seq, payload, len, deadline_ns);
    if (s == SHOAL_ERR_PEER && bs->rank != 0 && !shoal_boot_is_aborted(bs)) {
        /* Rank 0 may have hung up after telling us why: a failure notice
         * waiting to be read names the real culprit. */
        uint8_t peek[SHOAL_BOOT_HDR_BYTES + SHOAL_BOOT_TAG_BYTES];
        size_t hb = shoal_boot_hdr_block(bs);
        ssize_t n = recv(bs->fds[0], peek, hb, MSG_PEEK | MSG_DONTWAIT);
        if (n == (ssize_t)hb && shoal_boot_get_u32(peek) == SHOAL_BOOT_OP_FAIL &&
            shoal_sock_recv_all(bs->fds[0], peek, hb, 0) == SHOAL_OK) {
            if (bs->mac &&
                shoal_boot_check_tag(bs, 0, 'h', bs->links[0].rx, peek, SHOAL_BOOT_HDR_BYTES,
                                     peek + SHOAL_BOOT_HDR_BYTES, shoal_boot_op_name(op)) !=
                    SHOAL_OK)
                return SHOAL_ERR_AUTH;
            return shoal_boot_recv_fail(bs, 0, shoal_boot_get_u64(peek + 8), op, 0);
        }
    }
    return s == SHOAL_OK ? s : shoal_boot_io_fail(bs, s, peer, op);
}

/* Receive the header of the message expected from peer: op, seq and length
 * must match, else the ranks disagree about the collective being run. */
static shoal_status_t shoal_boot_recv_hdr(shoal_bootstrap_t *bs, int peer, uint32_t op,
                                          uint32_t seq, uint64_t len, uint64_t deadline_ns)
{
    uint8_t hdr[SHOAL_BOOT_HDR_BYTES + SHOAL_BOOT_TAG_BYTES];
    shoal_status_t s = shoal_sock_recv_all(bs->fds[peer], hdr, shoal_boot_hdr_block(bs),
                                           deadline_ns);
    if (s != SHOAL_OK)
        return shoal_boot_io_fail(bs, s, peer, op);
    /* Nothing of the header is believed before its tag is checked. */
    if (bs->mac) {
        s = shoal_boot_check_tag(bs, peer, 'h', bs->links[peer].rx, hdr, SHOAL_BOOT_HDR_BYTES,
                                 hdr + SHOAL_BOOT_HDR_BYTES, shoal_boot_op_name(op));
        if (s != SHOAL_OK)
            return s;
    }
    uint32_t got_op = shoal_boot_get_u32(hdr);
    uint32_t got_seq = shoal_boot_get_u32(hdr + 4);
    uint64_t got_len = shoal_boot_get_u64(hdr + 8);
    if (got_op == SHOAL_BOOT_OP_FAIL && op != SHOAL_BOOT_OP_JOIN)
        return shoal_boot_recv_fail(bs, peer, got_len, op, deadline_ns);
    if (got_op == SHOAL_BOOT_OP_BYE) {
        bs->links[peer].rx++;
        shoal_error(BOOT, "bootstrap %s on rank %d: rank %d left the communicator (destroyed "
                    "it) instead", shoal_boot_op_name(op), bs->rank, peer);
        return SHOAL_ERR_PEER;
    }
    if (got_op != op || got_seq != seq || got_len != len) {
        shoal_error(BOOT, "bootstrap on rank %d: rank %d sent %s #%u of %llu bytes where "
                    "%s #%u of %llu bytes was expected (ranks called different "
                    "collectives or sizes)", bs->rank, peer, shoal_boot_op_name(got_op),
                    got_seq, (unsigned long long)got_len, shoal_boot_op_name(op), seq,
                    (unsigned long long)len);
        return SHOAL_ERR_INTERNAL;
    }
    return SHOAL_OK;
}

static shoal_status_t shoal_boot_recv(shoal_bootstrap_t *bs, int peer, uint32_t op,
                                      uint32_t seq, void *payload, size_t len,
                                      uint64_t deadline_ns)
{
    shoal_status_t s = shoal_boot_recv_hdr(bs, peer, op, seq, len, deadline_ns);
    if (s == SHOAL_OK && len > 0) {
        s = shoal_sock_recv_all(bs->fds[peer], payload, len, deadline_ns);
        if (s != SHOAL_OK)
            return shoal_boot_io_fail(bs, s, peer, op);
    }
    if (s == SHOAL_OK && bs->mac && len > 0) {
        uint8_t tag[SHOAL_BOOT_TAG_BYTES];
        s = shoal_sock_recv_all(bs->fds[peer], tag, sizeof(tag), deadline_ns);
        if (s != SHOAL_OK)
            return shoal_boot_io_fail(bs, s, peer, op);
        s = shoal_boot_check_tag(bs, peer, 'p', bs->links[peer].rx, payload, len, tag,
                                 shoal_boot_op_name(op));
    }
    if (s == SHOAL_OK)
        bs->links[peer].rx++;
    return s;
}

/* Send one failure notice to rank r, waiting at most until deadline_ns. */
static shoal_status_t shoal_boot_send_fail(shoal_bootstrap_t *bs, int r, int culprit,
                                           shoal_status_t status, const char *text,
                                           uint64_t deadline_ns)
{
    uint8_t body[SHOAL_BOOT_FAIL_FIXED + SHOAL_BOOT_FAIL_TEXT_MAX];
    size_t n = strnlen(text, SHOAL_BOOT_FAIL_TEXT_MAX);
    shoal_boot_put_u32(body, (uint32_t)culprit);
    shoal_boot_put_u32(body + 4, (uint32_t)status);
    memcpy(body + SHOAL_BOOT_FAIL_FIXED, text, n);
    shoal_boot_link_t *l = &bs->links[r];
    return shoal_boot_put_msg(bs, bs->fds[r], bs->mac, l->key, &l->tx, r, SHOAL_BOOT_OP_FAIL,
                              bs->seq, body, SHOAL_BOOT_FAIL_FIXED + n, deadline_ns);
}

/* Rank 0 after a failure caused by rank culprit: tell every other rank
 * except skip, so that they return at once with the culprit named instead
 * of waiting for their deadline. */
static void shoal_boot_notify(shoal_bootstrap_t *bs, int skip, int culprit,
                              shoal_status_t status, const char *text)
{
    if (bs->rank != 0 || shoal_boot_is_aborted(bs))
        return;
    uint64_t deadline = shoal_deadline_after(SHOAL_BOOT_NOTIFY_NS);
    for (int r = 1; r < bs->nranks; r++) {
        if (r == skip || bs->fds[r] < 0 || (bs->gone && bs->gone[r]))
            continue;
        if (shoal_boot_send_fail(bs, r, culprit, status, text, deadline) != SHOAL_OK)
            shoal_debug(BOOT, "bootstrap: cannot tell rank %d about rank %d's failure", r,
                        culprit);
    }
}

/* Rank 0 after a bootstrap collective failed with rank `failed`. A culprit
 * whose connection broke or stalled is skipped: its stream may hold half a
 * message. One that sent a mismatched header is healthy and is told too. */
static void shoal_boot_notify_fail(shoal_bootstrap_t *bs, int failed, shoal_status_t status)
{
    int skip = status == SHOAL_ERR_PEER || status == SHOAL_ERR_TIMEOUT ? failed : -1;
    char text[128];
    snprintf(text, sizeof(text), "a bootstrap exchange of rank 0 with rank %d failed (%s)",
             failed, shoal_status_string(status));
    shoal_boot_notify(bs, skip, failed, status, text);
}

/* Common start of a collective: a failed or aborted bootstrap stays so. */
static shoal_status_t shoal_boot_begin(shoal_bootstrap_t *bs, uint64_t *deadline_p)
{
    if (shoal_boot_is_aborted(bs))
        return SHOAL_ERR_ABORTED;
    if (bs->status != SHOAL_OK) {
        shoal_debug(BOOT, "bootstrap on rank %d: unusable after an earlier failure (%s)",
                    bs->rank, shoal_status_string(bs->status));
        return bs->status;
    }
    bs->seq++;
    *deadline_p = shoal_deadline_after(bs->timeout_ns);
    return SHOAL_OK;
}

/* Common end of a collective: a failure is remembered, and rank 0 passes it
 * on to the others. */
static shoal_status_t shoal_boot_end(shoal_bootstrap_t *bs, shoal_status_t s, int failed)
{
    if (s == SHOAL_OK)
        return s;
    if (shoal_boot_is_aborted(bs))
        s = SHOAL_ERR_ABORTED;
    if (failed > 0)
        shoal_boot_notify_fail(bs, failed, s);
    bs->status = s;
    return s;
}

/* Each rank sends len bytes at buf + rank*len to rank 0, which returns the
 * whole nranks*len buffer to everyone: allgather, and barrier with len 0. */
static shoal_status_t shoal_boot_gather_release(shoal_bootstrap_t *bs, uint32_t op, void *buf,
                                                size_t len)
{
    uint64_t deadline;
    shoal_status_t s = shoal_boot_begin(bs, &deadline);
    if (s != SHOAL_OK || bs->nranks == 1)
        return s;
    char *base = buf;
    size_t total = len * (size_t)bs->nranks;
    if (bs->rank != 0) {
        const char *mine = len ? base + (size_t)bs->rank * len : NULL;
        s = shoal_boot_send(bs, 0, op, bs->seq, mine, len, deadline);
        if (s == SHOAL_OK)
            s = shoal_boot_recv(bs, 0, op, bs->seq, base, total, deadline);
        return shoal_boot_end(bs, s, 0);
    }
    int failed = 0;
    for (int r = 1; r < bs->nranks && s == SHOAL_OK; r++) {
        s = shoal_boot_recv(bs, r, op, bs->seq, len ? base + (size_t)r * len : NULL, len,
                            deadline);
        failed = r;
    }
    for (int r = 1; r < bs->nranks && s == SHOAL_OK; r++) {
        s = shoal_boot_send(bs, r, op, bs->seq, base, total, deadline);
        failed = r;
    }
    return shoal_boot_end(bs, s, failed);
}

shoal_status_t shoal_bootstrap_allgather(shoal_bootstrap_t *bs, void *buf, size_t len)
{
    if (!bs || (!buf && len > 0) || (len > 0 && len > SIZE_MAX / (size_t)bs->nranks)) {
        shoal_error(BOOT, "bootstrap allgather: invalid argument");
        return SHOAL_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&bs->lock);
    shoal_status_t s = shoal_boot_gather_release(bs, SHOAL_BOOT_OP_ALLGATHER, buf, len);
    pthread_mutex_unlock(&bs->lock);
    return s;
}

shoal_status_t shoal_bootstrap_barrier(shoal_bootstrap_t *bs)
{
    if (!bs) {
        shoal_error(BOOT, "bootstrap barrier: NULL bootstrap");
        return SHOAL_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&bs->lock);
    shoal_status_t s = shoal_boot_gather_release(bs, SHOAL_BOOT_OP_BARRIER, NULL, 0);
    pthread_mutex_unlock(&bs->lock);
    return s;
}

static shoal_status_t shoal_boot_bcast(shoal_bootstrap_t *bs, void *buf, size_t len, int root)
{
    const uint32_t op = SHOAL_BOOT_OP_BCAST;
    uint64_t deadline;
    shoal_status_t s = shoal_boot_begin(bs, &deadline);
    if (s != SHOAL_OK || bs->nranks == 1)
        return s;
    if (bs->rank != 0) {
        /* A root other than 0 hands its data to rank 0, which fans it out. */
        if (bs->rank == root)
            s = shoal_boot_send(bs, 0, op, bs->seq, buf, len, deadline);
        else
            s = shoal_boot_recv(bs, 0, op, bs->seq, buf, len, deadline);
        return shoal_boot_end(bs, s, 0);
    }
    int failed = 0;
    if (root != 0) {
        s = shoal_boot_recv(bs, root, op, bs->seq, buf, len, deadline);
        failed = root;
    }
    for (int r = 1; r < bs->nranks && s == SHOAL_OK; r++) {
        if (r == root)
            continue;
        s = shoal_boot_send(bs, r, op, bs->seq, buf, len, deadline);
        failed = r;
    }
    return shoal_boot_end(bs, s, failed);
}

shoal_status_t shoal_bootstrap_bcast(shoal_bootstrap_t *bs, void *buf, size_t len, int root)
{
    if (!bs || (!buf && len > 0) || root < 0 || root >= bs->nranks) {
        shoal_error(BOOT, "bootstrap bcast: invalid argument (root %d of %d ranks)", root,
                    bs ? bs->nranks : 0);
        return SHOAL_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&bs->lock);
    shoal_status_t s = shoal_boot_bcast(bs, buf, len, root);
    pthread_mutex_unlock(&bs->lock);
    return s;
}

/* ---- watching for failures ------------------------------------------------ */

/* What arrived unasked on peer's connection: a failure notice, a goodbye,
 * the connection's end, or (left alone) a message of the next collective. */
static shoal_status_t shoal_boot_news(shoal_bootstrap_t *bs, int peer, int *culprit_p,
                                      char *text, size_t cap)
{
    uint8_t msg[SHOAL_BOOT_HDR_BYTES + SHOAL_BOOT_FAIL_FIXED + SHOAL_BOOT_FAIL_TEXT_MAX +
                2 * SHOAL_BOOT_TAG_BYTES];
    int fd = bs->fds[peer];
    size_t hb = shoal_boot_hdr_block(bs), tb = hb - SHOAL_BOOT_HDR_BYTES;
    ssize_t n = recv(fd, msg, hb, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return SHOAL_OK;
    if (n <= 0) {
        *culprit_p = peer;
        snprintf(text, cap, "rank %d exited, was killed or aborted: its connection to rank "
                 "%d %s without a goodbye", peer, bs->rank,
                 n == 0 ? "closed" : "broke");
        return SHOAL_ERR_PEER;
    }
    if (n < (ssize_t)hb)
        return SHOAL_OK; /* the rest of the header is on its way */
    uint32_t op = shoal_boot_get_u32(msg);
    uint64_t len = shoal_boot_get_u64(msg + 8);
    if (op != SHOAL_BOOT_OP_BYE && op != SHOAL_BOOT_OP_FAIL)
        return SHOAL_OK; /* the next collective's: read, and checked, by it */
    if (bs->mac && shoal_boot_check_tag(bs, peer, 'h', bs->links[peer].rx, msg,
                                        SHOAL_BOOT_HDR_BYTES, msg + SHOAL_BOOT_HDR_BYTES,
                                        shoal_boot_op_name(op)) != SHOAL_OK) {
        *culprit_p = peer;
        snprintf(text, cap, "a message from rank %d to rank %d failed its integrity check",
                 peer, bs->rank);
        return SHOAL_ERR_AUTH;
    }
    if (op == SHOAL_BOOT_OP_BYE) {
        if (recv(fd, msg, hb, MSG_DONTWAIT) == (ssize_t)hb) {
            bs->gone[peer] = 1;
            bs->links[peer].rx++;
        }
        shoal_debug(BOOT, "bootstrap: rank %d said goodbye to rank %d", peer, bs->rank);
        return SHOAL_OK;
    }
    if (op != SHOAL_BOOT_OP_FAIL)
        return SHOAL_OK;
    shoal_status_t status;
    if (len < SHOAL_BOOT_FAIL_FIXED || len > SHOAL_BOOT_FAIL_FIXED + SHOAL_BOOT_FAIL_TEXT_MAX) {
        *culprit_p = peer;
        snprintf(text, cap, "rank %d sent rank %d a malformed failure notice", peer, bs->rank);
        return SHOAL_ERR_INTERNAL;
    }
    size_t whole = hb + (size_t)len + tb;
    n = recv(fd, msg, whole, MSG_PEEK | MSG_DONTWAIT);
    if (n < (ssize_t)whole || recv(fd, msg, whole, MSG_DONTWAIT) != (ssize_t)whole)
        return SHOAL_OK; /* not all there yet */
    if (bs->mac && shoal_boot_check_tag(bs, peer, 'p', bs->links[peer].rx, msg + hb,
                                        (size_t)len, msg + hb + len,
                                        shoal_boot_op_name(op)) != SHOAL_OK) {
        *culprit_p = peer;
        snprintf(text, cap, "a failure notice from rank %d to rank %d failed its integrity "
                 "check", peer, bs->rank);
        return SHOAL_ERR_AUTH;
    }
    bs->links[peer].rx++;
    char said[SHOAL_BOOT_FAIL_TEXT_MAX + 1];
    shoal_debug(BOOT, "bootstrap: failure notice from rank %d", peer);
    shoal_boot_fail_parse(msg + hb, (size_t)len, bs->nranks, culprit_p, &status, said,
                          sizeof(said));
    snprintf(text, cap, "%s", said);
    return status;
}

shoal_status_t shoal_bootstrap_poll(shoal_bootstrap_t *bs, int *culprit_p, char *text,
                                    size_t cap)
{
    if (pthread_mutex_trylock(&bs->lock) != 0)
        return SHOAL_OK; /* a collective runs: it reads the news itself */
    shoal_status_t s = SHOAL_OK;
    int n = 0;
    if (bs->status != SHOAL_OK || shoal_boot_is_aborted(bs))
        goto out;
    for (int r = bs->rank == 0 ? 1 : 0; r < (bs->rank == 0 ? bs->nranks : 1); r++) {
        if (bs->fds[r] < 0 || bs->gone[r])
            continue;
        bs->pfds[n] = (struct pollfd){.fd = bs->fds[r], .events = POLLIN};
        bs->pfd_rank[n++] = r;
    }
    if (n == 0 || poll(bs->pfds, (nfds_t)n, 0) <= 0)
        goto out;
    int from = -1;
    for (int i = 0; i < n && s == SHOAL_OK; i++) {
        from = bs->pfd_rank[i];
        if (bs->pfds[i].revents)
            s = shoal_boot_news(bs, from, culprit_p, text, cap);
    }
    if (s != SHOAL_OK) {
        /* The rank the news came from knows it (or is gone). */
        bs->status = s;
        shoal_boot_notify(bs, from, *culprit_p, s, text);
    }
out:
    pthread_mutex_unlock(&bs->lock);
    return s;
}

void shoal_bootstrap_report(shoal_bootstrap_t *bs, int culprit, shoal_status_t status,
                            const char *text)
{
    pthread_mutex_lock(&bs->lock);
    if (bs->status == SHOAL_OK && !shoal_boot_is_aborted(bs) && bs->nranks > 1) {
        bs->status = status;
        if (bs->rank == 0)
            shoal_boot_notify(bs, -1, culprit, status, text);
        else if (bs->fds[0] >= 0 && !bs->gone[0] &&
                 shoal_boot_send_fail(bs, 0, culprit, status, text,
                                      shoal_deadline_after(SHOAL_BOOT_NOTIFY_NS)) != SHOAL_OK)
            shoal_debug(BOOT, "bootstrap: rank %d cannot tell rank 0 of its failure", bs->rank);
    }
    pthread_mutex_unlock(&bs->lock);
}

/* ---- joining ------------------------------------------------------------ */

/* "1, 2, 5" for the ranks that have no connection yet, truncated to fit. */
static void shoal_boot_missing(const shoal_bootstrap_t *bs, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (int r = 1; r < bs->nranks; r++) {
        if (bs->fds[r] >= 0)
            continue;
        int w = snprintf(out + n, cap - n, "%s%d", n ? ", " : "", r);
        if (w < 0 || (size_t)w >= cap - n) {
            if (cap > 4)
                strcpy(out + cap - 4, "...");
            return;
        }
        n += (size_t)w;
    }
}

/* A join verdict to rank `to` on fd, tagged when that rank tags (mac), with
 * the connection's key and message count. */
static void shoal_boot_send_verdict(shoal_bootstrap_t *bs, int fd, int mac, const uint8_t *key,
                                    uint64_t *number, int to, shoal_boot_verdict_t verdict,
                                    uint64_t deadline_ns)
{
    uint8_t body[SHOAL_BOOT_VERDICT_BYTES] = {0};
    shoal_boot_put_u32(body, verdict);
    if (verdict == SHOAL_BOOT_JOIN_TIMEOUT) {
        uint32_t first = 0, count = 0;
        for (int r = bs->nranks - 1; r >= 1; r--) {
            if (bs->fds[r] < 0) {
                first = (uint32_t)r;
                count++;
            }
        }
        shoal_boot_put_u32(body + 4, first);
        shoal_boot_put_u32(body + 8, count);
    }
    /* Best effort: the verdict only explains a refusal that closing the
     * connection enforces anyway. */
    if (mac && !bs->mac_ctx && shoal_boot_mac_open(bs) != SHOAL_OK)
        return;
    if (shoal_boot_put_msg(bs, fd, mac, key, number, to, SHOAL_BOOT_OP_JOIN, 0, body,
                           sizeof(body), deadline_ns) != SHOAL_OK)
        shoal_debug(BOOT, "bootstrap: could not deliver join verdict %d", (int)verdict);
}

/* Check one hello: the rank it gives or a refusal. */
static shoal_boot_verdict_t shoal_boot_check_hello(const shoal_bootstrap_t *bs,
                                                   const uint8_t *hello, int *rank_p)
{
    if (shoal_boot_get_u32(hello) != SHOAL_BOOT_HELLO_MAGIC ||
        shoal_boot_get_u32(hello + 4) != SHOAL_BOOT_HELLO_VERSION)
        return SHOAL_BOOT_JOIN_BAD_HELLO;
    int rank = (int)shoal_boot_get_u32(hello + 8);
    int nranks = (int)shoal_boot_get_u32(hello + 12);
    int mac = (shoal_boot_get_u32(hello + 16) & SHOAL_BOOT_HELLO_MAC) != 0;
    *rank_p = rank;
    if (mac != bs->mac)
        return SHOAL_BOOT_JOIN_BAD_MAC;
    if (nranks != bs->nranks)
        return SHOAL_BOOT_JOIN_BAD_NRANKS;
    if (rank < 1 || rank >= bs->nranks)
        return SHOAL_BOOT_JOIN_BAD_RANK;
    if (bs->fds[rank] >= 0)
        return SHOAL_BOOT_JOIN_DUPLICATE;
    return SHOAL_BOOT_JOIN_OK;
}

/* Rank 0: accept the other ranks until all are in, then tell them so. */
static shoal_status_t shoal_boot_root_join(shoal_bootstrap_t *bs, const shoal_unique_id_t *id,
                                           const shoal_sockaddr_t *root, uint64_t deadline_ns)
{
    char text[SHOAL_SOCKADDR_STRLEN];
    bs->local_addr = *root;
    shoal_sock_set_port(&bs->local_addr, 0);
    int lfd = shoal_boot_listener_take(id);
    if (lfd < 0) {
        /* No shoal_bootstrap_id_create in this process for this id: the id
         * was made from a known address (launcher), which rank 0 binds. */
        shoal_sockaddr_t addr = *root;
        shoal_status_t s = shoal_sock_listen(&addr, &lfd);
        if (s != SHOAL_OK)
            return s;
    }
    if (bs->nranks == 1) {
        close(lfd);
        return SHOAL_OK;
    }
    shoal_acceptor_t *acc;
    shoal_status_t s = shoal_acceptor_create(lfd, bs->secret, SHOAL_BOOT_HELLO_BYTES, &acc);
    if (s != SHOAL_OK)
        goto err_close_listener;

    int arrived = 0;
    while (arrived < bs->nranks - 1) {
        uint8_t hello[SHOAL_BOOT_HELLO_BYTES];
        uint8_t session[SHOAL_SECRET_BYTES];
        int fd;
        s = shoal_acceptor_next_session(acc, deadline_ns, hello, &fd, session);
        if (s == SHOAL_ERR_TIMEOUT) {
            char missing[256];
            shoal_boot_missing(bs, missing, sizeof(missing));
            shoal_error(BOOT, "bootstrap init: %d of %d ranks joined before the timeout; "
                        "missing ranks: %s", arrived + 1, bs->nranks, missing);
            uint64_t notify = shoal_deadline_after(SHOAL_BOOT_NOTIFY_NS);
            for (int r = 1; r < bs->nranks; r++)
                if (bs->fds[r] >= 0)
                    shoal_boot_send_verdict(bs, bs->fds[r], bs->mac, bs->links[r].key,
                                            &bs->links[r].tx, r, SHOAL_BOOT_JOIN_TIMEOUT,
                                            notify);
        }
        if (s != SHOAL_OK)
            goto err_destroy_acceptor;
        int rank = -1;
        shoal_boot_verdict_t v = shoal_boot_check_hello(bs, hello, &rank);
        if (v != SHOAL_BOOT_JOIN_OK) {
            shoal_sockaddr_t peer;
            socklen_t plen = sizeof(peer);
            memset(&peer, 0, sizeof(peer));
            getpeername(fd, &peer.u.sa, &plen);
            shoal_warn(BOOT, "bootstrap init: refused a join from %s claiming rank %d "
                       "of %d: %s", shoal_sock_str(&peer, text), rank,
                       (int)shoal_boot_get_u32(hello + 12), shoal_boot_verdict_text[v]);
            /* In the framing the rank asked for, so that it reads why. */
            uint64_t number = 0;
            int mac = shoal_boot_get_u32(hello) == SHOAL_BOOT_HELLO_MAGIC &&
                      (shoal_boot_get_u32(hello + 16) & SHOAL_BOOT_HELLO_MAC);
            shoal_boot_send_verdict(bs, fd, mac, session, &number, rank, v, deadline_ns);
            OPENSSL_cleanse(session, sizeof(session));
            close(fd);
            continue;
        }
        bs->fds[rank] = fd;
        memcpy(bs->links[rank].key, session, SHOAL_SECRET_BYTES);
        OPENSSL_cleanse(session, sizeof(session));
        arrived++;
        shoal_debug(BOOT, "bootstrap init: rank %d joined (%d of %d)", rank, arrived + 1,
                    bs->nranks);
    }
    shoal_acceptor_destroy(acc);
    close(lfd);

    for (int r = 1; r < bs->nranks; r++) {
        uint8_t verdict[SHOAL_BOOT_VERDICT_BYTES] = {0};
        shoal_boot_put_u32(verdict, SHOAL_BOOT_JOIN_OK);
        s = shoal_boot_send(bs, r, SHOAL_BOOT_OP_JOIN, 0, verdict, sizeof(verdict),
                            deadline_ns);
        if (s != SHOAL_OK)
            return s;
    }
    return SHOAL_OK;

err_destroy_acceptor:
    shoal_acceptor_destroy(acc);
err_close_listener:
    close(lfd);
    return s;
}

/* Any rank but 0: connect to the root, prove the secret, say who we are and
 * wait until every rank is in. */
static shoal_status_t shoal_boot_peer_join(shoal_bootstrap_t *bs, const shoal_sockaddr_t *root,
                                           uint64_t deadline_ns)
{
    int fd;
    shoal_status_t s;
    for (int attempt = 1;; attempt++) {
        s = shoal_sock_connect(root, deadline_ns, &fd);
        if (s != SHOAL_OK)
            return s;
        /* A failed handshake is logged inside, with rank 0's address. */
        s = shoal_auth_client_session(fd, bs->secret, deadline_ns, bs->links[0].key);
        if (s == SHOAL_OK)
            break;
        /* Rank 0 drops handshakes it cannot serve in time (auth.h); a
         * closed connection before any verdict is worth another try. */
        if (s == SHOAL_ERR_AUTH && bs->origin != SHOAL_SECRET_RANDOM)
            shoal_error(BOOT, "bootstrap init on rank %d: this rank's secret is derived from "
                        "%s and the job's identity (rendezvous address, size and job id "
                        "variables): every rank needs the same of each", bs->rank,
                        bs->origin == SHOAL_SECRET_PASSPHRASE
                            ? "the passphrase (SHOAL_SECRET or SHOAL_SECRET_FILE)"
                            : "no passphrase (SHOAL_AUTH is not strict)");
        if (s != SHOAL_ERR_PEER || attempt == SHOAL_BOOT_CONNECT_ATTEMPTS ||
            shoal_deadline_passed(deadline_ns)) {
            if (s == SHOAL_ERR_PEER)
                shoal_error(BOOT, "bootstrap init on rank %d: rank 0 closed the connection "
                            "during the handshake, %d times", bs->rank, attempt);
            goto err_close_fd;
        }
        close(fd);
        shoal_info(BOOT, "bootstrap init on rank %d: reconnecting to rank 0", bs->rank);
    }
    bs->fds[0] = fd;
    uint8_t hello[SHOAL_BOOT_HELLO_BYTES];
    shoal_boot_put_u32(hello, SHOAL_BOOT_HELLO_MAGIC);
    shoal_boot_put_u32(hello + 4, SHOAL_BOOT_HELLO_VERSION);
    shoal_boot_put_u32(hello + 8, (uint32_t)bs->rank);
    shoal_boot_put_u32(hello + 12, (uint32_t)bs->nranks);
    shoal_boot_put_u32(hello + 16, bs->mac ? SHOAL_BOOT_HELLO_MAC : 0);
    s = shoal_sock_send_all(fd, hello, sizeof(hello), deadline_ns);
    if (s != SHOAL_OK) {
        s = shoal_boot_io_fail(bs, s, 0, SHOAL_BOOT_OP_JOIN);
        goto err_clear_fd;
    }
    /* Rank 0's verdict: a rank that reached it before rank 0 started
     * waiting gives it the time rank 0 takes to send it at its own
     * deadline, so that a timeout names the missing ranks here too. */
    uint8_t verdict[SHOAL_BOOT_VERDICT_BYTES];
    s = shoal_boot_recv(bs, 0, SHOAL_BOOT_OP_JOIN, 0, verdict, sizeof(verdict),
                        deadline_ns + SHOAL_BOOT_NOTIFY_NS);
    if (s != SHOAL_OK)
        goto err_clear_fd;
    uint32_t v = shoal_boot_get_u32(verdict);
    if (v == SHOAL_BOOT_JOIN_TIMEOUT) {
        uint32_t first = shoal_boot_get_u32(verdict + 4), count = shoal_boot_get_u32(verdict + 8);
        shoal_error(BOOT, "bootstrap init on rank %d: rank 0 gave up: not all %d ranks "
                    "joined in time; missing: rank %u%s (rank 0's log names them all)",
                    bs->rank, bs->nranks, first, count > 1 ? " and others" : "");
        s = SHOAL_ERR_TIMEOUT;
        goto err_clear_fd;
    }
    if (v != SHOAL_BOOT_JOIN_OK) {
        shoal_error(BOOT, "bootstrap init: rank 0 refused rank %d of %d: %s", bs->rank,
                    bs->nranks,
                    v < SHOAL_BOOT_JOIN_COUNT ? shoal_boot_verdict_text[v] : "unknown reason");
        s = SHOAL_ERR_INVALID_ARG;
        goto err_clear_fd;
    }
    /* The address this rank reaches rank 0 from: transports listen on the
     * same interface. */
    socklen_t len = sizeof(bs->local_addr);
    if (getsockname(fd, &bs->local_addr.u.sa, &len) != 0) {
        shoal_error(BOOT, "getsockname: %s", strerror(errno));
        s = SHOAL_ERR_SYSTEM;
        goto err_clear_fd;
    }
    shoal_sock_set_port(&bs->local_addr, 0);
    return SHOAL_OK;

err_clear_fd:
    bs->fds[0] = -1;
err_close_fd:
    close(fd);
    return s;
}

shoal_status_t shoal_bootstrap_init(const shoal_unique_id_t *id, int rank, int nranks,
                                    uint64_t timeout_ns, shoal_bootstrap_t **bs_p)
{
    if (!id || !bs_p || nranks < 1 || rank < 0 || rank >= nranks) {
        shoal_error(BOOT, "bootstrap init: invalid argument (rank %d of %d)", rank, nranks);
        return SHOAL_ERR_INVALID_ARG;
    }
    uint64_t deadline = shoal_deadline_after(timeout_ns);
    shoal_sockaddr_t root;
    shoal_bootstrap_t *bs = calloc(1, sizeof(*bs));
    if (!bs) {
        shoal_error(BOOT, "bootstrap init: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    bs->rank = rank;
    bs->nranks = nranks;
    bs->timeout_ns = timeout_ns;
    atomic_init(&bs->aborted, 0);
    shoal_status_t s = shoal_boot_id_parse(id, &root, bs->secret);
    if (s != SHOAL_OK)
        goto err_free_bs;
    bs->origin = shoal_boot_get_u32(id->bytes + SHOAL_BOOT_ID_ORIGIN);
    bs->mac = shoal_config_get()->boot.mac;
    bs->fds = malloc((size_t)nranks * sizeof(*bs->fds));
    if (!bs->fds) {
        shoal_error(BOOT, "bootstrap init: out of memory");
        s = SHOAL_ERR_NO_MEMORY;
        goto err_free_bs;
    }
    for (int r = 0; r < nranks; r++)
        bs->fds[r] = -1;
    bs->gone = calloc((size_t)nranks, sizeof(*bs->gone));
    bs->pfds = calloc((size_t)nranks, sizeof(*bs->pfds));
    bs->pfd_rank = calloc((size_t)nranks, sizeof(*bs->pfd_rank));
    bs->links = calloc((size_t)nranks, sizeof(*bs->links));
    if (!bs->gone || !bs->pfds || !bs->pfd_rank || !bs->links) {
        shoal_error(BOOT, "bootstrap init: out of memory");
        s = SHOAL_ERR_NO_MEMORY;
        goto err_close_fds;
    }
    if (bs->mac) {
        s = shoal_boot_mac_open(bs);
        if (s != SHOAL_OK)
            goto err_close_fds;
    }

    s = rank == 0 ? shoal_boot_root_join(bs, id, &root, deadline)
                  : shoal_boot_peer_join(bs, &root, deadline);
    if (s != SHOAL_OK)
        goto err_close_fds;
    int beat = (int)(shoal_config_get()->core.heartbeat_ns / 1000000000ull);
    for (int r = 0; r < nranks; r++)
        if (bs->fds[r] >= 0)
            shoal_sock_keepalive(bs->fds[r], beat);
    pthread_mutex_init(&bs->lock, NULL);
    char text[SHOAL_SOCKADDR_STRLEN];
    shoal_debug(BOOT, "bootstrap init: rank %d of %d joined; local address %s", rank, nranks,
                shoal_sock_str(&bs->local_addr, text));
    *bs_p = bs;
    return SHOAL_OK;

err_close_fds:
    for (int r = 0; r < nranks; r++)
        if (bs->fds[r] >= 0)
            close(bs->fds[r]);
    free(bs->fds);
    free(bs->gone);
    free(bs->pfds);
    free(bs->pfd_rank);
    shoal_boot_links_free(bs);
err_free_bs:
    free(bs);
    return s;
}

const uint8_t *shoal_bootstrap_secret(const shoal_bootstrap_t *bs)
{
    return bs->secret;
}

const shoal_sockaddr_t *shoal_bootstrap_local_addr(const shoal_bootstrap_t *bs)
{
    return &bs->local_addr;
}

void shoal_bootstrap_abort(shoal_bootstrap_t *bs)
{
    if (!bs || atomic_exchange_explicit(&bs->aborted, 1, memory_order_acq_rel))
        return;
    /* shutdown, unlike close, wakes a poll() blocked on these sockets in
     * another thread, and leaves the descriptors valid until destroy. */
    for (int r = 0; r < bs->nranks; r++)
        if (bs->fds[r] >= 0)
            shutdown(bs->fds[r], SHUT_RDWR);
}

void shoal_bootstrap_destroy(shoal_bootstrap_t *bs)
{
    if (!bs)
        return;
    /* A goodbye first, so that the others tell this departure from a death
     * (an abort says none: to the others it is a rank that failed). It is
     * 16 bytes into an idle socket's buffer: never waits. */
    for (int r = 0; r < bs->nranks; r++) {
        if (bs->fds[r] < 0)
            continue;
        uint8_t bye[SHOAL_BOOT_HDR_BYTES + SHOAL_BOOT_TAG_BYTES];
        size_t n;
        if (!shoal_boot_is_aborted(bs) && !bs->gone[r] &&
            (shoal_boot_frame(bs, bs->mac, bs->links[r].key, bs->links[r].tx, r,
                              SHOAL_BOOT_OP_BYE, bs->seq, NULL, 0, bye, &n) != SHOAL_OK ||
             send(bs->fds[r], bye, n, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)n))
            shoal_debug(BOOT, "bootstrap: no goodbye to rank %d: %s", r, strerror(errno));
        close(bs->fds[r]);
    }
    pthread_mutex_destroy(&bs->lock);
    free(bs->fds);
    free(bs->gone);
    free(bs->pfds);
    free(bs->pfd_rank);
    shoal_boot_links_free(bs);
    free(bs);
}
