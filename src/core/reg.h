/* Memory registrations of a communicator (shoal_comm_register): ranges of
 * user memory the caller promises to pass to operations on it. Nothing is
 * pinned or mapped here; the record is there for transports that need
 * registered memory (RDMA keys, device IPC handles): such a transport looks
 * up the registration that covers an operation's buffer with
 * shoal_reg_find and keeps its own state for it. No transport uses it yet.
 *
 * The list is not locked: register and deregister must not run
 * concurrently with other calls on the communicator (shoal.h). */
#ifndef SHOAL_REG_H
#define SHOAL_REG_H

#include <stddef.h>

struct shoal_comm;

typedef struct shoal_reg {
    struct shoal_reg *next;   /* the communicator's list, newest first */
    void *buf;
    size_t size;
} shoal_reg_t;

/* The newest live registration of comm covering [ptr, ptr + len), or NULL
 * if none does; an empty range (len 0) is covered when ptr lies within
 * [buf, buf + size]. The result belongs to comm and lives until it is
 * deregistered or comm is freed. */
const shoal_reg_t *shoal_reg_find(const struct shoal_comm *comm, const void *ptr, size_t len);

/* Free every registration left on comm (destroy, abort, failed init). */
void shoal_reg_release_all(struct shoal_comm *comm);

#endif
