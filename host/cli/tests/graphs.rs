//! Graph tools through the real binary: the state-graph walker component
//! built from source decides each step, and every action is a real
//! execution of a real tool, under the graph's permissions.

use std::process::{Command, Output};

use serde_json::{Value, json};

mod common;

struct Env {
    project: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let env = Self {
            project: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
        };
        env.ok(&["keys", "generate"]);
        env.ok(&["keys", "trust"]);
        env
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
        command.args(args);
        common::clean_env(
            &mut command,
            self.project.path(),
            self.home.path(),
            &common::shared_cache(),
        );
        command
    }

    fn rye(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.rye(args);
        assert!(
            out.status.success(),
            "rye {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let text = self.ok(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// Writes the graph tool `id` (YAML text after the common header) and
    /// signs it.
    fn graph(&self, id: &str, body: &str) {
        let path = self.project.path().join(format!(".ai/tools/{id}.yaml"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let category = id.rsplit_once('/').map_or("", |(c, _)| c);
        std::fs::write(
            &path,
            format!(
                "version: \"1.0.0\"\ntool_type: graph\nexecutor_id: rye/core/runtimes/state-graph/runtime\ncategory: {category}\ndescription: A test graph.\n{body}"
            ),
        )
        .unwrap();
        self.ok(&["sign", "tool", id]);
    }

    fn execute(&self, tool: &str, params: Value) -> Value {
        let out = self.rye(&["execute", "tool", tool, "--params", &params.to_string()]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

const COUNT: &str = r#"permissions: ["rye.execute.tool.rye.bash.*"]
config_schema: {type: object, properties: {path: {type: string, default: "README.md"}}}
config:
  start: count
  max_steps: 5
  nodes:
    count:
      action: {primary: execute, kind: tool, item_id: rye/bash/bash, params: {command: "n=$(wc -l < ${inputs.path}) && echo lines $n"}}
      assign: {lines: "${result.stdout}"}
      on_error: failed
      next:
        - {to: big, when: {path: state.lines, op: regex, value: "^lines [0-9]{3,}"}}
        - {to: small}
    big:   {type: return, output: {size: big, lines: "${state.lines}"}}
    small: {type: return, output: {size: small}}
    failed: {type: return, output: {error: "${state._last_error.error}"}}
"#;

#[test]
fn the_specs_example_runs_each_branch() {
    let env = Env::new();
    env.graph("demo/count", COUNT);
    let lines: String = (1..=150).map(|n| format!("{n}\n")).collect();
    std::fs::write(env.project.path().join("README.md"), lines).unwrap();
    std::fs::write(env.project.path().join("short.txt"), "one\ntwo\n").unwrap();

    let big = env.execute("demo/count", json!({}));
    assert_eq!(big["status"], "success", "{big:#}");
    let data = &big["data"];
    assert_eq!(data["success"], true);
    assert_eq!(data["status"], "completed");
    assert_eq!(
        data["output"],
        json!({"size": "big", "lines": "lines 150\n"})
    );
    assert_eq!(data["steps"], 2);
    assert!(
        data["graph_run_id"]
            .as_str()
            .unwrap()
            .starts_with("demo-count-")
    );

    let small = env.execute("demo/count", json!({"path": "short.txt"}));
    assert_eq!(
        small["data"]["output"],
        json!({"size": "small"}),
        "{small:#}"
    );

    // The tool fails (no such file): the node's on_error takes the run on.
    let failed = env.execute("demo/count", json!({"path": "missing.txt"}));
    assert_eq!(failed["status"], "success", "{failed:#}");
    let error = failed["data"]["output"]["error"].as_str().unwrap();
    assert!(error.contains("missing.txt"), "{failed:#}");

    // Each step's action is a thread of its own, the graph's its parent.
    let graph_thread = big["metadata"]["thread_id"].as_str().unwrap();
    let threads = env.json(&["--json", "threads", "list"]);
    let children: Vec<&Value> = threads
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["parent_id"] == graph_thread)
        .collect();
    assert_eq!(children.len(), 1, "{threads:#}");
    assert_eq!(children[0]["item_id"], "rye/bash/bash");
}

#[test]
fn trace_shows_each_step_and_its_decision() {
    let env = Env::new();
    env.graph("demo/count", COUNT);
    std::fs::write(env.project.path().join("README.md"), "x\n").unwrap();
    let out = env.ok(&["execute", "tool", "demo/count", "--trace"]);
    let ran: Value = serde_json::from_str(&out).unwrap();
    let steps: Vec<&Value> = ran["trace"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["step"] == "graph_step")
        .collect();
    let decided: Vec<&str> = steps.iter().map(|s| s["next"].as_str().unwrap()).collect();
    assert_eq!(
        decided,
        ["proceed", "dispatch", "proceed", "finished"],
        "{:#}",
        ran["trace"]
    );
    assert_eq!(steps[1]["actions"], json!(["rye/bash/bash"]));
    assert_eq!(steps[2]["node"], "small");
    assert!(ran["trace"].as_array().unwrap().iter().any(
        |e| e["step"] == "walker" && e["path"].as_str().unwrap().ends_with("state-graph.wasm")
    ));
}

#[test]
fn an_action_the_permissions_do_not_grant_never_runs() {
    let env = Env::new();
    let marker = env.project.path().join("ran");
    env.graph(
        "demo/denied",
        &format!(
            r#"permissions: ["rye.execute.tool.demo.*", "rye.load.*"]
config:
  start: a
  nodes:
    a:
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "touch {}"}}}}
"#,
            marker.display()
        ),
    );
    let ran = env.execute("demo/denied", json!({}));
    assert_eq!(ran["status"], "error", "{ran:#}");
    let error = ran["error"].as_str().unwrap();
    assert!(
        error.contains("permission denied") && error.contains("rye.execute.tool.rye.bash.bash"),
        "{error}"
    );
    assert!(!marker.exists(), "the denied action ran");

    // No permissions at all: the graph does not start.
    env.graph(
        "demo/unpermitted",
        "config:\n  start: a\n  nodes:\n    a: {type: return}\n",
    );
    let ran = env.execute("demo/unpermitted", json!({}));
    assert!(
        ran["error"].as_str().unwrap().contains("permissions"),
        "{ran:#}"
    );

    // The caller may narrow what a graph may do.
    env.graph(
        "demo/allowed",
        r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: a
  nodes:
    a: {action: {kind: tool, item_id: rye/bash/bash, params: {command: "echo hi"}}, next: b}
    b: {type: return}
"#,
    );
    assert_eq!(
        env.execute("demo/allowed", json!({}))["data"]["status"],
        "completed"
    );
    let narrowed = env.execute(
        "demo/allowed",
        json!({"capabilities": ["rye.execute.tool.demo.*"]}),
    );
    assert!(
        narrowed["error"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{narrowed:#}"
    );
}

#[test]
fn a_graph_cannot_widen_the_grant_of_the_graph_that_runs_it() {
    let env = Env::new();
    let marker = env.project.path().join("ran");
    env.graph(
        "demo/inner",
        &format!(
            r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: a
  nodes:
    a: {{action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "touch {}"}}}}, next: b}}
    b: {{type: return, output: done}}
"#,
            marker.display()
        ),
    );
    env.graph(
        "demo/outer",
        r#"permissions: ["rye.execute.tool.demo.inner"]
config:
  start: a
  nodes:
    a: {action: {kind: tool, item_id: demo/inner}, next: b}
    b: {type: return}
"#,
    );
    // Alone, the inner graph may run bash.
    assert_eq!(
        env.execute("demo/inner", json!({}))["data"]["output"],
        "done"
    );
    std::fs::remove_file(&marker).unwrap();
    // Under the outer one, which may run only demo/inner, it may not.
    let ran = env.execute("demo/outer", json!({}));
    assert_eq!(ran["status"], "error", "{ran:#}");
    assert!(
        ran["error"].as_str().unwrap().contains("permission denied"),
        "{ran:#}"
    );
    assert!(
        !marker.exists(),
        "the inner graph widened its caller's grant"
    );
}

