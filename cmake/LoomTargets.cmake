# Helpers that give every module, test and tool the same flags.
#
#   loom_module(NAME [TORCH] SOURCES a.cc b.cc DEPS loom_config ...)
#       -> static library loom_NAME, public headers in include/loom/NAME/.
#   loom_test(NAME [TORCH] SOURCES x_test.cc DEPS loom_NAME [LABELS slow] [TIMEOUT s]
#             [RESOURCE_LOCK name])
#       -> GoogleTest executable registered with ctest: as one test (label unit),
#          or test by test (other labels, e.g. slow; gtest_discover_tests).
#          Tests sharing a RESOURCE_LOCK never run at the same time under ctest -j.

set(LOOM_WARNINGS -Wall -Wextra)
if(LOOM_ASAN)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
if(LOOM_FUZZ)
  # Every library is instrumented for coverage and sanitized; the fuzz
  # targets add libFuzzer's main (tests/fuzz/CMakeLists.txt).
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=address,undefined)
endif()

# One precompiled header for everything that includes LibTorch; targets reuse it.
add_library(loom_torch_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cc)
target_link_libraries(loom_torch_pch PUBLIC loom_torch)
target_compile_options(loom_torch_pch PRIVATE ${LOOM_WARNINGS})
target_precompile_headers(loom_torch_pch PRIVATE <ATen/ATen.h> <torch/types.h>
                          <vector> <string> <memory> <unordered_map>)

# Unity batches: the sources of a module (and of the binary, and of a test
# executable) compile a few at a time as one unit, so the LibTorch precompiled
# header, CLI11 (header-only), GoogleTest and nlohmann/json are loaded and
# their inline code generated once per batch instead of once per file. On 2
# cores a cold build of `loom` takes a third of the time (docs/PERFORMANCE.md,
# "build: unity batches, cold").
# -DLOOM_UNITY_BUILD=OFF compiles file by file.
option(LOOM_UNITY_BUILD "Compile each module's sources in unity batches" ON)
set(LOOM_UNITY_BATCH 8 CACHE STRING "Sources per unity batch")
function(loom_unity target)
  if(LOOM_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${LOOM_UNITY_BATCH})
  endif()
endfunction()

function(loom_use_torch target)
  target_link_libraries(${target} PUBLIC loom_torch)
  target_precompile_headers(${target} REUSE_FROM loom_torch_pch)
endfunction()

function(loom_module name)
  cmake_parse_arguments(M "TORCH" "" "SOURCES;DEPS" ${ARGN})
  add_library(loom_${name} STATIC ${M_SOURCES})
  set_property(GLOBAL APPEND PROPERTY LOOM_MODULES loom_${name})
  target_include_directories(loom_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include
                             PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(loom_${name} PRIVATE ${LOOM_WARNINGS})
  target_link_libraries(loom_${name} PUBLIC ${M_DEPS})
  loom_unity(loom_${name})
  if(M_TORCH)
    loom_use_torch(loom_${name})
  endif()
endfunction()

include(GoogleTest)
function(loom_test name)
  cmake_parse_arguments(T "TORCH" "TIMEOUT;RESOURCE_LOCK" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(${name} PRIVATE ${LOOM_WARNINGS})
  target_compile_definitions(${name} PRIVATE
    LOOM_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    LOOM_BINARY="$<TARGET_FILE:loom>")
  target_link_libraries(${name} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main)
  loom_unity(${name})
  if(T_TORCH)
    loom_use_torch(${name})
  endif()
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_dependencies(${name} loom)
  set(lock)
  if(T_RESOURCE_LOCK)
    set(lock RESOURCE_LOCK ${T_RESOURCE_LOCK})
  endif()
  if(T_LABELS STREQUAL "unit")
    # A unit-test executable is one ctest test: its tests share one process,
    # so LibTorch loads once rather than once per test (about a second each,
    # over four minutes of a full run on 2 cores). Run one test with
    # build/tests/NAME --gtest_filter=Suite.Test.
    add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT ${T_TIMEOUT} ${lock})
  else()
    # Slow end-to-end tests stay one ctest test each: their own process and
    # timeout, spread over ctest -j.
    gtest_discover_tests(${name}
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
      DISCOVERY_TIMEOUT 60
      PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} ${lock})
  endif()
endfunction()
