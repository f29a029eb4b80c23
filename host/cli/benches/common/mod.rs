//! What the benches share.

use std::path::PathBuf;

/// The `rye` a bench measures: this build's, or the one `RYE_BENCH_BIN`
/// names (the profile-guided build of `.ci/pgo`, or another revision's
/// for a side-by-side run).
pub fn rye_binary() -> PathBuf {
    std::env::var_os("RYE_BENCH_BIN")
        .map_or_else(|| env!("CARGO_BIN_EXE_rye").into(), PathBuf::from)
}
