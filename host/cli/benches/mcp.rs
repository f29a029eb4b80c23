//! `cargo bench -p rye --bench mcp`: the MCP server's speed targets,
//! measured from a real client (the Rust SDK's) talking to the real
//! `rye serve` over stdio.
//!
//! 1. Server start to the first `tools/list` answer, warm component cache
//!    (each sample is a new process: spawn, initialize, list).
//! 2. `execute` of `rye/bash/bash` `echo hello` through one persistent
//!    session, round trip as the client sees it.
//! 3. `search` round trip through the same session.

use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt, service::RunningService};
use serde_json::{Value, json};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn p90(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() * 9 / 10]
}

fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

async fn start(home: &std::path::Path, cache: &std::path::Path) -> RunningService<RoleClient, ()> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_rye"));
    command
        .arg("serve")
        .env("HOME", home)
        .env("RYE_CACHE_DIR", cache)
        .env("RYE_CACHE_KEY", cache.with_extension("key"))
        .env("RYE_LOG", "error");
    ().serve(TokioChildProcess::new(command).unwrap())
        .await
        .unwrap()
}

fn main() {
    let home = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let project_path = project.path().display().to_string();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // Warm the component cache once.
        let warm = start(home.path(), cache.path()).await;
        warm.call_tool(call("search", json!({"scope": "tool", "query": "bash", "project_path": project_path})))
            .await
            .unwrap();
        warm.cancel().await.unwrap();

        let mut starts = Vec::new();
        for _ in 0..30 {
            let started = Instant::now();
            let client = start(home.path(), cache.path()).await;
            let tools = client.list_tools(None).await.unwrap();
            starts.push(started.elapsed());
            assert_eq!(tools.tools.len(), 4);
            client.cancel().await.unwrap();
        }
        println!(
            "{:<58} median {:>9.1?}  p90 {:>9.1?}",
            "server start to first tools/list (warm cache)",
            median(starts.clone()),
            p90(starts)
        );

        let client = start(home.path(), cache.path()).await;
        let echo = json!({"item_type": "tool", "item_id": "rye/bash/bash", "project_path": project_path,
                          "parameters": {"command": "echo hello"}});
        let search = json!({"scope": "tool", "query": "python", "project_path": project_path});
        for _ in 0..20 {
            client.call_tool(call("execute", echo.clone())).await.unwrap();
            client.call_tool(call("search", search.clone())).await.unwrap();
        }
        let (mut executes, mut searches) = (Vec::new(), Vec::new());
        for _ in 0..300 {
            let started = Instant::now();
            let result = client.call_tool(call("execute", echo.clone())).await.unwrap();
            executes.push(started.elapsed());
            assert_eq!(result.structured_content.unwrap()["data"]["stdout"], "hello\n");

            let started = Instant::now();
            let result = client.call_tool(call("search", search.clone())).await.unwrap();
            searches.push(started.elapsed());
            assert!(!result.structured_content.unwrap()["results"].as_array().unwrap().is_empty());
        }
        println!(
            "{:<58} median {:>9.1?}  p90 {:>9.1?}",
            "execute rye/bash/bash echo, persistent stdio session",
            median(executes.clone()),
            p90(executes)
        );
        println!(
            "{:<58} median {:>9.1?}  p90 {:>9.1?}",
            "search round trip, same session",
            median(searches.clone()),
            p90(searches)
        );
        client.cancel().await.unwrap();
    });
}
