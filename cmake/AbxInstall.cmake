# `cmake --install <build> --prefix P`: libabx, its public headers, a CMake package
# (find_package(abx) -> abx::client, abx::command_module) and a pkg-config file (abx.pc).
# Headers: the client API and what it includes (base's Error/Result/JSON helpers), and the
# registry headers a command module is written against. Nothing else of the tree is public.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ABX_PUBLIC_HEADER_DIRS base client registry)
foreach(d ${ABX_PUBLIC_HEADER_DIRS})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/abx/${d}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/abx COMPONENT sdk
          FILES_MATCHING PATTERN "*.h")
endforeach()
# The capability enum the client API names (header-only; the rest of templates stays private).
install(FILES ${PROJECT_SOURCE_DIR}/include/abx/templates/capability.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/abx/templates COMPONENT sdk)

# The in-tree target's include directory is the source tree; the installed one is the prefix.
target_include_directories(libabx INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(libabx PROPERTIES EXPORT_NAME client VERSION ${PROJECT_VERSION}
                                        SOVERSION ${PROJECT_VERSION_MAJOR})
add_library(abx_command_module_headers INTERFACE)
target_include_directories(abx_command_module_headers INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(abx_command_module_headers INTERFACE Boost::headers)
target_compile_features(abx_command_module_headers INTERFACE cxx_std_20)
set_target_properties(abx_command_module_headers PROPERTIES EXPORT_NAME command_module)
target_compile_features(libabx INTERFACE cxx_std_20)

install(TARGETS libabx abx_command_module_headers EXPORT abxTargets COMPONENT sdk
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT abxTargets NAMESPACE abx:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/abx
        COMPONENT sdk)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/abxConfig.cmake.in
  ${PROJECT_BINARY_DIR}/abxConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/abx)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/abxConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/abxConfig.cmake ${PROJECT_BINARY_DIR}/abxConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/abx COMPONENT sdk)
configure_file(${PROJECT_SOURCE_DIR}/cmake/abx.pc.in ${PROJECT_BINARY_DIR}/abx.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/abx.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT sdk)
