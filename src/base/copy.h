/* Payload copies (copy.c). libc's memcpy is not always the fastest way to
 * copy payload between ranks: where it copies with a string instruction
 * (rep movsb), a copy out of lines that another core has just written (a
 * peer's slot) ran six to nine times slower than plain vector loads and
 * stores on one virtual machine, and as fast on others. Nothing in the processor's
 * description says which, and a separate probe did not show it (its copies
 * ran alike), so a copier learns it from the copies it makes: it takes the
 * two kinds in turn, times them, and keeps the faster. */
#ifndef SHOAL_COPY_H
#define SHOAL_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    SHOAL_COPY_AUTO = 0, /* learn (shoal_copier_t) */
    SHOAL_COPY_LIBC,     /* memcpy */
    SHOAL_COPY_VECTOR,   /* shoal_copy_vector */
    SHOAL_COPY_NKINDS
} shoal_copy_kind_t;

/* Plain vector loads and stores, 64 bytes a step. */
void shoal_copy_vector(void *dst, const void *src, size_t bytes);
/* memcpy with streaming stores, for destinations not read again soon. */
void shoal_copy_stream(void *dst, const void *src, size_t bytes);
/* "auto", "libc", "vector". */
const char *shoal_copy_name(shoal_copy_kind_t kind);

static inline void shoal_copy(shoal_copy_kind_t kind, void *dst, const void *src, size_t bytes)
{
    if (kind == SHOAL_COPY_VECTOR)
        shoal_copy_vector(dst, src, bytes);
    else if (bytes)
        memcpy(dst, src, bytes);
}

/* Copies of at least SHOAL_COPY_LEARN_MIN bytes teach a learning copier
 * (a clock read costs little beside them); it decides after
 * SHOAL_COPY_LEARN_N of each kind, on the time per byte. */
#define SHOAL_COPY_LEARN_MIN (16u * 1024)
#define SHOAL_COPY_LEARN_N 32u

/* One stream of copies of one kind (a team's copies into its slots, or
 * out of them), made by one thread at a time. */
typedef struct {
    shoal_copy_kind_t kind; /* SHOAL_COPY_AUTO while it learns */
    const char *what;       /* for the log: which copies, whose */
    int rank;
    uint32_t n[2];          /* copies timed: libc's, the vector's */
    uint64_t ns[2];
    uint64_t bytes[2];
} shoal_copier_t;

/* kind: SHOAL_COPY_AUTO to learn, or the kind to keep; what and rank name
 * the copier in the log line of its choice. */
void shoal_copier_init(shoal_copier_t *c, shoal_copy_kind_t kind, const char *what, int rank);
/* Copies while learning (copy.c). */
void shoal_copier_learn(shoal_copier_t *c, void *dst, const void *src, size_t bytes);

static inline void shoal_copier_copy(shoal_copier_t *c, void *dst, const void *src,
                                     size_t bytes)
{
    if (c->kind == SHOAL_COPY_AUTO && bytes >= SHOAL_COPY_LEARN_MIN)
        shoal_copier_learn(c, dst, src, bytes);
    else
        shoal_copy(c->kind, dst, src, bytes);
}

#endif