/// Each item's tool writes when it starts and ends; no more than
/// `max_concurrency` are ever running, and more than one are.
#[test]
fn a_parallel_foreach_never_runs_more_than_its_concurrency() {
    let env = Env::new();
    let log = env.project.path().join("log");
    env.graph(
        "demo/fan",
        &format!(
            r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: fan
  nodes:
    fan:
      type: foreach
      over: "${{inputs.items}}"
      as: n
      parallel: true
      max_concurrency: 2
      collect: outs
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo start $(date +%s%N) >> {log}; sleep 0.4; echo end $(date +%s%N) >> {log}; echo item-${{n}}"}}}}
      next: done
    done: {{type: return, output: "${{state.outs}}"}}
"#,
            log = log.display()
        ),
    );
    let ran = env.execute("demo/fan", json!({"items": [1, 2, 3, 4, 5, 6]}));
    assert_eq!(ran["status"], "success", "{ran:#}");
    let outs: Vec<&str> = ran["data"]["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["stdout"].as_str().unwrap())
        .collect();
    assert_eq!(
        outs,
        [
            "item-1\n", "item-2\n", "item-3\n", "item-4\n", "item-5\n", "item-6\n"
        ]
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let mut marks: Vec<(u128, i32)> = text
        .lines()
        .map(|line| {
            let (what, at) = line.split_once(' ').unwrap();
            (at.parse().unwrap(), if what == "start" { 1 } else { -1 })
        })
        .collect();
    // An end and a start at the same instant: the end first.
    marks.sort();
    let (mut running, mut peak) = (0, 0);
    for (_, change) in marks {
        running += change;
        peak = peak.max(running);
    }
    assert_eq!(peak, 2, "{text}");
}

#[test]
fn a_loop_stops_at_max_steps_and_a_bad_graph_is_refused() {
    let env = Env::new();
    env.graph(
        "demo/forever",
        "permissions: []\nconfig:\n  start: a\n  max_steps: 25\n  nodes:\n    a: {type: gate, next: a}\n",
    );
    let ran = env.execute("demo/forever", json!({}));
    assert_eq!(ran["status"], "error");
    assert_eq!(ran["error"], "Max steps exceeded (25)", "{ran:#}");
    assert_eq!(ran["data"]["steps"], 25);
    // The runtime's default applies when the graph sets none.
    env.graph(
        "demo/forever_default",
        "permissions: []\nconfig:\n  start: a\n  nodes:\n    a: {type: gate, next: a}\n",
    );
    assert_eq!(
        env.execute("demo/forever_default", json!({}))["error"],
        "Max steps exceeded (100)"
    );

    env.graph(
        "demo/broken",
        "permissions: []\nconfig:\n  start: nowhere\n  nodes:\n    a: {type: return}\n",
    );
    let ran = env.execute("demo/broken", json!({}));
    assert!(
        ran["error"].as_str().unwrap().contains("nowhere"),
        "{ran:#}"
    );
}

#[test]
fn validate_analyzes_without_running() {
    let env = Env::new();
    let marker = env.project.path().join("ran");
    env.graph(
        "demo/checked",
        &format!(
            r#"permissions: ["rye.execute.tool.*"]
config:
  start: a
  nodes:
    a: {{action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "touch {}"}}}}, next: gone, assign: {{x: "${{state.never}}"}}}}
    lonely: {{type: return}}
"#,
            marker.display()
        ),
    );
    let report = env.execute("demo/checked", json!({"validate": true}));
    assert_eq!(report["status"], "error", "{report:#}");
    let data = &report["data"];
    assert_eq!(data["success"], false);
    assert_eq!(data["node_count"], 2);
    let (errors, warnings) = (data["errors"].to_string(), data["warnings"].to_string());
    assert!(errors.contains("gone"), "{errors}");
    assert!(warnings.contains("lonely"), "{warnings}");
    assert!(warnings.contains("state.never"), "{warnings}");
    assert!(!marker.exists(), "validate ran the graph");
}

