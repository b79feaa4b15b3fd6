/*
 * The C API between pygpukit._rust (Rust: every memory and scheduling decision)
 * and pygpukit._native (C++: every CUDA call).
 *
 * _rust exports a PyCapsule named PGK_CAPI_CAPSULE_NAME holding a `const pgk_api*`.
 * _native imports it once at module init (PyCapsule_Import), checks `version`
 * and `struct_size`, then registers its device backend: the only way Rust
 * reaches the GPU. Rust mirrors these structs with #[repr(C)] in
 * rust/pygpukit-python/src/capi.rs; change both together and bump the version.
 *
 * Threading: every function may be called from any thread, with or without the
 * GIL. None of them synchronizes the device.
 */
#ifndef PYGPUKIT_RUST_CAPI_H
#define PYGPUKIT_RUST_CAPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PGK_CAPI_CAPSULE_NAME "pygpukit._rust._C_API"
/* 2: transfer engine functions appended; 3: pool_touch_all; 4: PGK_ALLOC_NO_WAIT and
   PGK_WOULD_BLOCK; 5: the upload kernel (pull_launch, pgk_pull_args, transfer_configure's
   pull_stream) */
#define PGK_CAPI_VERSION 5u

typedef uint64_t pgk_stream; /* CUstream as an integer; 0 is the legacy default stream */
typedef uint64_t pgk_event;  /* CUevent as an integer */
typedef uint64_t pgk_devptr; /* CUdeviceptr */

typedef enum pgk_status {
    PGK_OK = 0,
    PGK_OUT_OF_MEMORY = 1,  /* the device (or host) has no memory left, even after freeing caches */
    PGK_LIMIT_EXCEEDED = 2, /* a global or partition limit refused the request */
    PGK_BACKEND_ERROR = 3,  /* a backend call failed; last_error() has the CUresult and text */
    PGK_INVALID_ARGUMENT = 4, /* e.g. an unknown block id */
    PGK_NO_BACKEND = 5,       /* no device backend registered for this device */
    PGK_WOULD_BLOCK = 6       /* PGK_ALLOC_NO_WAIT and no cached block fits (no error text) */
} pgk_status;

/* transfer_submit directions */
#define PGK_HOST_TO_DEVICE 0
#define PGK_DEVICE_TO_HOST 1

/* pool_alloc flags */
#define PGK_ALLOC_EVICTABLE 0x1u /* may be spilled to pinned host memory under pressure */
/* Only a cached block (no backend allocation, release, spill or host wait): PGK_WOULD_BLOCK
   otherwise, with nothing changed. Lets a caller that holds the GIL try first and release it only
   for the call that may wait. */
#define PGK_ALLOC_NO_WAIT 0x2u

/*
 * One launch of the upload kernel (native/kernels/upload_pull.cu). It copies `nbytes` to `dst`
 * out of a ring of `slots` pinned chunks that the Rust engine's threads fill
 * (rust/pygpukit-core/src/pull_ring.rs). Chunk i has sequence number seq = first_seq + i, sits in
 * slot seq % slots during lap seq / slots, and is ready once the slot's `ready` flag reaches
 * lap + 1 (u32, wrapping); after reading it the kernel sets the slot's `freed` flag to lap + 1.
 * Flags are u32s PGK_PULL_FLAG_STRIDE bytes apart.
 */
#define PGK_PULL_FLAG_STRIDE 64
typedef struct pgk_pull_args {
    pgk_devptr dst;     /* 16-byte aligned */
    uint64_t ring;      /* pinned, slots * chunk_bytes */
    uint64_t ready;     /* pinned flags, host -> device */
    uint64_t freed;     /* pinned flags, device -> host */
    pgk_devptr counter; /* one u32 of device memory; the launch zeroes it first (stream order) */
    uint64_t first_seq;
    uint64_t nbytes;
    uint64_t chunk_bytes; /* a multiple of 16 */
    uint32_t slots;
    uint32_t ctas; /* thread blocks */
} pgk_pull_args;

/*
 * The device backend _native implements over the CUDA driver. Each function
 * returns 0 on success or a CUresult (CUDA_ERROR_NOT_READY = 600 from
 * event_query means "still pending"). `ctx` is passed back unchanged.
 */
typedef struct pgk_device_backend {
    void* ctx;
    int (*mem_alloc)(void* ctx, int32_t device, uint64_t nbytes, pgk_devptr* out);
    int (*mem_free)(void* ctx, int32_t device, pgk_devptr ptr);
    int (*mem_get_info)(void* ctx, int32_t device, uint64_t* free_bytes, uint64_t* total_bytes);
    int (*host_alloc)(void* ctx, uint64_t nbytes, void** out); /* page-locked host memory */
    int (*host_free)(void* ctx, void* ptr);
    int (*event_create)(void* ctx, int32_t device, pgk_event* out); /* timing disabled */
    int (*event_destroy)(void* ctx, pgk_event ev);
    int (*event_record)(void* ctx, pgk_event ev, pgk_stream stream);
    int (*event_query)(void* ctx, pgk_event ev);
    int (*event_synchronize)(void* ctx, pgk_event ev); /* called without the GIL */
    int (*stream_wait_event)(void* ctx, pgk_stream stream, pgk_event ev);
    /* Copy with unified addressing (device<->device, device<->pinned host), enqueued on stream. */
    int (*memcpy_async)(void* ctx, uint64_t dst, uint64_t src, uint64_t nbytes, pgk_stream stream);
    /* *capturing = 1 when stream is being captured into a CUDA graph. */
    int (*stream_is_capturing)(void* ctx, pgk_stream stream, int* capturing);
    /* Version 5, may be NULL: enqueue the upload kernel on `stream` of `device`. Not through the
       dispatch controller (the engine calls it under its own lock). */
    int (*pull_launch)(void* ctx, int32_t device, pgk_stream stream, const pgk_pull_args* args);
} pgk_device_backend;

