vls_add_fuzz_target(tokenizer SOURCES tokenizer_fuzz.cc LIBS vls_tokenizer CORPUS tokenizer)
