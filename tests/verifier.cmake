flint_add_test(test_engine SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_engine.c LIBS flint_verifier LABELS cpu)
