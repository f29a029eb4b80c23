//! Every tool run is a thread, through the real binary: recorded with its
//! result, timed out, killed with SIGKILL mid-run, and run anyway (with a
//! warning) where the project's state cannot be written.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

#[test]
fn a_run_is_a_thread_with_its_result() {
    let env = Env::new();
    let ran = env.execute("rye/bash/bash", json!({"command": "echo recorded"}));
    assert_eq!(ran["status"], "success", "{ran:#}");
    let id = ran["metadata"]["thread_id"].as_str().unwrap().to_owned();

    let shown = env.json(&["threads", "show", &id]);
    assert_eq!(shown["status"], "completed", "{shown:#}");
    assert_eq!(shown["item_id"], "rye/bash/bash");
    assert!(shown["pid"].is_u64(), "{shown:#}");
    assert_eq!(shown["result"]["data"]["stdout"], "recorded\n", "{shown:#}");
    assert_eq!(shown["chain"][0]["item_id"], "rye/bash/bash");
    let hash = shown["result_hash"].as_str().unwrap();
    let object = env.project.path().join(format!(
        ".ai/state/objects/objects/{}/{}/{hash}.json",
        &hash[..2],
        &hash[2..4]
    ));
    assert!(object.is_file(), "{}", object.display());

    let failed = env.execute("rye/bash/bash", json!({"command": "echo no >&2; exit 3"}));
    assert_eq!(failed["status"], "error");
    let listed = env.json(&["--json", "threads", "list"]);
    let statuses: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["error", "completed"], "{listed:#}");
    let errors = env.json(&["--json", "threads", "list", "--status", "error"]);
    assert_eq!(errors.as_array().unwrap().len(), 1);

    // A dry run runs nothing and is no thread.
    let dry = env.rye(&[
        "execute",
        "tool",
        "rye/bash/bash",
        "--dry-run",
        "--params",
        "{\"command\": \"true\"}",
    ]);
    assert!(dry.status.success());
    assert_eq!(
        env.json(&["--json", "threads", "list"])
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let missing = env.rye(&["threads", "show", "no-such-thread"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no thread no-such-thread"));
    let bad = env.rye(&["threads", "list", "--status", "sleeping"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a thread status"));
}

#[test]
fn a_run_out_of_time_is_timed_out() {
    let env = Env::new();
    std::fs::create_dir_all(env.project.path().join(".ai/tools/demo")).unwrap();
    std::fs::write(
        env.project.path().join(".ai/tools/demo/slow.yaml"),
        "version: \"1.0.0\"\ntool_type: shell\nexecutor_id: rye/core/runtimes/bash/bash\ncategory: demo\ndescription: Sleeps past its deadline.\nconfig:\n  timeout: 1\n",
    )
    .unwrap();
    env.ok(&["sign", "tool", "demo/slow"]);
    let ran = env.execute("demo/slow", json!({"command": "sleep 30"}));
    assert_eq!(ran["status"], "error");
    let id = ran["metadata"]["thread_id"].as_str().unwrap();
    let shown = env.json(&["threads", "show", id]);
    assert_eq!(shown["status"], "timed_out", "{shown:#}");
    assert!(
        shown["error"].as_str().unwrap().contains("timed out"),
        "{shown:#}"
    );
}

#[test]
fn a_run_whose_rye_is_killed_is_marked_killed_and_leaves_nothing_running() {
    let env = Env::new();
    let marker = env.project.path().join("sleeper.pid");
    let command = format!("echo $$ > {}; exec sleep 60", marker.display());
    let mut child = env
        .command(&[
            "execute",
            "tool",
            "rye/bash/bash",
            "--params",
            &json!({"command": command}).to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marker.exists() || std::fs::read_to_string(&marker).unwrap().trim().is_empty() {
        assert!(Instant::now() < deadline, "the tool did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sleeper: u32 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let running = env.json(&["--json", "threads", "list", "--status", "running"]);
    assert_eq!(running.as_array().unwrap().len(), 1, "{running:#}");

    child.kill().unwrap();
    child.wait().unwrap();
    let listed = env.json(&["--json", "threads", "list"]);
    assert_eq!(listed[0]["status"], "killed", "{listed:#}");
    assert!(
        listed[0]["error"]
            .as_str()
            .unwrap()
            .contains("ended without finishing")
    );
    // The tool it ran is gone too (the next rye stops what a killed one
    // left running).
    env.ok(&[
        "execute",
        "tool",
        "rye/bash/bash",
        "--params",
        "{\"command\": \"true\"}",
    ]);
    assert!(
        rye_test_artifacts::process_dies_soon(sleeper),
        "the tool outlived its rye"
    );
}

#[test]
fn a_project_whose_state_cannot_be_written_still_runs_with_a_warning() {
    let env = Env::new();
    std::fs::create_dir_all(env.project.path().join(".ai")).unwrap();
    // A file where the state folder would be.
    std::fs::write(env.project.path().join(".ai/state"), "not a folder").unwrap();
    let ran = env.execute("rye/bash/bash", json!({"command": "echo still"}));
    assert_eq!(ran["status"], "success", "{ran:#}");
    assert_eq!(ran["data"]["stdout"], "still\n");
    let warnings = ran["warnings"].to_string();
    assert!(warnings.contains("not recorded as a thread"), "{ran:#}");
    assert!(ran["metadata"].get("thread_id").is_none());
}