/// A graph of 30 steps, ten of them tools that write to a log as they
/// begin and end.
fn crash_graph(log: &std::path::Path) -> String {
    let mut nodes = String::new();
    for i in 1..=30 {
        let next = if i == 30 {
            "done".to_owned()
        } else {
            format!("s{}", i + 1)
        };
        if i % 3 == 0 {
            nodes.push_str(&format!(
                "    s{i}: {{action: {{kind: tool, item_id: rye/bash/bash, params: {{command: \"echo begin s{i} >> {log}; sleep 0.03; echo end s{i} >> {log}; echo s{i}\"}}}}, assign: {{last: \"${{result.stdout}}\", s{i}: \"${{result.stdout}}\"}}, next: {next}}}\n",
                log = log.display()
            ));
        } else {
            nodes.push_str(&format!(
                "    s{i}: {{type: gate, assign: {{at: s{i}}}, next: {next}}}\n"
            ));
        }
    }
    format!(
        "permissions: [\"rye.execute.tool.rye.bash.*\"]\nconfig:\n  start: s1\n  max_steps: 40\n  state: {{big: \"${{inputs.big}}\"}}\n  nodes:\n{nodes}    done: {{type: return, output: {{last: \"${{state.last}}\", s3: \"${{state.s3}}\", s15: \"${{state.s15}}\", s30: \"${{state.s30}}\", at: \"${{state.at}}\"}}}}\n"
    )
}

