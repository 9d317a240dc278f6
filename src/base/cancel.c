/* Cancellation scopes (cancel.h). A thread-local pointer rather than an
 * argument of every socket call: the waits that must be cut short sit
 * several layers under the caller that knows the flag (split -> init ->
 * bootstrap and wireup -> sockets and authentication), and the same
 * functions serve callers that nothing may cancel. */
#include "cancel.h"

#include "clock.h"

#include <stddef.h>

static _Thread_local const atomic_int *cancel_flag;

void shoal_cancel_push(const atomic_int *flag, shoal_cancel_scope_t *scope)
{
    scope->prev = cancel_flag;
    cancel_flag = flag;
}

void shoal_cancel_pop(const shoal_cancel_scope_t *scope)
{
    cancel_flag = scope->prev;
}

int shoal_cancelled(void)
{
    const atomic_int *flag = cancel_flag;
    return flag && atomic_load_explicit(flag, memory_order_acquire) != 0;
}

int shoal_cancel_ms_left(uint64_t deadline_ns)
{
    int ms = shoal_deadline_ms_left(deadline_ns);
    return cancel_flag && ms > SHOAL_CANCEL_SLICE_MS ? SHOAL_CANCEL_SLICE_MS : ms;
}
