# Preprocessing: preprocessor_config.json, smart_resize, bicubic resize, patches.
target_sources(vls_vision PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/image_processor_config.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/smart_resize.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/resize.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/preprocess.cc)

vls_add_test(image_processor_config_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/image_processor_config_test.cc
  LIBS vls_vision LABELS untrusted)
vls_add_test(preprocess_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/smart_resize_test.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/resize_test.cc
          ${CMAKE_CURRENT_SOURCE_DIR}/preprocess_test.cc
  LIBS vls_vision)
