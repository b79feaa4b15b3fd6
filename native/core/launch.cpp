#include "core/launch.hpp"

#include <algorithm>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/gil.hpp"
#include "core/rust_api.hpp"
#include "core/stream.hpp"

namespace pgk {

namespace {

template <typename Enqueue>
void dispatch(const Stream& stream, const char* what, Enqueue&& enqueue) {
    const pgk_api& api = rust_api();
    CUresult r;
    {
        GilRelease nogil(!t_launches_keep_gil);
        DispatchTicket ticket(api, stream.device(), stream.id());
        r = enqueue();
        ticket.end(r == CUDA_SUCCESS);
    }
    check(r, what);
}

}  // namespace

void launch_kernel(CUfunction function, const LaunchConfig& c, const Stream& stream, void** args) {
    if (c.dependent && compute_capability(stream.device()).first >= 9) {
        dispatch(stream, "cuLaunchKernelEx", [&] {
            CUlaunchAttribute attr{};
            attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            CUlaunchConfig config{};
            config.gridDimX = c.grid[0], config.gridDimY = c.grid[1], config.gridDimZ = c.grid[2];
            config.blockDimX = c.block[0], config.blockDimY = c.block[1];
            config.blockDimZ = c.block[2];
            config.sharedMemBytes = c.shared_mem;
            config.hStream = stream.handle();
            config.attrs = &attr;
            config.numAttrs = 1;
            return drv().cuLaunchKernelEx(&config, function, args, nullptr);
        });
        return;
    }
    dispatch(stream, "cuLaunchKernel", [&] {
        return drv().cuLaunchKernel(function, c.grid[0], c.grid[1], c.grid[2], c.block[0],
                                    c.block[1], c.block[2], c.shared_mem, stream.handle(), args,
                                    nullptr);
    });
}

void launch_graph(CUgraphExec graph, const Stream& stream) {
    dispatch(stream, "cuGraphLaunch", [&] { return drv().cuGraphLaunch(graph, stream.handle()); });
}

LaunchConfig launch_config_1d(unsigned long long n, int device) {
    static int sm_counts[kMaxDevices] = {0};
    if (sm_counts[device] == 0) sm_counts[device] = device_info(device).sm_count;
    constexpr unsigned long long kThreads = 256;
    const unsigned long long max_blocks = static_cast<unsigned long long>(sm_counts[device]) * 32;
    LaunchConfig c;
    c.block[0] = kThreads;
    c.grid[0] =
        static_cast<unsigned>(std::max(1ULL, std::min(max_blocks, (n + kThreads - 1) / kThreads)));
    return c;
}

LaunchConfig launch_config_flat(unsigned long long n) {
    constexpr unsigned long long kThreads = 256;
    constexpr unsigned long long kMaxBlocks = (1ULL << 31) - 1;
    LaunchConfig c;
    c.block[0] = kThreads;
    c.grid[0] =
        static_cast<unsigned>(std::max(1ULL, std::min(kMaxBlocks, (n + kThreads - 1) / kThreads)));
    return c;
}

}  // namespace pgk
