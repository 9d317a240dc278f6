/* The application's side of the CUDA tests: the driver calls a program
 * makes to hold device memory and streams, reached through dlopen of the
 * library shoal is told to use (SHOAL_CUDA_DRIVER: the CPU stand-in of
 * tests/cuda/ in make test, the real libcuda.so.1 in make test-gpu), so
 * one test binary runs on both. Every call aborts the rank with a message
 * on a driver error; the tests check shoal, not the driver. */
#ifndef SHOAL_TEST_CUDA_USER_H
#define SHOAL_TEST_CUDA_USER_H

#include <stddef.h>
#include <stdint.h>

/* For a test binary's main: 1 when the CUDA module and the driver the
 * tests use (SHOAL_CUDA_MODULE, SHOAL_CUDA_DRIVER) are there to test on.
 * Otherwise prints the TAP plan: a failure in CI (SHOAL_CI=1, which builds
 * both), a skip elsewhere; main then returns *rc_p. */
int cu_user_testable(int *rc_p);

/* Load and initialise the driver, make device dev's primary context
 * current on this thread. Returns 0, or -1 with why (no driver, no
 * device) when there is nothing to test on. */
int cu_user_open(int dev, char *why, size_t len);
/* Whether the driver is the stand-in (it counts kernel launches). */
int cu_user_is_standin(void);
/* Kernel launches of name so far, in this process (stand-in only; 0 else). */
unsigned long cu_user_launches(const char *name);
/* Products the cuBLAS stand-in (SHOAL_CUBLAS) ran in this process, once
 * the module loaded it; 0 otherwise. */
unsigned long cu_user_gemms(void);

void *cu_user_alloc(size_t bytes);          /* device memory */
void cu_user_free(void *p);
/* Device memory by the virtual memory API (cuMemCreate, cuMemMap),
 * exportable as a file descriptor, as ncclMemAlloc's. */
void *cu_user_alloc_vmm(size_t bytes);
void cu_user_free_vmm(void *p);
/* Allocations imported from a peer's descriptor in this process so far
 * (stand-in only; 0 else). */
unsigned long cu_user_vmm_imports(void);
void *cu_user_alloc_pinned(size_t bytes);   /* pinned host memory */
void cu_user_free_pinned(void *p);
void *cu_user_alloc_managed(size_t bytes);
void cu_user_htod(void *dst, const void *src, size_t bytes);   /* synchronous */
void cu_user_dtoh(void *dst, const void *src, size_t bytes);
void *cu_user_stream(void);                 /* a new stream */
void cu_user_stream_free(void *stream);
void cu_user_sync(void *stream);
/* 1 when everything queued on stream has run. */
int cu_user_idle(void *stream);
void cu_user_copy_async(void *dst, const void *src, size_t bytes, void *stream);
/* Hold stream's later work until *gate >= value (a pinned word the test
 * then writes). */
void cu_user_gate(void *stream, uint32_t *gate, uint32_t value);

#endif
