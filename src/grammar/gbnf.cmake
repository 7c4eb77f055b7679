# GBNF grammars (gbnf.h) and the grammar checks and printer (grammar_check.cc).
target_sources(vls_grammar PRIVATE grammar_check.cc gbnf.cc)
vls_add_test(grammar_gbnf_test SOURCES gbnf_test.cc grammar_check_test.cc LIBS vls_grammar
             LABELS untrusted)
if(TARGET grammar_gbnf_test)
  target_compile_definitions(grammar_gbnf_test
                             PRIVATE VLS_GBNF_DIR="${CMAKE_SOURCE_DIR}/tests/grammar/gbnf")
endif()
