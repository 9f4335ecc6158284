# The CUDA drafter (drafter/forward_cuda.cu) against the CPU drafter and the PyTorch golden
# fixtures, batch invariance and a timing lab (label cuda: run on the GPU machine, from the
# repository root: build-h2/tests/test_drafter_cuda "$PWD" [--no-lab]).
if(FLINT_HAVE_CUDA)
  flint_add_test(test_drafter_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_drafter_cuda.c LIBS flint_verifier
                 LABELS cuda ARGS ${CMAKE_SOURCE_DIR})
  set_target_properties(test_drafter_cuda PROPERTIES LINKER_LANGUAGE CUDA)
endif()