typedef struct pgk_block {
    uint64_t id;    /* handle for pool_free / pool_touch; never 0 */
    pgk_devptr ptr; /* device address, valid until pool_free */
    uint64_t size;  /* usable bytes, >= the request */
} pgk_block;

typedef struct pgk_api {
    uint32_t version;     /* PGK_CAPI_VERSION */
    uint32_t struct_size; /* sizeof(pgk_api) as Rust sees it */

    /* Register the CUDA backend for devices [0, device_count). Called once by _native. */
    pgk_status (*register_backend)(const pgk_device_backend* backend, int32_t device_count);

    /* ---- device pool ---- */
    /* A block of at least nbytes usable on `stream` without further synchronization.
       The current partition (thread-local, set through _rust) is charged. */
    pgk_status (*pool_alloc)(int32_t device, uint64_t nbytes, pgk_stream stream, uint32_t flags,
                             pgk_block* out);
    /* Give a block back. Reusable on `stream` at once, on other streams only after
       the work enqueued on `stream` before this call has completed. */
    void (*pool_free)(uint64_t block_id, pgk_stream stream);
    /* Before a kernel uses an evictable block on `stream`: restores it to the device if it was
       spilled (the block's ptr may change: read it from *out) and marks it most recently used. */
    pgk_status (*pool_touch)(uint64_t block_id, pgk_stream stream, pgk_block* out);

    /* ---- CUDA graph capture: allocations on `stream` between begin and end come from a
       graph-private region that lives until pool_graph_release(id) ---- */
    pgk_status (*pool_graph_begin)(int32_t device, pgk_stream stream, uint64_t* graph_pool_id);
    pgk_status (*pool_graph_end)(uint64_t graph_pool_id);
    void (*pool_graph_release)(uint64_t graph_pool_id);

    /* ---- dispatch controller: every launch the runtime makes ---- */
    /* Before enqueueing work on `stream`. May block (without the GIL held by the caller)
       while the stream is at its in-flight limit or paced. Returns a ticket for dispatch_end. */
    pgk_status (*dispatch_begin)(int32_t device, pgk_stream stream, uint64_t* ticket);
    /* Right after the launch was enqueued (ok = 0 if the launch failed). */
    void (*dispatch_end)(uint64_t ticket, int ok);

    /* Text of the last non-OK status on this thread (NUL-terminated, truncated to cap).
       Returns the full length. */
    size_t (*last_error)(char* buf, size_t cap);

    /* ---- transfer engine (version 2): pageable host <-> device copies chunked through
       pinned staging buffers on dedicated copy streams, higher priority first ---- */
    /* Once per device before transfer_submit: the copy streams (made by _native), the stream of
       the upload kernel (0: none, every upload is staged), the download chunk size and how many
       chunks may be in flight (2 = double buffering). */
    pgk_status (*transfer_configure)(int32_t device, pgk_stream h2d_stream, pgk_stream d2h_stream,
                                     pgk_stream pull_stream, uint64_t chunk_bytes, uint32_t slots);
    /* Copies nbytes between pageable `host` memory and `dev` (direction PGK_HOST_TO_DEVICE or
       PGK_DEVICE_TO_HOST). Returns once every chunk is enqueued (host-to-device) or has landed in
       `host` (device-to-host), waiting on the host for staging buffers: call without the GIL.
       Both ranges stay valid until the ticket completes. *ticket is for the calls below. */
    pgk_status (*transfer_submit)(int32_t device, int32_t direction, uint64_t host, pgk_devptr dev,
                                  uint64_t nbytes, int32_t priority, uint64_t* ticket);
    /* Work enqueued on `stream` after this call waits for the copy (no host wait). */
    pgk_status (*transfer_stream_wait)(uint64_t ticket, pgk_stream stream);
    /* Waits on the host until the copy is complete (call without the GIL); releases the ticket. */
    pgk_status (*transfer_wait)(uint64_t ticket);
    /* Forgets a ticket that will not be waited on. */
    void (*transfer_release)(uint64_t ticket);

    /* ---- version 3 ---- */
    /* pool_touch of n evictable blocks of one device that one piece of work uses together:
       restoring one never spills another of them, so every out[i].ptr is current at once.
       PGK_LIMIT_EXCEEDED / PGK_OUT_OF_MEMORY when they do not fit together. */
    pgk_status (*pool_touch_all)(const uint64_t* block_ids, size_t n, pgk_stream stream,
                                 pgk_block* out);
} pgk_api;

#ifdef __cplusplus
}
#endif

#endif /* PYGPUKIT_RUST_CAPI_H */
