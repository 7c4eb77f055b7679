# The server's request parsing (src/server/openai_request.h).
if(EXISTS ${CMAKE_SOURCE_DIR}/src/server/CMakeLists.txt)
  vls_add_fuzz_target(openai_request SOURCES openai_request_fuzz.cc LIBS vls_server
                      CORPUS openai_request)
endif()
