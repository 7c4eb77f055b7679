# GBNF grammars (gbnf.h) and the grammar checks and printer (grammar_check.cc).
target_sources(vls_grammar PRIVATE grammar_check.cc)
vls_add_test(grammar_gbnf_test SOURCES grammar_check_test.cc LIBS vls_grammar LABELS untrusted)