/// The runs with a checkpoint.
fn run_ids(env: &Env) -> Vec<String> {
    let dir = env.project.path().join(".ai/state/graphs");
    let mut ids: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| {
                    let e = e.ok()?;
                    e.path()
                        .join("checkpoints.jsonl")
                        .is_file()
                        .then(|| e.file_name().into_string().ok())?
                })
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// Killed with SIGKILL at a different moment each trial, every run
/// resumed to the same output as the uninterrupted one; no tool that had
/// ended before the kill runs again (only the one running at the kill
/// may: its end was never recorded).
#[test]
fn a_run_killed_at_any_moment_resumes_to_the_same_end() {
    let env = Env::new();
    let log = env.project.path().join("log");
    env.graph("demo/crash", &crash_graph(&log));
    let began = std::time::Instant::now();
    let whole = env.execute("demo/crash", json!({"big": "x"}));
    let wall = began.elapsed().as_millis() as u64;
    assert_eq!(whole["status"], "success", "{whole:#}");
    let expected = whole["data"]["output"].clone();
    assert_eq!(expected["s30"], "s30\n");
    // The run itself, and the process's start before it: kills land
    // while the graph runs, at a different step each trial.
    let took = whole["metadata"]["duration_ms"].as_u64().unwrap().max(50);
    let start = wall.saturating_sub(took);
    std::fs::remove_file(&log).unwrap();

    let trials: u64 = std::env::var("RYE_GRAPH_CRASH_TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(100);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut resumed = 0;
    for trial in 0..trials {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let delay = start + (seed >> 33) % took;
        let _ = std::fs::remove_file(&log);
        let before: Vec<String> = run_ids(&env);
        let mut child = env
            .command(&[
                "execute",
                "tool",
                "demo/crash",
                "--params",
                &json!({"big": "x"}).to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay));
        child.kill().unwrap();
        child.wait().unwrap();
        let at_kill = std::fs::read_to_string(&log).unwrap_or_default();
        let new: Vec<String> = run_ids(&env)
            .into_iter()
            .filter(|id| !before.contains(id))
            .collect();
        let Some(run) = new.first() else {
            // Killed before the run's first checkpoint: nothing to resume,
            // and nothing ran.
            assert!(at_kill.is_empty(), "trial {trial}: {at_kill}");
            continue;
        };
        let again = env.execute("demo/crash", json!({"resume": true, "graph_run_id": run}));
        let done = if again["error"]
            .as_str()
            .is_some_and(|e| e.contains("already ended"))
        {
            // The run had ended before the kill landed.
            continue;
        } else {
            again
        };
        resumed += 1;
        assert_eq!(done["status"], "success", "trial {trial}: {done:#}");
        assert_eq!(done["data"]["output"], expected, "trial {trial}");
        assert_eq!(done["data"]["graph_run_id"], run.as_str());
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let last_begun = at_kill
            .lines()
            .filter_map(|l| l.strip_prefix("begin "))
            .next_back();
        for i in (3..=30).step_by(3) {
            let label = format!("s{i}");
            let ends = text
                .lines()
                .filter(|l| *l == format!("end {label}"))
                .count();
            if Some(label.as_str()) == last_begun {
                assert!(
                    (1..=2).contains(&ends),
                    "trial {trial}: {label} ended {ends} times:\n{text}"
                );
            } else {
                assert_eq!(
                    ends, 1,
                    "trial {trial}: {label} ended {ends} times:\n{text}"
                );
            }
        }
    }
    eprintln!("{resumed} of {trials} runs killed mid-run and resumed");
    assert!(
        resumed >= trials / 4,
        "only {resumed} of {trials} trials killed a run mid-way"
    );
}

#[test]
fn resume_refuses_a_changed_graph_an_ended_run_and_a_bad_id() {
    let env = Env::new();
    let log = env.project.path().join("log");
    env.graph("demo/crash", &crash_graph(&log));
    let mut child = env
        .command(&["execute", "tool", "demo/crash", "--params", "{\"big\": 1}"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("end s3")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the graph did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let run = run_ids(&env).pop().unwrap();

    // Edited (and signed again) since the run started: refused.
    let path = env.project.path().join(".ai/tools/demo/crash.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("max_steps: 40", "max_steps: 41")).unwrap();
    env.ok(&["sign", "tool", "demo/crash"]);
    let refused = env.execute("demo/crash", json!({"resume": true, "graph_run_id": run}));
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("has changed since run"),
        "{refused:#}"
    );
    // Put back, it goes on and ends; then it is over.
    std::fs::write(&path, &text).unwrap();
    env.ok(&["sign", "tool", "demo/crash"]);
    let done = env.execute("demo/crash", json!({"resume": true, "graph_run_id": run}));
    assert_eq!(done["data"]["status"], "completed", "{done:#}");
    let again = env.execute("demo/crash", json!({"resume": true, "graph_run_id": run}));
    assert!(
        again["error"].as_str().unwrap().contains("already ended"),
        "{again:#}"
    );

    for bad in ["../../../etc/passwd", "", "no-such-run"] {
        let refused = env.execute("demo/crash", json!({"resume": true, "graph_run_id": bad}));
        assert_eq!(refused["status"], "error", "{bad}: {refused:#}");
    }
    let missing = env.execute("demo/crash", json!({"resume": true}));
    assert!(missing["error"].as_str().unwrap().contains("graph_run_id"));
}

/// A value that never changes is stored once, however many steps follow.
#[test]
fn checkpoints_store_an_unchanged_value_once() {
    let env = Env::new();
    let mut nodes = String::new();
    for i in 1..=100 {
        nodes.push_str(&format!(
            "    a{i}: {{type: gate, assign: {{n: a{i}}}, next: {}}}\n",
            if i == 100 {
                "done".to_owned()
            } else {
                format!("a{}", i + 1)
            }
        ));
    }
    env.graph(
        "demo/steady",
        &format!(
            "permissions: []\nconfig:\n  start: a1\n  max_steps: 200\n  nodes:\n{nodes}    done: {{type: return, output: \"${{state.n}}\"}}\n"
        ),
    );
    let big = "y".repeat(100 * 1024);
    let state = env.project.path().join(".ai/state");
    // The store's objects and the runs' checkpoints (not their
    // transcripts, nor the thread registry).
    let size = |dir: &std::path::Path| -> u64 {
        walk(&dir.join("objects/objects"))
            .into_iter()
            .chain(walk(&dir.join("graphs")))
            .filter(|p| !p.ends_with("transcript.jsonl"))
            .map(|p| p.metadata().unwrap().len())
            .sum()
    };
    let ran = env.execute("demo/steady", json!({"big": big}));
    assert_eq!(ran["data"]["output"], "a100", "{ran:#}");
    assert_eq!(ran["data"]["steps"], 101);
    let stored = size(&state);
    // The 100 KB input once (in `inputs`), and each step's snapshot.
    assert!(stored < 100 * 1024 + 101 * 2048, "stored {stored} bytes");
    assert!(stored > 100 * 1024, "stored {stored} bytes");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                files.extend(walk(&path));
            } else {
                files.push(path);
            }
        }
    }
    files
}

