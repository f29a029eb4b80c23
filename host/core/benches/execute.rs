//! `cargo bench -p rye-host --bench execute`: the speed targets of
//! execution.
//!
//! 1. Chain build and validation of a project tool (tool -> python/script
//!    -> execute), warm: the host has built it before.
//! 2. The same from a new host (empty in-memory caches, files unchanged on
//!    disk, compiled components on disk): what a new process pays.
//! 3. `rye/bash/bash` running `echo hello` through the whole host, against
//!    a raw spawn of the same command, interleaved in one loop so both see
//!    the same machine; the difference is the host's overhead.
//! 4. What integrity costs: the same execution with verification on and
//!    off, interleaved with the raw spawn; and the cold chain build of
//!    item 2 with verification on and off (three signed elements and their
//!    signed parser components, a new trust store, no cached verdicts).
//! 5. What the thread record costs: the same execution recorded as a
//!    thread (registry row, result object) and not, interleaved; the
//!    host's own time (less the child's) of each.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rye_host::rye_integrity::{self, Keypair};
use rye_host::{ExecuteRequest, HostConfig, IntegrityPolicy, ItemKind, Rye, RyeConfig};
use serde_json::json;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn p90(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() * 9 / 10]
}

fn host(cache: &Path, key: &Keypair, verify: bool) -> Rye {
    host_with(cache, key, verify, true)
}

fn host_with(cache: &Path, key: &Keypair, verify: bool, record_threads: bool) -> Rye {
    Rye::new(RyeConfig {
        cache_dir: cache.to_owned(),
        user_base: None,
        system_base: None,
        components: HostConfig {
            cache_dir: Some(cache.join("components")),
            cache_key_file: Some(cache.join("cache.key")),
            ..HostConfig::default()
        },
        watch: true,
        snapshot: false,
        integrity: IntegrityPolicy {
            enforce: verify,
            ..IntegrityPolicy::default()
        },
        trusted_keys: vec![(key.public().clone(), "bench".into())],
        signing_key_dir: None,
        executable: None,
        record_threads,
    })
    .unwrap()
}

