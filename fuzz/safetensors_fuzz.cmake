vls_add_fuzz_target(safetensors SOURCES safetensors_fuzz.cc LIBS vls_io CORPUS safetensors)
