/* CUDA side of the device-buffer abstraction (see buffer.h). The only place that turns CUDA
 * errors on buffers into flint_err values. */
#include <cuda_runtime.h>

#include "buffer.h"

extern "C" int flint_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int flint_cuda_buf_alloc(flint_buf *b, size_t bytes, flint_err *err) {
    cudaError_t e = cudaSetDevice(b->device);
    if (e == cudaSuccess) e = cudaMalloc(&b->ptr, bytes ? bytes : 64);
    if (e == cudaSuccess) e = cudaMemset(b->ptr, 0, bytes);
    if (e != cudaSuccess) {
        b->ptr = NULL;
        return flint_err_set(err, FLINT_ERR_NOMEM, "cudaMalloc of %zu bytes on device %d: %s", bytes,
                             b->device, cudaGetErrorString(e));
    }
    return 0;
}

extern "C" void flint_cuda_buf_free(flint_buf *b) { cudaFree(b->ptr); }

extern "C" int flint_cuda_memcpy(void *dst, int dst_dev, const void *src, int src_dev, size_t n,
                                 flint_err *err) {
    cudaMemcpyKind kind = dst_dev ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                  : cudaMemcpyDeviceToHost;
    cudaError_t e = cudaMemcpy(dst, src, n, kind);
    if (e != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_INTERNAL, "cudaMemcpy of %zu bytes: %s", n, cudaGetErrorString(e));
    return 0;
}
