# Structured output end to end (issue 34): the official `openai` npm client and raw fetch on the
# small random test model at temperature 1 with several seeds; every reply that stops validates
# under python3-jsonschema (tests/server/validate_json.py) or the test's own recognisers, every
# reply cut by max_tokens is a valid prefix; enforced tool calls, refusals, /metrics. Included by
# tests/CMakeLists.txt; skips (77) without the npm packages of tests/*/setup.sh.
add_test(NAME server_structured_output
         COMMAND node ${CMAKE_SOURCE_DIR}/tests/server/structured_output_test.mjs
                 --vlstack $<TARGET_FILE:vlstack>)
set_tests_properties(server_structured_output PROPERTIES LABELS server TIMEOUT 600
                     SKIP_RETURN_CODE 77)
