# `vlstack eval-kl` (issue 18): its JSON against a NumPy recomputation of the KL statistics from
# `vlstack forward` logits; f32 vs f32 exactly 0; int4 KL > int8 KL > bf16 KL > 0; flag errors exit 2.
# Included from tests/CMakeLists.txt.
add_test(NAME eval_kl_check
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/oracle/eval_kl_check.py
                 --vlstack $<TARGET_FILE:vlstack>)
set_tests_properties(eval_kl_check PROPERTIES LABELS "oracle;cli" TIMEOUT 180)
