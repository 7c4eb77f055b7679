# vls_server is defined by src/server/CMakeLists.txt (target names resolve at generate time, so
# the order of the subdirectories does not matter); without the server there is nothing to fuzz.
if(EXISTS ${CMAKE_SOURCE_DIR}/src/server/CMakeLists.txt)
  vls_add_fuzz_target(tool_calls SOURCES tool_calls_fuzz.cc LIBS vls_server CORPUS tool_calls)
endif()
