# core/ and sampler/ unit tests
flint_add_test(test_sampler SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_sampler.c LIBS flint_sampler LABELS cpu)
flint_add_test(test_chat SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_chat.c LIBS flint_core LABELS cpu)
flint_add_test(test_core SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_core.c LIBS flint_core LABELS cpu)
flint_add_test(test_accept SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_accept.c LIBS flint_sampler LABELS cpu)
