# Installing and packaging (issue 19): `cmake --install`, pkg-config and find_package consumers,
# and `cpack -G DEB` of this build tree (tests/install/install_test.py; docs/install.md).
add_test(NAME install_package
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/install_test.py
                 --build ${CMAKE_BINARY_DIR} --source ${CMAKE_SOURCE_DIR})
set_tests_properties(install_package PROPERTIES LABELS install TIMEOUT 600 SKIP_RETURN_CODE 77)
