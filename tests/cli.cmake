# End-to-end tests of the flint binary (stories260K golden, bad input and exit statuses).
add_test(NAME test_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.sh $<TARGET_FILE:flint> ${CMAKE_SOURCE_DIR})
set_tests_properties(test_cli PROPERTIES LABELS cpu TIMEOUT 600)
