/* Mutual challenge/response over a fresh connection, and the acceptor that
 * runs the server side for many pending connections at once.
 *
 * Wire protocol (all integers big-endian):
 *   server -> client  challenge: magic, version, nonce_s[32]
 *   client -> server  proof:     magic, version, nonce_c[32],
 *                                HMAC(secret, "shoal-client" || nonce_s || nonce_c)
 *   server -> client  verdict:   status (0 = accepted),
 *                                HMAC(secret, "shoal-server" || nonce_c || nonce_s)
 *   client -> server  hello:     hello_len bytes, meaning up to the caller
 * Both nonces enter both proofs, so neither side can replay an old exchange,
 * and the labels keep one side's proof from being reflected as the other's.
 * Both sides may then derive the connection's session key,
 * HMAC(secret, "shoal-session" || nonce_s || nonce_c), which never travels.
 */
#include "auth.h"

#include "cancel.h"
#include "clock.h"
#include "log.h"
#include "sock.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHOAL_AUTH_MAGIC 0x5348414cu /* "SHAL" */
#define SHOAL_AUTH_VERSION 1u
#define SHOAL_AUTH_NONCE_BYTES 32
#define SHOAL_AUTH_MAC_BYTES 32

#define SHOAL_AUTH_CHALLENGE_BYTES (8 + SHOAL_AUTH_NONCE_BYTES)
#define SHOAL_AUTH_PROOF_BYTES (8 + SHOAL_AUTH_NONCE_BYTES + SHOAL_AUTH_MAC_BYTES)
#define SHOAL_AUTH_VERDICT_BYTES (4 + SHOAL_AUTH_MAC_BYTES)
#define SHOAL_AUTH_MSG_MAX SHOAL_AUTH_PROOF_BYTES

#define SHOAL_AUTH_ACCEPTED 0u
#define SHOAL_AUTH_REFUSED 1u

/* Handshakes in progress at once. When all are taken, a newcomer evicts the
 * oldest, so a flood of silent strangers cannot lock real peers out; but
 * only once that one had SHOAL_ACCEPTOR_GRACE_NS to answer, so that many
 * real peers arriving together (a large job) are not evicted by each other.
 * Until then newcomers wait in the kernel's listen queue. */
#define SHOAL_ACCEPTOR_MAX_PENDING 64
#define SHOAL_ACCEPTOR_GRACE_NS 1000000000ull

static const char shoal_auth_client_label[] = "shoal-client";
static const char shoal_auth_server_label[] = "shoal-server";
static const char shoal_auth_session_label[] = "shoal-session";

static void shoal_auth_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t shoal_auth_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

shoal_status_t shoal_auth_random(void *buf, size_t len)
{
    while (len > 0) {
        int n = len > (1u << 30) ? (1 << 30) : (int)len;
        if (RAND_bytes(buf, n) != 1) {
            shoal_error(BOOT, "RAND_bytes: %s", ERR_reason_error_string(ERR_get_error()));
            return SHOAL_ERR_SYSTEM;
        }
        buf = (char *)buf + n;
        len -= (size_t)n;
    }
    return SHOAL_OK;
}

/* mac = HMAC-SHA256(secret, label || first || second). */
static shoal_status_t shoal_auth_mac(const uint8_t secret[SHOAL_SECRET_BYTES],
                                     const char *label, const uint8_t *first,
                                     const uint8_t *second, uint8_t mac[SHOAL_AUTH_MAC_BYTES])
{
    uint8_t msg[16 + 2 * SHOAL_AUTH_NONCE_BYTES];
    size_t label_len = strlen(label);
    memcpy(msg, label, label_len);
    memcpy(msg + label_len, first, SHOAL_AUTH_NONCE_BYTES);
    memcpy(msg + label_len + SHOAL_AUTH_NONCE_BYTES, second, SHOAL_AUTH_NONCE_BYTES);
    unsigned mac_len = 0;
    if (!HMAC(EVP_sha256(), secret, SHOAL_SECRET_BYTES, msg,
              label_len + 2 * SHOAL_AUTH_NONCE_BYTES, mac, &mac_len) ||
        mac_len != SHOAL_AUTH_MAC_BYTES) {
        shoal_error(BOOT, "HMAC-SHA256: %s", ERR_reason_error_string(ERR_get_error()));
        return SHOAL_ERR_SYSTEM;
    }
    return SHOAL_OK;
}

