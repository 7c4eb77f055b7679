# `cpack -G DEB` in the build directory (issue 19): one Debian package, vlstack, holding what
# cmake/install.cmake installs, under /usr, stripped (the RelWithDebInfo debug info stays out).
# dpkg-shlibdeps (dpkg-dev) derives Depends from the libraries the binaries need; the package
# also declares libvlstack.so.ABI in its shlibs file, for packages that link against it.
set(VLS_PACKAGE_MAINTAINER "vlstack maintainers <vlstack@example.invalid>"
    CACHE STRING "The Maintainer field of the Debian package")

set(CPACK_PACKAGE_NAME vlstack)
set(CPACK_PACKAGE_VENDOR vlstack)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${VLS_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Qwen3 and Qwen3-VL inference engine for CPUs")
set(CPACK_PACKAGE_DESCRIPTION
    "vlstack runs Qwen3 and Qwen3-VL models from Hugging Face checkpoints on the CPU: the vlstack \
command (an OpenAI-compatible server with a chat page, chat, batch and benchmark tools) and \
libvlstack, a C library (ABI ${VLS_ABI_VERSION}) with its header, pkg-config file and CMake package.")
set(CPACK_GENERATOR DEB)  # under /usr: the DEB generator's default CPACK_PACKAGING_INSTALL_PREFIX
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# The Python bindings (/usr/lib/python3/dist-packages/vlstack) need python3 and NumPy; the
# library and CLI do not.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3, python3-numpy")

# `cpack --config CPackSourceConfig.cmake`: a source tarball without what .gitignore leaves out.
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "^${PROJECT_SOURCE_DIR}/(build[^/]*|out|demo)/"
                              "/node_modules/" "/__pycache__/" "\\\\.pyc$")

include(CPack)
