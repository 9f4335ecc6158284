# Tokenizer tests: HF `tokenizers` reference ids (tests/fixtures/tokenizer, made by
# tools/make_tokenizer_fixture.py) for Qwen3 (shared/), GPT-2 (converted here at build time from
# shared/tokenizers/gpt2 by tools/gpt2_to_tokenizer_json.py) and llama2.c SentencePiece variants.
set(FLINT_GPT2_TOKENIZER_JSON ${CMAKE_CURRENT_BINARY_DIR}/gpt2_tokenizer.json)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_custom_command(
    OUTPUT ${FLINT_GPT2_TOKENIZER_JSON}
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tools/gpt2_to_tokenizer_json.py
            ${FLINT_SHARED_DIR}/tokenizers/gpt2/encoder.json ${FLINT_SHARED_DIR}/tokenizers/gpt2/vocab.bpe
            ${FLINT_GPT2_TOKENIZER_JSON}
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/gpt2_to_tokenizer_json.py
    COMMENT "GPT-2 tokenizer.json from shared/tokenizers/gpt2"
    VERBATIM)
  add_custom_target(tokenizer_gpt2_json DEPENDS ${FLINT_GPT2_TOKENIZER_JSON})
else()
  message(WARNING "flint: no python3, test_tokenizer will fail for want of the GPT-2 tokenizer.json")
endif()

flint_add_test(test_tokenizer SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer.c LIBS flint_core Threads::Threads
               LABELS cpu)
target_compile_definitions(test_tokenizer PRIVATE FLINT_GPT2_TOKENIZER_JSON="${FLINT_GPT2_TOKENIZER_JSON}")
if(TARGET tokenizer_gpt2_json)
  add_dependencies(test_tokenizer tokenizer_gpt2_json)
endif()