/// The gate is the host's, not the walker's: a walker that asks for an
/// action the graph's permissions do not grant gets a denial, and the
/// action never runs.
#[test]
fn a_walker_cannot_take_what_the_graph_is_not_granted() {
    let env = Env::new();
    let walkers = env.project.path().join(".ai/walkers");
    std::fs::create_dir_all(&walkers).unwrap();
    std::fs::copy(
        rye_test_artifacts::WALKER_HOSTILE,
        walkers.join("hostile.wasm"),
    )
    .unwrap();
    env.ok(&["sign", "walker", "hostile"]);
    env.graph(
        "demo/escalate",
        "walker: hostile\npermissions: [\"rye.load.*\"]\nconfig: {start: a, nodes: {a: {type: return}}}\n",
    );
    let marker = env.project.path().join("escalated");
    let ran = env.execute(
        "demo/escalate",
        json!({"command": format!("touch {}", marker.display())}),
    );
    assert_eq!(ran["status"], "success", "{ran:#}");
    let denied = ran["data"]["output"]["error"].as_str().unwrap();
    assert!(denied.contains("permission denied"), "{ran:#}");
    assert!(!marker.exists(), "the walker's action ran");

    // An unsigned walker is refused before it runs.
    std::fs::write(
        walkers.join("hostile.wasm"),
        std::fs::read(rye_test_artifacts::WALKER_HOSTILE)
            .unwrap()
            .into_iter()
            .chain(*b"\0")
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let refused = env.execute("demo/escalate", json!({"command": "true"}));
    assert_eq!(refused["status"], "error", "{refused:#}");
    assert!(!marker.exists());
}

/// A node's timeout stops its action (and its processes) and is the
/// node's error; retry takes a failed action again with backoff; the
/// run's deadline ends the run and stops what is under way.
#[test]
fn timeouts_retries_and_the_run_deadline() {
    let env = Env::new();
    let pid_file = env.project.path().join("sleeper.pid");
    env.graph(
        "demo/slow",
        &format!(
            r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: a
  nodes:
    a:
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo $$ > {pid}; exec sleep 30"}}}}
      timeout: 1
      on_error: b
    b: {{type: return, output: "${{state._last_error.error}}"}}
"#,
            pid = pid_file.display()
        ),
    );
    let began = std::time::Instant::now();
    let ran = env.execute("demo/slow", json!({}));
    let took = began.elapsed();
    let said = ran["data"]["output"].as_str().unwrap_or_default();
    assert!(said.contains("timed out after 1 s"), "{ran:#}");
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        rye_test_artifacts::process_dies_soon(pid),
        "the timed-out action's process {pid} is still running"
    );

    // Fails twice, then succeeds: three attempts, with backoff between.
    let count = env.project.path().join("attempts");
    env.graph(
        "demo/flaky",
        &format!(
            r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: a
  nodes:
    a:
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo x >> {count}; test $(wc -l < {count}) -ge 3 && echo ok"}}}}
      retry: {{max_attempts: 4, backoff: 0.2}}
      assign: {{said: "${{result.stdout}}"}}
      next: b
    b: {{type: return, output: "${{state.said}}"}}
"#,
            count = count.display()
        ),
    );
    let began = std::time::Instant::now();
    let ran = env.execute("demo/flaky", json!({}));
    assert_eq!(ran["data"]["output"], "ok\n", "{ran:#}");
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 3);
    // 0.2 s, then 0.4 s.
    assert!(began.elapsed() >= std::time::Duration::from_millis(600));

    // Retried only for the failures it names: an error is not a timeout.
    std::fs::remove_file(&count).unwrap();
    env.graph(
        "demo/flaky_timeouts",
        &format!(
            r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: a
  nodes:
    a:
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo x >> {count}; exit 1"}}}}
      retry: {{max_attempts: 4, backoff: 0, on: [timeout]}}
"#,
            count = count.display()
        ),
    );
    let ran = env.execute("demo/flaky_timeouts", json!({}));
    assert_eq!(ran["status"], "error", "{ran:#}");
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1);

    // The run's deadline: a loop of half-second actions ends at 1.5 s.
    env.graph(
        "demo/late",
        r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: a
  deadline: 1.5
  max_steps: 1000
  nodes:
    a: {action: {kind: tool, item_id: rye/bash/bash, params: {command: "sleep 0.5"}}, next: a}
"#,
    );
    let began = std::time::Instant::now();
    let ran = env.execute("demo/late", json!({}));
    let took = began.elapsed();
    assert_eq!(
        ran["error"], "the run's deadline of 1.5 s passed",
        "{ran:#}"
    );
    assert!(took < std::time::Duration::from_secs(8), "took {took:?}");

    // A policy that cannot be read stops the graph before it starts.
    env.graph(
        "demo/bad_policy",
        "permissions: []\nconfig:\n  start: a\n  nodes:\n    a: {type: return, retry: {on: [crash]}}\n",
    );
    let ran = env.execute("demo/bad_policy", json!({}));
    assert!(
        ran["error"].as_str().unwrap().contains("retry.on names"),
        "{ran:#}"
    );
}

/// An async graph runs in a runner of its own; cancelling its thread
/// stops the node under way (its process with it), and the run can go on
/// later with resume.
#[test]
fn an_async_graph_is_cancelled_with_its_running_node_and_resumes() {
    let env = Env::new();
    let marker = env.project.path().join("sleeper.pid");
    let gate = env.project.path().join("gate");
    env.graph(
        "demo/long",
        &format!(
            r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: a
  nodes:
    a: {{action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "if [ -e {gate} ]; then echo done; else echo $$ > {marker}; exec sleep 120; fi"}}}}, assign: {{said: "${{result.stdout}}"}}, next: b}}
    b: {{type: return, output: "${{state.said}}"}}
