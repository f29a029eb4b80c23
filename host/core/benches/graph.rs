//! `cargo bench -p rye-host --bench graph`: what a state graph's step
//! costs the host.
//!
//! 1. Per-step overhead of gate nodes (no action): a graph of 1,000 gates
//!    run through the whole host, in memory (runs not recorded, so no
//!    checkpoints) and durable (every step checkpointed in the project's
//!    store), interleaved; the time per step less a one-step graph's.
//! 2. Stored bytes of 100 gate steps with a 100 KB input that never
//!    changes: the objects the run added to the store and its checkpoint
//!    log, counted after the run.
//! 3. One action step: a graph whose nodes each run `rye/bash/bash`, per
//!    step, against the same tool executed directly.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rye_host::rye_integrity::{self, Keypair};
use rye_host::{ExecuteRequest, HostConfig, IntegrityPolicy, ItemKind, Rye, RyeConfig};
use serde_json::{Value, json};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn host(cache: &Path, key: &Keypair, record_threads: bool) -> Rye {
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
        integrity: IntegrityPolicy::default(),
        trusted_keys: vec![(key.public().clone(), "bench".into())],
        signing_key_dir: None,
        executable: None,
        record_threads,
    })
    .unwrap()
}

/// Writes and signs graph `id` with `nodes` (YAML lines, indented four).
fn graph(
    project: &Path,
    key: &Keypair,
    id: &str,
    permissions: &str,
    max_steps: usize,
    nodes: &str,
) {
    let path = project.join(format!(".ai/tools/{id}.yaml"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text = format!(
        "version: \"1.0.0\"\ntool_type: graph\nexecutor_id: rye/core/runtimes/state-graph/runtime\ncategory: bench\ndescription: A bench graph.\npermissions: {permissions}\nconfig:\n  start: a1\n  max_steps: {max_steps}\n  nodes:\n{nodes}"
    );
    let format = rye_integrity::format_for(ItemKind::Tool, "x.yaml", &[]).unwrap();
    let signed = rye_integrity::sign_text(&text, &format, key, SystemTime::now()).unwrap();
    std::fs::write(path, signed).unwrap();
}

/// `count` gates in a row, then a return.
fn gates(count: usize) -> String {
    let mut nodes = String::new();
    for i in 1..=count {
        let next = if i == count {
            "done".to_owned()
        } else {
            format!("a{}", i + 1)
        };
        nodes.push_str(&format!(
            "    a{i}: {{type: gate, assign: {{at: a{i}}}, next: {next}}}\n"
        ));
    }
    nodes.push_str("    done: {type: return, output: \"${state.at}\"}\n");
    nodes
}

fn size(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            total += if path.is_dir() {
                size(&path)
            } else {
                path.metadata().map_or(0, |m| m.len())
            };
        }
    }
    total
}

