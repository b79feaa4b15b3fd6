//! The C API capsule `pygpukit._rust._C_API`: `#[repr(C)]` mirrors of
//! `native/include/pygpukit/rust_capi.h` (version 5) and the `extern "C"`
//! functions behind it, plus the adapter that turns the C++ device backend's
//! function pointers into a [`DeviceBackend`].
//!
//! Every function here may be called from any thread with or without the GIL:
//! none touches Python. Failures set this thread's last error text.

use crate::runtime::runtime;
use pygpukit_core::backend::{
    BackendError, BackendResult, DevPtr, DeviceBackend, Event, PullArgs, Stream,
    CUDA_ERROR_NOT_READY, CUDA_ERROR_NOT_SUPPORTED,
};
use pygpukit_core::pool::{AllocError, AllocErrorKind, AllocOptions, BlockRef, PoolError};
use pygpukit_core::runtime::RuntimeError;
use pygpukit_core::transfer::{Direction, TransferRequest};
use std::cell::RefCell;
use std::ffi::{c_int, c_void, CStr};
use std::sync::Arc;

pub const CAPSULE_NAME: &CStr = c"pygpukit._rust._C_API";
pub const PGK_CAPI_VERSION: u32 = 5;

pub type PgkStatus = c_int;
pub const PGK_OK: PgkStatus = 0;
pub const PGK_OUT_OF_MEMORY: PgkStatus = 1;
pub const PGK_LIMIT_EXCEEDED: PgkStatus = 2;
pub const PGK_BACKEND_ERROR: PgkStatus = 3;
pub const PGK_INVALID_ARGUMENT: PgkStatus = 4;
pub const PGK_NO_BACKEND: PgkStatus = 5;
pub const PGK_WOULD_BLOCK: PgkStatus = 6;

pub const PGK_ALLOC_EVICTABLE: u32 = 0x1;
pub const PGK_ALLOC_NO_WAIT: u32 = 0x2;

pub const PGK_HOST_TO_DEVICE: i32 = 0;
pub const PGK_DEVICE_TO_HOST: i32 = 1;

type Ctx = *mut c_void;

/// Declares a `#[repr(C)]` mirror of a C struct and its `layout()`: size, alignment and every
/// field's offset by name, in declaration order. `capi_layout` reports these, so the field list
/// is written once, here.
macro_rules! c_mirror {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $name {
            /// `(size, align, [(field, offset), ...])` as Rust lays the struct out.
            pub fn layout() -> (usize, usize, Vec<(&'static str, usize)>) {
                (
                    std::mem::size_of::<Self>(),
                    std::mem::align_of::<Self>(),
                    vec![$((stringify!($field), std::mem::offset_of!(Self, $field)),)*],
                )
            }
        }
    };
}

c_mirror! {
    /// Mirror of `pgk_device_backend`.
    #[derive(Clone, Copy)]
    pub struct PgkDeviceBackend {
        pub ctx: Ctx,
        pub mem_alloc: Option<unsafe extern "C" fn(Ctx, i32, u64, *mut u64) -> c_int>,
        pub mem_free: Option<unsafe extern "C" fn(Ctx, i32, u64) -> c_int>,
        pub mem_get_info: Option<unsafe extern "C" fn(Ctx, i32, *mut u64, *mut u64) -> c_int>,
        pub host_alloc: Option<unsafe extern "C" fn(Ctx, u64, *mut *mut c_void) -> c_int>,
        pub host_free: Option<unsafe extern "C" fn(Ctx, *mut c_void) -> c_int>,
        pub event_create: Option<unsafe extern "C" fn(Ctx, i32, *mut u64) -> c_int>,
        pub event_destroy: Option<unsafe extern "C" fn(Ctx, u64) -> c_int>,
        pub event_record: Option<unsafe extern "C" fn(Ctx, u64, u64) -> c_int>,
        pub event_query: Option<unsafe extern "C" fn(Ctx, u64) -> c_int>,
        pub event_synchronize: Option<unsafe extern "C" fn(Ctx, u64) -> c_int>,
        pub stream_wait_event: Option<unsafe extern "C" fn(Ctx, u64, u64) -> c_int>,
        pub memcpy_async: Option<unsafe extern "C" fn(Ctx, u64, u64, u64, u64) -> c_int>,
        pub stream_is_capturing: Option<unsafe extern "C" fn(Ctx, u64, *mut c_int) -> c_int>,
        /// Optional (version 5): NULL when the backend has no upload kernel.
        pub pull_launch: Option<unsafe extern "C" fn(Ctx, i32, u64, *const PgkPullArgs) -> c_int>,
    }
}

