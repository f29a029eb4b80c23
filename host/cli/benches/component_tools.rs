//! `cargo bench -p rye --bench component_tools`: a trivial tool's warm
//! `execute` through `rye serve` (one persistent stdio session of the
//! Rust SDK's client) as a WebAssembly component, as a bash process tool
//! and as a Python process tool, against a raw `bash -c` spawn from this
//! process; rounds alternate so the machine's drift falls on all alike.
//! Also the component tool's first run in a new server, with the
//! compiled-component cache empty and warm, the server's own CPU time
//! per execute over executes back to back, and executes and raw spawns
//! interleaved one by one or each after an idle spell, and an MCP `ping`
//! (the transport's own round trip) back to back, between spawns and
//! after an idle spell. Last, how much of the server's memory a `ping`
//! and an execute touch, and what an idle spell costs a plain pass over
//! a buffer of the same order, with no Rye in it.
//!
//! Each tool answers its parameters back: the component is tool-probe
//! (`{"do": "echo", "value": 1}` → `{"echo": 1}`), the bash tool is
//! `rye/bash/bash` running `cat`, the Python tool a script that loads
//! stdin and prints it.

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientRequest};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt, service::RunningService};
use serde_json::{Value, json};

const ROUNDS: usize = 5;
const PER_ROUND: usize = 60;
const PAIRS: usize = 1_000;
/// The idle spell before each side of the pairs that measure both idle.
const IDLE: Duration = Duration::from_millis(3);

