# Finds every dependency of ptune. LibTorch: any LibTorch 2.x on CMAKE_PREFIX_PATH (scripts/setup
# points it at the pinned torch wheel, see third_party/versions.env). The rest: Debian packages.

# The CUDA build of LibTorch configures CUDA through its own CMake files; tell it where the
# toolkit is when nvcc is not on PATH, and keep its architecture list short unless asked.
if(NOT DEFINED ENV{CUDACXX} AND NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "")
  set(CUDAToolkit_ROOT /usr/local/cuda CACHE PATH "")
endif()
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0" CACHE STRING "CUDA architectures for ptune's own kernels")
endif()

find_package(Torch 2.0 REQUIRED)
if(Torch_VERSION VERSION_LESS 2.0)
  message(FATAL_ERROR "ptune needs LibTorch 2.x, found ${Torch_VERSION}")
endif()
set(PTUNE_HAS_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(PTUNE_HAS_CUDA ON)
endif()
message(STATUS "ptune: LibTorch ${Torch_VERSION} (CUDA build: ${PTUNE_HAS_CUDA}) at ${TORCH_INSTALL_PREFIX}")

find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 2.0 REQUIRED)
find_package(spdlog REQUIRED)
find_package(PNG REQUIRED)
# Headers only: Boost.Math's Student's t (core/stats), and Boost.JSON's incremental parser (the
# trace reader of ptune analyze; compiled into lib/analyze/trace_reader.cpp from its src.hpp).
find_package(Boost 1.81 REQUIRED)
find_path(PTUNE_BOOST_JSON_DIR boost/json/basic_parser_impl.hpp HINTS ${Boost_INCLUDE_DIRS})
if(NOT PTUNE_BOOST_JSON_DIR)
  message(FATAL_ERROR "ptune: Boost.JSON's headers not found (apt-get install libboost-json1.81-dev)")
endif()
find_package(ZLIB REQUIRED)  # .json.gz traces (ptune analyze)
# libjpeg-turbo's TurboJPEG API, found by file rather than by pkg-config: the .pc file of a
# Debian package unpacked elsewhere (scripts/gpu-build's PTUNE_DEPS) points at /usr, and a GPU
# machine may have no pkg-config at all. find_* search CMAKE_PREFIX_PATH with its lib/<arch>.
find_path(PTUNE_TURBOJPEG_INCLUDE_DIR turbojpeg.h)
find_library(PTUNE_TURBOJPEG_LIBRARY NAMES turbojpeg)
if(NOT PTUNE_TURBOJPEG_INCLUDE_DIR OR NOT PTUNE_TURBOJPEG_LIBRARY)
  message(FATAL_ERROR "ptune: libturbojpeg not found (apt-get install libturbojpeg0-dev)")
endif()
add_library(ptune_turbojpeg UNKNOWN IMPORTED)
set_target_properties(ptune_turbojpeg PROPERTIES IMPORTED_LOCATION "${PTUNE_TURBOJPEG_LIBRARY}"
                      INTERFACE_INCLUDE_DIRECTORIES "${PTUNE_TURBOJPEG_INCLUDE_DIR}")
message(STATUS "ptune: TurboJPEG: ${PTUNE_TURBOJPEG_LIBRARY}")
# PCRE2 (program.step_pattern: Perl-syntax patterns with named groups), linked statically where
# Debian's libpcre2-dev has the archive, so that the executable needs nothing new where it runs.
find_path(PTUNE_PCRE2_INCLUDE_DIR pcre2.h)
find_library(PTUNE_PCRE2_LIBRARY NAMES libpcre2-8.a pcre2-8)
if(NOT PTUNE_PCRE2_INCLUDE_DIR OR NOT PTUNE_PCRE2_LIBRARY)
  message(FATAL_ERROR "ptune: PCRE2 not found (apt-get install libpcre2-dev)")
endif()
add_library(ptune_pcre2 UNKNOWN IMPORTED)
set_target_properties(ptune_pcre2 PROPERTIES IMPORTED_LOCATION "${PTUNE_PCRE2_LIBRARY}"
                      INTERFACE_INCLUDE_DIRECTORIES "${PTUNE_PCRE2_INCLUDE_DIR}")
message(STATUS "ptune: PCRE2: ${PTUNE_PCRE2_LIBRARY}")
find_package(Threads REQUIRED)

# The torch wheel's libtorch.so exports its own (partial) copy of std::filesystem; a program
# that resolves std::filesystem::remove_all there crashes. Put libstdc++ first among the
# executables' needed libraries so the toolchain's own definitions win.
string(APPEND CMAKE_EXE_LINKER_FLAGS " -Wl,--no-as-needed -lstdc++ -Wl,--as-needed")

# Gloo's headers, for c10d::ProcessGroupGloo (data-parallel runs on CPUs). The torch wheel ships
# ProcessGroupGloo.hpp but not the gloo/ headers it includes; Debian's libgloo-dev has them. Only
# the headers are used: the Gloo code that runs is the copy compiled into libtorch_cpu, so
# Debian's libgloo.so (and its CMake targets) must never be linked. Without the headers ptune
# still builds; dist.backend gloo is then an error that says to install libgloo-dev.
find_path(PTUNE_GLOO_INCLUDE_DIR gloo/algorithm.h
          HINTS ${TORCH_INSTALL_PREFIX}/include /usr/include /usr/local/include)
if(PTUNE_GLOO_INCLUDE_DIR)
  set(PTUNE_HAS_GLOO ON)
else()
  set(PTUNE_HAS_GLOO OFF)
  message(WARNING "ptune: gloo/algorithm.h not found (apt-get install libgloo-dev): "
                  "data-parallel runs on CPUs will be unavailable")
endif()
message(STATUS "ptune: Gloo headers: ${PTUNE_HAS_GLOO} (${PTUNE_GLOO_INCLUDE_DIR})")
