//! Tools that are WebAssembly components, executed through real chains:
//! the tool item and its `.wasm` (tool-probe, built from
//! `tests/test-programs/`) signed in a project, the system's component
//! runtime and primitive, each capability granted and withheld, each
//! limit crossed, a tampered component refused before it runs, and the
//! same logic as a process tool giving the same data.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::write;
use rye_host::{ExecuteRequest, ItemKind, Rye};
use rye_test_artifacts as artifacts;
use serde_json::{Value, json};

fn execute(rye: &Arc<Rye>, project: &Path, id: &str, parameters: Value) -> Value {
    let request = ExecuteRequest {
        parameters,
        project: Some(project.to_owned()),
        trace: true,
        ..ExecuteRequest::new(ItemKind::Tool, id)
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rye.execute(&request))
}

/// A component tool `demo/<name>` in `project`, its `.wasm` beside it,
/// with `capabilities`; both signed. (JSON is YAML.)
fn component_tool(project: &Path, name: &str, capabilities: Value) {
    let wasm = std::fs::read(artifacts::TOOL_PROBE).unwrap();
    write(project, &format!(".ai/tools/demo/{name}.wasm"), wasm);
    let item = json!({
        "version": "1.0.0",
        "tool_type": "wasm_component",
        "executor_id": "rye/core/runtimes/wasm/component",
        "category": "demo",
        "description": "Does what its parameters ask",
        "config": {"component": format!("{name}.wasm"), "capabilities": capabilities},
    });
    write(
        project,
        &format!(".ai/tools/demo/{name}.yaml"),
        serde_json::to_string_pretty(&item).unwrap(),
    );
}

fn setup() -> (tempfile::TempDir, tempfile::TempDir, Arc<Rye>) {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rye = Arc::new(common::rye(user.path()));
    (project, user, rye)
}

fn data(result: &Value) -> &Value {
    assert_eq!(result["status"], "success", "{result:#}");
    &result["data"]
}

fn error(result: &Value) -> String {
    assert_eq!(result["status"], "error", "{result:#}");
    result["error"].as_str().unwrap().to_owned()
}

#[test]
fn a_component_tool_runs_with_what_its_item_grants_and_the_trace_shows_it() {
    let (project, _user, rye) = setup();
    let p = project.path();
    write(p, "notes/a.md", "# a\n");
    std::fs::create_dir_all(p.join(".ai/state/out")).unwrap();
    component_tool(
        p,
        "probe",
        json!({"files": [{"path": "{project_path}", "access": "read"},
                         {"path": "{project_path}/.ai/state/out", "access": "write"}],
               "env": ["RYE_PROBE_GRANTED"]}),
    );
    let echoed = execute(
        &rye,
        p,
        "demo/probe",
        json!({"do": "echo", "value": [1, "two"]}),
    );
    assert_eq!(data(&echoed), &json!({"echo": [1, "two"]}));
    let granted: Vec<&Value> = echoed["trace"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["step"] == "component")
        .collect();
    assert_eq!(granted.len(), 1, "{echoed:#}");
    let root = p.canonicalize().unwrap();
    assert_eq!(
        granted[0]["files"],
        json!([{"path": root.to_str().unwrap(), "access": "read"},
               {"path": root.join(".ai/state/out").to_str().unwrap(), "access": "write"}])
    );
    assert_eq!(granted[0]["env_keys"], json!(["RYE_PROBE_GRANTED"]));
    assert!(
        echoed["trace"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["step"] == "verify_integrity"
                && s["item"] == "demo/probe component"
                && s["status"] == "verified"),
        "{echoed:#}"
    );

    // Read where granted; write only where granted to.
    let read = execute(
        &rye,
        p,
        "demo/probe",
        json!({"do": "read", "path": root.join("notes/a.md")}),
    );
    assert_eq!(data(&read), &json!({"content": "# a\n"}));
    let refused = execute(
        &rye,
        p,
        "demo/probe",
        json!({"do": "write", "path": root.join("notes/a.md"), "content": "x"}),
    );
    assert!(data(&refused)["error"].is_string(), "{refused:#}");
    assert_eq!(
        std::fs::read_to_string(p.join("notes/a.md")).unwrap(),
        "# a\n"
    );
    let wrote = execute(
        &rye,
        p,
        "demo/probe",
        json!({"do": "write", "path": root.join(".ai/state/out/r.json"), "content": "{}"}),
    );
    assert_eq!(data(&wrote), &json!({"written": true}));
    // Nothing outside the project.
    let outside = execute(
        &rye,
        p,
        "demo/probe",
        json!({"do": "read", "path": "/etc/hostname"}),
    );
    assert!(data(&outside)["error"].is_string(), "{outside:#}");
}

