/* Payload copies (copy.c). libc's memcpy is not always the fastest way to
 * copy payload between ranks. Where it copies with a string instruction
 * (rep movsb, from 2 KiB to 512 KiB on one AMD virtual machine), a copy
 * whose destination lay 1 to 31 bytes past its source, counted modulo
 * 4 KiB, ran at 2 GB/s, against 40 to 90 at other offsets and 20 to 50 for
 * plain vector loads and stores at any offset. A peer's slot starts on a
 * page and malloc's larger buffers 16 bytes past one, so copies out of the
 * slots into such a buffer all fell there. Nothing in the processor's
 * description says where the slow offsets are, or whether there are any,
 * so a copier learns it from the copies it makes: it takes the two kinds
 * in turn, times them, and keeps the faster, apart for the copies whose
 * destination lies 1 to 63 bytes past the source modulo 4 KiB ("near")
 * and for the others. */
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
 * (two clock reads and two fault counts cost well under a microsecond
 * beside them). It compares the kinds' median times per byte: after
 * SHOAL_COPY_LEARN_N copies of each, or after SHOAL_COPY_LEARN_EARLY of
 * each where one kind's median is more than SHOAL_COPY_LOPSIDED times the
 * other's (the slow offsets cost ten to twenty times as much, and every
 * slow copy while learning costs the collective that makes it). The
 * vector copy is taken only where its median is below
 * 1 / SHOAL_COPY_MARGIN of libc's: a communicator's first copies are
 * noisy (lines still in the peer's cache, preemption), and libc's memcpy
 * is the one tuned to the machine. A copy that took page faults (memory
 * touched for the first time: the first copies out of a new buffer, into
 * new slots) is not counted at all, up to SHOAL_COPY_LEARN_N such
 * copies: it times the kernel, and the kind that copies first would pay
 * for it. */
#define SHOAL_COPY_LEARN_MIN (4u * 1024)
#define SHOAL_COPY_LEARN_N 32u
#define SHOAL_COPY_LEARN_EARLY 4u
#define SHOAL_COPY_LOPSIDED 4.0
#define SHOAL_COPY_MARGIN 1.5

/* Whether dst lies 1 to 63 bytes past src, modulo 4 KiB. */
static inline int shoal_copy_near(const void *dst, const void *src)
{
    uintptr_t d = ((uintptr_t)dst - (uintptr_t)src) & 4095u;
    return d - 1u < 63u;
}

/* What a copier learns about the copies of one offset ("near" or not). */
typedef struct {
    shoal_copy_kind_t kind; /* SHOAL_COPY_AUTO while it learns */
    uint32_t n[2];          /* copies timed: libc's, the vector's */
    float ns_per_kib[2][SHOAL_COPY_LEARN_N]; /* each copy's time per KiB */
    uint32_t faulted;       /* copies not counted for their page faults */
} shoal_copy_way_t;

/* One stream of copies of one kind (a team's copies into its slots, or
 * out of them), made by one thread at a time. */
typedef struct {
    const char *what; /* for the log: which copies, whose */
    int rank;
    shoal_copy_way_t way[2]; /* [1]: the near copies */
} shoal_copier_t;

/* kind: SHOAL_COPY_AUTO to learn, or the kind to keep; what and rank name
 * the copier in the log line of its choice. */
void shoal_copier_init(shoal_copier_t *c, shoal_copy_kind_t kind, const char *what, int rank);
/* Copies while learning (copy.c). */
void shoal_copier_learn(shoal_copier_t *c, shoal_copy_way_t *w, void *dst, const void *src,
                        size_t bytes);

static inline void shoal_copier_copy(shoal_copier_t *c, void *dst, const void *src,
                                     size_t bytes)
{
    shoal_copy_way_t *w = &c->way[shoal_copy_near(dst, src)];
    if (w->kind == SHOAL_COPY_AUTO && bytes >= SHOAL_COPY_LEARN_MIN)
        shoal_copier_learn(c, w, dst, src, bytes);
    else
        shoal_copy(w->kind, dst, src, bytes);
}

#endif
