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

# The committed reports of the embedded pair (tools/eval_embedded.sh): every SVG under docs/evals
# is well-formed XML with an <svg> root, and every relative link of docs/evals/README.md exists.
set(flint_evals_docs_check [=[
import glob, os, re, sys
import xml.etree.ElementTree as ET
d = sys.argv[1]
files = sorted(glob.glob(os.path.join(d, "**", "*.svg"), recursive=True))
if not files:
    sys.exit("no SVG under " + d)
for f in files:
    r = ET.parse(f).getroot()
    if r.tag != "{http://www.w3.org/2000/svg}svg":
        sys.exit(f + ": the root element is " + r.tag)
    if not (r.get("viewBox") or (r.get("width") and r.get("height"))):
        sys.exit(f + ": no size")
links = re.findall(r"\]\(([^)#:]+)\)", open(os.path.join(d, "README.md")).read())
missing = [x for x in links if not os.path.exists(os.path.join(d, x))]
if missing:
    sys.exit("README.md links to missing files: " + " ".join(missing))
print(len(files), "SVG files parse as XML,", len(links), "README links resolve")
]=])
add_test(NAME test_evals_docs_svg COMMAND python3 -c "${flint_evals_docs_check}" ${CMAKE_SOURCE_DIR}/docs/evals)
set_tests_properties(test_evals_docs_svg PROPERTIES LABELS cpu TIMEOUT 60)
