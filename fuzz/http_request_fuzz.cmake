# The server's HTTP request framing (src/server/http_framing.h).
if(EXISTS ${CMAKE_SOURCE_DIR}/src/server/CMakeLists.txt)
  vls_add_fuzz_target(http_request SOURCES http_request_fuzz.cc LIBS vls_server
                      CORPUS http_request)
endif()
