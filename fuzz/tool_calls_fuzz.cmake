vls_add_fuzz_target(tool_calls SOURCES tool_calls_fuzz.cc LIBS vls_server CORPUS tool_calls)
