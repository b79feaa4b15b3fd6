# pygpukit_add_cubins(<target> SOURCES_DIR <dir> DESTINATION <wheel dir>)
#
# Compiles every <dir>/*.cu with NVRTC (tools/build_kernels.py, which runs
# pygpukit.kernels.build from the source tree, through the nvidia-cuda-nvrtc wheel;
# no GPU needed) to one cubin per arch in PYGPUKIT_CUDA_ARCHS, laid out as
# <DESTINATION>/sm_<arch>/<name>.cubin, plus a manifest.json with each entry
# point's argument types and the exported constants. A kernel that does not
# compile fails the build.
function(pygpukit_add_cubins target)
  cmake_parse_arguments(ARG "" "SOURCES_DIR;DESTINATION" "" ${ARGN})
  file(GLOB _sources CONFIGURE_DEPENDS "${ARG_SOURCES_DIR}/*.cu")
  set(_runtime "${PYGPUKIT_ROOT}/packages/pygpukit-runtime/src/pygpukit")
  file(GLOB _headers CONFIGURE_DEPENDS "${ARG_SOURCES_DIR}/*.cuh" "${ARG_SOURCES_DIR}/include/*.cuh"
       "${_runtime}/include/pygpukit/*.cuh")
  set(_out "${CMAKE_CURRENT_BINARY_DIR}/${target}")
  set(_stamp "${_out}/manifest.json")
  # Rebuild when the arch list changes (file(CONFIGURE) rewrites only on change).
  set(_archs_file "${CMAKE_CURRENT_BINARY_DIR}/${target}.archs")
  file(CONFIGURE OUTPUT "${_archs_file}" CONTENT "${PYGPUKIT_CUDA_ARCHS}")
  add_custom_command(
    OUTPUT "${_stamp}"
    COMMAND "${Python_EXECUTABLE}" "${PYGPUKIT_ROOT}/tools/build_kernels.py"
            --out "${_out}" --archs "${PYGPUKIT_CUDA_ARCHS}"
            --include "${PYGPUKIT_CUDA_INCLUDE_DIR}" ${_sources}
    DEPENDS ${_sources} ${_headers} "${_archs_file}" "${PYGPUKIT_ROOT}/tools/build_kernels.py"
            "${_runtime}/kernels/build.py" "${_runtime}/kernels/cubin.py" "${_runtime}/_environment.py"
    COMMENT "NVRTC: ${target} for ${PYGPUKIT_CUDA_ARCHS}"
    VERBATIM)
  add_custom_target(${target} ALL DEPENDS "${_stamp}")
  install(DIRECTORY "${_out}/" DESTINATION "${ARG_DESTINATION}")
endfunction()
