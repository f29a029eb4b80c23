//! `cargo bench -p rye --bench mcp_client`: a tool on another MCP server
//! called through Rye's pooled session, side by side with the same call
//! from a direct client, in one run.
//!
//! The servers, both over stdio: the FastMCP notes server
//! (`tests/mcp-servers/`) on the Python of `RYE_TEST_MCP_PYTHON` (else the
//! tests' virtual environment), and the reference server `server-everything`
//! on Node (`RYE_TEST_SERVER_EVERYTHING`, else the tests' npm install), a
//! server fast enough that Rye's share of a call shows. The client is the
//! Rust SDK's.
//!
//! 1. The server's own start: spawn to the `initialize` answer, 10 times.
//! 2. Through Rye: `rye serve` for a project whose `mcp/notes/*` items
//!    `rye mcp add` and `discover` made; the first `execute` of
//!    `mcp/notes/echo` (cold: Rye starts the server) is timed once.
//! 3. Warm calls, alternating: `echo` on the direct session, `execute` of
//!    `mcp/notes/echo` through Rye; 50 rounds of warm-up, then 500. The
//!    same for `server-everything`'s `echo` (`mcp/everything/echo`).
//! 4. 1,000 sequential pooled calls through Rye to each server, and 1,000
//!    direct calls to each; the CPU time `rye serve` used over those to
//!    `server-everything` (its threads', from `/proc`), per call.
//! 5. Hostile servers through the same `rye serve`: one that never answers
//!    `initialize`, one that writes 200 MB to stdout with no line end, one
//!    that writes 1 GB to stderr (each with a 1 s start deadline), and a
//!    call whose server exits mid-call; each error's time past its
//!    deadline, `rye serve`'s peak memory before and after, and a healthy
//!    call after them.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientRequest};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt, service::RunningService};
use serde_json::{Value, json};

fn median(times: Vec<Duration>) -> Duration {
    quantile(times, 500)
}

fn p90(times: Vec<Duration>) -> Duration {
    quantile(times, 900)
}

fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

fn python() -> PathBuf {
    std::env::var_os("RYE_TEST_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv/bin/python"))
}

fn script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp-servers/notes_server.py")
        .display()
        .to_string()
}

struct Places {
    home: tempfile::TempDir,
    cache: tempfile::TempDir,
    project: tempfile::TempDir,
}

impl Places {
    fn write(&self, relative: &str, text: &str) {
        let path = self.project.path().join(".ai/tools").join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A server item running `script` with `sh`, and a tool item on it.
    fn hostile(&self, name: &str, script: &str) {
        self.write(
            &format!("mcp/servers/{name}.yaml"),
            &format!(
                "version: '1.0.0'\ntool_type: mcp_server\nexecutor_id: null\ndescription: Hostile.\nconfig:\n  command: /bin/sh\n  args: ['-c', {script:?}]\n  timeout: 1\n"
            ),
        );
        self.write(
            &format!("mcp/{name}/x.yaml"),
            &format!(
                "version: '1.0.0'\ntool_type: mcp\nexecutor_id: rye/core/runtimes/mcp/stdio\ndescription: Hostile.\nconfig:\n  server: mcp/servers/{name}\n  tool_name: x\ndefinition_hash: '{}'\n",
                "0".repeat(64)
            ),
        );
        // The pin is never read: the server fails before its tools are.
        self.rye(&["sign", "tool", &format!("mcp/servers/{name}")]);
        self.rye(&["sign", "tool", &format!("mcp/{name}/x")]);
    }

    fn rye(&self, args: &[&str]) {
        let out = self
            .command(common::rye_binary())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "rye {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(self.project.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("RYE_CACHE_DIR", self.cache.path())
            .env("RYE_CACHE_KEY", self.cache.path().with_extension("key"))
            .env("RYE_LOG", "error");
        command
    }
}

fn everything() -> String {
    std::env::var_os("RYE_TEST_SERVER_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join("mcp-npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        })
        .display()
        .to_string()
}

async fn direct() -> RunningService<RoleClient, ()> {
    let mut command = tokio::process::Command::new(python());
    command.arg(script()).env_clear();
    ().serve(TokioChildProcess::new(command).unwrap())
        .await
        .unwrap()
}

async fn direct_everything() -> RunningService<RoleClient, ()> {
    let mut command = tokio::process::Command::new("node");
    command.arg(everything()).arg("stdio").env_clear();
    ().serve(TokioChildProcess::new(command).unwrap())
        .await
        .unwrap()
}

/// `rounds` alternating calls, direct then through Rye, after 50 of
/// warm-up: the times of each.
async fn alternate(
    direct: &RunningService<RoleClient, ()>,
    direct_call: impl Fn(usize) -> CallToolRequestParams,
    rye: &RunningService<RoleClient, ()>,
    execute: impl Fn(usize) -> CallToolRequestParams,
    rounds: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut direct_calls, mut pooled) = (Vec::new(), Vec::new());
    for round in 0..rounds + 50 {
        let started = Instant::now();
        let answer = direct.call_tool(direct_call(round)).await.unwrap();
        let direct_time = started.elapsed();
        assert_ne!(answer.is_error, Some(true));
        let started = Instant::now();
        let answer = rye.call_tool(execute(round)).await.unwrap();
        let pooled_time = started.elapsed();
        let text = serde_json::to_string(&answer.content).unwrap();
        assert!(text.contains("success"), "{text}");
        if round >= 50 {
            direct_calls.push(direct_time);
            pooled.push(pooled_time);
        }
    }
    (direct_calls, pooled)
}

