# Finds every external dependency once; module targets link the imported
# targets defined here.

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  # Precompiled headers need these sloppiness settings to get cache hits, and
  # CCACHE_BASEDIR makes paths relative so fresh clones (CI) hit the cache too.
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
      CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      ${CCACHE_PROGRAM})
endif()

# lld links the LibTorch executables (the binary, ~55 tests) several times
# faster than GNU ld; it is used when installed (scripts/setup.sh installs it).
option(LOOM_USE_LLD "Link with lld when it is installed" ON)
find_program(LOOM_LLD ld.lld)
if(LOOM_USE_LLD AND LOOM_LLD)
  add_link_options(-fuse-ld=lld)
endif()

# Protobuf and gRPC come before LibTorch: pip LibTorch's Caffe2Config.cmake defines
# protobuf::libprotobuf as an empty INTERFACE target when none exists yet, and
# FindProtobuf then keeps that dummy, so loom_proto would link no libprotobuf.
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG QUIET)
if(NOT gRPC_FOUND)
  # Debian 12 ships gRPC without a CMake package: use pkg-config.
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(GRPCPP REQUIRED IMPORTED_TARGET grpc++)
  add_library(gRPC::grpc++ ALIAS PkgConfig::GRPCPP)
endif()
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# LibTorch: Debian's libtorch-dev (1.13, CPU) or any LibTorch >= 1.13 through Torch_DIR.
find_package(Torch REQUIRED)
if(Torch_VERSION VERSION_LESS 1.13)
  message(FATAL_ERROR "loom needs LibTorch >= 1.13, found ${Torch_VERSION}")
endif()
# TorchConfig adds its flags globally; keep them but make an interface target.
add_library(loom_torch INTERFACE)
target_link_libraries(loom_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(loom_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
set(LOOM_WITH_CUDA OFF)
if(TORCH_CUDA_LIBRARIES OR CUDA_FOUND)
  set(LOOM_WITH_CUDA ON)
  target_compile_definitions(loom_torch INTERFACE LOOM_WITH_CUDA=1)
  find_library(NCCL_LIBRARY nccl)
  if(NCCL_LIBRARY)
    target_link_libraries(loom_torch INTERFACE ${NCCL_LIBRARY})
    target_compile_definitions(loom_torch INTERFACE LOOM_WITH_NCCL=1)
  endif()
endif()
message(STATUS "loom: LibTorch ${Torch_VERSION}, CUDA parts: ${LOOM_WITH_CUDA}")

# Whatever defined protobuf::libprotobuf, it must name a real library by now.
get_target_property(LOOM_PROTOBUF_TYPE protobuf::libprotobuf TYPE)
if(LOOM_PROTOBUF_TYPE STREQUAL "INTERFACE_LIBRARY")
  get_target_property(LOOM_PROTOBUF_LINKS protobuf::libprotobuf INTERFACE_LINK_LIBRARIES)
  if(NOT LOOM_PROTOBUF_LINKS)
    message(FATAL_ERROR
      "protobuf::libprotobuf is an empty INTERFACE target (LibTorch's Caffe2Config.cmake "
      "defines such a dummy when it runs before find_package(Protobuf)); loom_proto would "
      "link no libprotobuf. Point CMAKE_PREFIX_PATH at a protobuf installation with its "
      "library (Protobuf_LIBRARY=${Protobuf_LIBRARY}).")
  endif()
endif()

find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(spdlog REQUIRED)
find_package(absl REQUIRED)
find_package(OpenSSL REQUIRED)  # HMAC for the verification runner's report
find_package(SQLite3 REQUIRED)  # the task ledger
find_package(CLI11 CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)

if(TARGET yaml-cpp::yaml-cpp)
  set(LOOM_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(LOOM_YAML_TARGET yaml-cpp)
endif()
