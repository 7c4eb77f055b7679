# Included by src/server/CMakeLists.txt after add_library(vls_server ...): the server's
# self-contained parts, Prometheus metrics (metrics.h) and tool-call parsing (tool_calls.h).
target_sources(vls_server PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/metrics.cc
                                  ${CMAKE_CURRENT_SOURCE_DIR}/tool_calls.cc)
vls_add_test(server_parts_test SOURCES metrics_test.cc tool_calls_test.cc LIBS vls_server
             LABELS untrusted)