"#,
            gate = gate.display(),
            marker = marker.display()
        ),
    );
    let started = env.json(&["execute", "tool", "demo/long", "--async"]);
    assert_eq!(started["status"], "success", "{started:#}");
    let id = started["thread_id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let sleeper: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&marker)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        assert!(std::time::Instant::now() < deadline, "the node never ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // The running graph's transcript is in its thread's event log.
    let tail = env.rye(&["threads", "tail", &id, "--timeout", "0.5"]);
    assert!(!tail.status.success(), "the graph is still running");
    let kinds: Vec<String> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        kinds,
        ["started", "graph_run", "graph_started", "step_started"],
        "{tail:?}"
    );
    let cancelled = env.json(&["threads", "cancel", &id]);
    assert_eq!(cancelled["status"], "cancelled", "{cancelled:#}");
    assert!(
        rye_test_artifacts::process_dies_soon(sleeper),
        "the node's process outlived the cancel"
    );
    let threads = env.json(&["--json", "threads", "list"]);
    let node = threads
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["parent_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no node thread: {threads:#}"));
    assert_ne!(node["status"], "running", "{node:#}");

    std::fs::write(&gate, "").unwrap();
    let done: Value = serde_json::from_str(&env.ok(&["threads", "resume", &id])).unwrap();
    assert_eq!(done["data"]["output"], "done\n", "{done:#}");
    let out = env.rye(&["threads", "resume", &id]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("has already ended (completed)"),
        "{out:?}"
    );
}

#[test]
fn an_interrupt_waits_for_a_person_and_goes_on_with_their_inputs() {
    let env = Env::new();
    let log = env.project.path().join("deployed");
    env.graph(
        "demo/deploy",
        &format!(
            r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: build
  nodes:
    build:
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo built >> {log}; echo v7"}}}}
      assign: {{version: "${{result.stdout}}"}}
      next: ask
    ask:
      type: interrupt
      prompt: "Deploy ${{state.version}}?"
      required: [approved]
      assign: {{approved: "${{result.approved}}", note: "${{result.note}}"}}
      next:
        - {{to: deploy, when: {{path: result.approved, value: true}}}}
        - {{to: skipped}}
    deploy:
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo deployed '${{state.note}}' >> {log}"}}}}
      next: done
    done: {{type: return, output: {{deployed: true, note: "${{state.note}}"}}}}
    skipped: {{type: return, output: {{deployed: false}}}}
"#,
            log = log.display()
        ),
    );
    let waiting = env.execute("demo/deploy", json!({}));
    assert_eq!(waiting["status"], "success", "{waiting:#}");
    let told = &waiting["data"];
    assert_eq!(told["status"], "waiting", "{told:#}");
    assert_eq!(told["node"], "ask");
    assert_eq!(told["prompt"], "Deploy v7\n?");
    let run = told["graph_run_id"].as_str().unwrap().to_owned();
    let thread = waiting["metadata"]["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Resumed without what it needs, it stays waiting, and nothing runs.
    let out = env.rye(&["threads", "resume", &thread]);
    assert!(!out.status.success());
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        said["error"]
            .as_str()
            .unwrap()
            .contains("waits for input at node \"ask\""),
        "{said:#}"
    );
    let refused = env.execute(
        "demo/deploy",
        json!({"resume": true, "graph_run_id": run, "inputs": {"note": "no answer"}}),
    );
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("needs inputs approved"),
        "{refused:#}"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "built\n");

    let done: Value = serde_json::from_str(&env.ok(&[
        "threads",
        "resume",
        &thread,
        "--inputs",
        r#"{"approved": true, "note": "by ann"}"#,
    ]))
    .unwrap();
    assert_eq!(
        done["data"]["output"],
        json!({"deployed": true, "note": "by ann"}),
        "{done:#}"
    );
    assert_eq!(done["data"]["steps"], 4);
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "built\ndeployed by ann\n"
    );
    // Answered once: a second answer is refused.
    let again = env.execute(
        "demo/deploy",
        json!({"resume": true, "graph_run_id": run, "inputs": {"approved": false}}),
    );
    assert!(
        again["error"].as_str().unwrap().contains("already ended"),
        "{again:#}"
    );

    // A run that does not wait takes no inputs; a waiting one says no.
    let second = env.execute("demo/deploy", json!({}));
    let run = second["data"]["graph_run_id"].as_str().unwrap().to_owned();
    let no = env.execute(
        "demo/deploy",
        json!({"resume": true, "graph_run_id": run, "inputs": {"approved": false}}),
    );
    assert_eq!(no["data"]["output"], json!({"deployed": false}), "{no:#}");
}

