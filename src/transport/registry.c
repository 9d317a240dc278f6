/* The transports, in order of preference: a peer is reached through the
 * first one of this list that both ends have open and that reaches it. */
#include "transport.h"

const shoal_transport_ops_t *const shoal_transports[SHOAL_NTRANSPORTS] = {
    &shoal_shm_ops,
    &shoal_ib_ops,
    &shoal_tcp_ops,
};
