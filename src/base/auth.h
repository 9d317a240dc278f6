/* Mutual proof of a shared secret on a fresh connection: HMAC-SHA256 over
 * both sides' random nonces (OpenSSL libcrypto). The secret itself never
 * travels. Nothing read from a connection is trusted before this succeeds. */
#ifndef SHOAL_AUTH_H
#define SHOAL_AUTH_H

#include "shoal.h"

#include <stddef.h>
#include <stdint.h>

#define SHOAL_SECRET_BYTES 32

/* Fill buf with len cryptographically random bytes. */
shoal_status_t shoal_auth_random(void *buf, size_t len);

/* Client side: the connecting end. SHOAL_ERR_AUTH if the server's proof is
 * wrong. After success the caller sends its hello. */
shoal_status_t shoal_auth_client(int fd, const uint8_t secret[SHOAL_SECRET_BYTES],
                                 uint64_t deadline_ns);

/* The same, and on success a key of this connection alone (what the
 * bootstrap keys its message MACs with): HMAC(secret, "shoal-session" ||
 * nonce_s || nonce_c). Both ends compute it; it never travels, and the
 * fresh nonces make it differ for every connection. */
shoal_status_t shoal_auth_client_session(int fd, const uint8_t secret[SHOAL_SECRET_BYTES],
                                         uint64_t deadline_ns,
                                         uint8_t session[SHOAL_SECRET_BYTES]);

/* The client side as a state machine, for callers that must not block
 * while the server is busy (tcp's connections made on first use, where
 * two ranks may dial each other at once and each must keep serving its
 * own acceptor meanwhile). The struct is the caller's; its fields are
 * private to auth.c. */
#define SHOAL_AUTH_HELLO_MAX 64

typedef struct {
    int fd;
    int state;
    size_t off;
    size_t hello_len;
    uint8_t secret[SHOAL_SECRET_BYTES];
    uint8_t nonce_s[32];
    uint8_t nonce_c[32];
    uint8_t msg[72];
    uint8_t hello[SHOAL_AUTH_HELLO_MAX];
} shoal_auth_dial_t;

/* Begin on fd, a non-blocking socket whose connect() may still be in
 * progress (EINPROGRESS); hello (hello_len <= SHOAL_AUTH_HELLO_MAX bytes)
 * follows the proofs. fd stays the caller's. */
void shoal_auth_dial_start(shoal_auth_dial_t *d, int fd,
                           const uint8_t secret[SHOAL_SECRET_BYTES], const void *hello,
                           size_t hello_len);

/* Advance as far as the socket allows without waiting. SHOAL_INPROGRESS
 * while the server has yet to answer; SHOAL_OK once the hello is sent;
 * SHOAL_ERR_PEER when the connection was refused (errno ECONNREFUSED) or
 * closed (errno 0, or the error) (not logged: the caller knows whom it
 * dialed, and may dial again after a close); SHOAL_ERR_AUTH when either side
 * failed to prove the secret (logged). */
shoal_status_t shoal_auth_dial_step(shoal_auth_dial_t *d);

/* Forget the secret and nonces (the socket is not closed). */
void shoal_auth_dial_clear(shoal_auth_dial_t *d);

/* Accepts authenticated connections on a listening socket. Handshakes of
 * several pending connections advance together, so a stranger that sends
 * garbage or nothing cannot stall a real peer: garbage or a wrong proof
 * closes that connection (logged); silence only keeps it pending. */
typedef struct shoal_acceptor shoal_acceptor_t;

shoal_status_t shoal_acceptor_create(int listen_fd, const uint8_t secret[SHOAL_SECRET_BYTES],
                                     size_t hello_len, shoal_acceptor_t **acc_p);

/* Next connection that proved the secret and then sent hello_len bytes of
 * hello. *fd_p is a blocking socket owned by the caller. SHOAL_ERR_TIMEOUT
 * past deadline_ns; SHOAL_ERR_ABORTED once the calling thread's
 * cancellation scope is set (cancel.h). */
shoal_status_t shoal_acceptor_next(shoal_acceptor_t *acc, uint64_t deadline_ns,
                                   void *hello, int *fd_p);

/* The same, with the connection's session key (as the client's above). */
shoal_status_t shoal_acceptor_next_session(shoal_acceptor_t *acc, uint64_t deadline_ns,
                                           void *hello, int *fd_p,
                                           uint8_t session[SHOAL_SECRET_BYTES]);

/* Handshakes started and not yet delivered or dropped: while there are
 * some, a caller that polls the acceptor only when the listener is
 * readable must poll it anyway. */
size_t shoal_acceptor_pending(const shoal_acceptor_t *acc);

/* Drop (and log) the pending handshakes that started max_age_ns or more
 * ago: for a listener that stays open, so that a silent stranger holds
 * nothing for long. A real client dropped so reconnects. */
void shoal_acceptor_expire(shoal_acceptor_t *acc, uint64_t max_age_ns);

/* Close pending connections and free acc (not the listening socket). */
void shoal_acceptor_destroy(shoal_acceptor_t *acc);

#endif
