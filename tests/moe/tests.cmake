# Mixture of experts through every frontend (issue 32 item 6). Included from tests/CMakeLists.txt.
# cli_moe: inspect's MoE fields, run (text, an image, int4) and eval-kl in int8 and int4 on tiny
# qwen3-vl-moe / qwen3-moe models. server_moe: an image question through the `openai` npm client
# on a qwen3-vl-30b-a3b-shaped model (the released text width, one layer) served in int4. They
# skip (77) without the npm packages of tests/*/setup.sh.
add_test(NAME cli_moe
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/cli/moe_test.py
                 --vlstack $<TARGET_FILE:vlstack>)
set_tests_properties(cli_moe PROPERTIES LABELS cli TIMEOUT 300 SKIP_RETURN_CODE 77)
add_test(NAME server_moe
         COMMAND node ${CMAKE_SOURCE_DIR}/tests/server/moe_test.mjs --vlstack $<TARGET_FILE:vlstack>)
set_tests_properties(server_moe PROPERTIES LABELS server TIMEOUT 300 SKIP_RETURN_CODE 77)
