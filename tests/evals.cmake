# evals/: statistics against scipy values and the A/A calibration (C), the dataset loader (C),
# and the eval / ab / bench commands end to end on stories260K with random drafters (shell).
if(TARGET flint_evals)
  flint_add_test(test_evals_stats SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_evals_stats.c LIBS flint_evals LABELS cpu)
  flint_add_test(test_evals_dataset SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_evals_dataset.c LIBS flint_evals LABELS cpu)
  add_test(NAME test_evals_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_evals_cli.sh $<TARGET_FILE:flint>
           ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_evals_cli PROPERTIES LABELS cpu TIMEOUT 600)
  add_test(NAME test_evals_aa COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_evals_aa.sh $<TARGET_FILE:flint>
           ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_evals_aa PROPERTIES LABELS "cpu;slow" TIMEOUT 1200)
endif()
