# The output parsers are built into the test directly, so the test does not depend on the rest
# of the server module.
flint_add_test(test_parsers SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_parsers.c ${CMAKE_SOURCE_DIR}/server/parsers.c
               LIBS flint_core LABELS cpu)
