flint_add_test(test_drafter SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_drafter.c LIBS flint_drafter LABELS cpu)
