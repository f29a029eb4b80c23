//! A command tool's warm run in the engine against the cheapest process
//! spawn, side by side in one run: `tool-probe` echoing its parameters
//! against `bash -c cat` echoing stdin. Rounds alternate so the
//! machine's drift falls on both alike.
//!
//! `cargo bench -p rye-components --bench command`

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rye_components::{CommandGrants, ComponentHost, HostConfig, Limits};

const ROUNDS: usize = 5;
const PER_ROUND: usize = 200;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let cache = tempfile::tempdir().unwrap();
    let config = HostConfig {
        cache_dir: Some(cache.path().join("components")),
        cache_key_file: Some(cache.path().join("cache.key")),
        ..HostConfig::default()
    };
    // The first host compiles the tool and stores it; the one measured
    // reads it back, as a restarted `rye serve` does.
    let first = ComponentHost::new(config.clone()).unwrap();
    first
        .load_command(Path::new(rye_test_artifacts::TOOL_PROBE), |_| {
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap()
        .unwrap();
    drop(first);
    let host = ComponentHost::new(config).unwrap();
    let cold = Instant::now();
    let probe = host
        .load_command(Path::new(rye_test_artifacts::TOOL_PROBE), |_| {
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap()
        .unwrap();
    let loaded = cold.elapsed();
    let grants = CommandGrants {
        limits: Limits {
            deadline: Duration::from_secs(5),
            memory: 64 << 20,
        },
        output_cap: 1 << 20,
        ..CommandGrants::default()
    };
    let input = br#"{"do": "echo", "value": 1}"#;
    let component = || {
        // Timed to the answer, as a caller waits; the instance's reset
        // comes after it.
        let started = Instant::now();
        let mut took = None;
        host.run_command_then(&probe, &grants, input.to_vec(), |ran| {
            took = Some(started.elapsed());
            assert_eq!(ran.unwrap().unwrap().stdout, b"{\"echo\":1}\n");
        });
        took.expect("answered")
    };
    let first = component();
    println!(
        "cold: load ({:?}) {:.1} ms, first run {:.3} ms",
        probe.origin,
        ms(loaded),
        ms(first)
    );
    let spawn = || {
        let started = Instant::now();
        let mut child = Command::new("bash")
            .args(["-c", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.stdout, input);
        started.elapsed()
    };
    for round in 1..=ROUNDS {
        let runs: Vec<Duration> = (0..PER_ROUND).map(|_| component()).collect();
        let spawns: Vec<Duration> = (0..PER_ROUND).map(|_| spawn()).collect();
        let (c, s) = (median(runs), median(spawns));
        println!(
            "round {round}: component warm run {:.3} ms, bash -c spawn {:.3} ms ({:.1}x)",
            ms(c),
            ms(s),
            s.as_secs_f64() / c.as_secs_f64()
        );
    }
}
