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
# Lab: the CUDA forward at real sizes with random weights (tools/lab/bench_target.c).
if(FLINT_HAVE_CUDA)
  add_executable(bench_target ${CMAKE_SOURCE_DIR}/tools/lab/bench_target.c)
  target_link_libraries(bench_target PRIVATE flint_target flint_core)
  target_include_directories(bench_target PRIVATE ${CMAKE_SOURCE_DIR})
  set_target_properties(bench_target PROPERTIES LINKER_LANGUAGE CUDA)
endif()
