flint_add_test(test_engine SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_engine.c LIBS flint_verifier LABELS cpu)
flint_add_test(test_spec_stories SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec_stories.c LIBS flint_verifier LABELS cpu)
