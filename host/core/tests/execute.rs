//! Executing tools through real chains: parser components read them, the
//! standard adapter component (or a custom one) plans them, real processes
//! run them.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::write;
use rye_host::{ExecuteRequest, ItemKind, PlannedAction, Rye};
use rye_test_artifacts as artifacts;
use serde_json::{Value, json};

fn rye(user: &Path) -> Arc<Rye> {
    Arc::new(common::rye(user))
}

fn run(
    rye: &Arc<Rye>,
    project: &Path,
    kind: ItemKind,
    id: &str,
    parameters: Value,
    trace: bool,
) -> Value {
    let request = ExecuteRequest {
        parameters,
        project: Some(project.to_owned()),
        trace,
        ..ExecuteRequest::new(kind, id)
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rye.execute(&request))
}

fn tool(rye: &Arc<Rye>, project: &Path, id: &str, parameters: Value) -> Value {
    run(rye, project, ItemKind::Tool, id, parameters, false)
}

fn ok(result: &Value) -> &Value {
    assert_eq!(result["status"], "success", "{result:#}");
    &result["data"]
}

fn steps<'r>(result: &'r Value, step: &str) -> Vec<&'r Value> {
    result["trace"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["step"] == step)
        .collect()
}

fn have(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn every_standard_runtime_runs_a_real_tool() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/demo/function.py",
        "__executor_id__ = 'rye/core/runtimes/python/function'\n\
         def execute(params, project_path):\n    print('chatter goes to stderr')\n    return {'words': len(params['text'].split()), 'project': project_path}\n",
    );
    write(
        p,
        ".ai/tools/demo/script.py",
        "__executor_id__ = 'rye/core/runtimes/python/script'\nimport json, sys\n\
         if __name__ == '__main__':\n    print(json.dumps({'got': json.load(sys.stdin), 'argv': sys.argv[1:]}))\n",
    );
    write(
        p,
        ".ai/tools/demo/hello.js",
        "export const __executor_id__ = 'rye/core/runtimes/node/node';\nlet input = '';\n\
         process.stdin.on('data', (c) => (input += c));\n\
         process.stdin.on('end', () => console.log(JSON.stringify({ hello: JSON.parse(input).name })));\n",
    );
    let rye = rye(user.path());
    let project_path = p.display().to_string();

    let data = ok(&tool(
        &rye,
        p,
        "demo/function",
        json!({"text": "one two three"}),
    ))
    .clone();
    assert_eq!(data, json!({"words": 3, "project": project_path}));

    let data = ok(&tool(&rye, p, "demo/script", json!({"x": 1}))).clone();
    assert_eq!(
        data,
        json!({"got": {"x": 1}, "argv": ["--project-path", project_path]})
    );

    let data = ok(&tool(
        &rye,
        p,
        "rye/bash/bash",
        json!({"command": "printf '{\"sum\": %d}' $((2 + 3))"}),
    ))
    .clone();
    assert_eq!(data, json!({"sum": 5}));

    if have("node") {
        let data = ok(&tool(&rye, p, "demo/hello", json!({"name": "rye"}))).clone();
        assert_eq!(data, json!({"hello": "rye"}));
    } else {
        rye_test_artifacts::skip("the node runtime run", "no node on this machine");
    }
}

#[test]
fn a_project_runtime_shadows_the_system_one_and_the_trace_says_so() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/rye/core/runtimes/bash/bash.yaml",
        "version: '1.0.0'\nexecutor_id: rye/core/primitives/execute\nenv_config:\n  env:\n    WHICH_RUNTIME: project\n\
         config:\n  command: /bin/bash\n  args: ['-c', '{command}']\n",
    );
    // A system tool may use only system runtimes; a project tool gets the
    // project's copy.
    write(
        p,
        ".ai/tools/demo/sh.yaml",
        "executor_id: rye/core/runtimes/bash/bash\n",
    );
    let rye = rye(user.path());
    let system_tool = tool(
        &rye,
        p,
        "rye/bash/bash",
        json!({"command": "echo ${WHICH_RUNTIME:-system}"}),
    );
    assert_eq!(ok(&system_tool)["stdout"], "system\n");
    let result = run(
        &rye,
        p,
        ItemKind::Tool,
        "demo/sh",
        json!({"command": "echo $WHICH_RUNTIME"}),
        true,
    );
    assert_eq!(ok(&result)["stdout"], "project\n");
    let resolves = steps(&result, "resolve");
    assert_eq!(resolves[1]["space"], "project");
    assert_eq!(resolves[1]["shadowed"][0]["space"], "system");
    assert!(!steps(&result, "resolve_env").is_empty());
}

