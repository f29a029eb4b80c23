//! `rye serve` driven over stdio by real MCP clients: the Rust SDK's client
//! here, and the Python `mcp` package through tests/mcp/client.py.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientRequest, Request};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use rye_test_artifacts::{process_dies_soon, process_gone};
use serde_json::{Value, json};

mod common;

struct Env {
    project: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Self {
            project: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn cache() -> PathBuf {
        common::shared_cache()
    }

    fn configure(&self, command: &mut Command) {
        common::clean_env(
            command,
            self.project.path(),
            self.home.path(),
            &Self::cache(),
        )
        .env("RYE_LOG", "warn");
    }

    /// `rye` run once (for keys and setup).
    fn rye(&self, args: &[&str]) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
        self.configure(&mut command);
        let out = command.args(args).output().unwrap();
        assert!(
            out.status.success(),
            "rye {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `rye [args] serve` over stdio, for an MCP client to spawn.
    fn serve(&self, args: &[&str]) -> TokioChildProcess {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_rye"));
        command.args(args).arg("serve");
        self.configure(command.as_std_mut());
        TokioChildProcess::new(command).unwrap()
    }

    async fn client(&self) -> RunningService<RoleClient, ()> {
        ().serve(self.serve(&[])).await.unwrap()
    }

    fn project(&self) -> String {
        self.project.path().display().to_string()
    }
}

fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_rust_client_sees_four_tools_results_and_errors() {
    let env = Env::new();
    runtime().block_on(async {
        let client = env.client().await;
        let info = client.peer_info().unwrap();
        assert_eq!(info.server_info.as_ref().unwrap().name, "rye");
        let tools = client.list_tools(None).await.unwrap().tools;
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["execute", "search", "load", "sign"]);
        for tool in &tools {
            assert_eq!(tool.input_schema["type"], "object");
            let required = tool.input_schema["required"].as_array().unwrap();
            assert!(required.contains(&json!("project_path")), "{}", tool.name);
        }

        let ran = client
            .call_tool(call("execute", json!({"item_type": "tool", "item_id": "rye/bash/bash", "project_path": env.project(), "parameters": {"command": "echo hi"}})))
            .await
            .unwrap();
        assert_eq!(ran.is_error, Some(false));
        let data = ran.structured_content.unwrap();
        assert_eq!(data["data"]["stdout"], "hi\n", "{data:#}");

        let missing = client
            .call_tool(call("execute", json!({"item_type": "tool", "item_id": "no/such/tool", "project_path": env.project()})))
            .await
            .unwrap();
        assert_eq!(missing.is_error, Some(true));

        for (arguments, needle) in [
            (json!({"item_type": "tool", "project_path": env.project()}), "item_id"),
            (json!({"item_type": "gadget", "item_id": "x", "project_path": env.project()}), "gadget"),
            (json!({"item_type": "tool", "item_id": "x", "project_path": env.project(), "parameters": [1]}), "parameters must be an object"),
            (json!({"item_type": "tool", "item_id": "x", "project_path": env.project(), "colour": "red"}), "colour"),
        ] {
            let error = client.call_tool(call("execute", arguments)).await.unwrap_err();
            let text = error.to_string();
            assert!(text.contains("-32602") || text.to_lowercase().contains("invalid"), "{text}");
            assert!(text.contains(needle), "{needle} not in {text}");
        }
        let unknown = client.call_tool(call("explode", json!({}))).await.unwrap_err();
        assert!(unknown.to_string().contains("explode"), "{unknown}");

        // The server keeps serving after all of that.
        let found = client
            .call_tool(call("search", json!({"scope": "knowledge", "query": "spaces", "project_path": env.project()})))
            .await
            .unwrap();
        let ids: Vec<String> = found.structured_content.unwrap()["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect();
        assert!(ids.contains(&"rye/core/spaces".to_owned()), "{ids:?}");
        client.cancel().await.unwrap();
    });
}

/// The search options over MCP, as the original's `search` takes them.
#[test]
fn search_takes_fields_filters_sort_fuzzy_and_proximity() {
    let env = Env::new();
    for (name, version, tags, date, body) in [
        (
            "alpha",
            "1.0.0",
            "[web, http]",
            "2026-01-10",
            "alpha one two three four five six seven beta",
        ),
        (
            "beta",
            "2.3.0",
            "[cli]",
            "2026-03-01",
            "beta is next to alpha here",
        ),
    ] {
        let path = env
            .project
            .path()
            .join(format!(".ai/knowledge/demo/{name}.md"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            path,
            format!("```yaml\nname: {name}\ntitle: The {name} note\nentry_type: reference\nversion: \"{version}\"\ncategory: demo\ntags: {tags}\ncreated_at: \"{date}\"\n```\n\n{body}\n"),
        )
        .unwrap();
    }
    runtime().block_on(async {
        let client = env.client().await;
        let search = |extra: Value| {
            let mut arguments = json!({"scope": "knowledge.demo.*", "query": "", "project_path": env.project()});
            arguments.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let client = &client;
            async move {
                let found = client.call_tool(call("search", arguments)).await.unwrap();
                let found = found.structured_content.unwrap();
                found["results"]
                    .as_array()
                    .unwrap_or_else(|| panic!("{found:#}"))
                    .iter()
                    .map(|r| r["name"].as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(search(json!({"query": "name:beta"})).await, ["beta"]);
        assert_eq!(search(json!({"fields": {"tags": "http"}})).await, ["alpha"]);
        assert_eq!(search(json!({"filters": {"version": ">=2"}})).await, ["beta"]);
        assert_eq!(search(json!({"filters": {"tags": ["cli", "ftp"]}})).await, ["beta"]);
        assert_eq!(search(json!({"filters": {"date_to": "2026-02-01"}})).await, ["alpha"]);
        assert_eq!(search(json!({"sort_by": "date"})).await, ["beta", "alpha"]);
        assert_eq!(search(json!({"sort_by": "name"})).await, ["alpha", "beta"]);
        assert_eq!(search(json!({"query": "btea"})).await, Vec::<String>::new());
        assert_eq!(
            search(json!({"query": "btea", "fuzzy": {"enabled": true, "max_distance": 1}, "sort_by": "name"})).await,
            ["alpha", "beta"]
        );
        assert_eq!(
            search(json!({"query": "alpha beta", "proximity": {"enabled": true, "max_distance": 5}})).await,
            ["beta"]
        );
        let one = client
            .call_tool(call("search", json!({"scope": "knowledge.demo.*", "query": "name:alpha", "project_path": env.project()})))
            .await
            .unwrap()
            .structured_content
            .unwrap();
        let hit = &one["results"][0];
        assert_eq!(hit["signed"], false, "{hit:#}");
        assert_eq!(hit["integrity"], Value::Null);
        assert_eq!(hit["category"], "demo");

        for (extra, needle) in [
            (json!({"fuzzy": "yes"}), "fuzzy must be"),
            (json!({"proximity": {"enabled": true, "near": 3}}), "proximity.near"),
            (json!({"fuzzy": {"max_distance": -1}}), "max_distance"),
            (json!({"sort_by": "size"}), "score, date or name"),
            (json!({"fields": {"name": 7}}), "fields.name"),
        ] {
            let mut arguments = json!({"scope": "knowledge", "query": "", "project_path": env.project()});
            arguments.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let error = client.call_tool(call("search", arguments)).await.unwrap_err();
            assert!(error.to_string().contains(needle), "{needle} not in {error}");
        }
        client.cancel().await.unwrap();
    });
}

#[test]
fn sign_takes_config_items_checked_by_their_schema() {
    let env = Env::new();
    env.rye(&["keys", "generate"]);
    env.rye(&["keys", "trust"]);
    let write = |relative: &str, text: &str| {
        let path = env.project.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    };
    write(
        ".ai/tools/demo/limits.config-schema.yaml",
        "version: \"1.0.0\"\ntool_type: config-schema\nexecutor_id: null\ncategory: demo\ndescription: Limits\nschema:\n  type: object\n  properties:\n    rps: {type: integer, maximum: 100}\n",
    );
    env.rye(&["sign", "tool", "demo/limits.config-schema"]);
    let config = write(
        ".ai/config/demo/limits.yaml",
        "name: limits\ncategory: demo\nversion: \"1.0.0\"\nrps: 500\n",
    );
    runtime().block_on(async {
        let client = env.client().await;
        let sign = |id: &str| {
            call(
                "sign",
                json!({"item_type": "config", "item_id": id, "project_path": env.project()}),
            )
        };
        let refused = client.call_tool(sign("demo/limits")).await.unwrap();
        assert_eq!(refused.is_error, Some(true));
        let reply = refused.structured_content.unwrap();
        let error = reply["error"].as_str().unwrap();
        assert!(
            error.contains("limits.yaml") && error.contains("/rps 500 is more than 100"),
            "{reply:#}"
        );
        std::fs::write(
            &config,
            "name: limits\ncategory: demo\nversion: \"1.0.0\"\nrps: 50\n",
        )
        .unwrap();
        let signed = client.call_tool(sign("demo/limits")).await.unwrap();
        assert_eq!(signed.is_error, Some(false), "{signed:?}");
        assert_eq!(signed.structured_content.unwrap()["status"], "signed");
        let missing = client.call_tool(sign("demo/absent")).await.unwrap();
        assert_eq!(missing.is_error, Some(true));
        client.cancel().await.unwrap();
    });
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .starts_with("# rye:signed:")
    );
}

#[test]
fn cancelling_an_execute_kills_the_sleeping_tool() {
    let env = Env::new();
    let pidfile = env.project.path().join("sleeper.pid");
    runtime().block_on(async {
        let client = env.client().await;
        let command = format!("echo $$ > {}; exec sleep 30", pidfile.display());
        let handle = client
            .peer()
            .send_cancellable_request(
                ClientRequest::CallToolRequest(Request::new(call(
                    "execute",
                    json!({"item_type": "tool", "item_id": "rye/bash/bash", "project_path": env.project(), "parameters": {"command": command}}),
                ))),
                PeerRequestOptions::no_options(),
            )
            .await
            .unwrap();
        let pid = wait_for_pid(&pidfile).await;
        assert!(!process_gone(pid));
        handle.cancel(Some("the test is done waiting".into())).await.unwrap();
        assert!(
            process_dies_soon(pid),
            "the tool outlived its cancelled call"
        );

        // The same session still answers.
        let ran = client
            .call_tool(call("execute", json!({"item_type": "tool", "item_id": "rye/bash/bash", "project_path": env.project(), "parameters": {"command": "echo after"}})))
            .await
            .unwrap();
        assert_eq!(ran.structured_content.unwrap()["data"]["stdout"], "after\n");
        client.cancel().await.unwrap();
    });
    // The cancelled run's thread says so.
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    env.configure(&mut command);
    let out = command
        .args(["--json", "threads", "list", "--status", "cancelled"])
        .output()
        .unwrap();
    let cancelled: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cancelled.as_array().unwrap().len(), 1, "{cancelled:#}");
}

#[test]
fn cancelling_an_execute_stops_a_component_tool_within_a_tick() {
    let env = Env::new();
    env.rye(&["keys", "generate"]);
    env.rye(&["keys", "trust"]);
    let tools = env.project.path().join(".ai/tools/demo");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::create_dir_all(env.project.path().join(".ai/state")).unwrap();
    std::fs::copy(rye_test_artifacts::TOOL_PROBE, tools.join("counter.wasm")).unwrap();
    std::fs::write(
        tools.join("counter.yaml"),
        "version: \"1.0.0\"\ntool_type: wasm_component\nexecutor_id: rye/core/runtimes/wasm/component\n\
         category: demo\ndescription: Counts until stopped\nconfig:\n  component: counter.wasm\n  \
         capabilities:\n    files: [{path: \"{project_path}/.ai/state\", access: write}]\n    \
         limits: {deadline_ms: 600000}\n",
    )
    .unwrap();
    env.rye(&["sign", "tool", "demo/counter"]);
    let state = env.project.path().join(".ai/state");
    let count = state.canonicalize().unwrap().join("count");
    let read = || std::fs::read_to_string(&count).unwrap_or_default();
    runtime().block_on(async {
        let client = env.client().await;
        let handle = client
            .peer()
            .send_cancellable_request(
                ClientRequest::CallToolRequest(Request::new(call(
                    "execute",
                    json!({"item_type": "tool", "item_id": "demo/counter", "project_path": env.project(),
                           "parameters": {"do": "count", "path": count}}),
                ))),
                PeerRequestOptions::no_options(),
            )
            .await
            .unwrap();
        let began = std::time::Instant::now();
        while read().is_empty() {
            assert!(began.elapsed() < Duration::from_secs(60), "the tool never began");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Meanwhile the server answers others: the run left the one worker
        // of a stdio server at its first tick.
        let meanwhile = tokio::time::timeout(
            Duration::from_secs(10),
            client.call_tool(call("execute", json!({"item_type": "tool", "item_id": "demo/counter", "project_path": env.project(), "parameters": {"do": "echo", "value": 2}}))),
        )
        .await
        .expect("an execute waited for the running one")
        .unwrap();
        assert_eq!(meanwhile.structured_content.unwrap()["data"], json!({"echo": 2}));
        handle.cancel(Some("the test is done waiting".into())).await.unwrap();
        // Within a tick (100 ms) it stops; then the count stands still.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stopped = read();
        assert!(stopped.parse::<u64>().is_ok(), "no count: {stopped:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(read(), stopped, "the tool ran on after its call was cancelled");

        let ran = client
            .call_tool(call("execute", json!({"item_type": "tool", "item_id": "demo/counter", "project_path": env.project(), "parameters": {"do": "echo", "value": 1}})))
            .await
            .unwrap();
        assert_eq!(ran.structured_content.unwrap()["data"], json!({"echo": 1}));
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_server_stopped_right_after_answering_keeps_the_records_of_its_runs() {
    let env = Env::new();
    env.rye(&["keys", "generate"]);
    env.rye(&["keys", "trust"]);
    let tools = env.project.path().join(".ai/tools/demo");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::copy(rye_test_artifacts::TOOL_PROBE, tools.join("probe.wasm")).unwrap();
    std::fs::write(
        tools.join("probe.yaml"),
        "version: \"1.0.0\"\ntool_type: wasm_component\nexecutor_id: rye/core/runtimes/wasm/component\n\
         category: demo\ndescription: Answers back\nconfig:\n  component: probe.wasm\n",
    )
    .unwrap();
    env.rye(&["sign", "tool", "demo/probe"]);
    let ids = runtime().block_on(async {
        let transport = env.serve(&[]);
        let pid = transport.id().unwrap();
        let client = ().serve(transport).await.unwrap();
        let mut ids = Vec::new();
        for value in 0..5 {
            let ran = client
                .call_tool(call(
                    "execute",
                    json!({"item_type": "tool", "item_id": "demo/probe",
                    "project_path": env.project(), "parameters": {"do": "echo", "value": value}}),
                ))
                .await
                .unwrap()
                .structured_content
                .unwrap();
            assert_eq!(ran["data"], json!({"echo": value}), "{ran:#}");
            ids.push(ran["metadata"]["thread_id"].as_str().unwrap().to_owned());
        }
        // Told to stop the moment the last answer is in: the runs' records
        // are still being grouped to be written.
        let stopped = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(stopped.success());
        assert!(process_dies_soon(pid), "rye serve did not stop");
        drop(client);
        ids
    });
    for (value, id) in ids.iter().enumerate() {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
        env.configure(&mut command);
        let out = command.args(["threads", "show", id]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(shown["status"], "completed", "{shown:#}");
        assert_eq!(shown["result"]["data"], json!({"echo": value}), "{shown:#}");
    }
}

#[test]
fn an_async_execute_returns_at_once_and_outlives_its_client() {
    let env = Env::new();
    let gate = env.project.path().join("gate");
    let command = format!(
        "while [ ! -e {gate} ]; do sleep 0.02; done; echo after the client left",
        gate = gate.display()
    );
    let (thread_id, runner) = runtime().block_on(async {
        let client = env.client().await;
        let execute = |arguments: Value| client.call_tool(call("execute", arguments));
        let started = execute(json!({"item_type": "tool", "item_id": "rye/bash/bash", "project_path": env.project(), "parameters": {"command": command}, "async": true}))
            .await
            .unwrap();
        assert_ne!(started.is_error, Some(true), "{started:?}");
        let body = started.structured_content.unwrap();
        assert_eq!(body["async"], true, "{body:#}");
        assert_eq!(body["state"], "running");
        let thread_id = body["thread_id"].as_str().unwrap().to_owned();
        let runner = body["pid"].as_u64().unwrap() as u32;

        // An agent looks at it through execute.
        let status = execute(json!({"item_type": "tool", "item_id": "rye/core/processes/status", "project_path": env.project(), "parameters": {"run_id": thread_id}}))
            .await
            .unwrap();
        let status = status.structured_content.unwrap();
        assert_eq!(status["data"]["status"], "running", "{status:#}");
        assert_eq!(status["data"]["pid"], runner);

        // The original's refusals, each naming why.
        for (arguments, why) in [
            (json!({"item_type": "tool", "item_id": "rye/bash/bash", "project_path": env.project(), "dry_run": true, "async": true}), "dry_run"),
            (json!({"item_type": "knowledge", "item_id": "rye/any", "project_path": env.project(), "async": true}), "knowledge"),
            (json!({"item_type": "directive", "item_id": "rye/any", "project_path": env.project(), "async": true}), "inline directive"),
        ] {
            let refused = execute(arguments).await.unwrap();
            assert_eq!(refused.is_error, Some(true));
            let body = refused.structured_content.unwrap();
            assert!(body["error"].as_str().unwrap().contains(why), "{body:#}");
        }
        // The client goes away, and its server with it.
        client.cancel().await.unwrap();
        (thread_id, runner)
    });
    assert!(!process_gone(runner), "the runner ended with its client");
    std::fs::write(&gate, "").unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    env.configure(&mut command);
    let out = command
        .args(["threads", "wait", &thread_id, "--timeout", "60"])
        .output()
        .unwrap();
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(
        done["result"]["data"]["stdout"], "after the client left\n",
        "{done:#}"
    );
}

/// A client that keeps the URIs of resource-updated notifications.
#[derive(Clone, Default)]
struct Updates {
    uris: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    arrived: std::sync::Arc<tokio::sync::Notify>,
}

impl rmcp::ClientHandler for Updates {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.uris.lock().unwrap().push(params.uri);
        self.arrived.notify_one();
    }
}

#[test]
#[expect(
    deprecated,
    reason = "resources/subscribe is how clients before protocol 2026-07-28 subscribe, and what rye serves"
)]
fn a_subscribed_thread_resource_tells_its_end() {
    let env = Env::new();
    let gate = env.project.path().join("gate");
    let command = format!(
        "while [ ! -e {gate} ]; do sleep 0.02; done; echo told",
        gate = gate.display()
    );
    runtime().block_on(async {
        let updates = Updates::default();
        let mut serve = tokio::process::Command::new(env!("CARGO_BIN_EXE_rye"));
        serve.args(["--project", &env.project(), "serve"]);
        env.configure(serve.as_std_mut());
        let client = updates
            .clone()
            .serve(TokioChildProcess::new(serve).unwrap())
            .await
            .unwrap();
        let templates = client.list_resource_templates(None).await.unwrap();
        assert!(
            templates
                .resource_templates
                .iter()
                .any(|t| t.uri_template == "rye://threads/{thread_id}"),
            "{templates:?}"
        );
        let started = client
            .call_tool(call("execute", json!({"item_type": "tool", "item_id": "rye/bash/bash", "project_path": env.project(), "parameters": {"command": command}, "async": true})))
            .await
            .unwrap();
        let id = started.structured_content.unwrap()["thread_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let uri = format!("rye://threads/{id}");
        let read = |uri: String| {
            let client = &client;
            async move {
                let read = client
                    .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
                    .await
                    .unwrap();
                let rmcp::model::ResourceContents::TextResourceContents { text, .. } =
                    &read.contents[0]
                else {
                    panic!("{read:?}")
                };
                serde_json::from_str::<Value>(text).unwrap()
            }
        };
        assert_eq!(read(uri.clone()).await["status"], "running");
        client
            .subscribe(rmcp::model::SubscribeRequestParams::new(uri.clone()))
            .await
            .unwrap();
        // Unknown threads and other resources cannot be subscribed to.
        for bad in ["rye://threads/no-such-thread", "rye://knowledge/x"] {
            assert!(
                client
                    .subscribe(rmcp::model::SubscribeRequestParams::new(bad))
                    .await
                    .is_err(),
                "{bad}"
            );
        }

        std::fs::write(&gate, "").unwrap();
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                updates.arrived.notified().await;
                let done = read(uri.clone()).await;
                if done["status"] != "running" {
                    return done;
                }
            }
        })
        .await
        .map(|done| {
            assert_eq!(done["status"], "completed", "{done:#}");
            assert_eq!(done["result"]["data"]["stdout"], "told\n");
        })
        .expect("no update said the thread ended");
        assert!(updates.uris.lock().unwrap().iter().all(|u| *u == uri));
        client.cancel().await.unwrap();
    });
}

async fn wait_for_pid(path: &Path) -> u32 {
    for _ in 0..500 {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the tool never started")
}

#[test]
fn the_python_mcp_client_drives_rye_serve() {
    let Some(python) = common::test_python() else {
        rye_test_artifacts::skip("the Python MCP client checks", "no python3 on this machine");
        return;
    };
    let env = Env::new();
    env.rye(&["keys", "generate"]);
    env.rye(&["keys", "trust"]);
    let tool = env.project.path().join(".ai/tools/demo/hello.py");
    std::fs::create_dir_all(tool.parent().unwrap()).unwrap();
    std::fs::write(
        &tool,
        "__executor_id__ = 'rye/core/runtimes/python/script'\nimport json\nif __name__ == '__main__':\n    print(json.dumps({'hello': 'mcp'}))\n",
    )
    .unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/client.py");
    let mut command = Command::new(python);
    env.configure(&mut command);
    let out = command
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_rye"))
        .arg(env.project.path())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && report.contains("all checks passed"),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `rye serve --http 127.0.0.1:0`, killed when dropped.
struct HttpServer {
    child: std::process::Child,
    url: String,
}

impl HttpServer {
    fn start(env: &Env, token: &str) -> Self {
        use std::io::BufRead;
        let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
        env.configure(&mut command);
        let mut child = command
            .args(["serve", "--http", "127.0.0.1:0", "--token", token])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = std::io::BufReader::new(stderr).lines();
        let first = lines
            .next()
            .expect("the server says where it serves")
            .unwrap();
        let url = first
            .strip_prefix("serving MCP at ")
            .unwrap_or_else(|| panic!("unexpected first line: {first}"))
            .to_owned();
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, url }
    }

    /// The status code of a raw HTTP request to the endpoint.
    fn status(&self, headers: &[&str]) -> u16 {
        use std::io::{Read, Write};
        let authority = self
            .url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap();
        let mut stream = std::net::TcpStream::connect(authority).unwrap();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        if !headers.iter().any(|h| h.starts_with("Host:")) {
            request.push_str(&format!("Host: {authority}\r\n"));
        }
        for header in headers {
            request.push_str(header);
            request.push_str("\r\n");
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn http_checks_token_host_and_origin() {
    let env = Env::new();
    let server = HttpServer::start(&env, "s3cret");
    assert_eq!(server.status(&[]), 401, "no token");
    assert_eq!(server.status(&["Authorization: Bearer wrong"]), 401);
    let auth = "Authorization: Bearer s3cret";
    assert_eq!(
        server.status(&[auth, "Host: attacker.example"]),
        403,
        "DNS rebinding host"
    );
    assert_eq!(
        server.status(&[auth, "Origin: http://attacker.example"]),
        403,
        "foreign origin"
    );
    let ok = server.status(&[auth]);
    assert!(
        ok != 401 && ok != 403,
        "the right token on loopback passes: {ok}"
    );
}

#[test]
fn over_http_the_python_client_works_200_concurrent_calls_answer_and_cancelling_kills() {
    let Some(python) = common::test_python() else {
        rye_test_artifacts::skip(
            "the Python MCP client checks over HTTP",
            "no python3 on this machine",
        );
        return;
    };
    let env = Env::new();
    env.rye(&["keys", "generate"]);
    env.rye(&["keys", "trust"]);
    let p = env.project.path();
    let write = |relative: &str, content: &str| {
        let path = p.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    };
    write(
        ".ai/tools/demo/hello.py",
        "__executor_id__ = 'rye/core/runtimes/python/script'\nimport json\nif __name__ == '__main__':\n    print(json.dumps({'hello': 'mcp'}))\n",
    );
    // demo/spin is read by a parser component that never returns.
    let parser = p.join(".ai/parsers/loop/loop.wasm");
    std::fs::create_dir_all(parser.parent().unwrap()).unwrap();
    std::fs::copy(rye_test_artifacts::PARSER_LOOP, &parser).unwrap();
    env.rye(&["sign", "parser", "loop/loop"]);
    let system_extractor = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.ai/tools/rye/core/extractors/tool/tool_extractor.yaml"),
    )
    .unwrap();
    let extractor = system_extractor
        .replace("\".toml\"]", "\".toml\", \".spin\"]")
        .replace("parsers:\n", "parsers:\n  .spin: loop/loop\n")
        .replace(
            "search_fields:",
            "signature_formats:\n  .spin: {prefix: \"#\"}\nsearch_fields:",
        );
    assert!(extractor.contains(".spin: loop/loop"));
    write(
        ".ai/tools/rye/core/extractors/tool/tool_extractor.yaml",
        &extractor,
    );
    // Its parser never finishes, so `rye sign` (which parses first) would
    // refuse it: sign it directly.
    let key =
        rye_integrity::Keypair::load(&env.home.path().join(".ai/config/keys/signing")).unwrap();
    let signed = rye_integrity::sign_text(
        "executor_id: rye/core/runtimes/bash/bash\n",
        &rye_integrity::SignatureFormat::new("#", "", false),
        &key,
        std::time::SystemTime::now(),
    )
    .unwrap();
    write(".ai/tools/demo/spin.spin", &signed);

    let server = HttpServer::start(&env, "t0ken");
    let run = |script: &str, args: &[&str]| {
        let mut command = Command::new(&python);
        env.configure(&mut command);
        let out = command
            .env("RYE_MCP_TOKEN", "t0ken")
            .arg(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../tests/mcp")
                    .join(script),
            )
            .args(args)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{script}: {report}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        report
    };
    let project = env.project();
    let report = run("client.py", &[&server.url, &project]);
    assert!(report.contains("all checks passed"), "{report}");
    let report = run("stress.py", &[&server.url, &project, "200"]);
    assert!(report.contains("\"failures\": 0"), "{report}");
    eprintln!("stress: {report}");
    // 200 async runs at once: each its own thread, with its own output.
    let report = run("async_stress.py", &[&server.url, &project, "200"]);
    assert!(report.contains("\"failures\": 0"), "{report}");
    assert!(report.contains("\"threads\": 200"), "{report}");
    eprintln!("async stress: {report}");
    let pidfile = p.join("sleeper.pid").display().to_string();
    let report = run("cancel.py", &[&server.url, &project, &pidfile]);
    assert!(report.contains("killed"), "{report}");
}

/// A client that counts list-changed notifications.
#[derive(Clone, Default)]
struct Watcher {
    prompts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    resources: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl rmcp::ClientHandler for Watcher {
    async fn on_prompt_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.prompts
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    async fn on_resource_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.resources
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn directives_are_prompts_and_knowledge_is_resources_and_changes_are_announced() {
    let env = Env::new();
    runtime().block_on(async {
        let watcher = Watcher::default();
        let client = watcher
            .clone()
            .serve(env.serve(&["--project", &env.project()]))
            .await
            .unwrap();

        let prompts = client.list_prompts(None).await.unwrap().prompts;
        let create = prompts
            .iter()
            .find(|p| p.name == "rye/core/create_knowledge")
            .unwrap_or_else(|| panic!("{prompts:#?}"));
        assert!(
            create.arguments.as_ref().is_some_and(|a| !a.is_empty()),
            "{create:#?}"
        );

        let resources = client.list_resources(None).await.unwrap().resources;
        let uri = "rye://knowledge/rye/core/spaces";
        assert!(resources.iter().any(|r| r.uri == uri), "{resources:#?}");
        let read = client
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
            .await
            .unwrap();
        let text = serde_json::to_value(&read.contents[0]).unwrap();
        assert!(text["text"].as_str().unwrap().contains("shadow"), "{text}");

        // A new knowledge file in the project is announced.
        let path = env.project.path().join(".ai/knowledge/demo/new.md");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "```yaml\nname: new\ntitle: New\n```\n\nFresh.\n").unwrap();
        for _ in 0..100 {
            if watcher.resources.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            watcher.resources.load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        assert_eq!(watcher.prompts.load(std::sync::atomic::Ordering::SeqCst), 0);
        let resources = client.list_resources(None).await.unwrap().resources;
        assert!(
            resources
                .iter()
                .any(|r| r.uri == "rye://knowledge/demo/new")
        );
        client.cancel().await.unwrap();
    });
}

/// A client that counts progress notifications.
#[derive(Clone, Default)]
struct Progress(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl rmcp::ClientHandler for Progress {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        assert!(params.message.unwrap_or_default().contains("rye/bash/bash"));
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn a_long_execute_reports_progress() {
    let env = Env::new();
    runtime().block_on(async {
        let progress = Progress::default();
        let client = progress.clone().serve(env.serve(&[])).await.unwrap();
        let handle = client
            .peer()
            .send_request_with_option(
                ClientRequest::CallToolRequest(Request::new(call(
                    "execute",
                    json!({"item_type": "tool", "item_id": "rye/bash/bash", "project_path": env.project(), "parameters": {"command": "sleep 2.5; echo done"}}),
                ))),
                PeerRequestOptions::no_options(),
            )
            .await
            .unwrap();
        let result = handle.await_response().await.unwrap();
        assert!(format!("{result:?}").contains("done"), "{result:?}");
        let seen = progress.0.load(std::sync::atomic::Ordering::SeqCst);
        assert!(seen >= 2, "{seen} progress notifications in 2.5 s");
        client.cancel().await.unwrap();
    });
}

#[test]
fn protocol_versions_that_current_clients_send_are_accepted() {
    use std::io::{BufRead, Write};
    let env = Env::new();
    // 2025-11-25: Python mcp 1.30; 2025-06-18: TypeScript SDK 1.x; older
    // ones from clients still in use.
    for version in ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
        env.configure(&mut command);
        let mut child = command
            .arg("serve")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
        writeln!(stdin, "{initialize}").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["result"]["protocolVersion"], version, "{answer}");
        assert_eq!(answer["result"]["serverInfo"]["name"], "rye");
        drop(stdin);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// An agent over MCP adds a server, discovers its tools and calls one, all
/// through `execute` of the system tool `rye/mcp/manager`; the items it
/// makes are signed with the user's key like those `rye mcp` writes.
#[test]
fn an_agent_manages_mcp_servers_over_mcp() {
    let Some(python) = common::test_python() else {
        return;
    };
    let env = Env::new();
    env.rye(&["keys", "generate"]);
    env.rye(&["keys", "trust"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp-servers/notes_server.py")
        .display()
        .to_string();
    runtime().block_on(async {
        let client = env.client().await;
        let manage = |parameters: Value| {
            call(
                "execute",
                json!({"item_type": "tool", "item_id": "rye/mcp/manager", "project_path": env.project(), "parameters": parameters}),
            )
        };
        let result = |answer: rmcp::model::CallToolResult| answer.structured_content.unwrap();

        let added = result(
            client
                .call_tool(manage(json!({"action": "add", "name": "notes", "stdio": [python.display().to_string(), script]})))
                .await
                .unwrap(),
        );
        assert_eq!(added["status"], "success", "{added:#}");
        assert_eq!(added["data"]["server"], "mcp/servers/notes", "{added:#}");
        let found = result(
            client
                .call_tool(manage(json!({"action": "discover", "name": "notes"})))
                .await
                .unwrap(),
        );
        assert!(
            found["data"]["added"].as_array().unwrap().contains(&json!("add")),
            "{found:#}"
        );
        let sum = result(
            client
                .call_tool(call(
                    "execute",
                    json!({"item_type": "tool", "item_id": "mcp/notes/add", "project_path": env.project(), "parameters": {"a": 40, "b": 2}}),
                ))
                .await
                .unwrap(),
        );
        assert_eq!(sum["data"], json!({"sum": 42}), "{sum:#}");

        // The server item a warm call used gives way at once to an edit:
        // tampered, it is refused; signed again with one more variable,
        // the next call reaches a session that has it.
        let environment = |name: &str| {
            call(
                "execute",
                json!({"item_type": "tool", "item_id": "mcp/notes/environment", "project_path": env.project(), "parameters": {"name": name}}),
            )
        };
        let before = result(client.call_tool(environment("NOTES_MARK")).await.unwrap());
        assert_eq!(before["data"]["result"], "(unset)", "{before:#}");
        let server_item = env.project.path().join(".ai/tools/mcp/servers/notes.yaml");
        let signed = std::fs::read_to_string(&server_item).unwrap();
        let home = "\"HOME\":\"${HOME}\"";
        assert!(signed.contains(home), "{signed}");
        std::fs::write(&server_item, signed.replace(home, "\"HOME\":\"/tmp\"")).unwrap();
        let refused = result(client.call_tool(environment("HOME")).await.unwrap());
        assert_eq!(refused["status"], "error", "{refused:#}");
        assert!(
            refused["error"].as_str().unwrap().contains("modified"),
            "{refused:#}"
        );
        std::fs::write(
            &server_item,
            signed.replace(home, &format!("{home},\"NOTES_MARK\":\"second\"")),
        )
        .unwrap();
        env.rye(&["sign", "tool", "mcp/servers/notes"]);
        let after = result(client.call_tool(environment("NOTES_MARK")).await.unwrap());
        assert_eq!(after["data"]["result"], "second", "{after:#}");

        // Warm calls of one tool with other parameters each get their own
        // arguments; the tool item edited and signed again, the next call
        // follows the edit.
        for name in ["NOTES_MARK", "HOME", "NOTES_MARK"] {
            let answer = result(client.call_tool(environment(name)).await.unwrap());
            assert_eq!(answer["status"], "success", "{answer:#}");
            assert_ne!(answer["data"]["result"], "(unset)", "{name}: {answer:#}");
        }
        let tool_item = env.project.path().join(".ai/tools/mcp/notes/environment.yaml");
        let tool_text = std::fs::read_to_string(&tool_item).unwrap();
        assert!(tool_text.contains("server: \"mcp/servers/notes\""), "{tool_text}");
        std::fs::write(
            &tool_item,
            tool_text.replace("\"mcp/servers/notes\"", "\"mcp/servers/elsewhere\""),
        )
        .unwrap();
        env.rye(&["sign", "tool", "mcp/notes/environment"]);
        let moved = result(client.call_tool(environment("NOTES_MARK")).await.unwrap());
        assert_eq!(moved["status"], "error", "{moved:#}");
        assert!(
            moved["error"].as_str().unwrap().contains("mcp/servers/elsewhere"),
            "{moved:#}"
        );
        std::fs::write(&tool_item, &tool_text).unwrap();
        env.rye(&["sign", "tool", "mcp/notes/environment"]);
        let back = result(client.call_tool(environment("NOTES_MARK")).await.unwrap());
        assert_eq!(back["data"]["result"], "second", "{back:#}");

        let listed = result(
            client
                .call_tool(manage(json!({"action": "list"})))
                .await
                .unwrap(),
        );
        assert_eq!(listed["data"][0]["name"], "notes", "{listed:#}");

        // Bad requests are errors that say what is wrong; nothing is written.
        for (parameters, needle) in [
            (json!({"action": "explode"}), "add, discover, refresh, list or remove"),
            (json!({"action": "add", "name": "../escape", "http": "https://mcp.test/mcp"}), "not a server name"),
            (json!({"action": "add", "name": "both", "http": "https://mcp.test/mcp", "stdio": ["sh"]}), "either"),
            (json!({"action": "remove", "name": "never-added"}), "no server item"),
            (json!({"action": "list", "colour": "red"}), "colour"),
        ] {
            let refused = result(client.call_tool(manage(parameters.clone())).await.unwrap());
            assert_eq!(refused["status"], "error", "{parameters}: {refused:#}");
            assert!(
                refused["error"].as_str().unwrap().contains(needle),
                "{needle} not in {refused:#}"
            );
        }
        assert!(!env.project.path().join(".ai/tools/mcp/servers/both.yaml").exists());
        assert!(!env.project.path().join(".ai/tools/escape.yaml").exists());

        let removed = result(
            client
                .call_tool(manage(json!({"action": "remove", "name": "notes"})))
                .await
                .unwrap(),
        );
        assert_eq!(removed["status"], "success", "{removed:#}");
        assert!(!env.project.path().join(".ai/tools/mcp/notes").exists());
        client.cancel().await.unwrap();
    });
    env.rye(&["validate", "--require-signed"]);
}

/// Whatever stdin and stdout are — pipes (the tests above), one socket for
/// both (as some launchers give), or plain files — `rye serve` answers
/// and ends at the end of its input.
#[test]
fn serve_answers_over_a_socket_and_over_files() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    let env = Env::new();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let ran = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "execute", "arguments": {"item_type": "tool", "item_id": "rye/bash/bash", "project_path": env.project(), "parameters": {"command": "echo answered"}}}});
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});

    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    env.configure(&mut command);
    let mut child = command
        .arg("serve")
        .stdin(std::os::fd::OwnedFd::from(theirs.try_clone().unwrap()))
        .stdout(std::os::fd::OwnedFd::from(theirs))
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(ours.try_clone().unwrap()).lines();
    let mut writer = ours.try_clone().unwrap();
    let mut send = |message: &Value| writeln!(writer, "{message}").unwrap();
    send(&init);
    let answer: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(answer["result"]["serverInfo"]["name"], "rye", "{answer}");
    send(&initialized);
    send(&ran);
    let answer: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["data"]["stdout"], "answered\n",
        "{answer}"
    );
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "rye serve outlived its input"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    std::fs::write(&input, format!("{init}\n{initialized}\n{ping}\n")).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    env.configure(&mut command);
    let status = command
        .arg("serve")
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(std::fs::File::create(&output).unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    let answers = std::fs::read_to_string(&output).unwrap();
    assert!(
        answers.lines().count() == 2 && answers.contains("\"id\":2"),
        "{answers}"
    );
}
