# Installing vlstack (issue 19): `cmake --install BUILD [--prefix P] [--strip]` puts
#   bin/vlstack                           the CLI (the internals linked in statically)
#   lib/libvlstack.so.ABI.MINOR.PATCH     the C ABI, its soname libvlstack.so.ABI and the
#   lib/libvlstack.so.ABI, libvlstack.so  link-time name (symlinks)
#   include/vlstack/vlstack.h             the one public header
#   lib/pkgconfig/vlstack.pc              pkg-config, relocatable (prefix from ${pcfiledir})
#   lib/cmake/vlstack/                    find_package(vlstack): the imported target vlstack::vlstack
#   lib/python3/dist-packages/vlstack/    the Python bindings (VLS_INSTALL_PYTHONDIR)
#   share/doc/vlstack/                    README.md and docs/
# (lib is GNUInstallDirs' CMAKE_INSTALL_LIBDIR). cmake/package.cmake packs the same files
# into a Debian package. docs/install.md describes both.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(VLS_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/vlstack)

install(TARGETS vlstack RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Only libvlstack.so is exported: its link libraries are PRIVATE static archives already inside
# it, so the exported target carries no link dependencies, just the library and its include dir
# (src/capi/CMakeLists.txt: $<INSTALL_INTERFACE:include>).
set_target_properties(vlstack_shared PROPERTIES EXPORT_NAME vlstack)
install(TARGETS vlstack_shared EXPORT vlstackTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/vlstack/vlstack.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/vlstack)

# pkg-config: the prefix is found from the .pc file's own place (${pcfiledir}), so the file works
# wherever the tree lands: `cmake --install --prefix X`, DESTDIR, an unpacked package. Absolute
# GNUInstallDirs paths cannot move; they are written as they are.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(VLS_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH vls_pc_up "/vls/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/vls")
  string(REGEX REPLACE "/$" "" vls_pc_up "${vls_pc_up}")
  set(VLS_PC_PREFIX "\${pcfiledir}/${vls_pc_up}")
endif()
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(VLS_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(VLS_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/vlstack.pc.in ${PROJECT_BINARY_DIR}/install/vlstack.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/install/vlstack.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# find_package(vlstack [VERSION]): config, version (same major version) and exported targets.
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/vlstackConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/install/vlstackConfig.cmake
                              INSTALL_DESTINATION ${VLS_CMAKE_PACKAGE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/install/vlstackConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/install/vlstackConfig.cmake
              ${PROJECT_BINARY_DIR}/install/vlstackConfigVersion.cmake
        DESTINATION ${VLS_CMAKE_PACKAGE_DIR})
install(EXPORT vlstackTargets NAMESPACE vlstack:: FILE vlstackTargets.cmake
        DESTINATION ${VLS_CMAKE_PACKAGE_DIR})

# The Python bindings (python/vlstack, pure Python over libvlstack.so) where Debian's python3
# looks for packages under /usr; under another prefix, put <prefix>/lib/python3/dist-packages on
# PYTHONPATH. The package finds the library two folders up from that one (<prefix>/lib).
set(VLS_INSTALL_PYTHONDIR lib/python3/dist-packages
    CACHE STRING "where the Python package goes, relative to the install prefix")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/vlstack DESTINATION ${VLS_INSTALL_PYTHONDIR}
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)

install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})

include(${CMAKE_CURRENT_LIST_DIR}/package.cmake)