#[test]
fn the_tools_own_env_wins_over_its_runtimes() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/demo/runtime.yaml",
        "executor_id: rye/core/primitives/execute\nenv_config:\n  env:\n    MODE: runtime\n    BASE: from-runtime\n\
         config:\n  command: /bin/sh\n  args: ['-c', 'echo \"{\\\"mode\\\": \\\"$MODE\\\", \\\"base\\\": \\\"$BASE\\\"}\"']\n",
    );
    write(
        p,
        ".ai/tools/demo/tool.py",
        "__executor_id__ = 'demo/runtime'\nENV_CONFIG = {'env': {'MODE': 'tool'}}\n",
    );
    let rye = rye(user.path());
    let data = ok(&tool(&rye, p, "demo/tool", json!({}))).clone();
    assert_eq!(data, json!({"mode": "tool", "base": "from-runtime"}));
}

#[test]
fn chain_errors_come_back_as_error_results() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/demo/tool.py",
        "__executor_id__ = 'no/such/runtime'\n",
    );
    let rye = rye(user.path());
    let result = tool(&rye, p, "demo/tool", json!({}));
    assert_eq!(result["status"], "error");
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("\"no/such/runtime\" not found"),
        "{result:#}"
    );
    let missing = tool(&rye, p, "not/here", json!({}));
    assert!(missing["error"].as_str().unwrap().contains("not found"));
}

#[test]
fn a_tool_past_its_timeout_is_killed_with_its_children() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/slow/runtime.yaml",
        "executor_id: rye/core/primitives/execute\nconfig:\n  command: /bin/bash\n  args: ['-c', '{command}']\n  timeout: 1\n",
    );
    write(p, ".ai/tools/slow/tool.yaml", "executor_id: slow/runtime\n");
    let pidfile = p.join("child.pid");
    let rye = rye(user.path());
    let started = Instant::now();
    let result = tool(
        &rye,
        p,
        "slow/tool",
        json!({"command": format!("sleep 60 & echo $! > {}; sleep 60", pidfile.display())}),
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "it waited for the sleeps"
    );
    assert_eq!(result["status"], "error");
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 1 s"),
        "{result:#}"
    );
    let child: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        rye_test_artifacts::process_dies_soon(child),
        "the background child lives"
    );
}

#[test]
fn a_hundred_megabytes_of_output_is_capped() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rye = rye(user.path());
    let result = tool(
        &rye,
        project.path(),
        "rye/bash/bash",
        json!({"command": "yes | head -c 100000000"}),
    );
    let data = ok(&result);
    assert_eq!(data["stdout"].as_str().unwrap().len(), 16 << 20);
    assert_eq!(
        result["metadata"]["truncated"]["stdout_bytes"],
        100_000_000 - (16 << 20)
    );
}

#[test]
fn ten_megabytes_of_parameters_reach_the_tool_on_stdin() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/demo/size.py",
        "__executor_id__ = 'rye/core/runtimes/python/function'\ndef execute(params, project_path):\n    return {'length': len(params['blob'])}\n",
    );
    let rye = rye(user.path());
    let blob = "x".repeat(10 << 20);
    assert_eq!(
        ok(&tool(&rye, p, "demo/size", json!({"blob": blob})))["length"],
        10 << 20
    );
}

#[test]
fn any_json_is_data_and_success_false_is_an_error() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rye = rye(user.path());
    for output in ["{}", "[]", "0", "null", "[1, 2]", "\"text\""] {
        let result = tool(
            &rye,
            project.path(),
            "rye/bash/bash",
            json!({"command": format!("echo '{output}'")}),
        );
        assert_eq!(
            *ok(&result),
            serde_json::from_str::<Value>(output).unwrap(),
            "{output}"
        );
    }
    let result = tool(
        &rye,
        project.path(),
        "rye/bash/bash",
        json!({"command": "echo '{\"success\": false, \"error\": \"nope\"}'"}),
    );
    assert_eq!(result["status"], "error");
    assert_eq!(result["error"], "nope");
    let result = tool(
        &rye,
        project.path(),
        "rye/bash/bash",
        json!({"command": "echo broken >&2; exit 4"}),
    );
    assert_eq!(result["status"], "error");
    assert_eq!(result["error"], "broken");
    assert_eq!(result["data"]["return_code"], 4);
}