/* Whether the first 8 bytes of a message name this protocol and version. */
static int shoal_auth_header_ok(const uint8_t *p)
{
    return shoal_auth_get_u32(p) == SHOAL_AUTH_MAGIC &&
           shoal_auth_get_u32(p + 4) == SHOAL_AUTH_VERSION;
}

shoal_status_t shoal_auth_client(int fd, const uint8_t secret[SHOAL_SECRET_BYTES],
                                 uint64_t deadline_ns)
{
    uint8_t session[SHOAL_SECRET_BYTES];
    shoal_status_t s = shoal_auth_client_session(fd, secret, deadline_ns, session);
    OPENSSL_cleanse(session, sizeof(session));
    return s;
}

shoal_status_t shoal_auth_client_session(int fd, const uint8_t secret[SHOAL_SECRET_BYTES],
                                         uint64_t deadline_ns,
                                         uint8_t session[SHOAL_SECRET_BYTES])
{
    char text[SHOAL_SOCKADDR_STRLEN];
    shoal_sockaddr_t server;
    socklen_t server_len = sizeof(server);
    memset(&server, 0, sizeof(server));
    if (getpeername(fd, &server.u.sa, &server_len) != 0)
        shoal_debug(BOOT, "getpeername: %s", strerror(errno));
    const char *name = shoal_sock_str(&server, text);

    uint8_t challenge[SHOAL_AUTH_CHALLENGE_BYTES];
    shoal_status_t s = shoal_sock_recv_all(fd, challenge, sizeof(challenge), deadline_ns);
    if (s == SHOAL_ERR_PEER) {
        /* A busy server may drop a handshake it could not serve in time;
         * the caller may reconnect, so this is not yet an error. */
        shoal_warn(BOOT, "handshake with %s: closed before the challenge", name);
        return s;
    }
    if (s != SHOAL_OK) {
        shoal_error(BOOT, "handshake with %s: no challenge: %s", name,
                    shoal_status_string(s));
        return s;
    }
    if (!shoal_auth_header_ok(challenge)) {
        shoal_error(BOOT, "handshake with %s: it does not speak shoal's protocol "
                    "(magic %08x version %u)", name, shoal_auth_get_u32(challenge),
                    shoal_auth_get_u32(challenge + 4));
        return SHOAL_ERR_AUTH;
    }
    const uint8_t *nonce_s = challenge + 8;

    uint8_t proof[SHOAL_AUTH_PROOF_BYTES];
    uint8_t *nonce_c = proof + 8;
    shoal_auth_put_u32(proof, SHOAL_AUTH_MAGIC);
    shoal_auth_put_u32(proof + 4, SHOAL_AUTH_VERSION);
    s = shoal_auth_random(nonce_c, SHOAL_AUTH_NONCE_BYTES);
    if (s != SHOAL_OK)
        return s;
    s = shoal_auth_mac(secret, shoal_auth_client_label, nonce_s, nonce_c,
                       proof + 8 + SHOAL_AUTH_NONCE_BYTES);
    if (s != SHOAL_OK)
        return s;
    s = shoal_sock_send_all(fd, proof, sizeof(proof), deadline_ns);
    if (s != SHOAL_OK) {
        shoal_error(BOOT, "handshake with %s: sending our proof: %s", name,
                    shoal_status_string(s));
        return s;
    }

    uint8_t verdict[SHOAL_AUTH_VERDICT_BYTES];
    s = shoal_sock_recv_all(fd, verdict, sizeof(verdict), deadline_ns);
    if (s == SHOAL_ERR_PEER) {
        shoal_warn(BOOT, "handshake with %s: closed before the verdict", name);
        return s;
    }
    if (s != SHOAL_OK) {
        shoal_error(BOOT, "handshake with %s: no verdict: %s", name,
                    shoal_status_string(s));
        return s;
    }
    if (shoal_auth_get_u32(verdict) != SHOAL_AUTH_ACCEPTED) {
        shoal_error(BOOT, "handshake with %s: our proof was refused: this process "
                    "holds a different secret (wrong unique id?)", name);
        return SHOAL_ERR_AUTH;
    }
    uint8_t expect[SHOAL_AUTH_MAC_BYTES];
    s = shoal_auth_mac(secret, shoal_auth_server_label, nonce_c, nonce_s, expect);
    if (s != SHOAL_OK)
        return s;
    if (CRYPTO_memcmp(expect, verdict + 4, SHOAL_AUTH_MAC_BYTES) != 0) {
        shoal_error(BOOT, "handshake with %s: it failed to prove the secret", name);
        return SHOAL_ERR_AUTH;
    }
    return shoal_auth_mac(secret, shoal_auth_session_label, nonce_s, nonce_c, session);
}

