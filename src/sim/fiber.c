/* Fibers on ucontext, with the switch annotations the address and thread
 * sanitizers need to follow a stack change.
 *
 * A fiber is entered through its ucontext once, the first time it runs;
 * every switch after that, either way, is a sigsetjmp/siglongjmp that
 * leaves the signal mask alone. swapcontext saves and sets the mask with
 * a system call on every switch, which on a virtual machine took most of
 * a simulated 1024-rank ring's time. A fiber's function runs in a loop
 * inside its first entry, so a fiber started again runs the new function
 * on the same entry. glibc's checked longjmp (_FORTIFY_SOURCE) refuses a
 * jump to a stack below the current one, which is what a switch to a
 * fiber is: the check is off in this file. Under the address sanitizer,
 * whose longjmp makes a system call of its own to unpoison the stacks,
 * every switch stays a swapcontext. */
#ifdef _FORTIFY_SOURCE
#undef _FORTIFY_SOURCE
#endif
#include "fiber.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FIBER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define FIBER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define FIBER_TSAN 1
#endif
#ifdef FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

typedef struct {
    ucontext_t ctx;       /* the first entry (every switch under ASan) */
    sigjmp_buf env;       /* where the fiber goes on when resumed */
    int entered;          /* its first entry was made: env is where it waits */
    char *stack;          /* the mapping, guard page first */
    void (*fn)(void *);
    void *arg;
    int done;
    void *tsan;           /* the thread sanitizer's fiber */
} fiber_t;

struct shoal_fibers {
    int n;
    int cur;              /* the running fiber; -1 in the scheduler */
    size_t stack_bytes;   /* usable, after the guard page */
    size_t page;
    ucontext_t sched;     /* swapcontext's save (under ASan the one used) */
    sigjmp_buf sched_env; /* where the scheduler goes on when a fiber yields */
    const void *sched_bottom; /* the scheduler's stack, for the address sanitizer */
    size_t sched_size;
    void *sched_tsan;
    fiber_t fib[];
};

/* Before leaving the running context for one on [bottom, +size); save is
 * NULL when the context being left never runs again. */
static void switch_begin(void **save, const void *bottom, size_t size, void *tsan_to)
{
#ifdef FIBER_ASAN
    __sanitizer_start_switch_fiber(save, bottom, size);
#else
    (void)save, (void)bottom, (void)size;
#endif
#ifdef FIBER_TSAN
    __tsan_switch_to_fiber(tsan_to, 0);
#else
    (void)tsan_to;
#endif
}

/* Back in a context: where the one that switched here had its stack. */
static void switch_end(void *save, const void **bottom_p, size_t *size_p)
{
#ifdef FIBER_ASAN
    __sanitizer_finish_switch_fiber(save, bottom_p, size_p);
#else
    (void)save, (void)bottom_p, (void)size_p;
#endif
}

/* From the scheduler into fiber fb, until it yields or its function
 * returns. */
static void to_fiber(shoal_fibers_t *f, fiber_t *fb)
{
#ifdef FIBER_ASAN
    fb->entered = 1;
    swapcontext(&f->sched, &fb->ctx);
#else
    if (sigsetjmp(f->sched_env, 0))
        return;
    if (fb->entered)
        siglongjmp(fb->env, 1);
    fb->entered = 1;
    swapcontext(&f->sched, &fb->ctx);
    abort(); /* the fiber comes back by sched_env */
#endif
}

/* From fiber fb back to the scheduler, until resumed. */
static void to_sched(shoal_fibers_t *f, fiber_t *fb)
{
#ifdef FIBER_ASAN
    swapcontext(&fb->ctx, &f->sched);
#else
    if (!sigsetjmp(fb->env, 0))
        siglongjmp(f->sched_env, 1);
#endif
}

static void fiber_leave(shoal_fibers_t *f, fiber_t *fb)
{
    void *save = NULL;
    switch_begin(&save, f->sched_bottom, f->sched_size, f->sched_tsan);
    to_sched(f, fb);
    switch_end(save, &f->sched_bottom, &f->sched_size);
}

/* makecontext passes ints: the set's address in two halves. A fiber's
 * function runs here, again each time the fiber is started anew. */
static void fiber_main(unsigned lo, unsigned hi)
{
    shoal_fibers_t *f = (shoal_fibers_t *)(((uintptr_t)hi << 32) | lo);
    fiber_t *fb = &f->fib[f->cur];
    switch_end(NULL, &f->sched_bottom, &f->sched_size);
    for (;;) {
        fb->fn(fb->arg);
        fb->done = 1;
        fiber_leave(f, fb);
        if (fb->done)
            abort(); /* a finished fiber is started again, never resumed */
    }
}

shoal_fibers_t *shoal_fibers_create(int n, size_t stack_bytes)
{
    shoal_fibers_t *f = calloc(1, sizeof(*f) + (size_t)n * sizeof(fiber_t));
    if (!f)
        return NULL;
    f->n = n;
    f->cur = -1;
    f->page = (size_t)sysconf(_SC_PAGESIZE);
    f->stack_bytes = (stack_bytes + f->page - 1) / f->page * f->page;
#ifdef FIBER_TSAN
    f->sched_tsan = __tsan_get_current_fiber();
#endif
    for (int i = 0; i < n; i++) {
        fiber_t *fb = &f->fib[i];
        fb->done = 1;
        void *m = mmap(NULL, f->stack_bytes + f->page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (m == MAP_FAILED) {
            shoal_fibers_destroy(f);
            return NULL;
        }
        fb->stack = m;
        mprotect(m, f->page, PROT_NONE); /* an overflow faults, not corrupts */
#ifdef FIBER_TSAN
        fb->tsan = __tsan_create_fiber(0);
#endif
    }
    return f;
}

void shoal_fibers_destroy(shoal_fibers_t *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n; i++) {
        if (f->fib[i].stack)
            munmap(f->fib[i].stack, f->stack_bytes + f->page);
#ifdef FIBER_TSAN
        if (f->fib[i].tsan)
            __tsan_destroy_fiber(f->fib[i].tsan);
#endif
    }
    free(f);
}

void shoal_fiber_start(shoal_fibers_t *f, int i, void (*fn)(void *), void *arg)
{
    fiber_t *fb = &f->fib[i];
    fb->fn = fn;
    fb->arg = arg;
    fb->done = 0;
    if (fb->entered)
        return; /* its loop runs fn when resumed */
    getcontext(&fb->ctx);
    fb->ctx.uc_stack.ss_sp = fb->stack + f->page;
    fb->ctx.uc_stack.ss_size = f->stack_bytes;
    fb->ctx.uc_link = NULL;
    uintptr_t self = (uintptr_t)f;
    makecontext(&fb->ctx, (void (*)(void))fiber_main, 2, (unsigned)(self & 0xffffffffu),
                (unsigned)(self >> 32));
}

int shoal_fiber_resume(shoal_fibers_t *f, int i)
{
    fiber_t *fb = &f->fib[i];
    void *save = NULL;
    f->cur = i;
    switch_begin(&save, fb->stack + f->page, f->stack_bytes, fb->tsan);
    to_fiber(f, fb);
    switch_end(save, NULL, NULL);
    f->cur = -1;
    return fb->done;
}

void shoal_fiber_yield(shoal_fibers_t *f)
{
    fiber_leave(f, &f->fib[f->cur]);
}