#[test]
fn hooks_run_through_the_door_and_an_error_hook_retries() {
    let env = Env::new();
    let dir = env.project.path();
    let (count, log) = (dir.join("count"), dir.join("hooks"));
    env.graph(
        "demo/hooked",
        &format!(
            r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: flaky
  max_steps: 10
  hooks:
    - {{event: graph_started, action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo started >> {log}"}}}}}}
    - event: after_step
      condition: {{path: node, op: ne, value: done}}
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo after ${{node}} to ${{next_node}} >> {log}"}}}}
    - event: error
      condition: {{path: node, value: flaky}}
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo error ${{retries}} >> {log}; echo '{{\"action\": \"retry\", \"max_retries\": 5}}'"}}}}
    - {{event: graph_completed, action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo completed ${{status}} >> {log}"}}}}}}
    - {{event: graph_completed, action: {{kind: tool, item_id: rye/other/tool, params: {{}}}}}}
  nodes:
    flaky:
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo x >> {count}; test $(wc -l < {count}) -ge 3 && echo ok"}}}}
      assign: {{said: "${{result.stdout}}"}}
      next: done
    done: {{type: return, output: {{said: "${{state.said}}", retries: "${{state._retries.flaky}}"}}}}
"#,
            count = count.display(),
            log = log.display()
        ),
    );
    let ran = env.execute("demo/hooked", json!({}));
    assert_eq!(
        ran["data"]["output"],
        json!({"said": "ok\n", "retries": 2}),
        "{ran:#}"
    );
    assert_eq!(ran["data"]["steps"], 2);
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "started\nerror 0\nerror 1\nafter flaky to done\ncompleted completed\n"
    );
    // The hook outside the graph's permissions was refused, not run.
    let thread = ran["metadata"]["thread_id"].as_str().unwrap();
    let view = env.json(&["threads", "show", thread]);
    let kinds: Vec<&str> = view["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "graph_run",
        "graph_started",
        "hooks_started",
        "step_failed",
        "step_retried",
        "step_completed",
        "graph_completed",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let runs = env.json(&["--json", "threads", "list", "--limit", "100"]);
    assert!(
        !runs
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["item_id"] == "rye/other/tool"),
        "{runs:#}"
    );
}

#[test]
fn a_parallel_foreach_stops_starting_items_past_its_tolerated_failures() {
    let env = Env::new();
    let log = env.project.path().join("started");
    let graph = |id: &str, tolerated: &str| {
        env.graph(
            id,
            &format!(
                r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: fan
  nodes:
    fan:
      type: foreach
      over: "${{inputs.items}}"
      as: n
      parallel: true
      max_concurrency: 1
      tolerated_failures: {tolerated}
      collect: outs
      action: {{kind: tool, item_id: rye/bash/bash, params: {{command: "echo ${{n}} >> {log}; test ${{n}} -lt 3"}}}}
      on_error: failed
      next: done
    done: {{type: return, output: {{all: "${{state.outs|length}}"}}}}
    failed: {{type: return, output: {{error: "${{state._last_error.error}}", outs: "${{state.outs|length}}"}}}}
"#,
                log = log.display()
            ),
        );
    };
    graph("demo/strict", "1");
    graph("demo/tolerant", "\"75%\"");
    let items = json!({"items": [1, 2, 3, 4, 5, 6]});
    let ran = env.execute("demo/strict", items.clone());
    let output = &ran["data"]["output"];
    assert_eq!(
        output["error"],
        "4 of the 6 items of foreach node \"fan\" failed, more than the 1 it tolerates",
        "{ran:#}"
    );
    assert_eq!(output["outs"], 6);
    // One at a time: once items 3 and 4 had failed, 5 and 6 were not
    // started.
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "1\n2\n3\n4\n");
    std::fs::remove_file(&log).unwrap();
    let ran = env.execute("demo/tolerant", items);
    assert_eq!(ran["data"]["output"], json!({"all": 6}), "{ran:#}");
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 6);
}

#[test]
fn one_node_runs_alone_in_single_step_mode() {
    let env = Env::new();
    env.graph(
        "demo/steps",
        r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: a
  nodes:
    a: {type: gate, assign: {n: 1}, next: b}
    b:
      action: {kind: tool, item_id: rye/bash/bash, params: {command: "echo n=$((${state.n} + 1))"}}
      assign: {n: "${result.stdout}"}
      next: c
    c: {type: return, output: "${state.n}"}
"#,
    );
    let ran = env.execute(
        "demo/steps",
        json!({"node": "b", "inject_state": {"n": 41}}),
    );
    let data = &ran["data"];
    assert_eq!(data["executed_node"], "b", "{ran:#}");
    assert_eq!(data["next_node"], "c");
    assert_eq!(data["step_count"], 1);
    assert_eq!(data["state"]["n"], "n=42\n");
    assert!(
        data["graph_run_id"].as_str().unwrap().ends_with("-step"),
        "{data:#}"
    );
}

#[test]
fn a_cached_node_result_stands_in_only_while_its_chain_is_unchanged() {
    let env = Env::new();
    let dir = env.project.path();
    let count = dir.join("count");
    let tool = dir.join(".ai/tools/demo/counter.yaml");
    let write_tool = |description: &str| {
        std::fs::create_dir_all(tool.parent().unwrap()).unwrap();
        std::fs::write(
            &tool,
            format!("version: \"1.0.0\"\ntool_type: script\nexecutor_id: rye/core/runtimes/bash/bash\ncategory: demo\ndescription: {description}\n"),
        )
        .unwrap();
    };
    write_tool("Counts.");
    env.ok(&["sign", "tool", "demo/counter"]);
    env.graph(
        "demo/cached",
        &format!(
            r#"permissions: ["rye.execute.tool.demo.*"]
config:
  start: a
  nodes:
    a:
      action: {{kind: tool, item_id: demo/counter, params: {{command: "echo x >> {count}; echo {{\\\"n\\\": $(wc -l < {count}), \\\"for\\\": \\\"${{inputs.who}}\\\"}}"}}}}
      cache_result: true
      assign: {{n: "${{result.n}}"}}
      next: b
    b: {{type: return, output: "${{state.n}}"}}
"#,
            count = count.display()
        ),
    );
    let run = |who: &str| env.execute("demo/cached", json!({"who": who}));
    assert_eq!(run("ann")["data"]["output"], 1);
    assert_eq!(
        run("ann")["data"]["output"],
        1,
        "the second run is answered from the cache"
    );
    assert_eq!(run("bob")["data"]["output"], 2, "other params, another key");
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 2);
    let pointers = std::fs::read_dir(dir.join(".ai/state/objects/cache/nodes"))
        .unwrap()
        .count();
    assert_eq!(pointers, 2);

    // The tool re-signed with a change: its old result no longer stands.
    write_tool("Counts, changed.");
    env.ok(&["sign", "tool", "demo/counter"]);
    assert_eq!(run("ann")["data"]["output"], 3);
    assert_eq!(run("ann")["data"]["output"], 3);
    // Changed and not signed: refused, cache or no cache.
    write_tool("Counts, tampered.");
    let refused = run("ann");
    assert_eq!(refused["data"]["success"], false, "{refused:#}");
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 3);
}

