# Preprocessing: preprocessor_config.json, smart_resize, bicubic resize, patches.
target_sources(vls_vision PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/image_processor_config.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/processor_config_json.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/smart_resize.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/resize.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/preprocess.cc)
# resize.cc reproduces torch's float rounding: no fused multiply-adds but the ones it writes.
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/resize.cc PROPERTIES COMPILE_OPTIONS
                            -ffp-contract=off)

vls_add_test(image_processor_config_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/image_processor_config_test.cc
  LIBS vls_vision LABELS untrusted)
vls_add_test(preprocess_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/smart_resize_test.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/resize_test.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/preprocess_test.cc
  LIBS vls_vision)
# Oracle: tests/oracle/preprocess_ref.py (transformers' Python + torchvision) writes the cases,
# preprocess_oracle_test checks PreprocessImages against them.
if(VLS_BUILD_TESTS)
  add_executable(preprocess_oracle_test ${CMAKE_CURRENT_SOURCE_DIR}/preprocess_oracle_test.cc)
  target_link_libraries(preprocess_oracle_test PRIVATE vls_vision vls_io)
  add_test(NAME oracle_preprocess
           COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/oracle/preprocess_cases.py
                   --check $<TARGET_FILE:preprocess_oracle_test>
                   --work ${CMAKE_BINARY_DIR}/oracle_preprocess_work)
  set_tests_properties(oracle_preprocess PROPERTIES LABELS oracle TIMEOUT 600)
endif()
