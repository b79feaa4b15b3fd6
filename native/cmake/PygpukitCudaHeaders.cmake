# Locate the CUDA headers PyGPUkit compiles against: cuda.h (driver API types),
# nvrtc.h, and cuda_fp16.h / cuda_bf16.h for the kernels. They come from the
# nvidia-cuda-runtime and nvidia-cuda-nvrtc wheels (build requirements), or from
# CUDA_PATH / CUDA_HOME. Nothing is linked: libcuda and libnvrtc are opened at run time.
if(NOT PYGPUKIT_CUDA_INCLUDE_DIR)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" "${PYGPUKIT_ROOT}/tools/cuda_paths.py" include
    OUTPUT_VARIABLE _pgk_inc OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _pgk_rc)
  if(NOT _pgk_rc EQUAL 0 OR _pgk_inc STREQUAL "")
    message(FATAL_ERROR
      "CUDA headers not found. Install the build requirements "
      "(pip install nvidia-cuda-runtime nvidia-cuda-nvrtc) or set CUDA_PATH.")
  endif()
  set(PYGPUKIT_CUDA_INCLUDE_DIR "${_pgk_inc}" CACHE PATH "Directory holding cuda.h and nvrtc.h")
endif()
message(STATUS "PyGPUkit: CUDA headers from ${PYGPUKIT_CUDA_INCLUDE_DIR}")
