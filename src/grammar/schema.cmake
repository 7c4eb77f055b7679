# The regular-expression and JSON Schema front ends (regex.h, json_schema.h).
target_sources(vls_grammar PRIVATE regex.cc json_schema_regex.cc json_schema.cc json_schema_json.cc
                                   json_schema_types.cc)
vls_add_test(grammar_schema_test SOURCES regex_test.cc json_schema_test.cc json_schema_suite_test.cc
             LIBS vls_grammar LABELS untrusted)
