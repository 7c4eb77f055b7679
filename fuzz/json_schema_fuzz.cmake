vls_add_fuzz_target(json_schema SOURCES json_schema_fuzz.cc LIBS vls_grammar CORPUS json_schema)
