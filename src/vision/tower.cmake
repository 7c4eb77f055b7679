# The vision tower and its mergers.
target_sources(vls_vision PRIVATE
               ${CMAKE_CURRENT_LIST_DIR}/vision_config.cc
               ${CMAKE_CURRENT_LIST_DIR}/vision_weights.cc
               ${CMAKE_CURRENT_LIST_DIR}/vision_ops.cc
               ${CMAKE_CURRENT_LIST_DIR}/vision_model.cc
               ${CMAKE_CURRENT_LIST_DIR}/vision_reference.cc)
vls_add_test(vision_model_test SOURCES vision_model_test.cc LIBS vls_vision)