c_mirror! {
    /// Mirror of `pgk_pull_args` (see [`PullArgs`]).
    #[derive(Clone, Copy, Debug)]
    pub struct PgkPullArgs {
        pub dst: u64,
        pub ring: u64,
        pub ready: u64,
        pub freed: u64,
        pub counter: u64,
        pub first_seq: u64,
        pub nbytes: u64,
        pub chunk_bytes: u64,
        pub slots: u32,
        pub ctas: u32,
    }
}

c_mirror! {
    /// Mirror of `pgk_block`.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct PgkBlock {
        pub id: u64,
        pub ptr: u64,
        pub size: u64,
    }
}

c_mirror! {
    /// Mirror of `pgk_api`.
    pub struct PgkApi {
        pub version: u32,
        pub struct_size: u32,
        pub register_backend: unsafe extern "C" fn(*const PgkDeviceBackend, i32) -> PgkStatus,
        pub pool_alloc: unsafe extern "C" fn(i32, u64, u64, u32, *mut PgkBlock) -> PgkStatus,
        pub pool_free: unsafe extern "C" fn(u64, u64),
        pub pool_touch: unsafe extern "C" fn(u64, u64, *mut PgkBlock) -> PgkStatus,
        pub pool_graph_begin: unsafe extern "C" fn(i32, u64, *mut u64) -> PgkStatus,
        pub pool_graph_end: unsafe extern "C" fn(u64) -> PgkStatus,
        pub pool_graph_release: unsafe extern "C" fn(u64),
        pub dispatch_begin: unsafe extern "C" fn(i32, u64, *mut u64) -> PgkStatus,
        pub dispatch_end: unsafe extern "C" fn(u64, c_int),
        pub last_error: unsafe extern "C" fn(*mut u8, usize) -> usize,
        pub transfer_configure: unsafe extern "C" fn(i32, u64, u64, u64, u64, u32) -> PgkStatus,
        pub transfer_submit: unsafe extern "C" fn(i32, i32, u64, u64, u64, i32, *mut u64) -> PgkStatus,
        pub transfer_stream_wait: unsafe extern "C" fn(u64, u64) -> PgkStatus,
        pub transfer_wait: unsafe extern "C" fn(u64) -> PgkStatus,
        pub transfer_release: unsafe extern "C" fn(u64),
        pub pool_touch_all: unsafe extern "C" fn(*const u64, usize, u64, *mut PgkBlock) -> PgkStatus,
    }
}

/// The table the capsule points to; it lives as long as the process.
pub static API: PgkApi = PgkApi {
    version: PGK_CAPI_VERSION,
    struct_size: std::mem::size_of::<PgkApi>() as u32,
    register_backend,
    pool_alloc,
    pool_free,
    pool_touch,
    pool_graph_begin,
    pool_graph_end,
    pool_graph_release,
    dispatch_begin,
    dispatch_end,
    last_error,
    transfer_configure,
    transfer_submit,
    transfer_stream_wait,
    transfer_wait,
    transfer_release,
    pool_touch_all,
};

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    static LAST_ALLOC_ERROR: RefCell<Option<AllocError>> = const { RefCell::new(None) };
}

/// This thread's last failed allocation (for building `OutOfMemoryError`).
pub fn last_alloc_error() -> Option<AllocError> {
    LAST_ALLOC_ERROR.with(|e| e.borrow().clone())
}

fn fail(status: PgkStatus, message: String) -> PgkStatus {
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
    status
}

