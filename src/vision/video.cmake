# Video preprocessing (issue 35): video_preprocessor_config.json, frame sampling, the video
# smart_resize, timestamps and patches (docs/video.md "Video preprocessing").
target_sources(vls_vision PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/video_processor_config.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/video_preprocess.cc)

vls_add_test(video_processor_config_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/video_processor_config_test.cc
  LIBS vls_vision LABELS untrusted)
vls_add_test(video_preprocess_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/video_preprocess_test.cc
  LIBS vls_vision)
