# The vision tower and its mergers.
target_sources(vls_vision PRIVATE
               ${CMAKE_CURRENT_LIST_DIR}/vision_config.cc
               ${CMAKE_CURRENT_LIST_DIR}/vision_weights.cc
               ${CMAKE_CURRENT_LIST_DIR}/vision_ops.cc
               ${CMAKE_CURRENT_LIST_DIR}/vision_model.cc
               ${CMAKE_CURRENT_LIST_DIR}/vision_attention.cc
               ${CMAKE_CURRENT_LIST_DIR}/vision_flops.cc
               ${CMAKE_CURRENT_LIST_DIR}/vision_reference.cc)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  # Vector loops called only under an AVX-512 kernel variant (kernels/dispatch.h).
  target_sources(vls_vision PRIVATE ${CMAKE_CURRENT_LIST_DIR}/vision_avx512.cc)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/vision_avx512.cc PROPERTIES COMPILE_OPTIONS
                              "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mfma;-Wno-uninitialized;-Wno-maybe-uninitialized")
  target_compile_definitions(vls_vision PRIVATE VLS_VISION_AVX512)
endif()
vls_add_test(vision_config_test SOURCES vision_config_test.cc LIBS vls_vision LABELS untrusted)
vls_add_test(vision_model_test SOURCES vision_model_test.cc LIBS vls_vision)
vls_add_test(vision_ops_test SOURCES vision_ops_test.cc LIBS vls_vision)

if(VLS_BUILD_TESTS)
  # The engine side of the NumPy oracle check (tests/oracle/vision_cases.py); not installed.
  add_executable(vision_encode_tool ${CMAKE_CURRENT_LIST_DIR}/vision_oracle_main.cc)
  target_link_libraries(vision_encode_tool PRIVATE vls_vision)
  add_test(NAME oracle_vision
           COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/oracle/vision_cases.py
                   --tool $<TARGET_FILE:vision_encode_tool> --work ${CMAKE_BINARY_DIR}/oracle_vision_work)
  add_test(NAME oracle_vision_bf16
           COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/oracle/vision_cases.py
                   --tool $<TARGET_FILE:vision_encode_tool> --precision bf16
                   --work ${CMAKE_BINARY_DIR}/oracle_vision_work)
  set_tests_properties(oracle_vision oracle_vision_bf16 PROPERTIES LABELS oracle TIMEOUT 900)
endif()

# End-to-end timing of the tower (bench/vision_bench.cc); built, never run by the tests.
add_executable(vision_bench ${CMAKE_SOURCE_DIR}/bench/vision_bench.cc)
target_link_libraries(vision_bench PRIVATE vls_vision)
