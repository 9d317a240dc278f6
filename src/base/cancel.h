/* Cancellation of a thread's socket waits. A thread that waits on behalf
 * of an object that another thread may abort (shoal_comm_split forming the
 * new communicator, while the parent may be aborted) opens a scope with
 * that object's abort flag; while it is open, the waits of sock.c and
 * auth.c sleep in slices of at most SHOAL_CANCEL_SLICE_MS and fail with
 * SHOAL_ERR_ABORTED soon after the flag is set, instead of at their
 * deadline. The flag is read, never written, and must stay readable while
 * the scope is open. Scopes nest (the innermost flag counts) and belong to
 * the thread that opened them. */
#ifndef SHOAL_CANCEL_H
#define SHOAL_CANCEL_H

#include <stdatomic.h>
#include <stdint.h>

/* How late a cancelled wait notices, at most (plus the time of a step). */
#define SHOAL_CANCEL_SLICE_MS 20

typedef struct {
    const atomic_int *prev; /* the enclosing scope's flag, restored by pop */
} shoal_cancel_scope_t;

/* Open a scope on this thread: its waits end once *flag is not 0. */
void shoal_cancel_push(const atomic_int *flag, shoal_cancel_scope_t *scope);
/* Close the innermost scope of this thread, the one scope opened. */
void shoal_cancel_pop(const shoal_cancel_scope_t *scope);

/* Whether this thread's innermost scope's flag is set (0 outside scopes). */
int shoal_cancelled(void);

/* Milliseconds for a poll() that waits until deadline_ns: what
 * shoal_deadline_ms_left says, cut to SHOAL_CANCEL_SLICE_MS inside a
 * scope, so that the caller looks at shoal_cancelled() again soon. */
int shoal_cancel_ms_left(uint64_t deadline_ns);

#endif
