# core/safetensors and the llama2.c converter (target/convert_llama2c.c, cli/cmd_convert.c).
flint_add_test(test_safetensors SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_safetensors.c LIBS flint_core LABELS cpu)
flint_add_test(test_convert SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_convert.c LIBS flint_target flint_core
               LABELS cpu)
add_dependencies(test_convert flint) # it runs the binary to check exit statuses
