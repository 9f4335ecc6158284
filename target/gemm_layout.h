/* Where an element of a packed GEMM weight sits (gemm_cuda.cu's packing; read also by the
 * embedding kernel and the dummy-weight fill): one header, so every reader agrees with the packer.
 * Plain C as well (tests/test_target.c checks the layout's promises on the CPU). */
#ifndef FLINT_TARGET_GEMM_LAYOUT_H
#define FLINT_TARGET_GEMM_LAYOUT_H

#ifdef __CUDACC__
#define FLINT_GEMM_LAYOUT_FN static __host__ __device__ __forceinline__
#else
#define FLINT_GEMM_LAYOUT_FN static inline
#endif

/* The packed GEMM weight layout inside one 1 KB tile (16 rows x one k32 block; gemm_cuda.cu):
 * element (row rr, k kk) at index (rr / 8) 256 + h 128 + c 64 + (rr % 8) 8 + 2 t + e, with
 * kk = 8 t + 4 h + 2 c + e (t = 0..3; h, c, e = 0, 1). So for MMA h of the block (the k slots the
 * register path gives it) and row half rr / 8, core matrix c is 8 rows x 16 contiguous bytes (the
 * operand layout of wgmma's shared-memory form), and lane (g, t) of an mma.sync finds each of its
 * A words at one 4-byte place, the warp's 32 lanes reading 128 contiguous bytes. */
FLINT_GEMM_LAYOUT_FN int gemm_tile_elem(int rr, int kk) {
    return (rr >> 3) * 256 + ((kk >> 2) & 1) * 128 + ((kk >> 1) & 1) * 64 + (rr & 7) * 8 + (kk >> 3) * 2 + (kk & 1);
}
/* the inverse: index p (0..511) of a tile holds row *rr, k *kk */
FLINT_GEMM_LAYOUT_FN void gemm_tile_rk(int p, int *rr, int *kk) {
    *rr = 8 * (p >> 8) + ((p >> 3) & 7);
    *kk = 8 * ((p >> 1) & 3) + 4 * ((p >> 7) & 1) + 2 * ((p >> 6) & 1) + (p & 1);
}

#endif