#[test]
fn variables_reach_the_tool_only_when_named() {
    // SAFETY: set before this test's host starts any thread.
    unsafe {
        std::env::set_var("RYE_PROBE_NAMED", "yes");
        std::env::set_var("RYE_PROBE_UNNAMED", "no");
    }
    let (project, _user, rye) = setup();
    let p = project.path();
    component_tool(p, "env", json!({"env": ["RYE_PROBE_NAMED"]}));
    let seen = execute(
        &rye,
        p,
        "demo/env",
        json!({"do": "env", "name": "RYE_PROBE_NAMED"}),
    );
    assert_eq!(data(&seen)["value"], "yes");
    assert_eq!(data(&seen)["names"], json!(["RYE_PROBE_NAMED"]));
    let hidden = execute(
        &rye,
        p,
        "demo/env",
        json!({"do": "env", "name": "RYE_PROBE_UNNAMED"}),
    );
    assert_eq!(data(&hidden)["value"], Value::Null);
}

#[test]
fn each_limit_stops_the_run_with_an_error_naming_the_tool_and_the_limit() {
    let (project, _user, rye) = setup();
    let p = project.path();
    component_tool(p, "slow", json!({"limits": {"deadline_ms": 300}}));
    component_tool(p, "greedy", json!({"limits": {"memory_bytes": 33554432}}));
    component_tool(p, "loud", json!({"limits": {"output_bytes": 65536}}));
    let slow = error(&execute(&rye, p, "demo/slow", json!({"do": "loop"})));
    assert!(
        slow.contains("demo/slow") && slow.contains("limits.deadline_ms"),
        "{slow}"
    );
    let greedy = error(&execute(&rye, p, "demo/greedy", json!({"do": "allocate"})));
    assert!(
        greedy.contains("demo/greedy") && greedy.contains("limits.memory_bytes"),
        "{greedy}"
    );
    let loud = error(&execute(&rye, p, "demo/loud", json!({"do": "flood"})));
    assert!(
        loud.contains("demo/loud") && loud.contains("limits.output_bytes"),
        "{loud}"
    );
    // The host serves on.
    assert_eq!(
        data(&execute(
            &rye,
            p,
            "demo/slow",
            json!({"do": "echo", "value": 1})
        )),
        &json!({"echo": 1})
    );
}

#[test]
fn grants_past_the_runtime_or_out_of_the_project_are_refused_before_anything_runs() {
    let (project, _user, rye) = setup();
    let p = project.path();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), p.join("away")).unwrap();
    // The standard validator refuses what is wrong in the file; the host
    // what only a run can know (where links lead, the runtime's bounds).
    for (name, capabilities, expected) in [
        (
            "abs",
            json!({"files": [{"path": "/etc"}]}),
            "[rye/tool/component] capabilities.files[0].path is \"/etc\"",
        ),
        (
            "up",
            json!({"files": [{"path": "{project_path}/.."}]}),
            "without `.` or `..`",
        ),
        (
            "link",
            json!({"files": [{"path": "{project_path}/away"}]}),
            "leads out of",
        ),
        (
            "big",
            json!({"limits": {"memory_bytes": 1_073_741_824u64}}),
            "past the",
        ),
        (
            "net",
            json!({"network": {"hosts": ["https://example.com/"]}}),
            "capabilities.network.hosts: \"https://example.com/\" is not a host",
        ),
        (
            "port",
            json!({"network": {"hosts": ["example.com:http"]}}),
            "network.hosts: \"example.com:http\" is not a host: its port is not a number",
        ),
        ("odd", json!({"sockets": true}), "not a capability"),
    ] {
        component_tool(p, name, capabilities);
        let refused = error(&execute(
            &rye,
            p,
            &format!("demo/{name}"),
            json!({"do": "echo"}),
        ));
        assert!(
            refused.contains(&format!("demo/{name}")) && refused.contains(expected),
            "{name}: {refused}"
        );
    }
}

#[test]
fn a_tampered_component_is_refused_before_it_runs() {
    let (project, _user, rye) = setup();
    let p = project.path();
    component_tool(p, "probe", json!({}));
    assert_eq!(
        data(&execute(
            &rye,
            p,
            "demo/probe",
            json!({"do": "echo", "value": 1})
        )),
        &json!({"echo": 1})
    );
    let wasm = p.join(".ai/tools/demo/probe.wasm");
    let mut bytes = std::fs::read(&wasm).unwrap();
    bytes.extend_from_slice(b"\0\0\0");
    std::fs::write(&wasm, bytes).unwrap();
    let result = execute(&rye, p, "demo/probe", json!({"do": "echo", "value": 1}));
    assert_eq!(result["status"], "error", "{result:#}");
    assert_eq!(result["error_type"], "integrity", "{result:#}");
}

#[test]
fn the_same_logic_as_a_process_tool_gives_the_same_data() {
    let (project, _user, rye) = setup();
    let p = project.path();
    component_tool(p, "probe", json!({}));
    write(
        p,
        ".ai/tools/demo/echo.py",
        "__executor_id__ = 'rye/core/runtimes/python/script'\nimport json, sys\n\
         if __name__ == '__main__':\n    asked = json.load(sys.stdin)\n    print(json.dumps({'echo': asked['value']}))\n",
    );
    let parameters = json!({"do": "echo", "value": {"n": 3, "words": ["a", "b"]}});
    let component = execute(&rye, p, "demo/probe", parameters.clone());
    let process = execute(&rye, p, "demo/echo", parameters);
    assert_eq!(data(&component), data(&process));
}
