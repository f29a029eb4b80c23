use std::time::Duration;

/// Per-call resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// CPU time a call may take before it is interrupted. Enforced by epoch
    /// interruption at a 100 ms tick, so a call is stopped between the
    /// deadline and one tick after it.
    pub deadline: Duration,
    /// Bytes of linear memory all of a call's instances may hold together.
    pub memory: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(1),
            memory: 64 * 1024 * 1024,
        }
    }
}

/// Enforces [`Limits::memory`] across every memory of one store, and
/// remembers a refusal so the resulting trap can be reported as what it is.
pub(crate) struct MemoryLimiter {
    cap: usize,
    used: usize,
    pub(crate) exceeded: bool,
}

impl MemoryLimiter {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            used: 0,
            exceeded: false,
        }
    }
}

/// Table elements one store may hold; far above any real plugin's needs.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let used = self.used - current.min(self.used) + desired;
        if used > self.cap {
            self.exceeded = true;
            return Err(wasmtime::format_err!(
                "memory cap of {} bytes reached",
                self.cap
            ));
        }
        self.used = used;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}
