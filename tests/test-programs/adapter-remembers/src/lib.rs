//! Plans `echo <calls> <earlier parameters> <leftover bytes>`: the number
//! of plans this instance has made, the parameters of the one before, and
//! how many bytes of memory it grew were not zero when it first read
//! them. In a fresh instance per plan, whose memory the engine reset, that
//! is always `1`, nothing and `0`.

use std::sync::Mutex;

use rye_guest::adapter::{PlanError, PlanInput, Planned, ProcessPlan, RuntimeAdapter};

static SEEN: Mutex<(u32, String)> = Mutex::new((0, String::new()));

/// Pages of linear memory grown on every plan: well past the part the
/// engine keeps resident between instances.
const GROWN_PAGES: usize = 48;
const PAGE: usize = 64 * 1024;

struct Remembers;

impl RuntimeAdapter for Remembers {
    fn plan(input: PlanInput) -> Result<Planned, PlanError> {
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        seen.0 += 1;
        let earlier = std::mem::replace(&mut seen.1, input.parameters);
        Ok(ProcessPlan::new("echo")
            .arg(seen.0.to_string())
            .arg(earlier)
            .arg(leftovers().to_string())
            .into())
    }
}

/// Grows linear memory, counts the bytes of the new pages that are not
/// zero, then marks every byte of them, so that an instance later given
/// the same memory unreset would count them.
#[cfg(target_arch = "wasm32")]
fn leftovers() -> usize {
    let first = core::arch::wasm32::memory_grow(0, GROWN_PAGES);
    if first == usize::MAX {
        return usize::MAX;
    }
    let start = (first * PAGE) as *mut u8;
    let len = GROWN_PAGES * PAGE;
    let mut dirty = 0;
    for offset in 0..len {
        // SAFETY: the pages were just grown and nothing else uses them;
        // volatile, so every byte is read from memory as it is.
        let byte = unsafe { core::ptr::read_volatile(start.add(offset)) };
        if byte != 0 {
            dirty += 1;
        }
    }
    // SAFETY: as above.
    unsafe { core::ptr::write_bytes(start, 0xAB, len) };
    dirty
}

#[cfg(not(target_arch = "wasm32"))]
fn leftovers() -> usize {
    0
}

rye_guest::export_adapter!(Remembers);
