/* One-sided communication (shoal.h: shoal_win_create, shoal_put_signal,
 * shoal_signal, shoal_wait_signal).
 *
 * A window is a registration every rank makes together: each tells the
 * others its part's size and, for every transport it has open, a remote key
 * to it (transport.h: rkey_pack). A put writes into the target's part
 * through the endpoint's put_signal where the endpoint can attach the
 * target's key (shm, ib), or else sends the bytes through the endpoint's
 * slots for the target to copy (tcp, or memory a transport cannot reach).
 * Either way the put ends with a message that counts one signal at the
 * target, behind its bytes in the FIFO; a signal alone is only that
 * message.
 *
 * These messages share the FIFOs with the operations' pieces but belong to
 * none: their header's kind is SHOAL_SIG_RMA, and every receive hands them
 * here (algos/team.h: shoal_team_recv_slot) whatever it waits for; a rank
 * that took part in one-sided traffic also takes them from every peer
 * while any of its waits is idle (shoal_team_rma_drain). So a put needs no
 * call of the target to land, only a free slot for its signal, which the
 * target frees whenever it is inside any call.
 *
 * A wait for signals counts the signals each peer's messages brought and
 * consumes the number asked for. Everything here runs on the
 * communicator's executor, in issue order with the other calls. */
#ifndef SHOAL_RMA_H
#define SHOAL_RMA_H

#include "algos/team.h"
#include "shoal.h"

struct shoal_comm;
struct shoal_call;

/* A one-sided call's kind (shoal_call_t.rma.kind); 0 for every other call. */
enum { SHOAL_RMA_PUT = 1, SHOAL_RMA_SIGNAL = 2, SHOAL_RMA_WAIT = 3 };

/* The per-communicator state: made at init, freed with the communicator
 * (with the windows left). */
shoal_status_t shoal_rma_create(struct shoal_comm *comm);
void shoal_rma_destroy(struct shoal_comm *comm);

/* The team hook (hooks->rma): a one-sided message from peer. */
shoal_status_t shoal_rma_message(shoal_team_t *team, int peer, const void *hdr, const void *buf,
                                 size_t len);

/* The executor's side of a one-sided call (call->run). */
shoal_status_t shoal_rma_run(struct shoal_comm *comm, const struct shoal_call *call);

#endif