/// Maps a registry error to a status, recording its text (and allocation details).
pub fn status_of(err: &RuntimeError) -> PgkStatus {
    if let RuntimeError::Pool(PoolError::Alloc(a)) = err {
        LAST_ALLOC_ERROR.with(|e| *e.borrow_mut() = Some(a.clone()));
    }
    let status = match err {
        RuntimeError::NoBackend(_) => PGK_NO_BACKEND,
        RuntimeError::AlreadyRegistered => PGK_INVALID_ARGUMENT,
        RuntimeError::Pool(PoolError::Alloc(a)) => match a.kind {
            AllocErrorKind::OutOfMemory => PGK_OUT_OF_MEMORY,
            AllocErrorKind::LimitExceeded => PGK_LIMIT_EXCEEDED,
            AllocErrorKind::WouldBlock => PGK_WOULD_BLOCK,
            AllocErrorKind::PartitionRetired => PGK_INVALID_ARGUMENT,
            AllocErrorKind::Backend(_) => PGK_BACKEND_ERROR,
        },
        RuntimeError::Pool(PoolError::Backend(_)) => PGK_BACKEND_ERROR,
        RuntimeError::Pool(_)
        | RuntimeError::TransferNotConfigured(_)
        | RuntimeError::TransferAlreadyConfigured(_)
        | RuntimeError::UnknownTransfer(_) => PGK_INVALID_ARGUMENT,
    };
    fail(status, describe(err))
}

/// Human-readable text of a registry error, the same for C++ and Python.
pub fn describe(err: &RuntimeError) -> String {
    match err {
        RuntimeError::NoBackend(d) => format!("no device backend registered for device {d}"),
        RuntimeError::AlreadyRegistered => "a device backend is already registered".to_string(),
        RuntimeError::Pool(PoolError::UnknownBlock(id)) => {
            format!("unknown or already freed block id {id}")
        }
        RuntimeError::Pool(PoolError::UnknownGraphPool(id)) => {
            format!("unknown graph pool id {id}")
        }
        RuntimeError::Pool(PoolError::NotCapturing(s)) => {
            format!(
                "stream {s:#x} is not capturing: call pool_graph_begin after cuStreamBeginCapture"
            )
        }
        RuntimeError::Pool(PoolError::RestoreDuringCapture(id)) => format!(
            "block {id} is spilled to host memory and cannot be restored while its stream is \
             captured: touch it before beginning the capture"
        ),
        RuntimeError::Pool(PoolError::Backend(e)) => e.to_string(),
        RuntimeError::TransferNotConfigured(d) => {
            format!("no transfer engine on device {d}: call transfer_configure first")
        }
        RuntimeError::TransferAlreadyConfigured(d) => {
            format!("the transfer engine of device {d} is already configured")
        }
        RuntimeError::UnknownTransfer(t) => format!("unknown or released transfer ticket {t}"),
        RuntimeError::Pool(PoolError::Alloc(AllocError {
            kind: AllocErrorKind::PartitionRetired,
            requested,
            partition,
            ..
        })) => {
            let name = partition.map_or_else(String::new, |p| {
                let name = runtime().partition_name(p).unwrap_or_else(|| p.to_string());
                format!(" {name:?}")
            });
            format!(
                "allocation of {requested} bytes refused: partition{name} was deleted, so nothing \
                 more can be allocated inside it; leave its `with partition:` block (or create \
                 the partition again) before allocating"
            )
        }
        RuntimeError::Pool(PoolError::Alloc(a)) => {
            let limit = a.limit.map_or("none".to_string(), |l| format!("{l} bytes"));
            let what = match &a.kind {
                AllocErrorKind::OutOfMemory => "out of device memory".to_string(),
                AllocErrorKind::LimitExceeded => "memory limit exceeded".to_string(),
                AllocErrorKind::WouldBlock => {
                    "no cached block fits (no-wait allocation)".to_string()
                }
                AllocErrorKind::PartitionRetired => unreachable!("described above"),
                AllocErrorKind::Backend(e) => e.to_string(),
            };
            let partition = a.partition.map_or(String::new(), |p| {
                let name = runtime().partition_name(p).unwrap_or_else(|| p.to_string());
                format!(", partition {name:?}")
            });
            format!(
                "{what}: requested {} bytes, in use {} bytes, limit {limit}{partition}",
                a.requested, a.in_use
            )
        }
    }
}