/// `count` calls one after another, `call(i)` the `i`th: the whole time,
/// and each call's.
async fn sequential(
    client: &RunningService<RoleClient, ()>,
    call: impl Fn(usize) -> CallToolRequestParams,
    count: usize,
) -> (Duration, Vec<Duration>) {
    let mut each = Vec::with_capacity(count);
    let started = Instant::now();
    for i in 0..count {
        let call_started = Instant::now();
        client.call_tool(call(i)).await.unwrap();
        each.push(call_started.elapsed());
    }
    (started.elapsed(), each)
}

/// The `per_mille`th of `times` in order (990: p99).
fn quantile(mut times: Vec<Duration>, per_mille: usize) -> Duration {
    times.sort();
    times[(times.len() * per_mille / 1000).min(times.len() - 1)]
}

fn main() {
    let places = Places {
        home: tempfile::tempdir().unwrap(),
        cache: tempfile::tempdir().unwrap(),
        project: tempfile::tempdir().unwrap(),
    };
    let python = python().display().to_string();
    places.rye(&["keys", "generate"]);
    places.rye(&["keys", "trust"]);
    places.rye(&["mcp", "add", "notes", "--stdio", &python, &script()]);
    places.rye(&["mcp", "discover", "notes"]);
    places.rye(&[
        "mcp",
        "add",
        "everything",
        "--stdio",
        "node",
        &everything(),
        "stdio",
    ]);
    places.rye(&["mcp", "discover", "everything"]);
    places.hostile("silent", "sleep 300");
    places.hostile(
        "flood",
        "head -c 200000000 /dev/zero | tr '\\0' x; sleep 300",
    );
    places.hostile(
        "loud",
        "head -c 1000000000 /dev/zero | tr '\\0' e >&2; sleep 300",
    );
    let project_path = places.project.path().display().to_string();
    let echo = |text: &str| json!({"item_type": "tool", "item_id": "mcp/notes/echo", "project_path": project_path, "parameters": {"text": text}});

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut starts = Vec::new();
        for _ in 0..10 {
            let started = Instant::now();
            let server = direct().await;
            starts.push(started.elapsed());
            server.cancel().await.unwrap();
        }

        let command = places.command(common::rye_binary());
        let mut command = tokio::process::Command::from(command);
        command.arg("serve");
        let transport = TokioChildProcess::new(command).unwrap();
        let pid = transport.id().unwrap();
        let rye = ().serve(transport).await.unwrap();
        // The components warm, no MCP session yet: a search first.
        rye.call_tool(call(
            "search",
            json!({"scope": "tool", "query": "notes", "project_path": project_path}),
        ))
        .await
        .unwrap();
        let started = Instant::now();
        let first = rye.call_tool(call("execute", echo("cold"))).await.unwrap();
        let cold = started.elapsed();
        let text = serde_json::to_string(&first.content).unwrap();
        assert!(text.contains("cold") && text.contains("success"), "{text}");

        let server = direct().await;
        // Every call says something else: nothing may be answered from an
        // earlier call with the same parameters.
        let text = |i: usize| format!("hi {i}");
        let direct_echo = |i| call("echo", json!({"text": text(i)}));
        let execute_echo = |i| call("execute", echo(&text(i)));
        let (direct_calls, pooled) = alternate(&server, direct_echo, &rye, execute_echo, 500).await;
        let fast = direct_everything().await;
        let fast_execute = |i| {
            call(
                "execute",
                json!({"item_type": "tool", "item_id": "mcp/everything/echo", "project_path": project_path, "parameters": {"message": text(i)}}),
            )
        };
        let fast_direct = |i| call("echo", json!({"message": text(i)}));
        let (fast_direct_calls, fast_pooled) =
            alternate(&fast, fast_direct, &rye, fast_execute, 500).await;
        // The parts of the hop: the transport alone (a ping), and an
        // execute that stops after the chain and its validation.
        let (mut pings, mut dry_runs) = (Vec::new(), Vec::new());
        let mut dry = echo("dry");
        dry["dry_run"] = json!(true);
        for _ in 0..500 {
            let started = Instant::now();
            rye.peer()
                .send_request(ClientRequest::PingRequest(Default::default()))
                .await
                .unwrap();
            pings.push(started.elapsed());
            let started = Instant::now();
            let Value::Object(arguments) = dry.clone() else {
                unreachable!()
            };
            rye.call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
                .await
                .unwrap();
            dry_runs.push(started.elapsed());
        }
        let (thousand, _) = sequential(&rye, execute_echo, 1000).await;
        let (thousand_direct, _) = sequential(&server, direct_echo, 1000).await;
        let cpu_before = common::cpu_seconds(pid);
        let (fast_thousand, _) = sequential(&rye, fast_execute, 1000).await;
        let fast_thousand_cpu = common::cpu_seconds(pid) - cpu_before;
        let (fast_thousand_direct, _) = sequential(&fast, fast_direct, 1000).await;
        // The tail: a call now and then waits for the host's other work
        // (its records, a checkpoint of their database).
        let (_, fast_tail) = sequential(&rye, fast_execute, 4000).await;
        let (_, fast_tail_direct) = sequential(&fast, fast_direct, 4000).await;
        let last = rye.call_tool(call("execute", echo("hi"))).await.unwrap();
        // Where a warm call's time goes, as the host counts it.
        let result: Value = last
            .structured_content
            .clone()
            .or_else(|| {
                let text = serde_json::to_value(&last.content).ok()?;
                serde_json::from_str(text[0]["text"].as_str()?).ok()
            })
            .unwrap_or(Value::Null);
        let metadata = &result["metadata"];

        let row = |what: &str, times: &[Duration]| {
            println!(
                "{what:<62} median {:>9.2?}  p90 {:>9.2?}",
                median(times.to_vec()),
                p90(times.to_vec())
            );
        };
        row(
            "the notes server's own start (spawn to initialize)",
            &starts,
        );
        println!(
            "{:<62} {cold:>16.1?}",
            "first execute through rye serve (cold: starts the server)"
        );
        row("warm echo, direct client", &direct_calls);
        row("warm execute of mcp/notes/echo through rye serve", &pooled);
        let added = median(pooled.clone()).saturating_sub(median(direct_calls.clone()));
        println!("{:<62} {added:>16.2?}", "added by Rye at the median");
        println!("{:<62} {thousand:>16.1?}", "1,000 sequential pooled calls");
        println!("{:<62} {thousand_direct:>16.1?}", "1,000 sequential direct calls");
        row("server-everything: warm echo, direct client", &fast_direct_calls);
        row("server-everything: warm execute through rye serve", &fast_pooled);
        let added = median(fast_pooled.clone()).saturating_sub(median(fast_direct_calls.clone()));
        println!("{:<62} {added:>16.2?}", "server-everything: added by Rye at the median");
        println!("{:<62} {fast_thousand:>16.1?}", "server-everything: 1,000 sequential pooled calls");
        println!(
            "{:<62} {fast_thousand_direct:>16.1?}",
            "server-everything: 1,000 sequential direct calls"
        );
        println!(
            "{:<62} {:>13.0} µs",
            "server-everything: rye serve's CPU per sequential pooled call",
            fast_thousand_cpu * 1e6 / 1000.0
        );
        for (what, times) in [("pooled", &fast_tail), ("direct", &fast_tail_direct)] {
            println!(
                "server-everything: 4,000 sequential {what} calls: p90 {:.2?}, p99 {:.2?}, p99.9 {:.2?}",
                quantile(times.clone(), 900),
                quantile(times.clone(), 990),
                quantile(times.clone(), 999),
            );
        }
        row("MCP ping to rye serve (the transport alone)", &pings);
        row("execute dry_run of mcp/notes/echo (chain, validation, reply)", &dry_runs);
        println!(
            "last call's stages (µs): chain {} validate {} plan {} call {} whole {} ms",
            metadata["chain_us"],
            metadata["validate_us"],
            metadata["plan_us"],
            metadata["process_us"],
            metadata["duration_ms"]
        );

        let peak = || {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap().to_owned();
            line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
        };
        let before = peak();
        let hostile = |id: &'static str, params: Value| {
            let call = call(
                "execute",
                json!({"item_type": "tool", "item_id": id, "project_path": project_path, "parameters": params}),
            );
            let rye = &rye;
            async move {
                let started = Instant::now();
                let answer = rye.call_tool(call).await.unwrap();
                let text = serde_json::to_string(&answer.content).unwrap();
                (started.elapsed(), text)
            }
        };
        for (id, what) in [
            ("mcp/silent/x", "never answers initialize"),
            ("mcp/flood/x", "200 MB on stdout, no line end"),
            ("mcp/loud/x", "1 GB on stderr"),
        ] {
            let (took, text) = hostile(id, json!({})).await;
            assert!(text.contains("within 1 s"), "{text}");
            println!(
                "{:<62} {:>16.1?}",
                format!("{what}: error after the 1 s deadline by"),
                took.saturating_sub(Duration::from_secs(1))
            );
        }
        let (took, text) = hostile("mcp/notes/crash", json!({})).await;
        assert!(text.contains("crashing now"), "{text}");
        println!("{:<62} {took:>16.1?}", "server exits mid-call: error after");
        let healthy = rye.call_tool(call("execute", echo("after"))).await.unwrap();
        assert!(serde_json::to_string(&healthy.content).unwrap().contains("after"));
        println!(
            "{:<62} {:>10} MiB -> {} MiB",
            "rye serve peak memory (VmHWM) before and after the hostile servers",
            before,
            peak()
        );
        rye.cancel().await.unwrap();
        server.cancel().await.unwrap();
        fast.cancel().await.unwrap();
    });
}
