# The Python bindings (python/vlstack, pure ctypes over libvlstack.so): tests/python/test_*.py
# (stdlib unittest, run by run_tests.py) against this build's library and vlstack executable.
# In an address/UB-sanitizer build the library needs the sanitizer runtimes loaded before the
# interpreter starts (LD_PRELOAD; leak detection off: the interpreter's own allocations are not
# freed at exit); a TSan or libFuzzer build skips the test (exit 77).
set(vls_py_env
    "VLSTACK_LIBRARY=$<TARGET_FILE:vlstack_shared>"
    "VLSTACK_BIN=$<TARGET_FILE:vlstack>"
    "PYTHONPATH=${CMAKE_SOURCE_DIR}/python")
if(VLS_TSAN OR VLS_LIBFUZZER)
  list(APPEND vls_py_env "VLS_PY_SKIP=the library is built with TSan or libFuzzer")
elseif(VLS_SANITIZE)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE vls_py_asan OUTPUT_STRIP_TRAILING_WHITESPACE)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libubsan.so
                    OUTPUT_VARIABLE vls_py_ubsan OUTPUT_STRIP_TRAILING_WHITESPACE)
    list(APPEND vls_py_env "LD_PRELOAD=${vls_py_asan}:${vls_py_ubsan}"
         "ASAN_OPTIONS=detect_leaks=0")
  else()
    list(APPEND vls_py_env "VLS_PY_SKIP=a sanitizer build with a compiler other than GCC")
  endif()
endif()
add_test(NAME python_bindings
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/run_tests.py)
set_tests_properties(python_bindings PROPERTIES LABELS python TIMEOUT 300 SKIP_RETURN_CODE 77
                                                ENVIRONMENT "${vls_py_env}")
