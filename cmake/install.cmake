# install.cmake — what `cmake --install` puts under the prefix:
#   include/zero/*.h                 the public headers
#   lib/libzero.a, lib/libzero.so.*  the library (shared with ZERO_BUILD_SHARED)
#   bin/zero                         the program (linked with libzero.a)
#   lib/pkgconfig/zero.pc            pkg-config: -lzero; Libs.private for a static link
#   lib/cmake/zero/                  find_package(zero): zero::zero (shared when installed, else
#                                    static) and zero::zero_static, dependencies found again
# (lib is CMAKE_INSTALL_LIBDIR.) Both generated files are relocatable: the prefix is derived
# from where they are installed, so `cmake --install build --prefix DIR` works.
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/zero DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
set(ZERO_INSTALL_TARGETS zero)
if(ZERO_BUILD_SHARED)
  list(APPEND ZERO_INSTALL_TARGETS zero_shared)
endif()
install(TARGETS ${ZERO_INSTALL_TARGETS} EXPORT zeroTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS zero_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# ---- pkg-config: Libs.private lists what a static link needs (-l for each library file).
set(ZERO_PC_PRIVATE_FILES "")
foreach(name ${ZERO_DEP_IMPORTS})
  list(APPEND ZERO_PC_PRIVATE_FILES ${ZERO_DEP_${name}_LIBRARY})
endforeach()
foreach(name ${OpenMP_C_LIB_NAMES})
  list(APPEND ZERO_PC_PRIVATE_FILES ${OpenMP_${name}_LIBRARY})
endforeach()
if(ZERO_HAVE_MPI)
  list(APPEND ZERO_PC_PRIVATE_FILES ${MPI_C_LIBRARIES})
endif()
set(ZERO_PC_LIBS_PRIVATE "")
set(ZERO_PC_SEEN_DIRS ${CMAKE_C_IMPLICIT_LINK_DIRECTORIES})
foreach(f ${ZERO_PC_PRIVATE_FILES})
  get_filename_component(dir "${f}" DIRECTORY)
  get_filename_component(lib "${f}" NAME_WE)
  string(REGEX REPLACE "^lib" "" lib "${lib}")
  if(dir AND NOT dir IN_LIST ZERO_PC_SEEN_DIRS)
    string(APPEND ZERO_PC_LIBS_PRIVATE " -L${dir}")
    list(APPEND ZERO_PC_SEEN_DIRS ${dir})
  endif()
  if(NOT " ${ZERO_PC_LIBS_PRIVATE} " MATCHES " -l${lib} ")
    string(APPEND ZERO_PC_LIBS_PRIVATE " -l${lib}")
  endif()
endforeach()
if(NOT " ${ZERO_PC_LIBS_PRIVATE} " MATCHES " -lpthread ")
  string(APPEND ZERO_PC_LIBS_PRIVATE " -lpthread")
endif()
string(APPEND ZERO_PC_LIBS_PRIVATE " -lm")
string(STRIP "${ZERO_PC_LIBS_PRIVATE}" ZERO_PC_LIBS_PRIVATE)
# ${pcfiledir}/<this many ..> is the prefix
file(RELATIVE_PATH ZERO_PC_TO_PREFIX ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" ZERO_PC_TO_PREFIX "${ZERO_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/zero.pc.in ${PROJECT_BINARY_DIR}/zero.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/zero.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- CMake package
set(ZERO_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/zero)
install(EXPORT zeroTargets NAMESPACE zero:: DESTINATION ${ZERO_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/zeroConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/zeroConfig.cmake
                              INSTALL_DESTINATION ${ZERO_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/zeroConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/zeroConfig.cmake ${PROJECT_BINARY_DIR}/zeroConfigVersion.cmake
        DESTINATION ${ZERO_CMAKE_DIR})
