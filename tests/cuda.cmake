# CUDA kernels (target/ops_cuda.h) against their C references, batch invariance, and the GEMM /
# attention timing lab. Labelled cuda: built wherever nvcc is found (CI compiles it), run only on
# the GPU machine, where tools/device/cuda_tests.sh builds it through tests/kernels/CMakeLists.txt
# (a standalone project that needs none of flint_core's libraries).
if(FLINT_HAVE_CUDA)
  flint_add_test(test_cuda_ops SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/kernels/test_cuda_ops.c
                 ${CMAKE_CURRENT_SOURCE_DIR}/kernels/lab_cuda_ops.c
                 ${CMAKE_CURRENT_SOURCE_DIR}/kernels/cuda_test_util.c LIBS flint_target
                 LABELS cuda ARGS --no-lab)
  set_target_properties(test_cuda_ops PROPERTIES LINKER_LANGUAGE CUDA)
endif()
# The wgmma bit-equality lab (standalone, sm_90a only): built so that it keeps compiling; run by
# hand on the GPU machine (.devbin/lab_wgmma), not a test.
if(FLINT_HAVE_CUDA AND "90a" IN_LIST CMAKE_CUDA_ARCHITECTURES)
  add_executable(lab_wgmma ${CMAKE_CURRENT_SOURCE_DIR}/kernels/lab_wgmma.cu)
endif()
