// The one way the runtime enqueues work: every kernel launch (built-in ops and user JIT kernels)
// and every graph replay passes the Rust dispatch controller (dispatch_begin / dispatch_end).
#pragma once

#include <cuda.h>

namespace pgk {

class Stream;

struct LaunchConfig {
    unsigned grid[3] = {1, 1, 1};
    unsigned block[3] = {1, 1, 1};
    unsigned shared_mem = 0;
    // Programmatic dependent launch (SM 9.0+): the kernel may start while the previous kernel on
    // the stream is still running, and must execute griddepcontrol.wait before it reads that
    // kernel's results (or writes what it reads). Ignored on older devices.
    bool dependent = false;
};

// Enqueue `function` on `stream` with `args` (an array of pointers to each parameter's value,
// cuLaunchKernel's convention). The GIL, when held, is released while the dispatch controller
// may block, unless the thread keeps it through its launches (t_launches_keep_gil, core/gil.hpp).
// Throws CudaError when the launch fails.
void launch_kernel(CUfunction function, const LaunchConfig& config, const Stream& stream,
                   void** args);

// Replay an instantiated graph on `stream`, through the dispatch controller like a launch.
void launch_graph(CUgraphExec graph, const Stream& stream);

// A 1-D grid-stride configuration covering n items: 256 threads per block, at most
// 32 blocks per SM worth of work per launch (the kernels loop over the rest).
LaunchConfig launch_config_1d(unsigned long long n, int device);

// One thread per item (256 per block), for streaming kernels over contiguous memory: on an H200 a
// 1 GiB add ran 5% faster with a block per 256 vectors than with the grid-stride cap above (the
// hardware block scheduler keeps the loads flowing better than a persistent loop). The grid is
// capped at 2^31 - 1 blocks, so kernels still loop when n is larger.
LaunchConfig launch_config_flat(unsigned long long n);

}  // namespace pgk
