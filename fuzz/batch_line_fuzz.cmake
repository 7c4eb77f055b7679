vls_add_fuzz_target(batch_line SOURCES batch_line_fuzz.cc LIBS vls_cli_lib CORPUS batch_line)
