flint_add_test(test_engine SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_engine.c LIBS flint_verifier LABELS cpu)
flint_add_test(test_spec_stories SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec_stories.c LIBS flint_verifier LABELS cpu)
# The embedded pair (models/flint-tiny + flint-tiny-dspark), issue #4: one executable, its parts
# registered as separate tests so that ctest -j2 runs them side by side (pinned: seeded requests under
# dynamic draft lengths; probe: a few requests draft while drafting does not pay; deep: a few draft K
# while the steps draft fewer; prune: confidence
# pruning only where verify rows cost). test_spec_embedded
# is the greedy part (about 230 s on one thread), the others are named by their part.
flint_add_test(test_spec_embedded SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_spec_embedded.c LIBS flint_verifier
               LABELS "cpu;slow" ARGS greedy)
add_test(NAME test_spec_embedded_sampling COMMAND test_spec_embedded sampling)
set_tests_properties(test_spec_embedded_sampling PROPERTIES LABELS "cpu;slow" TIMEOUT 1200)
foreach(part layout reference pinned probe deep prune)
  add_test(NAME test_spec_embedded_${part} COMMAND test_spec_embedded ${part})
  set_tests_properties(test_spec_embedded_${part} PROPERTIES LABELS cpu TIMEOUT 1200)
endforeach()