/* ---- client without blocking ---------------------------------------------- */

enum {
    SHOAL_DIAL_CONNECTING,
    SHOAL_DIAL_RECV_CHALLENGE,
    SHOAL_DIAL_SEND_PROOF,
    SHOAL_DIAL_RECV_VERDICT,
    SHOAL_DIAL_SEND_HELLO,
    SHOAL_DIAL_DONE,
};

_Static_assert(sizeof(((shoal_auth_dial_t *)0)->msg) >= SHOAL_AUTH_MSG_MAX, "room for a proof");
_Static_assert(sizeof(((shoal_auth_dial_t *)0)->nonce_s) == SHOAL_AUTH_NONCE_BYTES, "nonces");

void shoal_auth_dial_start(shoal_auth_dial_t *d, int fd,
                           const uint8_t secret[SHOAL_SECRET_BYTES], const void *hello,
                           size_t hello_len)
{
    memset(d, 0, sizeof(*d));
    d->fd = fd;
    d->state = SHOAL_DIAL_CONNECTING;
    memcpy(d->secret, secret, SHOAL_SECRET_BYTES);
    d->hello_len = hello_len < SHOAL_AUTH_HELLO_MAX ? hello_len : SHOAL_AUTH_HELLO_MAX;
    memcpy(d->hello, hello, d->hello_len);
}

void shoal_auth_dial_clear(shoal_auth_dial_t *d)
{
    OPENSSL_cleanse(d, sizeof(*d));
    d->fd = -1;
}

/* Move bytes of the current message: SHOAL_OK once len are through,
 * SHOAL_INPROGRESS when the socket has no more room or data now. */