#[test]
fn a_custom_adapter_from_the_examples_changes_the_plan() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let adapter = p.join(".ai/adapters/examples/shebang.wasm");
    std::fs::create_dir_all(adapter.parent().unwrap()).unwrap();
    common::copy_signed(artifacts::SHEBANG_ADAPTER, &adapter);
    write(
        p,
        ".ai/tools/shebang/runtime.yaml",
        "executor_id: rye/core/primitives/execute\nadapter: examples/shebang\nconfig:\n  timeout: 20\n",
    );
    write(
        p,
        ".ai/tools/demo/echo.sh",
        "#!/bin/sh -e\n# Echo the parameters.\n# __executor_id__ = \"shebang/runtime\"\ncat\n",
    );
    let rye = rye(user.path());
    let result = run(
        &rye,
        p,
        ItemKind::Tool,
        "demo/echo",
        json!({"said": "hi"}),
        true,
    );
    assert_eq!(*ok(&result), json!({"said": "hi"}));
    assert_eq!(steps(&result, "adapter")[0]["path"], json!(adapter));
    let plan = steps(&result, "plan")[0];
    assert_eq!(plan["command"], "/bin/sh");
    assert_eq!(
        plan["args"],
        json!(["-e", p.join(".ai/tools/demo/echo.sh")])
    );
    assert_eq!(plan["timeout_ms"], 20_000);
    assert_eq!(steps(&result, "shebang")[0]["interpreter"], "/bin/sh");
}

#[test]
fn an_adapter_that_plans_a_process_for_an_http_chain_is_refused() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let adapter = p.join(".ai/adapters/examples/shebang.wasm");
    std::fs::create_dir_all(adapter.parent().unwrap()).unwrap();
    common::copy_signed(artifacts::SHEBANG_ADAPTER, &adapter);
    write(
        p,
        ".ai/tools/shebang/web.yaml",
        "executor_id: rye/core/primitives/http_client\nadapter: examples/shebang\n",
    );
    write(
        p,
        ".ai/tools/demo/web.sh",
        "#!/bin/sh -e\n# Not a request.\n# __executor_id__ = \"shebang/web\"\ntouch ran\n",
    );
    let rye = rye(user.path());
    let result = tool(&rye, p, "demo/web", json!({}));
    assert_eq!(result["status"], "error", "{result:#}");
    let error = result["error"].as_str().unwrap();
    assert!(
        error
            .contains("planned a process for a chain that ends in rye/core/primitives/http_client"),
        "{error}"
    );
    assert!(!p.join("ran").exists(), "nothing ran");
}

#[test]
fn interpreters_are_resolved_and_their_commands_traced() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/interp/command.yaml",
        "executor_id: rye/core/primitives/execute\nenv_config:\n  interpreter:\n    type: command\n    resolve_cmd: ['/bin/sh', '-c', 'command -v sh']\n    var: SHELL_PATH\n\
         config:\n  command: '${SHELL_PATH}'\n  args: ['-c', 'echo {\\\"ok\\\": true}']\n",
    );
    write(
        p,
        ".ai/tools/interp/tool.yaml",
        "executor_id: interp/command\n",
    );
    write(
        p,
        ".ai/tools/interp/missing.yaml",
        "executor_id: rye/core/primitives/execute\nenv_config:\n  interpreter:\n    type: system_binary\n    binary: no-such-interpreter-here\n    var: X\nconfig:\n  command: '${X}'\n",
    );
    write(
        p,
        ".ai/tools/interp/orphan.yaml",
        "executor_id: interp/missing\n",
    );
    let rye = rye(user.path());
    let result = run(&rye, p, ItemKind::Tool, "interp/tool", json!({}), true);
    assert_eq!(*ok(&result), json!({"ok": true}));
    let ran = steps(&result, "resolve_command");
    assert_eq!(ran[0]["item_id"], "interp/command");
    assert!(ran[0]["result"]["ok"].as_str().unwrap().ends_with("/sh"));

    let result = tool(&rye, p, "interp/orphan", json!({}));
    assert_eq!(result["status"], "error");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("interp/missing") && error.contains("no-such-interpreter-here on PATH"),
        "{error}"
    );
}

#[test]
fn dry_run_validates_and_runs_nothing() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let marker = p.join("ran");
    let rye = rye(user.path());
    let request = ExecuteRequest {
        parameters: json!({"command": format!("touch {}", marker.display())}),
        project: Some(p.to_owned()),
        dry_run: true,
        ..ExecuteRequest::new(ItemKind::Tool, "rye/bash/bash")
    };
    let result = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(rye.execute(&request));
    assert_eq!(result["status"], "validation_passed");
    assert_eq!(result["validated_pairs"], 2);
    assert_eq!(result["chain"].as_array().unwrap().len(), 3);
    assert!(!marker.exists());
}

