vls_add_fuzz_target(config SOURCES config_fuzz.cc LIBS vls_vision CORPUS config)
