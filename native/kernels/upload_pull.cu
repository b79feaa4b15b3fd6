// The upload kernel: copies a large pageable upload to the device out of the small pinned ring
// that the transfer engine's host threads fill. Why a kernel rather than the copy engine, and the
// host side of the protocol: rust/pygpukit-core/src/pull_ring.rs; the arguments: pgk_pull_args in
// native/include/pygpukit/rust_capi.h.
//
// Each block takes the next chunk in sequence order (a counter, so progress never depends on
// which blocks are resident), waits for the chunk's slot to be marked ready, copies it with
// 16-byte loads over PCIe (eight per thread in flight), then marks the slot freed.

namespace {

constexpr unsigned kThreads = 512;
constexpr unsigned kUnroll = 8;
constexpr unsigned kFlagStride = 16;  // u32s between flags: PGK_PULL_FLAG_STRIDE = 64 bytes

__device__ __forceinline__ unsigned load_acquire_sys(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_release_sys(unsigned* p, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The ring is rewritten every lap: volatile loads are never served from a cached earlier lap.
__device__ __forceinline__ uint4 load_ring(const uint4* p) {
    uint4 r;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p)
                 : "memory");
    return r;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
    upload_pull(unsigned long long dst, const uint4* ring, const unsigned* ready, unsigned* freed,
                unsigned* counter, unsigned long long first_seq, unsigned long long nbytes,
                unsigned long long chunk_bytes, unsigned slots) {
    __shared__ unsigned long long s_chunk;
    const unsigned long long chunks = (nbytes + chunk_bytes - 1) / chunk_bytes;
    for (;;) {
        if (threadIdx.x == 0) s_chunk = atomicAdd(counter, 1u);
        __syncthreads();
        const unsigned long long i = s_chunk;
        if (i >= chunks) return;
        const unsigned long long seq = first_seq + i;
        const unsigned slot = static_cast<unsigned>(seq % slots);
        const unsigned want = static_cast<unsigned>(seq / slots) + 1u;  // wraps with the host's
        if (threadIdx.x == 0) {
            while (static_cast<int>(load_acquire_sys(ready + slot * kFlagStride) - want) < 0) {
                __nanosleep(64);
            }
        }
        // Thread 0's acquire, then the barrier: every thread's loads below see the chunk.
        __syncthreads();
        const unsigned long long offset = i * chunk_bytes;
        const unsigned long long len =
            chunk_bytes < nbytes - offset ? chunk_bytes : nbytes - offset;
        const uint4* src = ring + slot * (chunk_bytes / 16);
        uint4* out = reinterpret_cast<uint4*>(dst + offset);
        const unsigned vecs = static_cast<unsigned>(len / 16);
        for (unsigned base = 0; base < vecs; base += kThreads * kUnroll) {
            uint4 v[kUnroll];
#pragma unroll
            for (unsigned u = 0; u < kUnroll; ++u) {
                const unsigned k = base + u * kThreads + threadIdx.x;
                if (k < vecs) v[u] = load_ring(src + k);
            }
#pragma unroll
            for (unsigned u = 0; u < kUnroll; ++u) {
                const unsigned k = base + u * kThreads + threadIdx.x;
                if (k < vecs) out[k] = v[u];
            }
        }
        const unsigned tail = static_cast<unsigned>(len % 16);
        if (threadIdx.x < tail) {
            const unsigned k = vecs * 16 + threadIdx.x;
            const volatile unsigned char* s = reinterpret_cast<const unsigned char*>(src);
            reinterpret_cast<unsigned char*>(out)[k] = s[k];
        }
        // Every thread's reads of the slot are done (their values are stored): release it. The
        // barrier also keeps thread 0 from taking the next chunk into s_chunk before all have
        // read this one.
        __syncthreads();
        if (threadIdx.x == 0) store_release_sys(freed + slot * kFlagStride, want);
    }
}
