# Structured output: the grammar mask (sampler/grammar*.c) and flint_tokenizer_token_bytes.
# Needs shared/tokenizers/qwen3 and the GPT-2 tokenizer.json that tests/tokenizer.cmake converts.
flint_add_test(test_grammar SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_grammar.c LIBS flint_verifier flint_sampler flint_core LABELS cpu)
add_test(NAME test_grammar_engine COMMAND test_grammar engine)
set_tests_properties(test_grammar_engine PROPERTIES LABELS "cpu;slow" TIMEOUT 900)
target_compile_definitions(test_grammar PRIVATE
                           FLINT_GPT2_TOKENIZER_JSON="${CMAKE_CURRENT_BINARY_DIR}/gpt2_tokenizer.json")
# tokenizer.cmake (which makes that file) is included after this one: wire the dependency once
# every tests/*.cmake has run.
function(flint_grammar_test_deps)
  if(TARGET tokenizer_gpt2_json)
    add_dependencies(test_grammar tokenizer_gpt2_json)
  endif()
endfunction()
cmake_language(DEFER CALL flint_grammar_test_deps)