#[test]
fn a_directive_comes_back_ready_to_follow() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/directives/demo/greet.md",
        "```xml\n<directive name=\"greet\" version=\"1.0.0\">\n  <metadata><description>Greet</description></metadata>\n\
         <inputs>\n    <input name=\"who\" type=\"string\" required=\"true\">Who</input>\n    <input name=\"tone\" type=\"string\" default=\"warm\">How</input>\n  </inputs>\n\
         <process><step name=\"say\"><description>Say hello to {who} in a {tone} tone</description></step></process>\n</directive>\n```\n\nGreet {who}.\n",
    );
    let rye = rye(user.path());
    let result = run(
        &rye,
        p,
        ItemKind::Directive,
        "demo/greet",
        json!({"who": "Ada"}),
        false,
    );
    assert_eq!(result["status"], "success", "{result:#}");
    assert_eq!(result["inputs"], json!({"who": "Ada", "tone": "warm"}));
    assert_eq!(
        result["data"]["process"][0]["description"],
        "Say hello to Ada in a warm tone"
    );
    assert!(
        result["your_directions"]
            .as_str()
            .unwrap()
            .ends_with("Greet Ada.")
    );

    let missing = run(&rye, p, ItemKind::Directive, "demo/greet", json!({}), false);
    assert_eq!(missing["error"], "missing required inputs: who");
    let unknown = run(
        &rye,
        p,
        ItemKind::Directive,
        "demo/greet",
        json!({"who": "x", "colour": "red"}),
        false,
    );
    assert_eq!(
        unknown["error"],
        "unknown parameters: colour; valid inputs: who, tone"
    );
}

#[test]
fn knowledge_comes_back_as_its_content() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rye = rye(user.path());
    let result = run(
        &rye,
        project.path(),
        ItemKind::Knowledge,
        "rye/core/spaces",
        json!({}),
        false,
    );
    assert_eq!(result["status"], "success");
    assert_eq!(result["data"]["title"], "Spaces and item resolution");
    assert!(
        result["data"]["body"]
            .as_str()
            .unwrap()
            .contains("shadowed")
    );
}

#[test]
fn validators_refuse_execution_of_what_they_find_wrong_and_remember_what_passed() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/demo/sh.yaml",
        "version: '1.0.0'\ntool_type: script\nexecutor_id: rye/core/runtimes/bash/bash\ndescription: A shell line.\n",
    );
    write(
        p,
        ".ai/directives/demo/loose.md",
        "```xml\n<directive name=\"loose\" version=\"1.0.0\">\n  <metadata>\n    <description>No permissions.</description>\n    <author>me</author>\n  </metadata>\n</directive>\n```\nDo things.\n",
    );
    let rye = rye(user.path());
    let before = tool(&rye, p, "demo/sh", json!({"command": "echo ran"}));
    assert_eq!(ok(&before)["stdout"], "ran\n");

    // The project's policy arrives: the same tool is refused, naming the
    // rule and the validator; so is a directive without permissions.
    let validator = p.join(".ai/validators/policy.wasm");
    common::copy_signed(artifacts::POLICY_VALIDATOR, &validator);
    let refused = tool(&rye, p, "demo/sh", json!({"command": "echo ran"}));
    assert_eq!(refused["status"], "error", "{refused:#}");
    assert_eq!(refused["error_type"], "validation");
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains("policy/no-bash") && error.contains("validator policy"),
        "{error}"
    );
    let directive = run(&rye, p, ItemKind::Directive, "demo/loose", json!({}), false);
    assert_eq!(directive["error_type"], "validation", "{directive:#}");
    assert!(
        directive["error"]
            .as_str()
            .unwrap()
            .contains("policy/permissions")
    );

    // A tool the policy allows runs; its second run is served from the
    // validation cache (the trace says the findings, not the time).
    write(
        p,
        ".ai/tools/demo/py.py",
        "\"\"\"Says ok.\"\"\"\n__version__ = '1.0.0'\n__tool_type__ = 'python'\n__executor_id__ = 'rye/core/runtimes/python/script'\nimport json\nprint(json.dumps({'ok': True}))\n",
    );
    if have("python3") {
        let first = run(&rye, p, ItemKind::Tool, "demo/py", json!({}), true);
        assert_eq!(ok(&first)["ok"], true);
        assert_eq!(steps(&first, "validate")[0]["findings"], 0, "{first:#}");
    }

    // The same host sees the validators folder change under it: the
    // policy in a nested folder instead still refuses, and once that is
    // removed the tool runs again.
    common::copy_signed(
        artifacts::POLICY_VALIDATOR,
        &p.join(".ai/validators/org/policy.wasm"),
    );
    std::fs::remove_file(&validator).unwrap();
    let moved = tool(&rye, p, "demo/sh", json!({"command": "echo ran"}));
    assert_eq!(moved["error_type"], "validation", "{moved:#}");
    assert!(
        moved["error"].as_str().unwrap().contains("policy/no-bash"),
        "{moved:#}"
    );
    std::fs::remove_dir_all(p.join(".ai/validators/org")).unwrap();
    let gone = tool(&rye, p, "demo/sh", json!({"command": "echo ran"}));
    assert_eq!(ok(&gone)["stdout"], "ran\n", "{gone:#}");
    common::copy_signed(artifacts::POLICY_VALIDATOR, &validator);

    // A tampered validator is not run, and nothing it would guard runs.
    let mut bytes = std::fs::read(&validator).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&validator, &bytes).unwrap();
    let tampered = tool(&rye, p, "demo/sh", json!({"command": "echo ran"}));
    assert_eq!(tampered["error_type"], "validation", "{tampered:#}");
    assert!(
        tampered["error"].as_str().unwrap().contains("modified"),
        "{tampered:#}"
    );
}