fn write_block(out: *mut PgkBlock, b: BlockRef) {
    // SAFETY: callers checked `out` is non-null; it points to caller-owned storage.
    unsafe {
        *out = PgkBlock {
            id: b.id,
            ptr: b.ptr,
            size: b.size,
        }
    };
}

/// [`DeviceBackend`] over the function pointers `_native` registered.
struct CapiBackend {
    table: PgkDeviceBackend,
}

// SAFETY: the C API requires every backend function to be callable from any
// thread; `ctx` is owned by `_native` and lives for the process.
unsafe impl Send for CapiBackend {}
// SAFETY: as above.
unsafe impl Sync for CapiBackend {}

fn check(code: c_int, call: &'static str) -> BackendResult<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(BackendError::new(code, call))
    }
}

macro_rules! call {
    ($self:ident . $f:ident ( $($arg:expr),* )) => {{
        let f = $self.table.$f.expect(concat!(stringify!($f), " checked at registration"));
        // SAFETY: registration checked the pointer; the backend contract makes it
        // valid for these arguments from any thread.
        check(unsafe { f($self.table.ctx, $($arg),*) }, stringify!($f))
    }};
}

impl DeviceBackend for CapiBackend {
    fn mem_alloc(&self, device: i32, nbytes: u64) -> BackendResult<DevPtr> {
        let mut out = 0u64;
        call!(self.mem_alloc(device, nbytes, &mut out))?;
        Ok(out)
    }

    fn mem_free(&self, device: i32, ptr: DevPtr) -> BackendResult<()> {
        call!(self.mem_free(device, ptr))
    }

    fn mem_get_info(&self, device: i32) -> BackendResult<(u64, u64)> {
        let (mut free, mut total) = (0u64, 0u64);
        call!(self.mem_get_info(device, &mut free, &mut total))?;
        Ok((free, total))
    }

    fn host_alloc(&self, nbytes: u64) -> BackendResult<u64> {
        let mut out: *mut c_void = std::ptr::null_mut();
        call!(self.host_alloc(nbytes, &mut out))?;
        Ok(out as u64)
    }

    fn host_free(&self, ptr: u64) -> BackendResult<()> {
        call!(self.host_free(ptr as *mut c_void))
    }

    fn event_create(&self, device: i32) -> BackendResult<Event> {
        let mut out = 0u64;
        call!(self.event_create(device, &mut out))?;
        Ok(out)
    }

    fn event_destroy(&self, event: Event) -> BackendResult<()> {
        call!(self.event_destroy(event))
    }

    fn event_record(&self, event: Event, stream: Stream) -> BackendResult<()> {
        call!(self.event_record(event, stream))
    }

