//! `cargo bench -p rye --bench async_execute`: how long an agent waits for
//! an async `execute` to return, side by side with the same tool run
//! synchronously, through `rye serve` over stdio and the Rust SDK's
//! client, in one loop.
//!
//! The tool is `rye/bash/bash` running `echo`. Each round starts it async
//! (timed to the reply), runs it synchronously (timed), and waits for the
//! async run's runner to exit before the next round, so no round shares
//! the machine with another's runner. 10 rounds of warm-up, then 100.
//! Also printed: the runner's life from the async reply to its exit.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn p90(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() * 9 / 10]
}

fn call(arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    CallToolRequestParams::new("execute").with_arguments(arguments)
}

fn configure(command: &mut Command, home: &Path, cache: &Path, project: &Path) {
    command
        .current_dir(project)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("RYE_CACHE_DIR", cache)
        .env("RYE_CACHE_KEY", cache.with_extension("key"))
        .env("RYE_LOG", "error");
}

fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s[s.rfind(')').unwrap() + 2..].starts_with(['Z', 'X'])
    })
}

fn main() {
    let home = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_rye"));
        command.arg("serve");
        configure(
            command.as_std_mut(),
            home.path(),
            cache.path(),
            project.path(),
        );
        let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
        let arguments = |run_async: bool| {
            json!({
                "item_type": "tool",
                "item_id": "rye/bash/bash",
                "project_path": project.path(),
                "parameters": {"command": "echo hi"},
                "async": run_async,
            })
        };
        let (mut starts, mut syncs, mut lives) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..110 {
            let began = Instant::now();
            let started = client.call_tool(call(arguments(true))).await.unwrap();
            let start = began.elapsed();
            let body = started.structured_content.unwrap();
            assert_eq!(body["state"], "running", "{body:#}");
            let runner = body["pid"].as_u64().unwrap() as u32;
            let returned = Instant::now();

            let began = Instant::now();
            let ran = client.call_tool(call(arguments(false))).await.unwrap();
            let sync = began.elapsed();
            assert_eq!(ran.structured_content.unwrap()["status"], "success");

            while !gone(runner) {
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            if round >= 10 {
                starts.push(start);
                syncs.push(sync);
                lives.push(returned.elapsed());
            }
        }
        client.cancel().await.unwrap();
        println!(
            "{:<58} {:>9.2?} (p90 {:>9.2?})",
            "async execute, to the reply, median",
            median(starts.clone()),
            p90(starts)
        );
        println!(
            "{:<58} {:>9.2?} (p90 {:>9.2?})",
            "the same tool run synchronously, median",
            median(syncs.clone()),
            p90(syncs)
        );
        println!(
            "{:<58} {:>9.2?} (p90 {:>9.2?})",
            "the runner, from the async reply to its exit, median",
            median(lives.clone()),
            p90(lives)
        );
    });
    // Every run was recorded, and each async one completed.
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    configure(&mut command, home.path(), cache.path(), project.path());
    let out = command
        .args(["--json", "threads", "list", "--limit", "1000"])
        .output()
        .unwrap();
    let threads: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(threads.len(), 220);
    assert!(threads.iter().all(|t| t["status"] == "completed"));
}
