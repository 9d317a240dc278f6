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

/* Close pending connections and free acc (not the listening socket). */
void shoal_acceptor_destroy(shoal_acceptor_t *acc);

#endif
