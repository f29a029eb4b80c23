//! What the benches share.

use std::path::PathBuf;

/// The `rye` a bench measures: this build's, or the one `RYE_BENCH_BIN`
/// names (the profile-guided build of `.ci/pgo`, or another revision's
/// for a side-by-side run).
pub fn rye_binary() -> PathBuf {
    std::env::var_os("RYE_BENCH_BIN")
        .map_or_else(|| env!("CARGO_BIN_EXE_rye").into(), PathBuf::from)
}

/// The CPU time process `pid` has used, in seconds (`utime + stime`,
/// counted in the kernel's user-visible 100 Hz ticks).
#[allow(dead_code, reason = "not every bench reads a server's CPU time")]
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}