static shoal_status_t shoal_dial_io(shoal_auth_dial_t *d, int sending, uint8_t *buf, size_t len)
{
    while (d->off < len) {
        ssize_t n = sending ? send(d->fd, buf + d->off, len - d->off, MSG_DONTWAIT | MSG_NOSIGNAL)
                            : recv(d->fd, buf + d->off, len - d->off, MSG_DONTWAIT);
        if (n > 0) {
            d->off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return SHOAL_INPROGRESS;
        if (n == 0)
            errno = 0; /* closed: the caller tells it from a refused connect */
        return SHOAL_ERR_PEER;
    }
    d->off = 0;
    return SHOAL_OK;
}

shoal_status_t shoal_auth_dial_step(shoal_auth_dial_t *d)
{
    char text[SHOAL_SOCKADDR_STRLEN];
    shoal_status_t s = SHOAL_OK;
    while (s == SHOAL_OK && d->state != SHOAL_DIAL_DONE) {
        switch (d->state) {
        case SHOAL_DIAL_CONNECTING: {
            struct pollfd pfd = {.fd = d->fd, .events = POLLOUT};
            if (poll(&pfd, 1, 0) == 0)
                return SHOAL_INPROGRESS;
            int err = 0;
            socklen_t len = sizeof(err);
            if (getsockopt(d->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
            if (err != 0) {
                errno = err;
                return SHOAL_ERR_PEER;
            }
            d->state = SHOAL_DIAL_RECV_CHALLENGE;
            break;
        }
        case SHOAL_DIAL_RECV_CHALLENGE:
            s = shoal_dial_io(d, 0, d->msg, SHOAL_AUTH_CHALLENGE_BYTES);
            if (s != SHOAL_OK)
                break;
            if (!shoal_auth_header_ok(d->msg)) {
                shoal_sockaddr_t server;
                socklen_t len = sizeof(server);
                memset(&server, 0, sizeof(server));
                getpeername(d->fd, &server.u.sa, &len);
                shoal_error(BOOT, "handshake with %s: it does not speak shoal's protocol "
                            "(magic %08x version %u)", shoal_sock_str(&server, text),
                            shoal_auth_get_u32(d->msg), shoal_auth_get_u32(d->msg + 4));
                return SHOAL_ERR_AUTH;
            }
            memcpy(d->nonce_s, d->msg + 8, SHOAL_AUTH_NONCE_BYTES);
            shoal_auth_put_u32(d->msg, SHOAL_AUTH_MAGIC);
            shoal_auth_put_u32(d->msg + 4, SHOAL_AUTH_VERSION);
            s = shoal_auth_random(d->nonce_c, SHOAL_AUTH_NONCE_BYTES);
            if (s == SHOAL_OK) {
                memcpy(d->msg + 8, d->nonce_c, SHOAL_AUTH_NONCE_BYTES);
                s = shoal_auth_mac(d->secret, shoal_auth_client_label, d->nonce_s, d->nonce_c,
                                   d->msg + 8 + SHOAL_AUTH_NONCE_BYTES);
            }
            d->state = SHOAL_DIAL_SEND_PROOF;
            break;
        case SHOAL_DIAL_SEND_PROOF:
            s = shoal_dial_io(d, 1, d->msg, SHOAL_AUTH_PROOF_BYTES);
            if (s == SHOAL_OK)
                d->state = SHOAL_DIAL_RECV_VERDICT;
            break;
        case SHOAL_DIAL_RECV_VERDICT: {
            s = shoal_dial_io(d, 0, d->msg, SHOAL_AUTH_VERDICT_BYTES);
            if (s != SHOAL_OK)
                break;
            uint8_t expect[SHOAL_AUTH_MAC_BYTES];
            if (shoal_auth_get_u32(d->msg) != SHOAL_AUTH_ACCEPTED) {
                shoal_error(BOOT, "handshake on fd %d: our proof was refused: this process "
                            "holds a different secret (wrong unique id?)", d->fd);
                return SHOAL_ERR_AUTH;
            }
            s = shoal_auth_mac(d->secret, shoal_auth_server_label, d->nonce_c, d->nonce_s,
                               expect);
            if (s != SHOAL_OK)
                break;
            if (CRYPTO_memcmp(expect, d->msg + 4, SHOAL_AUTH_MAC_BYTES) != 0) {
                shoal_error(BOOT, "handshake on fd %d: the server failed to prove the secret",
                            d->fd);
                return SHOAL_ERR_AUTH;
            }
            d->state = SHOAL_DIAL_SEND_HELLO;
            break;
        }
        case SHOAL_DIAL_SEND_HELLO:
            s = shoal_dial_io(d, 1, d->hello, d->hello_len);
            if (s == SHOAL_OK)
                d->state = SHOAL_DIAL_DONE;
            break;
        }
    }
    return s;
}

/* ---- acceptor ----------------------------------------------------------- */

typedef enum {
    SHOAL_ACC_SEND_CHALLENGE,
    SHOAL_ACC_RECV_PROOF,
    SHOAL_ACC_SEND_VERDICT,
    SHOAL_ACC_RECV_HELLO,
} shoal_acc_state_t;

typedef enum {
    SHOAL_ACC_STEP_WAIT,  /* needs the socket to become ready */
    SHOAL_ACC_STEP_DONE,  /* proved the secret and sent its hello */
    SHOAL_ACC_STEP_DROP,  /* failed; already logged */
} shoal_acc_step_t;

typedef struct {
    int fd;
    shoal_acc_state_t state;
    size_t off;                              /* bytes moved in this state */
    uint64_t start_ns;                       /* when it was accepted */
    uint8_t nonce_s[SHOAL_AUTH_NONCE_BYTES];
    uint8_t session[SHOAL_SECRET_BYTES];     /* once the proof is checked */
    uint8_t msg[SHOAL_AUTH_MSG_MAX];         /* message being sent or received */
    uint8_t *hello;                          /* hello_len bytes */
    shoal_sockaddr_t peer;
} shoal_acc_conn_t;

struct shoal_acceptor {
    int listen_fd;
    uint8_t secret[SHOAL_SECRET_BYTES];
    size_t hello_len;
    size_t nconns;                           /* oldest first */
    shoal_acc_conn_t conns[SHOAL_ACCEPTOR_MAX_PENDING];
    struct pollfd pfds[SHOAL_ACCEPTOR_MAX_PENDING + 1];
};

shoal_status_t shoal_acceptor_create(int listen_fd, const uint8_t secret[SHOAL_SECRET_BYTES],
                                     size_t hello_len, shoal_acceptor_t **acc_p)
{
    if (listen_fd < 0 || !secret || !acc_p) {
        shoal_error(BOOT, "acceptor: invalid argument");
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_acceptor_t *acc = calloc(1, sizeof(*acc));
    if (!acc) {
        shoal_error(BOOT, "acceptor: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    acc->listen_fd = listen_fd;
    memcpy(acc->secret, secret, SHOAL_SECRET_BYTES);
    acc->hello_len = hello_len;
    *acc_p = acc;
    return SHOAL_OK;
}

static void shoal_acc_conn_close(shoal_acc_conn_t *c)
{
    close(c->fd);
    free(c->hello);
    OPENSSL_cleanse(c->session, sizeof(c->session));
}

/* Remove conns[i], keeping the others in arrival order. */
static void shoal_acc_remove(shoal_acceptor_t *acc, size_t i)
{
    memmove(&acc->conns[i], &acc->conns[i + 1],
            (acc->nconns - i - 1) * sizeof(acc->conns[0]));
    acc->nconns--;
}

static void shoal_acc_drop(shoal_acceptor_t *acc, size_t i)
{
    shoal_acc_conn_close(&acc->conns[i]);
    shoal_acc_remove(acc, i);
}

/* Move bytes of the current message; WAIT until all len bytes are through. */
static shoal_acc_step_t shoal_acc_io(shoal_acc_conn_t *c, int sending, uint8_t *buf,
                                     size_t len, int *complete_p)
{
    char text[SHOAL_SOCKADDR_STRLEN];
    *complete_p = 0;
    while (c->off < len) {
        ssize_t n = sending ? send(c->fd, buf + c->off, len - c->off, MSG_DONTWAIT | MSG_NOSIGNAL)
                            : recv(c->fd, buf + c->off, len - c->off, MSG_DONTWAIT);
        if (n > 0) {
            c->off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return SHOAL_ACC_STEP_WAIT;
        if (n == 0)
            shoal_warn(BOOT, "connection from %s closed during the handshake; dropped",
                       shoal_sock_str(&c->peer, text));
        else
            shoal_warn(BOOT, "connection from %s failed during the handshake: %s; dropped",
                       shoal_sock_str(&c->peer, text), strerror(errno));
        return SHOAL_ACC_STEP_DROP;
    }
    *complete_p = 1;
    return SHOAL_ACC_STEP_WAIT;
}

/* Tell a client whose proof failed that it was refused, if its socket takes
 * the few bytes now; it is closed either way. */
static void shoal_acc_refuse(shoal_acc_conn_t *c)
{
    uint8_t verdict[SHOAL_AUTH_VERDICT_BYTES] = {0};
    shoal_auth_put_u32(verdict, SHOAL_AUTH_REFUSED);
    ssize_t n = send(c->fd, verdict, sizeof(verdict), MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)n;
}

static shoal_acc_step_t shoal_acc_check_proof(shoal_acceptor_t *acc, shoal_acc_conn_t *c)
{
    char text[SHOAL_SOCKADDR_STRLEN];
    const uint8_t *nonce_c = c->msg + 8;
    uint8_t expect[SHOAL_AUTH_MAC_BYTES];
    if (shoal_auth_mac(acc->secret, shoal_auth_client_label, c->nonce_s, nonce_c, expect) !=
        SHOAL_OK)
        return SHOAL_ACC_STEP_DROP;
    if (CRYPTO_memcmp(expect, c->msg + 8 + SHOAL_AUTH_NONCE_BYTES, SHOAL_AUTH_MAC_BYTES) != 0) {
        shoal_warn(BOOT, "connection from %s failed authentication (wrong secret); refused",
                   shoal_sock_str(&c->peer, text));
        shoal_acc_refuse(c);
        return SHOAL_ACC_STEP_DROP;
    }
    uint8_t nonce_copy[SHOAL_AUTH_NONCE_BYTES];
    memcpy(nonce_copy, nonce_c, sizeof(nonce_copy));
    if (shoal_auth_mac(acc->secret, shoal_auth_session_label, c->nonce_s, nonce_copy,
                       c->session) != SHOAL_OK)
        return SHOAL_ACC_STEP_DROP;
    shoal_auth_put_u32(c->msg, SHOAL_AUTH_ACCEPTED);
    if (shoal_auth_mac(acc->secret, shoal_auth_server_label, nonce_copy, c->nonce_s,
                       c->msg + 4) != SHOAL_OK)
        return SHOAL_ACC_STEP_DROP;
    c->state = SHOAL_ACC_SEND_VERDICT;
    c->off = 0;
    return SHOAL_ACC_STEP_WAIT;
}

/* Advance one handshake as far as its socket allows. */
static shoal_acc_step_t shoal_acc_step(shoal_acceptor_t *acc, shoal_acc_conn_t *c)
{
    char text[SHOAL_SOCKADDR_STRLEN];
    for (;;) {
        int complete;
        shoal_acc_step_t r;
        switch (c->state) {
        case SHOAL_ACC_SEND_CHALLENGE:
            r = shoal_acc_io(c, 1, c->msg, SHOAL_AUTH_CHALLENGE_BYTES, &complete);
            if (!complete)
                return r;
            c->state = SHOAL_ACC_RECV_PROOF;
            c->off = 0;
            break;
        case SHOAL_ACC_RECV_PROOF:
            r = shoal_acc_io(c, 0, c->msg, SHOAL_AUTH_PROOF_BYTES, &complete);
            /* Garbage is refused as soon as its first bytes show it, not
             * only once a whole proof's worth of it has arrived. */
            if (r != SHOAL_ACC_STEP_DROP && c->off >= 8 && !shoal_auth_header_ok(c->msg)) {
                shoal_warn(BOOT, "connection from %s is not a shoal handshake (magic %08x); "
                           "dropped", shoal_sock_str(&c->peer, text),
                           shoal_auth_get_u32(c->msg));
                return SHOAL_ACC_STEP_DROP;
            }
            if (!complete)
                return r;
            r = shoal_acc_check_proof(acc, c);
            if (r == SHOAL_ACC_STEP_DROP)
                return r;
            break;
        case SHOAL_ACC_SEND_VERDICT:
            r = shoal_acc_io(c, 1, c->msg, SHOAL_AUTH_VERDICT_BYTES, &complete);
            if (!complete)
                return r;
            c->state = SHOAL_ACC_RECV_HELLO;
            c->off = 0;
            break;
        case SHOAL_ACC_RECV_HELLO:
            r = shoal_acc_io(c, 0, c->hello, acc->hello_len, &complete);
            return complete ? SHOAL_ACC_STEP_DONE : r;
        }
    }
}

/* Whether a new connection may be taken now: there is a free slot, or the
 * oldest pending handshake has had its grace period. */
static int shoal_acc_has_room(const shoal_acceptor_t *acc, uint64_t now_ns)
{
    return acc->nconns < SHOAL_ACCEPTOR_MAX_PENDING ||
           now_ns - acc->conns[0].start_ns >= SHOAL_ACCEPTOR_GRACE_NS;
}

/* Take the connections waiting in the listen queue while there is room.
 * Returns SHOAL_OK, or SHOAL_ERR_SYSTEM if the listening socket failed. */
static shoal_status_t shoal_acc_accept(shoal_acceptor_t *acc)
{
    char text[SHOAL_SOCKADDR_STRLEN];
    for (;;) {
        uint64_t now = shoal_now_ns();
        if (!shoal_acc_has_room(acc, now))
            return SHOAL_OK;
        shoal_sockaddr_t peer;
        socklen_t len = sizeof(peer);
        memset(&peer, 0, sizeof(peer));
        int fd = accept4(acc->listen_fd, &peer.u.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return SHOAL_OK;
            /* Connections that died in the queue, and signals, are not the
             * listener's fault. */
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO ||
                errno == EPERM)
                continue;
            shoal_error(BOOT, "accept: %s", strerror(errno));
            return SHOAL_ERR_SYSTEM;
        }
        if (acc->nconns == SHOAL_ACCEPTOR_MAX_PENDING) {
            shoal_warn(BOOT, "%d handshakes pending; dropping the oldest, from %s, "
                       "which did not answer in time", SHOAL_ACCEPTOR_MAX_PENDING,
                       shoal_sock_str(&acc->conns[0].peer, text));
            shoal_acc_drop(acc, 0);
        }
        shoal_acc_conn_t *c = &acc->conns[acc->nconns];
        memset(c, 0, sizeof(*c));
        c->fd = fd;
        c->start_ns = now;
        c->peer = peer;
        c->state = SHOAL_ACC_SEND_CHALLENGE;
        c->hello = malloc(acc->hello_len ? acc->hello_len : 1);
        if (!c->hello || shoal_auth_random(c->nonce_s, sizeof(c->nonce_s)) != SHOAL_OK) {
            shoal_error(BOOT, "acceptor: cannot set up a handshake for %s",
                        shoal_sock_str(&peer, text));
            free(c->hello);
            close(fd);
            return SHOAL_ERR_NO_MEMORY;
        }
        shoal_auth_put_u32(c->msg, SHOAL_AUTH_MAGIC);
        shoal_auth_put_u32(c->msg + 4, SHOAL_AUTH_VERSION);
        memcpy(c->msg + 8, c->nonce_s, SHOAL_AUTH_NONCE_BYTES);
        acc->nconns++;
        /* The challenge goes out in the next round of poll (the socket is
         * writable at once): a fast client may finish the whole handshake
         * within one step, and only the main loop can hand it over. */
        shoal_debug(BOOT, "connection from %s: handshake started",
                    shoal_sock_str(&peer, text));
    }
}

/* Hand over conns[i], whose handshake is complete, to the caller. */
static shoal_status_t shoal_acc_deliver(shoal_acceptor_t *acc, size_t i, void *hello,
                                        int *fd_p, uint8_t session[SHOAL_SECRET_BYTES])
{
    shoal_acc_conn_t *c = &acc->conns[i];
    int flags = fcntl(c->fd, F_GETFL);
    if (flags < 0 || fcntl(c->fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        shoal_error(BOOT, "fcntl: %s", strerror(errno));
        shoal_acc_drop(acc, i);
        return SHOAL_ERR_SYSTEM;
    }
    int one = 1;
    if (setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        shoal_debug(BOOT, "TCP_NODELAY: %s", strerror(errno));
    memcpy(hello, c->hello, acc->hello_len);
    if (session)
        memcpy(session, c->session, SHOAL_SECRET_BYTES);
    OPENSSL_cleanse(c->session, sizeof(c->session));
    *fd_p = c->fd;
    free(c->hello);
    shoal_acc_remove(acc, i);
    return SHOAL_OK;
}

shoal_status_t shoal_acceptor_next(shoal_acceptor_t *acc, uint64_t deadline_ns,
                                   void *hello, int *fd_p)
{
    return shoal_acceptor_next_session(acc, deadline_ns, hello, fd_p, NULL);
}

shoal_status_t shoal_acceptor_next_session(shoal_acceptor_t *acc, uint64_t deadline_ns,
                                           void *hello, int *fd_p,
                                           uint8_t session[SHOAL_SECRET_BYTES])
{
    for (;;) {
        /* Step every handshake whose socket has news; the first to finish is
         * returned, the rest stay pending for the next call. */
        struct pollfd *pfds = acc->pfds;
        uint64_t now = shoal_now_ns();
        int timeout_ms = shoal_cancel_ms_left(deadline_ns);
        /* Without room, the listener is left out of poll (a negative fd is
         * ignored) until the oldest handshake's grace period ends. */
        int room = shoal_acc_has_room(acc, now);
        if (!room) {
            uint64_t wake = acc->conns[0].start_ns + SHOAL_ACCEPTOR_GRACE_NS;
            int wake_ms = (int)((wake - now + 999999) / 1000000);
            if (wake_ms < timeout_ms)
                timeout_ms = wake_ms;
        }
        pfds[0] = (struct pollfd){.fd = room ? acc->listen_fd : -1, .events = POLLIN};
        for (size_t i = 0; i < acc->nconns; i++) {
            shoal_acc_conn_t *c = &acc->conns[i];
            int sending = c->state == SHOAL_ACC_SEND_CHALLENGE ||
                          c->state == SHOAL_ACC_SEND_VERDICT;
            pfds[i + 1] = (struct pollfd){.fd = c->fd, .events = sending ? POLLOUT : POLLIN};
        }
        size_t npfds = acc->nconns + 1;
        int n = poll(pfds, npfds, timeout_ms);
        if (n < 0 && errno != EINTR) {
            shoal_error(BOOT, "poll: %s", strerror(errno));
            return SHOAL_ERR_SYSTEM;
        }
        if (n <= 0) {
            if (shoal_cancelled())
                return SHOAL_ERR_ABORTED;
            if (shoal_deadline_passed(deadline_ns))
                return SHOAL_ERR_TIMEOUT;
            continue;
        }
        /* Walk backwards so that dropping an entry keeps earlier indices. */
        for (size_t i = npfds - 1; i >= 1; i--) {
            if (!pfds[i].revents)
                continue;
            shoal_acc_step_t r = shoal_acc_step(acc, &acc->conns[i - 1]);
            if (r == SHOAL_ACC_STEP_DROP)
                shoal_acc_drop(acc, i - 1);
            else if (r == SHOAL_ACC_STEP_DONE)
                return shoal_acc_deliver(acc, i - 1, hello, fd_p, session);
        }
        if (pfds[0].revents) {
            shoal_status_t s = shoal_acc_accept(acc);
            if (s != SHOAL_OK)
                return s;
        }
    }
}

size_t shoal_acceptor_pending(const shoal_acceptor_t *acc)
{
    return acc->nconns;
}

void shoal_acceptor_expire(shoal_acceptor_t *acc, uint64_t max_age_ns)
{
    char text[SHOAL_SOCKADDR_STRLEN];
    uint64_t now = shoal_now_ns();
    /* Oldest first: stop at the first young one. */
    while (acc->nconns > 0 && now - acc->conns[0].start_ns >= max_age_ns) {
        shoal_warn(BOOT, "connection from %s did not finish its handshake within %.1f s; "
                   "dropped", shoal_sock_str(&acc->conns[0].peer, text),
                   (double)max_age_ns * 1e-9);
        shoal_acc_drop(acc, 0);
    }
}

void shoal_acceptor_destroy(shoal_acceptor_t *acc)
{
    if (!acc)
        return;
    for (size_t i = 0; i < acc->nconns; i++)
        shoal_acc_conn_close(&acc->conns[i]);
    free(acc);
}
