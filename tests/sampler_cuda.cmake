# The GPU sampler (sampler/sampler_cuda.h) against the CPU reference (sampler.c, accept.c): Philox,
# the exponential, sampling, drafting, acceptance (with a chi-square), batch invariance, guards; a
# timing lab that --no-lab leaves out. Labelled cuda: built wherever nvcc is found, run on the GPU
# machine only.
if(FLINT_HAVE_CUDA)
  flint_add_test(test_sampler_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_sampler_cuda.c LIBS flint_sampler
                 LABELS cuda ARGS --no-lab)
  set_target_properties(test_sampler_cuda PROPERTIES LINKER_LANGUAGE CUDA)
endif()
