# The token matcher (matcher.h): byte lowering, pushdown stacks, token trie and mask cache.
target_sources(vls_grammar PRIVATE matcher.cc utf8_lowering.cc byte_grammar.cc byte_stacks.cc
                                   token_trie.cc mask_cache.cc)
vls_add_test(grammar_matcher_test
             SOURCES matcher_test.cc matcher_cases_test.cc utf8_lowering_test.cc
             LIBS vls_grammar LABELS untrusted)

# Compile and mask-time benchmark over a real vocabulary (bench/grammar_bench.cc): built when
# Google Benchmark is installed, as the other benchmarks; never run by the test suite.
find_package(benchmark QUIET)
if(benchmark_FOUND)
  add_executable(grammar_bench ${CMAKE_SOURCE_DIR}/bench/grammar_bench.cc)
  target_link_libraries(grammar_bench PRIVATE vls_grammar vls_tokenizer)
endif()
