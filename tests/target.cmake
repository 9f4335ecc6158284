# Target model: config, weight loading, CPU forward with the paged KV cache (golden fixtures from
# tools/make_golden.py in tests/fixtures/golden), batch invariance, refused inputs.
flint_add_test(test_target SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_target.c LIBS flint_target LABELS cpu)
