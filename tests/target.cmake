# Target model: config, weight loading, CPU forward with the paged KV cache (golden fixtures from
# tools/make_golden.py in tests/fixtures/golden), batch invariance, refused inputs.
flint_add_test(test_target SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_target.c LIBS flint_target LABELS cpu)
# Tensor parallelism simulated on the CPU: N = 1, 2, 4 ranks as threads, in-process collectives.
flint_add_test(test_tp_sim SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tp_sim.c LIBS flint_drafter flint_target Threads::Threads
               LABELS cpu)
# The CUDA target forward vs the CPU one, and the engine with its target on the GPU (label cuda:
# run on the GPU machine by tools/device/engine_tests.sh).
if(FLINT_HAVE_CUDA)
  flint_add_test(test_target_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_target_cuda.c LIBS flint_verifier
                 LABELS cuda ARGS ${CMAKE_SOURCE_DIR})
  set_target_properties(test_target_cuda PROPERTIES LINKER_LANGUAGE CUDA)
endif()
# Tensor parallelism through NCCL on GPUs (one GPU: the one-rank path; two: N = 2 vs N = 1).
if(FLINT_HAVE_CUDA)
  flint_add_test(test_tp_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tp_cuda.c LIBS flint_verifier
                 LABELS cuda ARGS ${CMAKE_SOURCE_DIR})
  set_target_properties(test_tp_cuda PROPERTIES LINKER_LANGUAGE CUDA)
endif()
