//! `cargo bench -p rye --bench first_run`: a new user's first command. A
//! fresh home folder, an empty component cache and state folder, then
//! `rye execute tool rye/bash/bash` through the real binary: once with the
//! bundled components as the build compiled them, once with
//! `RYE_PRECOMPILED=0` (compiled on the spot, as before the build did it),
//! alternating, seven runs each; then the hundredth run (a warm cache) for
//! comparison. Prints the median and the fastest of each, the binary's
//! size and how much of it the compiled components take.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

const RUNS: usize = 7;

/// One `rye execute` in a fresh home, or in `warm` when given.
fn first_execute(precompiled: bool, warm: Option<&std::path::Path>) -> Duration {
    let fresh = tempfile::tempdir().unwrap();
    let home = warm.unwrap_or(fresh.path());
    let cache = home.join(".cache/rye");
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    common::clean_env(
        command.args([
            "execute",
            "tool",
            "rye/bash/bash",
            "--params",
            r#"{"command": "true"}"#,
        ]),
        home,
        home,
        &cache,
    )
    .env("RYE_STATE_DIR", home.join(".local/state/rye"))
    .env("RYE_LOG", "error");
    if !precompiled {
        command.env("RYE_PRECOMPILED", "0");
    }
    let started = Instant::now();
    let out = command.output().unwrap();
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn summary(mut times: Vec<Duration>) -> String {
    times.sort();
    format!(
        "median {:>7.1} ms   fastest {:>7.1} ms",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3
    )
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let (mut bundled, mut compiled) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        compiled.push(first_execute(false, None));
        bundled.push(first_execute(true, None));
    }
    let home = tempfile::tempdir().unwrap();
    first_execute(true, Some(home.path()));
    let warm: Vec<Duration> = (0..RUNS)
        .map(|_| first_execute(true, Some(home.path())))
        .collect();
    println!("first `rye execute tool rye/bash/bash`, fresh home and cache ({RUNS} runs each):");
    println!(
        "  compiled on the spot (RYE_PRECOMPILED=0)  {}",
        summary(compiled)
    );
    println!(
        "  bundled, compiled at build                {}",
        summary(bundled)
    );
    println!(
        "  warm cache (the hundredth run)            {}",
        summary(warm)
    );
    let binary = std::fs::metadata(env!("CARGO_BIN_EXE_rye")).unwrap().len();
    let (count, bytes) = rye_host::bundled_artifacts();
    println!(
        "binary {:.1} MB, of which {count} compiled components {:.1} MB",
        binary as f64 / 1e6,
        bytes as f64 / 1e6
    );
}
