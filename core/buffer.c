/* CPU side of the device-buffer abstraction. CUDA buffers go through core/buffer_cuda.cu when
 * the build has CUDA; without it they are refused with a clear error. */
#include "buffer.h"

#include <stdlib.h>
#include <string.h>

#ifdef FLINT_HAVE_CUDA
int flint_cuda_buf_alloc(flint_buf *b, size_t bytes, flint_err *err);
void flint_cuda_buf_free(flint_buf *b);
int flint_cuda_memcpy(void *dst, int dst_dev, const void *src, int src_dev, size_t n, flint_err *err);
int flint_cuda_device_count(void);
#endif

int flint_cuda_available(void) {
#ifdef FLINT_HAVE_CUDA
    return flint_cuda_device_count() > 0;
#else
    return 0;
#endif
}

int flint_buf_alloc(flint_buf *b, flint_device_kind kind, int device, size_t bytes, flint_err *err) {
    memset(b, 0, sizeof *b);
    b->kind = kind;
    b->device = device;
    b->bytes = bytes;
    if (kind == FLINT_DEV_CPU) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
            return flint_err_set(err, FLINT_ERR_NOMEM, "cannot allocate %zu bytes of host memory", bytes);
        memset(p, 0, bytes);
        b->ptr = p;
        return 0;
    }
#ifdef FLINT_HAVE_CUDA
    return flint_cuda_buf_alloc(b, bytes, err);
#else
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "this flint was built without CUDA");
#endif
}

void flint_buf_free(flint_buf *b) {
    if (!b->ptr) return;
    if (b->kind == FLINT_DEV_CPU) free(b->ptr);
#ifdef FLINT_HAVE_CUDA
    else flint_cuda_buf_free(b);
#endif
    memset(b, 0, sizeof *b);
}

static int copy_raw(void *dst, flint_device_kind dk, const void *src, flint_device_kind sk, size_t n,
                    flint_err *err) {
    if (dk == FLINT_DEV_CPU && sk == FLINT_DEV_CPU) {
        memmove(dst, src, n);
        return 0;
    }
#ifdef FLINT_HAVE_CUDA
    return flint_cuda_memcpy(dst, dk == FLINT_DEV_CUDA, src, sk == FLINT_DEV_CUDA, n, err);
#else
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "this flint was built without CUDA");
#endif
}

int flint_buf_copy(flint_buf *dst, size_t dst_off, const flint_buf *src, size_t src_off, size_t n,
                   flint_err *err) {
    if (dst_off > dst->bytes || n > dst->bytes - dst_off || src_off > src->bytes || n > src->bytes - src_off)
        return flint_err_set(err, FLINT_ERR_INVALID, "buffer copy of %zu bytes out of range", n);
    return copy_raw((char *)dst->ptr + dst_off, dst->kind, (const char *)src->ptr + src_off, src->kind, n, err);
}

int flint_buf_upload(flint_buf *dst, size_t dst_off, const void *host, size_t n, flint_err *err) {
    if (dst_off > dst->bytes || n > dst->bytes - dst_off)
        return flint_err_set(err, FLINT_ERR_INVALID, "buffer upload of %zu bytes out of range", n);
    return copy_raw((char *)dst->ptr + dst_off, dst->kind, host, FLINT_DEV_CPU, n, err);
}

int flint_buf_download(void *host, const flint_buf *src, size_t src_off, size_t n, flint_err *err) {
    if (src_off > src->bytes || n > src->bytes - src_off)
        return flint_err_set(err, FLINT_ERR_INVALID, "buffer download of %zu bytes out of range", n);
    return copy_raw(host, FLINT_DEV_CPU, (const char *)src->ptr + src_off, src->kind, n, err);
}
