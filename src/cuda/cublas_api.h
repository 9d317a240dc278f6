/* cuBLAS as the module reaches it: libcublas.so.13 (or the library open
 * named) loaded with dlopen the first time gemm needs it, and its
 * functions looked up into a table, so that the module links against
 * nothing of cuBLAS's, loads where cuBLAS is not installed, and pays for
 * loading it only in a process that multiplies matrices. This file and
 * cublas_api.c are the only place that names the cuBLAS library.
 *
 * As in cu_api.h, the members are named as cublas_v2.h spells the
 * functions (cublasSgemm is the member cublasSgemm_v2), so code calls
 * them by their plain names and reaches the function whose prototype the
 * header declares. */
#ifndef SHOAL_CUDA_CUBLAS_API_H
#define SHOAL_CUDA_CUBLAS_API_H

#include "shoal.h"

#include <cublas_v2.h>

/* Every cuBLAS function the module calls, and nothing else: the CPU
 * stand-in of cuBLAS (tests/cuda/standin_cublas.c) implements the same
 * list. */
#define SHOAL_CUBLAS_FUNCS(X)                                                          \
    X(cublasCreate)                                                                    \
    X(cublasDestroy)                                                                   \
    X(cublasSetStream)                                                                 \
    X(cublasSgemm)

#define SHOAL_CUBLAS_MEMBER_(fn) __typeof__(fn) *fn;
typedef struct {
    SHOAL_CUBLAS_FUNCS(SHOAL_CUBLAS_MEMBER_)
} shoal_cublas_t;
#undef SHOAL_CUBLAS_MEMBER_

/* Remember which library shoal_cublas_get loads (path: a path or file
 * name; NULL for libcublas.so.13). Loads nothing. module.c's open calls it
 * once, before any entry can run. */
void shoal_cublas_set_path(const char *path);

/* The table, loaded on the first call and kept for the life of the
 * process (the library is never unloaded). The first call decides: when
 * the library cannot be loaded or lacks a function, this call and every
 * later one fail with SHOAL_ERR_UNSUPPORTED and the cause (the library's
 * name and dlerror's words, or the missing function) in the calling
 * thread's message. Any thread. */
shoal_status_t shoal_cublas_get(const shoal_cublas_t **cb_p);

/* Record that fn (a cuBLAS function's plain name) returned s, as "fn:
 * <what s means> (<CUBLAS_STATUS_NAME>)", and return the status that
 * stands for it: SHOAL_ERR_NO_MEMORY, SHOAL_ERR_INVALID_ARG,
 * SHOAL_ERR_UNSUPPORTED or SHOAL_ERR_SYSTEM. */
shoal_status_t shoal_cublas_fail(const char *fn, cublasStatus_t s);

#endif