/// A tool call its adapter marked reusable is planned once per chain: a
/// later plan of the same chain with other parameters is that plan with
/// those parameters as its arguments, the adapter not run. An edit of any
/// element, signed again, is planned anew; a call whose configuration
/// names a variable, or parameters that are not an object, always go to
/// the adapter.
#[test]
fn a_reusable_tool_call_is_planned_once_per_chain() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let item = |config: &str| {
        format!(
            "version: '1.0.0'\ntool_type: mcp\nexecutor_id: rye/core/runtimes/mcp/stdio\n\
             description: Echoes.\nconfig:\n{config}\ninput_schema: {{type: object}}\n"
        )
    };
    let plain = "  server: mcp/servers/notes\n  tool_name: echo";
    write(p, ".ai/tools/mcp/notes/echo.yaml", item(plain));
    let rye = rye(user.path());
    let plan = |parameters: Value| {
        let (_, planned, _) = rye.plan(Some(p), "mcp/notes/echo", parameters).unwrap();
        let PlannedAction::Mcp(call) = &planned.action else {
            panic!("not a tool call: {planned:?}");
        };
        (planned.reused, call.clone())
    };

    let (reused, first) = plan(json!({"text": "one"}));
    assert!(!reused, "the first plan is the adapter's");
    assert_eq!(first.arguments, json!({"text": "one"}));
    let (reused, second) = plan(json!({"text": "two", "n": [1, 2]}));
    assert!(reused);
    assert_eq!(second.arguments, json!({"text": "two", "n": [1, 2]}));
    assert_eq!(
        (&second.server, &second.tool_name, second.timeout_ms),
        (&first.server, &first.tool_name, first.timeout_ms)
    );

    // An edit, signed again, reaches the next plan.
    write(
        p,
        ".ai/tools/mcp/notes/echo.yaml",
        item(&format!("{plain}\n  timeout: 7")),
    );
    let (reused, edited) = plan(json!({"text": "three"}));
    assert!(!reused, "the edited chain went to the adapter");
    assert_eq!(edited.timeout_ms, Some(7000));
    let (reused, again) = plan(json!({"text": "four"}));
    assert!(reused);
    assert_eq!(
        (again.timeout_ms, &again.arguments),
        (Some(7000), &json!({"text": "four"}))
    );

    // Parameters that are not an object are the adapter's to refuse.
    let refused = rye.plan(Some(p), "mcp/notes/echo", json!([1])).unwrap_err();
    assert!(
        refused.to_string().contains("not a JSON object"),
        "{refused}"
    );

    // A call whose configuration names a variable reads the environment,
    // so it is planned by the adapter every time.
    write(
        p,
        ".ai/tools/mcp/notes/echo.yaml",
        item("  server: mcp/servers/${NOTES_SERVER:-notes}\n  tool_name: echo"),
    );
    for text in ["five", "six"] {
        let (reused, call) = plan(json!({"text": text}));
        assert!(!reused, "{text}");
        assert_eq!(call.arguments, json!({"text": text}));
    }
}
