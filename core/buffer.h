/* Device-buffer abstraction: memory that lives on the CPU or on a CUDA device, with explicit
 * copies between them. Modules above core/ hold flint_buf values rather than raw cudaMalloc
 * pointers, so the CPU build and the CUDA build share the same model and KV bookkeeping. */
#ifndef FLINT_CORE_BUFFER_H
#define FLINT_CORE_BUFFER_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FLINT_DEV_CPU = 0, FLINT_DEV_CUDA = 1 } flint_device_kind;

typedef struct flint_buf {
    void *ptr;
    size_t bytes;
    flint_device_kind kind;
    int device; /* CUDA ordinal; 0 for CPU */
} flint_buf;

/* 1 when this build has CUDA and a device is present at run time. */
int flint_cuda_available(void);

/* Allocate zeroed memory. Returns -1 with FLINT_ERR_NOMEM or FLINT_ERR_UNSUPPORTED (CUDA asked
 * for in a CPU-only build). */
int flint_buf_alloc(flint_buf *b, flint_device_kind kind, int device, size_t bytes, flint_err *err);
void flint_buf_free(flint_buf *b);
/* Copies of n bytes between any two buffers, at byte offsets. Synchronous. */
int flint_buf_copy(flint_buf *dst, size_t dst_off, const flint_buf *src, size_t src_off, size_t n,
                   flint_err *err);
int flint_buf_upload(flint_buf *dst, size_t dst_off, const void *host, size_t n, flint_err *err);
int flint_buf_download(void *host, const flint_buf *src, size_t src_off, size_t n, flint_err *err);

#ifdef __cplusplus
}
#endif
#endif
