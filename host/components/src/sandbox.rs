//! The state of one call: a WASI context that grants nothing, a captured
//! stderr, and the memory limiter.

use std::path::PathBuf;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use crate::limits::MemoryLimiter;
use crate::services::AdapterServices;

/// How much of a component's stderr is kept for error messages.
const STDERR_CAPTURE: usize = 16 * 1024;

pub(crate) struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) stderr: MemoryOutputPipe,
    /// A command tool's stdout, kept for its answer.
    pub(crate) stdout: Option<MemoryOutputPipe>,
    /// What the host answers a runtime adapter's questions with.
    pub(crate) services: Option<Box<dyn AdapterServices>>,
    /// The world's instance slot this call holds, given back when the
    /// store is dropped.
    pub(crate) slot: Option<crate::slots::Slot>,
    /// The world of the component the call is to, which the gate asks
    /// about every host call.
    pub(crate) world: Option<crate::World>,
    /// Outgoing HTTP: linked for command tools only, and reaching only
    /// what their grants list.
    http: wasmtime_wasi_http::WasiHttpCtx,
    pub(crate) net: crate::net::NetHooks,
}

impl CallState {
    /// No filesystem, network, environment or arguments; clocks that stand
    /// still at the Unix epoch (so timing reveals nothing and results stay
    /// a function of the input); stdin closed, stdout discarded.
    pub(crate) fn sandboxed(memory_cap: usize) -> Self {
        Self::granted(memory_cap, &[]).expect("no grants, nothing to fail")
    }

    /// The sandbox plus read-only views of those of `grants` that open as
    /// folders (a path that is missing or not a folder is left out), each
    /// at its own host path inside the guest, so paths mean the same on
    /// both sides.
    pub(crate) fn granted(
        memory_cap: usize,
        grants: &[PathBuf],
    ) -> Result<Self, (PathBuf, String)> {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let wasi = context(&stderr, grants)?;
        Ok(Self::with_context(wasi, memory_cap, stderr))
    }

    /// Gives a call not yet made (its instance never called) the views of
    /// `grants` in place of those it had, as [`CallState::granted`] makes
    /// them.
    pub(crate) fn grant(&mut self, grants: &[PathBuf]) -> Result<(), (PathBuf, String)> {
        self.wasi = context(&self.stderr, grants)?;
        Ok(())
    }

    /// Gives a command's instance, made and never called, the context of
    /// the run `fresh` was made for: its WASI context (grants, input,
    /// output), its stderr and stdout, and its network hooks. The memory
    /// limiter stays: the instance's first memory was counted against it
    /// (its cap is the run's, as the spare was chosen by it).
    pub(crate) fn take_run(&mut self, fresh: Self) {
        let Self {
            wasi,
            stderr,
            stdout,
            net,
            ..
        } = fresh;
        self.wasi = wasi;
        self.stderr = stderr;
        self.stdout = stdout;
        self.net = net;
    }

    /// A call's state around the WASI context `wasi`.
    pub(crate) fn with_context(wasi: WasiCtx, memory_cap: usize, stderr: MemoryOutputPipe) -> Self {
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(memory_cap),
            stderr,
            stdout: None,
            services: None,
            slot: None,
            world: None,
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            net: crate::net::NetHooks::none(),
        }
    }

    /// The host's services for `call`, if the gate lets this call's world
    /// make it and the host gave any.
    pub(crate) fn services_for(
        &mut self,
        call: rye_gate::HostCall,
    ) -> Option<&mut Box<dyn AdapterServices>> {
        if !self.world.is_some_and(|w| w.may_call(call)) {
            return None;
        }
        self.services.as_mut()
    }

    pub(crate) fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents()).into_owned()
    }
}

/// The sandbox's WASI context around `stderr`, with read-only views of
/// those of `grants` that open as folders.
fn context(stderr: &MemoryOutputPipe, grants: &[PathBuf]) -> Result<WasiCtx, (PathBuf, String)> {
    let mut builder = WasiCtx::builder();
    builder
        // Calls are synchronous already (on a blocking thread or in
        // block_in_place); a trip to tokio's blocking pool for every
        // file a guest looks at would only add latency.
        .allow_blocking_current_thread(true)
        .stderr(stderr.clone())
        .wall_clock(FrozenClock)
        .monotonic_clock(FrozenClock)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    for dir in grants {
        let guest = dir
            .to_str()
            .ok_or_else(|| (dir.clone(), "the path is not UTF-8".to_owned()))?;
        // Opened as a folder or left out: asking first whether it is one
        // would only look the path up once more. Only a path that names
        // no folder is left out; any other failure (no descriptor left,
        // say) is the call's, not a view silently missing.
        if let Err(e) = builder.preopened_dir(dir, guest, FsPerms::ReadOnly) {
            let names_no_folder = e
                .downcast_ref::<std::io::Error>()
                .and_then(rustix::io::Errno::from_io_error)
                .is_some_and(|errno| {
                    [
                        rustix::io::Errno::NOENT,
                        rustix::io::Errno::NOTDIR,
                        rustix::io::Errno::ACCESS,
                        rustix::io::Errno::LOOP,
                        rustix::io::Errno::NAMETOOLONG,
                    ]
                    .contains(&errno)
                });
            if !names_no_folder {
                return Err((dir.clone(), format!("{e:#}")));
            }
        }
    }
    Ok(builder.build())
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wasmtime_wasi_http::WasiHttpView for CallState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.net,
        }
    }
}

struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }

    fn now(&self) -> u64 {
        0
    }
}