fn main() {
    // As the `rye` binary does: no stack traces for library errors (see
    // quiet_library_backtraces in host/cli/src/main.rs).
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: first thing in main, before any other thread exists.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let tool = project.path().join(".ai/tools/demo/count.py");
    std::fs::create_dir_all(tool.parent().unwrap()).unwrap();
    let key = Keypair::generate().unwrap();
    let source = "\"\"\"Count words.\"\"\"\n__version__ = '1.0.0'\n__executor_id__ = 'rye/core/runtimes/python/script'\nCONFIG_SCHEMA = {'type': 'object'}\n";
    let format = rye_integrity::format_for(ItemKind::Tool, "count.py", &[]).unwrap();
    let signed = rye_integrity::sign_text(source, &format, &key, SystemTime::now()).unwrap();
    std::fs::write(&tool, signed).unwrap();
    let p = project.path();

    // 1. Warm chain.
    let rye = host(cache.path(), &key, true);
    rye.chain(Some(p), "demo/count").unwrap();
    if std::env::args().any(|a| a == "profile-chain") {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            rye.chain(Some(p), "demo/count").unwrap();
        }
        return;
    }
    let warm: Vec<Duration> = (0..2000)
        .map(|_| {
            let started = Instant::now();
            rye.chain(Some(p), "demo/count").unwrap();
            started.elapsed()
        })
        .collect();
    println!(
        "{:<62} median {:>9.1?}  p90 {:>9.1?}",
        "chain build + validate, warm",
        median(warm.clone()),
        p90(warm)
    );

    // 2. Cold chain: a new host each time, with and without verification.
    let (mut cold, mut cold_off) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        for (verify, times) in [(true, &mut cold), (false, &mut cold_off)] {
            let started = Instant::now();
            let fresh = host(cache.path(), &key, verify);
            fresh.chain(Some(p), "demo/count").unwrap();
            times.push(started.elapsed());
        }
    }
    let (cold_on, cold_off_median) = (median(cold.clone()), median(cold_off.clone()));
    println!(
        "{:<62} median {:>9.1?}  p90 {:>9.1?}",
        "chain build + validate, new host (cold caches, warm disk)",
        cold_on,
        p90(cold)
    );
    println!(
        "{:<62} median {:>9.1?}  p90 {:>9.1?}",
        "  the same with verification off",
        cold_off_median,
        p90(cold_off)
    );
    println!(
        "{:<62} {:>16.1?}",
        "cold verification of the 3-element chain (difference)",
        cold_on.saturating_sub(cold_off_median)
    );

    // 3. Execute against a raw spawn.
    let rye = Arc::new(rye);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let request = ExecuteRequest {
        parameters: json!({"command": "echo hello"}),
        project: Some(p.to_owned()),
        ..ExecuteRequest::new(ItemKind::Tool, "rye/bash/bash")
    };
    let check = runtime.block_on(rye.execute(&request));
    assert_eq!(check["data"]["stdout"], "hello\n", "{check:#}");
    if std::env::args().any(|a| a == "profile-plan") {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            rye.plan(Some(p), "rye/bash/bash", json!({"command": "echo hello"}))
                .unwrap();
        }
        return;
    }
    if std::env::args().any(|a| a == "profile-execute") {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(8) {
            runtime.block_on(rye.execute(&request));
        }
        return;
    }
    let unverified = Arc::new(host(cache.path(), &key, false));
    assert_eq!(
        runtime.block_on(unverified.execute(&request))["status"],
        "success"
    );
    // Chain and plan alone (no process), verification on and off.
    for (name, verified) in [("on", &rye), ("off", &unverified)] {
        let chain: Vec<Duration> = (0..2000)
            .map(|_| {
                let started = Instant::now();
                verified.chain(Some(p), "rye/bash/bash").unwrap();
                started.elapsed()
            })
            .collect();
        let plan: Vec<Duration> = (0..500)
            .map(|_| {
                let started = Instant::now();
                verified
                    .plan(Some(p), "rye/bash/bash", json!({"command": "echo hello"}))
                    .unwrap();
                started.elapsed()
            })
            .collect();
        let dry = ExecuteRequest {
            dry_run: true,
            ..request.clone()
        };
        let dry_runs: Vec<Duration> = (0..500)
            .map(|_| {
                let started = Instant::now();
                runtime.block_on(verified.execute(&dry));
                started.elapsed()
            })
            .collect();
        println!(
            "{:<62} median {:>9.1?}  plan {:>9.1?}  dry run {:>9.1?}",
            format!("rye/bash/bash warm chain, verification {name}"),
            median(chain),
            median(plan),
            median(dry_runs)
        );
    }
    let (mut host_times, mut raw_times, mut off_times) = (Vec::new(), Vec::new(), Vec::new());
    // The host's own share of each execution: its whole time less the
    // child process's, free of the spawn's noise.
    let (mut own_on, mut own_off) = (Vec::new(), Vec::new());
    let own = |elapsed: Duration, result: &serde_json::Value| {
        elapsed.saturating_sub(Duration::from_micros(
            result["metadata"]["process_us"].as_u64().unwrap(),
        ))
    };
    let mut parts: [Vec<u64>; 4] = Default::default();
    for round in 0..300 {
        // Alternate which host goes first, so neither always follows the
        // raw spawn's exiting child.
        let order: [bool; 2] = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for verified in order {
            let host = if verified { &rye } else { &unverified };
            let started = Instant::now();
            let result = runtime.block_on(host.execute(&request));
            let elapsed = started.elapsed();
            assert_eq!(result["status"], "success");
            if verified {
                host_times.push(elapsed);
                own_on.push(own(elapsed, &result));
                for (i, key) in ["chain_us", "validate_us", "plan_us", "process_us"]
                    .iter()
                    .enumerate()
                {
                    parts[i].push(result["metadata"][key].as_u64().unwrap());
                }
            } else {
                off_times.push(elapsed);
                own_off.push(own(elapsed, &result));
            }
        }

        let started = Instant::now();
        let out = runtime
            .block_on(async {
                tokio::process::Command::new("/bin/bash")
                    .args(["-c", "echo hello"])
                    .output()
                    .await
            })
            .unwrap();
        raw_times.push(started.elapsed());
        assert_eq!(out.stdout, b"hello\n");
    }
    let (host_median, raw_median) = (median(host_times.clone()), median(raw_times.clone()));
    println!(
        "{:<62} median {:>9.1?}  p90 {:>9.1?}",
        "execute rye/bash/bash `echo hello` (whole host)",
        host_median,
        p90(host_times)
    );
    println!(
        "{:<62} median {:>9.1?}  p90 {:>9.1?}",
        "raw spawn of /bin/bash -c 'echo hello'",
        raw_median,
        p90(raw_times)
    );
    for (i, key) in ["chain_us", "validate_us", "plan_us", "process_us"]
        .iter()
        .enumerate()
    {
        let mut values = parts[i].clone();
        values.sort();
        println!(
            "{:<62} median {:>7} µs",
            format!("  of which {key}"),
            values[values.len() / 2]
        );
    }
    println!(
        "{:<62} {:>16.1?}  ratio {:.2}",
        "host overhead (difference of medians)",
        host_median.saturating_sub(raw_median),
        host_median.as_secs_f64() / raw_median.as_secs_f64()
    );
    let off_median = median(off_times.clone());
    println!(
        "{:<62} median {:>9.1?}  p90 {:>9.1?}",
        "execute, the same with verification off",
        off_median,
        p90(off_times)
    );
    let (on, off) = (
        host_median.saturating_sub(raw_median),
        off_median.saturating_sub(raw_median),
    );
    println!(
        "{:<62} {:>9.1?} vs {:>9.1?}  on/off {:.2}",
        "host overhead, verification on vs off",
        on,
        off,
        on.as_secs_f64() / off.as_secs_f64()
    );
    let (own_on, own_off) = (median(own_on), median(own_off));
    println!(
        "{:<62} {:>9.1?} vs {:>9.1?}  on/off {:.2}",
        "host's own time per execute (less the child), on vs off",
        own_on,
        own_off,
        own_on.as_secs_f64() / own_off.as_secs_f64()
    );

    // 5. The thread record.
    let untracked = Arc::new(host_with(cache.path(), &key, true, false));
    let first = runtime.block_on(untracked.execute(&request));
    assert!(first["metadata"].get("thread_id").is_none(), "{first:#}");
    let (mut tracked_own, mut untracked_own) = (Vec::new(), Vec::new());
    for round in 0..300 {
        let order: [bool; 2] = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for tracked in order {
            let host = if tracked { &rye } else { &untracked };
            let started = Instant::now();
            let result = runtime.block_on(host.execute(&request));
            let elapsed = started.elapsed();
            assert_eq!(result["status"], "success");
            assert_eq!(result["metadata"].get("thread_id").is_some(), tracked);
            if tracked {
                tracked_own.push(own(elapsed, &result));
            } else {
                untracked_own.push(own(elapsed, &result));
            }
        }
    }
    let (tracked, untracked) = (median(tracked_own), median(untracked_own));
    println!(
        "{:<62} {:>9.1?} vs {:>9.1?}  added {:>9.1?}",
        "host's own time per execute, recorded as a thread vs not",
        tracked,
        untracked,
        tracked.saturating_sub(untracked)
    );
}