/// `text` with the run's id and the project's folder in it named, not
/// spelled: what differs from one run of a case to the next.
fn normalized(value: Value, run: Option<&str>, project: &str) -> Value {
    match value {
        Value::String(text) => {
            let text = match run {
                Some(run) if !run.is_empty() => text.replace(run, "<run>"),
                _ => text,
            };
            Value::String(text.replace(project, "<project>"))
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| normalized(v, run, project))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, normalized(v, run, project)))
                .collect(),
        ),
        other => other,
    }
}

/// The conformance suite: each graph in `tests/conformance/graphs/` (the
/// `.yaml`, a graph tool's body) run with each parameter set its `.json`
/// lists, through the real binary; what each run gave (status, error,
/// data) and the events its thread logged must equal the golden ones in
/// the same `.json`. `RYE_BLESS=1` writes them instead, to be read over
/// before they are committed.
#[test]
fn conformance_graphs_give_their_golden_results() {
    let suite = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/graphs");
    let bless = std::env::var_os("RYE_BLESS").is_some();
    let env = Env::new();
    let project = env.project.path().to_str().unwrap().to_owned();
    let mut names: Vec<String> = std::fs::read_dir(&suite)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".yaml").map(str::to_owned)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 8, "{names:?}");
    let mut differ = Vec::new();
    for name in names {
        let body = std::fs::read_to_string(suite.join(format!("{name}.yaml"))).unwrap();
        let id = format!("conformance/{name}");
        env.graph(&id, &body);
        let case_file = suite.join(format!("{name}.json"));
        let mut case: Value =
            serde_json::from_str(&std::fs::read_to_string(&case_file).unwrap()).unwrap();
        let mut seen = Vec::new();
        for params in case["runs"].as_array().unwrap().clone() {
            let ran = env.execute(&id, params.clone());
            let events: Vec<Value> = match ran["metadata"]["thread_id"].as_str() {
                Some(thread) => env.json(&["threads", "show", thread])["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    // The thread's own beginning and end (a pid, a hash)
                    // are not the graph's.
                    .filter(|e| e["kind"] != "started" && e["kind"] != "finished")
                    .map(|e| json!([e["kind"], e["detail"]]))
                    .collect(),
                None => Vec::new(),
            };
            let run = ran["data"]["graph_run_id"].as_str().map(str::to_owned);
            seen.push(normalized(
                json!({"params": params, "status": ran["status"], "error": ran["error"],
                       "data": ran["data"], "events": events}),
                run.as_deref(),
                &project,
            ));
        }
        if bless {
            case["golden"] = Value::Array(seen);
            std::fs::write(
                &case_file,
                serde_json::to_string_pretty(&case).unwrap() + "\n",
            )
            .unwrap();
        } else if case["golden"] != Value::Array(seen.clone()) {
            differ.push(format!(
                "{name}: expected\n{:#}\ngot\n{:#}",
                case["golden"],
                Value::Array(seen)
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n\n"));
}

/// A run's own duration, as the host measured it, in milliseconds.
fn took_ms(ran: &Value) -> u64 {
    ran["metadata"]["duration_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("no duration: {ran:#}"))
}

#[test]
fn a_deadline_and_a_node_timeout_hold_within_100_ms() {
    let env = Env::new();
    env.graph(
        "demo/forever",
        r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: a
  max_steps: 100000
  deadline: 1.5
  nodes:
    a: {action: {kind: tool, item_id: rye/bash/bash, params: {command: "sleep 0.07"}}, next: a}
"#,
    );
    let ran = env.execute("demo/forever", json!({}));
    assert!(
        ran["error"]
            .as_str()
            .unwrap()
            .contains("deadline of 1.5 s passed"),
        "{ran:#}"
    );
    let took = took_ms(&ran);
    assert!((1500..=1600).contains(&took), "took {took} ms: {ran:#}");

    env.graph(
        "demo/stuck",
        r#"permissions: ["rye.execute.tool.rye.bash.*"]
config:
  start: a
  nodes:
    a: {action: {kind: tool, item_id: rye/bash/bash, params: {command: "exec sleep 30"}}, timeout: 0.7}
"#,
    );
    let out = env.rye(&["execute", "tool", "demo/stuck", "--trace"]);
    let traced: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        traced["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 0.7 s"),
        "{traced:#}"
    );
    // The node's dispatch, from its start to its end, as the trace
    // measured it.
    let dispatch = traced["trace"]
        .as_array()
        .unwrap()
        .iter()
        .find(|step| step["step"] == "graph_step" && step["next"] == "dispatch")
        .unwrap_or_else(|| panic!("no dispatch traced: {traced:#}"));
    let took = dispatch["actions_us"].as_u64().unwrap() / 1000;
    assert!((700..=800).contains(&took), "took {took} ms: {dispatch:#}");
}
