# Shared build helpers: warnings, test and fuzz target conventions.
# (No -Wnull-dereference: at -O2 it reports false positives inside Boost.Asio and libstdc++.)

set(ABX_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
    -Woverloaded-virtual -Wimplicit-fallthrough -Wno-unused-parameter
    # C++20 designated initializers may omit members that have defaults; GCC 12 warns anyway.
    -Wno-missing-field-initializers)
if(ABX_WERROR)
  list(APPEND ABX_WARNINGS -Werror)
endif()
# A unity build includes each .cc into one generated file, so GCC takes a class defined in a .cc
# (an Impl with members of the file's anonymous namespace) for one defined in a header.
if(CMAKE_UNITY_BUILD)
  list(APPEND ABX_WARNINGS -Wno-subobject-linkage)
endif()

# abx_module(<name> SOURCES ... DEPS ...): one library target per module, alias abx::<name>.
# No private include directory: a module's private headers are found only relative to the file
# that includes them (same folder), so including another module's private header fails to
# compile (and scripts/lint.sh rejects "../" includes). Public headers: include/abx/.
function(abx_module name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(abx_${name} STATIC ${M_SOURCES})
  add_library(abx::${name} ALIAS abx_${name})
  target_include_directories(abx_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(abx_${name} PRIVATE ${ABX_WARNINGS})
  target_link_libraries(abx_${name} PUBLIC ${M_DEPS} PRIVATE ${M_PRIVATE_DEPS})
endfunction()

# abx_test(<name> SOURCES ... DEPS ...): a GoogleTest binary registered with ctest.
function(abx_test name)
  if(NOT ABX_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_compile_options(${name} PRIVATE ${ABX_WARNINGS})
  target_link_libraries(${name} PRIVATE ${T_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 30
                       PROPERTIES LABELS "${T_LABELS}" TIMEOUT 120)
  # gtest_discover_tests passes PROPERTIES through two list expansions, so of "unit;e2e" only the
  # first label reached the tests. Set the whole list again from a ctest include file that runs
  # after discovery, over the list of discovered tests (<name>_TESTS).
  list(LENGTH T_LABELS _n)
  if(_n GREATER 1)
    set(_inc ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
    file(WRITE ${_inc} "foreach(_t IN LISTS ${name}_TESTS)\n"
                       "  set_tests_properties(\"\${_t}\" PROPERTIES LABELS \"${T_LABELS}\")\n"
                       "endforeach()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${_inc})
  endif()
endfunction()

# abx_fuzz(<name> SOURCE <file> CORPUS <dir> DEPS ...): a libFuzzer target. Without
# ABX_LIBFUZZER it links a replay driver instead, and ctest replays the seed corpus on
# every build so the parser never regresses on a known input.
function(abx_fuzz name)
  cmake_parse_arguments(F "" "SOURCE;CORPUS" "DEPS" ${ARGN})
  add_executable(${name} ${F_SOURCE})
  target_compile_options(${name} PRIVATE ${ABX_WARNINGS})
  target_link_libraries(${name} PRIVATE ${F_DEPS})
  if(ABX_LIBFUZZER)
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  else()
    target_link_libraries(${name} PRIVATE abx_fuzz_replay)
  endif()
  if(ABX_BUILD_TESTS)
    add_test(NAME ${name}.corpus COMMAND ${name} ${F_CORPUS})
    set_tests_properties(${name}.corpus PROPERTIES LABELS "unit;fuzz" TIMEOUT 120)
  endif()
endfunction()

# abx_static_runtime(<target>): in-sandbox binaries and command modules depend on glibc only.
function(abx_static_runtime target)
  target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
endfunction()

# abx_command_module(<name> SOURCES ...): a command module for `abx-server --module`. It is not
# linked against abx libraries: its ABX_REGISTERs bind at dlopen time to the registry exported
# by the process that loads it, so every module shares one default_registry().
function(abx_command_module name)
  cmake_parse_arguments(C "" "" "SOURCES" ${ARGN})
  add_library(${name} MODULE ${C_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PRIVATE Boost::headers)
  target_compile_options(${name} PRIVATE ${ABX_WARNINGS})
  abx_static_runtime(${name})
endfunction()