fn median<T: Ord + Copy>(mut samples: Vec<T>) -> T {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn call(arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    CallToolRequestParams::new("execute").with_arguments(arguments)
}

fn rye(home: &Path, project: &Path, args: &[&str]) {
    let out = Command::new(common::rye_binary())
        .args(args)
        .current_dir(project)
        .env("HOME", home)
        .env("RYE_LOG", "error")
        .output()
        .unwrap();
    assert!(out.status.success(), "rye {args:?}: {out:?}");
}

async fn start(home: &Path, cache: &Path) -> (RunningService<RoleClient, ()>, u32) {
    let mut command = tokio::process::Command::new(common::rye_binary());
    command
        .arg("serve")
        .env("HOME", home)
        .env("RYE_CACHE_DIR", cache)
        .env("RYE_CACHE_KEY", cache.with_extension("key"))
        .env(
            "RYE_LOG",
            std::env::var("RYE_LOG").unwrap_or_else(|_| "error".into()),
        );
    let transport = TokioChildProcess::new(command).unwrap();
    let pid = transport.id().unwrap();
    (().serve(transport).await.unwrap(), pid)
}

const BACK_TO_BACK: usize = 2000;

async fn execute(client: &RunningService<RoleClient, ()>, arguments: &Value) -> (Duration, Value) {
    let started = Instant::now();
    let result = client.call_tool(call(arguments.clone())).await.unwrap();
    let took = started.elapsed();
    let content = result.structured_content.unwrap();
    assert_eq!(content["status"], "success", "{content:#}");
    (took, content["data"].clone())
}

async fn ping(client: &RunningService<RoleClient, ()>) -> Duration {
    let started = Instant::now();
    client
        .peer()
        .send_request(ClientRequest::PingRequest(Default::default()))
        .await
        .unwrap();
    started.elapsed()
}

fn spawn() -> Duration {
    let input = br#"{"do": "echo", "value": 1}"#;
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
}

fn main() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    let tools = p.join(".ai/tools/demo");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::copy(rye_test_artifacts::TOOL_PROBE, tools.join("probe.wasm")).unwrap();
    std::fs::write(
        tools.join("probe.yaml"),
        "version: \"1.0.0\"\ntool_type: wasm_component\n\
         executor_id: rye/core/runtimes/wasm/component\ncategory: demo\n\
         description: Echoes its parameters\nconfig:\n  component: probe.wasm\n",
    )
    .unwrap();
    std::fs::write(
        tools.join("echo.py"),
        "__version__ = '1.0.0'\n__executor_id__ = 'rye/core/runtimes/python/script'\n\
         import json, sys\nif __name__ == '__main__':\n    print(json.dumps(json.load(sys.stdin)))\n",
    )
    .unwrap();
    rye(home.path(), p, &["keys", "generate"]);
    rye(home.path(), p, &["keys", "trust"]);
    rye(home.path(), p, &["sign", "tool", "demo/probe"]);
    rye(home.path(), p, &["sign", "tool", "demo/echo"]);
    let project_path = p.display().to_string();
    let component = json!({"item_type": "tool", "item_id": "demo/probe", "project_path": project_path,
                           "parameters": {"do": "echo", "value": 1}});
    let bash = json!({"item_type": "tool", "item_id": "rye/bash/bash", "project_path": project_path,
                      "parameters": {"command": "cat"}});
    let python = json!({"item_type": "tool", "item_id": "demo/echo", "project_path": project_path,
                        "parameters": {"do": "echo", "value": 1}});

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // The first run in a new server: the compiled-component cache
        // empty (compiled now), then warm (read back).
        let cache = tempfile::tempdir().unwrap();
        let cache_path = cache.path().join("cache");
        for state in ["empty", "warm"] {
            let (client, _) = start(home.path(), &cache_path).await;
            let (took, data) = execute(&client, &component).await;
            assert_eq!(data, json!({"echo": 1}));
            println!(
                "component tool, first execute in a new server, cache {state}: {:.1} ms",
                ms(took)
            );
            client.cancel().await.unwrap();
        }

        let (client, pid) = start(home.path(), &cache_path).await;
        for arguments in [&component, &bash, &python] {
            for _ in 0..10 {
                execute(&client, arguments).await;
            }
            // Where the host's time goes, as the result reports it.
            let result = client.call_tool(call(arguments.clone())).await.unwrap();
            let meta = &result.structured_content.unwrap()["metadata"];
            println!(
                "{}: host {} ms in all; chain {} us, validate {} us, plan {} us, run {} us",
                arguments["item_id"],
                meta["duration_ms"],
                meta["chain_us"],
                meta["validate_us"],
                meta["plan_us"],
                meta["process_us"]
            );
        }
        for round in 1..=ROUNDS {
            let mut line = format!("round {round}:");
            let mut spawn_ms = 0.0;
            let mut component_ms = 0.0;
            for (name, arguments) in [
                ("component", &component),
                ("bash", &bash),
                ("python", &python),
            ] {
                let mut times = Vec::new();
                for _ in 0..PER_ROUND {
                    let (took, data) = execute(&client, arguments).await;
                    assert!(data.is_object(), "{data}");
                    times.push(took);
                }
                let m = ms(median(times));
                if name == "component" {
                    component_ms = m;
                }
                line += &format!(" {name} {m:.3} ms,");
            }
            let spawns: Vec<Duration> = (0..PER_ROUND).map(|_| spawn()).collect();
            spawn_ms += ms(median(spawns));
            println!(
                "{line} raw bash -c spawn {spawn_ms:.3} ms; spawn / component {:.1}x",
                spawn_ms / component_ms
            );
        }
        // What an execute costs the server itself, its records included:
        // its CPU time over executes back to back.
        let before = common::cpu_seconds(pid);
        let mut times = Vec::new();
        for _ in 0..BACK_TO_BACK {
            times.push(execute(&client, &component).await.0);
        }
        let used = common::cpu_seconds(pid) - before;
        println!(
            "component tool, {BACK_TO_BACK} executes back to back: server CPU {:.0} us each, median {:.3} ms",
            used / BACK_TO_BACK as f64 * 1e6,
            ms(median(times))
        );
        // The comparison the target names, as side by side as one process
        // can make it: each execute followed by a raw spawn, so whatever the
        // machine does meanwhile falls on both alike.
        let (mut executes, mut spawns) = (Vec::new(), Vec::new());
        let before = common::cpu_seconds(pid);
        for _ in 0..PAIRS {
            executes.push(execute(&client, &component).await.0);
            spawns.push(spawn());
        }
        let used = common::cpu_seconds(pid) - before;
        let (execute_ms, spawn_ms) = (ms(median(executes)), ms(median(spawns)));
        println!(
            "{PAIRS} pairs of a component execute then a raw bash -c spawn: execute {execute_ms:.3} ms, \
             spawn {spawn_ms:.3} ms; spawn / component {:.1}x; server CPU {:.0} us each",
            spawn_ms / execute_ms,
            used / PAIRS as f64 * 1e6
        );
        // Both sides after the same idle spell: each execute and each
        // spawn follows a 3 ms sleep of this process, so neither finds the
        // processors busy from the other.
        let (mut executes, mut spawns) = (Vec::new(), Vec::new());
        for _ in 0..PAIRS {
            tokio::time::sleep(IDLE).await;
            executes.push(execute(&client, &component).await.0);
            tokio::time::sleep(IDLE).await;
            spawns.push(spawn());
        }
        let (execute_ms, spawn_ms) = (ms(median(executes)), ms(median(spawns)));
        println!(
            "{PAIRS} pairs, each side after {} ms idle: execute {execute_ms:.3} ms, spawn {spawn_ms:.3} ms; \
             spawn / component {:.1}x",
            IDLE.as_millis(),
            spawn_ms / execute_ms
        );
        // The transport alone: an MCP `ping` back to back, between spawns
        // and after an idle spell, so that what an idle spell costs the
        // server's next answer shows apart from the execute's own work.
        let mut back_to_back = Vec::new();
        for _ in 0..PAIRS {
            back_to_back.push(ping(&client).await);
        }
        let (mut pings, mut spawns) = (Vec::new(), Vec::new());
        for _ in 0..PAIRS {
            pings.push(ping(&client).await);
            spawns.push(spawn());
        }
        let mut idle = Vec::new();
        for _ in 0..PAIRS {
            tokio::time::sleep(IDLE).await;
            idle.push(ping(&client).await);
        }
        println!(
            "MCP ping: back to back {:.3} ms; {PAIRS} pairs of a ping then a raw spawn: ping {:.3} ms, spawn {:.3} ms; \
             after {} ms idle {:.3} ms",
            ms(median(back_to_back)),
            ms(median(pings)),
            ms(median(spawns)),
            IDLE.as_millis(),
            ms(median(idle))
        );
        // How much of the server's memory one call touches (code, data
        // and stacks, in whole pages, its work off the reply's path
        // included): what an idle spell makes it fetch again.
        let (mut pinged, mut executed) = (Vec::new(), Vec::new());
        for _ in 0..TOUCH_SAMPLES {
            pinged.push(touched(pid, ping(&client)).await);
            executed.push(touched(pid, execute(&client, &component)).await);
        }
        match (median_of(pinged), median_of(executed)) {
            (Some(ping_kib), Some(execute_kib)) => println!(
                "memory the server touches for one call (median of {TOUCH_SAMPLES}): ping {ping_kib} KiB, \
                 component execute {execute_kib} KiB"
            ),
            _ => println!("memory the server touches: /proc/<pid>/clear_refs is not available here"),
        }
        client.cancel().await.unwrap();
    });
    // The machine's own toll for an idle spell, with no Rye in it: one
    // read of every cache line of a buffer, back to back and after the
    // same 3 ms sleep as above.
    for mib in [1, 4, 16] {
        let buffer = std::hint::black_box(vec![1u8; mib << 20]);
        let back_to_back: Vec<Duration> = (0..WALKS).map(|_| walk(&buffer)).collect();
        let idle: Vec<Duration> = (0..WALKS)
            .map(|_| {
                std::thread::sleep(IDLE);
                walk(&buffer)
            })
            .collect();
        let (b, i) = (median(back_to_back), median(idle));
        println!(
            "one pass over {mib} MiB: back to back {:.0} us, after {} ms idle {:.0} us ({:.1}x)",
            b.as_secs_f64() * 1e6,
            IDLE.as_millis(),
            i.as_secs_f64() * 1e6,
            i.as_secs_f64() / b.as_secs_f64()
        );
    }
}

const TOUCH_SAMPLES: usize = 7;
const WALKS: usize = 500;

/// Reads one byte of each 64-byte line of `buffer`.
fn walk(buffer: &[u8]) -> Duration {
    let started = Instant::now();
    let sum = buffer
        .iter()
        .step_by(64)
        .fold(0u64, |sum, &byte| sum.wrapping_add(u64::from(byte)));
    std::hint::black_box(sum);
    started.elapsed()
}

/// The KiB of process `pid`'s memory that `call` touches, from the
/// pages' referenced bits: cleared through `/proc/<pid>/clear_refs`,
/// summed from `smaps_rollup` once the work a call leaves behind is
/// done. `None` where the kernel does not allow it.
async fn touched<T>(pid: u32, call: impl std::future::Future<Output = T>) -> Option<u64> {
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::write(format!("/proc/{pid}/clear_refs"), "1").ok()?;
    call.await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup
        .lines()
        .find_map(|line| line.strip_prefix("Referenced:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The median of `samples`, if every one was taken.
fn median_of(samples: Vec<Option<u64>>) -> Option<u64> {
    samples.into_iter().collect::<Option<_>>().map(median)
}
