/* Flight recorder: each communicator keeps its last few operations, with
 * their state and, for the one running, the bytes moved with each peer
 * since it started. On a timeout or error every rank logs them (with
 * SHOAL_DEBUG_FILE=...%h.%p, one file per rank), so that comparing the
 * ranks' logs shows which rank stalled, in which operation, and which peer
 * it was still waiting for.
 *
 * A recorder holds a fixed number of records (its depth), all allocated at
 * create, and one spare. Queue, start and finish never allocate, never
 * wait and take no lock: each publishes what it changes in its record
 * under the record's sequence number, and format reads each record
 * consistently (start also reads two counters per peer). They are safe
 * together under this discipline, which the executor keeps (exec.c):
 * calls to queue never overlap each other (the executor queues under its
 * lock); one thread starts at a time (the one holding the executor's
 * token); a record's start and finish never overlap, and a finish on
 * another thread than the start's follows it through the executor's
 * lock. Nothing else needs ordering, as queue fills only a free or a
 * finished slot, never a live record's or the spare, and start and finish
 * write only their own live record (or the spare, start). Format and dump
 * may run at any time, from any thread. A NULL recorder (depth 0) is
 * valid everywhere and makes every call a no-op.
 *
 * When all records are taken, a new one replaces the oldest finished
 * record; if none has finished (as many queued operations as the depth),
 * the newest queued ones are left out, and an operation left out that
 * starts then takes the spare (without its call name and queued bytes),
 * displacing an earlier one there. The running operation and the ones
 * that finished last are what a stall is found with; the tail of a long
 * queue is not. */
#ifndef SHOAL_FLIGHT_H
#define SHOAL_FLIGHT_H

#include "shoal.h"
#include "sig.h"

#include <stddef.h>
#include <stdint.h>

struct shoal_comm;

typedef enum {
    SHOAL_FLIGHT_QUEUED,  /* issued, waiting for the executor */
    SHOAL_FLIGHT_RUNNING, /* the executor is running it */
    SHOAL_FLIGHT_DONE,    /* finished with SHOAL_OK */
    SHOAL_FLIGHT_FAILED,  /* finished with another status (also when never started) */
} shoal_flight_state_t;

typedef struct shoal_flight shoal_flight_t;

/* Peers listed, at most, for a running record. Each costs up to about 45
 * characters, and a record must fit in one log line (log.c writes at most
 * 1 KiB a line) with its host, pid and call prefix. */
#define SHOAL_FLIGHT_PEERS_MAX 16

/* A recorder of depth records for comm (0: no recorder, *f_p = NULL).
 * comm must have its rank and nranks set; its endpoints (comm->team.eps) are read
 * only by start, format and dump, and must stay valid whenever those run
 * (comm->team.eps may still be NULL then: no peer is listed). The recorder
 * belongs to the caller, who frees it with shoal_flight_destroy.
 * Returns SHOAL_OK; SHOAL_ERR_INVALID_ARG (NULL f_p, or depth > 0 with a
 * NULL comm or nranks < 1); SHOAL_ERR_NO_MEMORY (logged). *f_p is written
 * only on SHOAL_OK. */
shoal_status_t shoal_flight_create(struct shoal_comm *comm, size_t depth, shoal_flight_t **f_p);

/* Free f (NULL: nothing). No other call on f may run or follow. */
void shoal_flight_destroy(shoal_flight_t *f);

/* A new record in QUEUED state for a call named what (a static string, kept
 * by pointer; NULL prints as "?") that moves bytes from this rank. Returns
 * its number: 1, 2, ... in the order of the calls to queue on f, or 0 when
 * f is NULL. Calls to queue never overlap (see the top). */
uint64_t shoal_flight_queue(shoal_flight_t *f, const char *what, size_t bytes);

/* Record id starts running with algorithm algo (a static string; NULL: none
 * chosen, e.g. a group of sends and receives) on the signature sig (copied;
 * NULL: none). The record's bytes per peer count from now: every peer's
 * tx_bytes and rx_bytes are read here. At most one record of f runs at a
 * time; a start while another runs leaves the earlier one RUNNING without
 * its bytes per peer. id 0 is ignored. */
void shoal_flight_start(shoal_flight_t *f, uint64_t id, const char *algo, const shoal_sig_t *sig);

/* Record id ends: DONE for SHOAL_OK, FAILED (keeping status) otherwise,
 * whether it started or not (a queued operation failed by an abort). An id
 * whose record was replaced meanwhile, and id 0, are ignored. */
void shoal_flight_finish(shoal_flight_t *f, uint64_t id, shoal_status_t status);

/* The records, oldest first, one line each ending in '\n' (wrapped here):
 *   #11 shoal_allreduce of 400 B: allreduce #10 of 100 x float sum, ring,
 *       done in 0.4 ms, 5012.5 ms ago
 *   #12 shoal_allreduce of 400 B: allreduce #11 of 100 x float sum, ring,
 *       running for 5003.2 ms; to r1 4.0 MiB, from r1 2.0 MiB; to r3 0 B, from r3 0 B
 *   #13 shoal_allreduce of 400 B: queued for 5003.0 ms
 * The call and its bytes come from queue ("#12 ?:" for a record left out
 * while queued), the signature and algorithm from start. A running record
 * lists every peer with an endpoint, in rank order, with the bytes sent to
 * it and received from it since it started; past SHOAL_FLIGHT_PEERS_MAX
 * peers it lists the suspects first (nothing received: those sent to, then
 * those idle both ways), keeps a quarter of the places for peers that sent
 * something, and ends with "... and N more". A finished record says how
 * long it ran and how long ago it ended; a failed one also its status.
 * buf gets the first cap - 1 characters of the text and a NUL (nothing when
 * cap is 0; buf may then be NULL). Returns the length of the whole text, as
 * snprintf does: a result >= cap means it was cut. 0 for a NULL f. */
size_t shoal_flight_format(shoal_flight_t *f, char *buf, size_t cap);

/* Log the records at error level (subsystem INIT): the line
 * "rank R flight recorder (reason): last K of N operations", then one line
 * per record as format writes it, prefixed with "rank R ". K is the number
 * of records kept, N the number queued since create. Nothing when f is
 * NULL or error logging of INIT is off. */
void shoal_flight_dump(shoal_flight_t *f, const char *reason);

#endif
