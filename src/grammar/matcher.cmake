# The token matcher (matcher.h): byte lowering, pushdown stacks, token trie and mask cache.
target_sources(vls_grammar PRIVATE matcher.cc utf8_lowering.cc byte_grammar.cc byte_stacks.cc
                                   token_trie.cc mask_cache.cc)
vls_add_test(grammar_matcher_test SOURCES matcher_test.cc utf8_lowering_test.cc
             LIBS vls_grammar LABELS untrusted)
