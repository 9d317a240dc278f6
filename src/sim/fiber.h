/* Fibers for the simulator: many ranks' blocking schedules in one thread,
 * each on a stack of its own, switched cooperatively (ucontext). One
 * scheduler context resumes a fiber; the fiber runs until it yields or its
 * function returns. Not thread-safe: one thread drives a fiber set. */
#ifndef SHOAL_FIBER_H
#define SHOAL_FIBER_H

#include <stddef.h>

typedef struct shoal_fibers shoal_fibers_t;

/* n fibers with stacks of stack_bytes each (reserved, touched only as
 * used). NULL when memory runs out. */
shoal_fibers_t *shoal_fibers_create(int n, size_t stack_bytes);
void shoal_fibers_destroy(shoal_fibers_t *f);

/* Make fiber i run fn(arg) from the start when next resumed. Only for a
 * fiber that has not started or whose function has returned. */
void shoal_fiber_start(shoal_fibers_t *f, int i, void (*fn)(void *), void *arg);

/* Run fiber i until it yields or returns; 1 when its function returned. */
int shoal_fiber_resume(shoal_fibers_t *f, int i);

/* From inside a fiber: back to the scheduler, until resumed again. */
void shoal_fiber_yield(shoal_fibers_t *f);

#endif
