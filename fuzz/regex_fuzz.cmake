vls_add_fuzz_target(regex SOURCES regex_fuzz.cc LIBS vls_grammar CORPUS regex)