fn main() {
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    let key = Keypair::generate().unwrap();
    graph(p, &key, "bench/one", "[]", 10, &gates(1));
    graph(p, &key, "bench/gates", "[]", 2000, &gates(1000));
    let mut steps_100 = gates(100);
    steps_100.push('\n');
    graph(p, &key, "bench/steady", "[]", 200, &steps_100);
    let mut actions = String::new();
    for i in 1..=20 {
        let next = if i == 20 {
            "done".to_owned()
        } else {
            format!("a{}", i + 1)
        };
        actions.push_str(&format!(
            "    a{i}: {{action: {{kind: tool, item_id: rye/bash/bash, params: {{command: \"echo {i}\"}}}}, next: {next}}}\n"
        ));
    }
    actions.push_str("    done: {type: return}\n");
    graph(
        p,
        &key,
        "bench/actions",
        "[\"rye.execute.tool.rye.bash.*\"]",
        100,
        &actions,
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let memory = Arc::new(host(cache.path(), &key, false));
    let durable = Arc::new(host(cache.path(), &key, true));
    let run = |rye: &Arc<Rye>, id: &str, parameters: Value| -> (Duration, Value) {
        let request = ExecuteRequest {
            parameters,
            project: Some(p.to_owned()),
            ..ExecuteRequest::new(ItemKind::Tool, id)
        };
        let started = Instant::now();
        let result = runtime.block_on(rye.execute(&request));
        (started.elapsed(), result)
    };
    for rye in [&memory, &durable] {
        let (_, warm) = run(rye, "bench/gates", json!({}));
        assert_eq!(warm["data"]["steps"], 1001, "{warm:#}");
    }
    // `profile-durable`: only the durable gates, for a profiler.
    if std::env::args().any(|a| a == "profile-durable") {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(8) {
            run(&durable, "bench/gates", json!({}));
        }
        return;
    }

    // 1. Gates, interleaved.
    let (mut one_memory, mut one_durable, mut many_memory, mut many_durable) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..12 {
        let order: [bool; 2] = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for kept in order {
            let rye = if kept { &durable } else { &memory };
            let (one, _) = run(rye, "bench/one", json!({}));
            let (many, result) = run(rye, "bench/gates", json!({}));
            assert_eq!(result["data"]["output"], "a1000");
            if kept {
                one_durable.push(one);
                many_durable.push(many);
            } else {
                one_memory.push(one);
                many_memory.push(many);
            }
        }
    }
    let per_step =
        |many: Vec<Duration>, one: Vec<Duration>| median(many).saturating_sub(median(one)) / 999;
    let (memory_one, durable_one) = (median(one_memory.clone()), median(one_durable.clone()));
    println!(
        "{:<62} {:>9.1?} / {:>9.1?}",
        "graph of one gate, whole execute: in memory / durable", memory_one, durable_one
    );
    println!(
        "{:<62} {:>9.1?}",
        "per gate step, in memory (target 50 µs)",
        per_step(many_memory, one_memory)
    );
    println!(
        "{:<62} {:>9.1?}",
        "per gate step, durable checkpoints (target 300 µs)",
        per_step(many_durable, one_durable)
    );

    // 2. Stored bytes.
    let objects = p.join(".ai/state/objects/objects");
    let before = size(&objects);
    let big = "z".repeat(100 * 1024);
    let (_, result) = run(&durable, "bench/steady", json!({"big": big}));
    assert_eq!(result["data"]["steps"], 101, "{result:#}");
    let run_id = result["data"]["graph_run_id"].as_str().unwrap();
    let log = p.join(format!(".ai/state/graphs/{run_id}/checkpoints.jsonl"));
    let stored = size(&objects) - before + log.metadata().unwrap().len();
    println!(
        "{:<62} {:>9} bytes ({:.1} KB a step past the value)",
        "stored by 100 gate steps with a 100 KB input (target 307,200)",
        stored,
        (stored.saturating_sub(100 * 1024)) as f64 / 101.0 / 1024.0
    );

    // 3. Action steps against the tool run directly.
    let (mut graph_times, mut direct_times) = (Vec::new(), Vec::new());
    for _ in 0..6 {
        let (took, result) = run(&durable, "bench/actions", json!({}));
        assert_eq!(result["data"]["steps"], 21, "{result:#}");
        graph_times.push(took / 20);
        let started = Instant::now();
        for i in 0..20 {
            let (_, direct) = run(
                &durable,
                "rye/bash/bash",
                json!({"command": format!("echo {i}")}),
            );
            assert_eq!(direct["status"], "success");
        }
        direct_times.push(started.elapsed() / 20);
    }
    let (graph_step, direct) = (median(graph_times), median(direct_times));
    println!(
        "{:<62} {:>9.1?} vs {:>9.1?} (added {:.1?})",
        "action step (rye/bash/bash) in a graph vs executed directly",
        graph_step,
        direct,
        graph_step.saturating_sub(direct)
    );
}
