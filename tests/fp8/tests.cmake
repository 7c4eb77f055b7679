# FP8 block-quantized checkpoints (issue 18, docs/adr/0017-fp8-checkpoints.md). Included from
# tests/CMakeLists.txt.

# The E4M3 decode against the oracle's golden table, and the vision tower in FP8.
vls_add_test(fp8_golden_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/e4m3_golden_test.cc LIBS vls_tensor
             LABELS untrusted)
if(TARGET fp8_golden_test)
  target_compile_definitions(fp8_golden_test
                             PRIVATE VLS_E4M3_TABLE="${CMAKE_CURRENT_LIST_DIR}/e4m3_table.txt")
endif()
vls_add_test(fp8_vision_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/fp8_vision_test.cc LIBS vls_vision
             LABELS untrusted)

# The independent NumPy oracle: its self-test and the golden table against its formula.
add_test(NAME fp8_oracle
         COMMAND /bin/sh -c "/usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/oracle/fp8_oracle.py selftest && /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/oracle/fp8_oracle.py check-table ${CMAKE_CURRENT_LIST_DIR}/e4m3_table.txt")
# End to end through the command line: make-test-model --fp8, the oracle's dequantized copies,
# `vlstack forward` logits bit for bit equal at f32, bf16 and int8 (text and image prompts),
# compiled artifacts refused across FP8 and BF16, corrupt checkpoints refused naming the tensor.
add_test(NAME fp8_forward
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/fp8_forward_test.py
                 --vlstack $<TARGET_FILE:vlstack>)
set_tests_properties(fp8_oracle fp8_forward PROPERTIES LABELS "oracle;fp8" TIMEOUT 600)
