vls_add_fuzz_target(image_decode SOURCES image_decode_fuzz.cc LIBS vls_image CORPUS image_decode)