    fn event_query(&self, event: Event) -> BackendResult<bool> {
        match call!(self.event_query(event)) {
            Ok(()) => Ok(true),
            Err(e) if e.code == CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn event_synchronize(&self, event: Event) -> BackendResult<()> {
        call!(self.event_synchronize(event))
    }

    fn stream_wait_event(&self, stream: Stream, event: Event) -> BackendResult<()> {
        call!(self.stream_wait_event(stream, event))
    }

    fn memcpy_async(&self, dst: u64, src: u64, nbytes: u64, stream: Stream) -> BackendResult<()> {
        call!(self.memcpy_async(dst, src, nbytes, stream))
    }

    fn stream_is_capturing(&self, stream: Stream) -> BackendResult<bool> {
        let mut capturing: c_int = 0;
        call!(self.stream_is_capturing(stream, &mut capturing))?;
        Ok(capturing != 0)
    }

    fn pull_launch(&self, device: i32, stream: Stream, args: &PullArgs) -> BackendResult<()> {
        if self.table.pull_launch.is_none() {
            return Err(BackendError::new(CUDA_ERROR_NOT_SUPPORTED, "pull_launch"));
        }
        let c = PgkPullArgs {
            dst: args.dst,
            ring: args.ring,
            ready: args.ready,
            freed: args.freed,
            counter: args.counter,
            first_seq: args.first_seq,
            nbytes: args.nbytes,
            chunk_bytes: args.chunk_bytes,
            slots: args.slots,
            ctas: args.ctas,
        };
        call!(self.pull_launch(device, stream, &c))
    }
}

unsafe extern "C" fn register_backend(
    backend: *const PgkDeviceBackend,
    device_count: i32,
) -> PgkStatus {
    // SAFETY: a non-null pointer to a pgk_device_backend, per the contract; copied at once.
    let Some(table) = (unsafe { backend.as_ref() }).copied() else {
        return fail(
            PGK_INVALID_ARGUMENT,
            "register_backend: backend is NULL".to_string(),
        );
    };
    let complete = table.mem_alloc.is_some()
        && table.mem_free.is_some()
        && table.mem_get_info.is_some()
        && table.host_alloc.is_some()
        && table.host_free.is_some()
        && table.event_create.is_some()
        && table.event_destroy.is_some()
        && table.event_record.is_some()
        && table.event_query.is_some()
        && table.event_synchronize.is_some()
        && table.stream_wait_event.is_some()
        && table.memcpy_async.is_some()
        && table.stream_is_capturing.is_some();
    if !complete || device_count < 0 {
        return fail(
            PGK_INVALID_ARGUMENT,
            "register_backend: a function pointer is NULL or device_count < 0".to_string(),
        );
    }
    match runtime().register_backend(Arc::new(CapiBackend { table }), device_count) {
        Ok(()) => PGK_OK,
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn pool_alloc(
    device: i32,
    nbytes: u64,
    stream: u64,
    flags: u32,
    out: *mut PgkBlock,
) -> PgkStatus {
    if out.is_null() {
        return fail(PGK_INVALID_ARGUMENT, "pool_alloc: out is NULL".to_string());
    }
    let options = AllocOptions {
        evictable: flags & PGK_ALLOC_EVICTABLE != 0,
        no_wait: flags & PGK_ALLOC_NO_WAIT != 0,
    };
    match runtime().alloc(device, nbytes, stream, options) {
        Ok(b) => {
            write_block(out, b);
            PGK_OK
        }
        // A no-wait miss is the caller's cue to retry without the GIL, not an error: no text.
        Err(RuntimeError::Pool(PoolError::Alloc(AllocError {
            kind: AllocErrorKind::WouldBlock,
            ..
        }))) => PGK_WOULD_BLOCK,
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn pool_free(block_id: u64, stream: u64) {
    if let Err(e) = runtime().free(block_id, stream) {
        status_of(&e);
    }
}

unsafe extern "C" fn pool_touch(block_id: u64, stream: u64, out: *mut PgkBlock) -> PgkStatus {
    if out.is_null() {
        return fail(PGK_INVALID_ARGUMENT, "pool_touch: out is NULL".to_string());
    }
    match runtime().touch(block_id, stream) {
        Ok(b) => {
            write_block(out, b);
            PGK_OK
        }
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn pool_touch_all(
    block_ids: *const u64,
    n: usize,
    stream: u64,
    out: *mut PgkBlock,
) -> PgkStatus {
    if n > 0 && (block_ids.is_null() || out.is_null()) {
        return fail(
            PGK_INVALID_ARGUMENT,
            "pool_touch_all: block_ids or out is NULL".to_string(),
        );
    }
    let ids: &[u64] = if n == 0 {
        &[]
    } else {
        // SAFETY: the caller passes n readable ids (checked non-null).
        unsafe { std::slice::from_raw_parts(block_ids, n) }
    };
    match runtime().touch_all(ids, stream) {
        Ok(blocks) => {
            for (i, b) in blocks.into_iter().enumerate() {
                // SAFETY: the caller passes room for n blocks (checked non-null).
                write_block(unsafe { out.add(i) }, b);
            }
            PGK_OK
        }
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn pool_graph_begin(
    device: i32,
    stream: u64,
    graph_pool_id: *mut u64,
) -> PgkStatus {
    if graph_pool_id.is_null() {
        return fail(
            PGK_INVALID_ARGUMENT,
            "pool_graph_begin: graph_pool_id is NULL".to_string(),
        );
    }
    match runtime().graph_begin(device, stream) {
        Ok(id) => {
            // SAFETY: checked non-null; caller-owned storage.
            unsafe { *graph_pool_id = id };
            PGK_OK
        }
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn pool_graph_end(graph_pool_id: u64) -> PgkStatus {
    match runtime().graph_end(graph_pool_id) {
        Ok(()) => PGK_OK,
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn pool_graph_release(graph_pool_id: u64) {
    if let Err(e) = runtime().graph_release(graph_pool_id) {
        status_of(&e);
    }
}

unsafe extern "C" fn dispatch_begin(device: i32, stream: u64, ticket: *mut u64) -> PgkStatus {
    if ticket.is_null() {
        return fail(
            PGK_INVALID_ARGUMENT,
            "dispatch_begin: ticket is NULL".to_string(),
        );
    }
    match runtime().dispatch_begin(device, stream) {
        Ok(t) => {
            // SAFETY: checked non-null; caller-owned storage.
            unsafe { *ticket = t };
            PGK_OK
        }
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn dispatch_end(ticket: u64, ok: c_int) {
    if let Err(e) = runtime().dispatch_end(ticket, ok != 0) {
        status_of(&e);
    }
}

unsafe extern "C" fn last_error(buf: *mut u8, cap: usize) -> usize {
    LAST_ERROR.with(|e| {
        let text = e.borrow();
        if !buf.is_null() && cap > 0 {
            let n = text.len().min(cap - 1);
            // SAFETY: buf has room for cap bytes, per the contract; n + 1 <= cap.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), buf, n);
                *buf.add(n) = 0;
            }
        }
        text.len()
    })
}

unsafe extern "C" fn transfer_configure(
    device: i32,
    h2d_stream: u64,
    d2h_stream: u64,
    pull_stream: u64,
    chunk_bytes: u64,
    slots: u32,
) -> PgkStatus {
    if chunk_bytes == 0 || slots == 0 {
        return fail(
            PGK_INVALID_ARGUMENT,
            "transfer_configure: chunk_bytes and slots must be > 0".to_string(),
        );
    }
    let pull_stream = (pull_stream != 0).then_some(pull_stream);
    let configured = runtime().transfer_configure(
        device,
        h2d_stream,
        d2h_stream,
        pull_stream,
        chunk_bytes,
        slots as usize,
    );
    match configured {
        Ok(()) => PGK_OK,
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn transfer_submit(
    device: i32,
    direction: i32,
    host: u64,
    dev: u64,
    nbytes: u64,
    priority: i32,
    ticket: *mut u64,
) -> PgkStatus {
    let direction = match direction {
        PGK_HOST_TO_DEVICE => Direction::HostToDevice,
        PGK_DEVICE_TO_HOST => Direction::DeviceToHost,
        other => {
            return fail(
                PGK_INVALID_ARGUMENT,
                format!("transfer_submit: unknown direction {other}"),
            )
        }
    };
    if ticket.is_null() || (host == 0 && nbytes > 0) {
        return fail(
            PGK_INVALID_ARGUMENT,
            "transfer_submit: ticket or host is NULL".to_string(),
        );
    }
    let request = TransferRequest {
        direction,
        host,
        device: dev,
        nbytes,
        priority,
    };
    // SAFETY: the contract makes the caller keep `host` valid until the ticket completes.
    match unsafe { runtime().transfer_submit(device, request) } {
        Ok(t) => {
            // SAFETY: checked non-null; caller-owned storage.
            unsafe { *ticket = t };
            PGK_OK
        }
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn transfer_stream_wait(ticket: u64, stream: u64) -> PgkStatus {
    match runtime().transfer_stream_wait(ticket, stream) {
        Ok(()) => PGK_OK,
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn transfer_wait(ticket: u64) -> PgkStatus {
    match runtime().transfer_wait(ticket) {
        Ok(()) => PGK_OK,
        Err(e) => status_of(&e),
    }
}

unsafe extern "C" fn transfer_release(ticket: u64) {
    if let Err(e) = runtime().transfer_release(ticket) {
        status_of(&e);
    }
}

/// Keeps `AllocError` construction in one place for the Python side.
pub fn alloc_error_of(err: &RuntimeError) -> Option<&AllocError> {
    match err {
        RuntimeError::Pool(PoolError::Alloc(a)) => Some(a),
        _ => None,
    }
}
