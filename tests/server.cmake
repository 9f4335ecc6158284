# server/ tests (label "server"; all also "cpu"):
#   test_server_unit      the request parser, key comparison, JSON/SSE shapes, the chat output
#                         parsers as the server drives them (C, no socket)
#   test_server_<group>   the HTTP API end to end against a live `flint serve` on a converted
#                         stories260K with a random DSpark drafter (tests/test_server.py GROUP):
#                         api (openai SDK, curl), stream (equivalence), robust (4xx/429), notready,
#                         auth, timeouts, disconnect, shutdown; default and multiturn serve the
#                         embedded pair (models/flint-tiny + flint-tiny-dspark)
#   test_server_load      256 streaming clients for 60 s with `flint load` (label "slow" too)
# The fuzz target for the request parser is built and run by tests/fuzz/run.sh (clang, libFuzzer).
if(NOT TARGET flint_server)
  return()
endif()

flint_add_test(test_server_unit SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_server_unit.c LIBS flint_server
               LABELS "cpu;server")

foreach(group default multiturn api stream robust notready auth timeouts disconnect shutdown)
  add_test(NAME test_server_${group}
           COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_server.py $<TARGET_FILE:flint> ${CMAKE_SOURCE_DIR} ${group})
  set_tests_properties(test_server_${group} PROPERTIES LABELS "cpu;server" TIMEOUT 600)
endforeach()
# multiturn prefills 2,000-token prompts: a minute normally, three under ASan, which adds nothing
# there that the other groups do not cover (the ASan run skips slow)
set_tests_properties(test_server_multiturn PROPERTIES LABELS "cpu;server;slow")

add_test(NAME test_server_load
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_server.py $<TARGET_FILE:flint> ${CMAKE_SOURCE_DIR} load)
set_tests_properties(test_server_load PROPERTIES LABELS "cpu;server;slow" TIMEOUT 900)
