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

    /// The files of the project's content store.
    fn stored_files(&self) -> Vec<std::path::PathBuf> {
        fn walk(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if entry.file_type().unwrap().is_dir() {
                    walk(&entry.path(), found);
                } else {
                    found.push(entry.path());
                }
            }
        }
        let mut found = Vec::new();
        walk(&self.project.path().join(".ai/state/objects"), &mut found);
        found
    }

    /// The project's thread registry, opened as any SQLite client would.
    fn registry(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.project.path().join(".ai/state/threads/registry.db"))
            .unwrap()
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
    // A result this small is kept with its thread in the registry, not
    // as a file of its own.
    assert_eq!(shown["result_hash"].as_str().unwrap().len(), 64);
    assert_eq!(env.stored_files(), Vec::<std::path::PathBuf>::new());

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

/// Waits until `file` holds a pid; the pid.
fn pid_in(file: &std::path::Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never held a pid",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !matches!(
            s[s.rfind(')').unwrap() + 2..].chars().next(),
            Some('Z' | 'X')
        )
    })
}

impl Env {
    fn start_async(&self, command: &str) -> Value {
        let started = self.json(&[
            "execute",
            "tool",
            "rye/bash/bash",
            "--async",
            "--params",
            &json!({ "command": command }).to_string(),
        ]);
        assert_eq!(started["status"], "success", "{started:#}");
        started
    }

    fn status(&self, id: &str) -> Value {
        self.json(&["threads", "show", id])["status"].clone()
    }
}

#[test]
fn an_async_run_returns_at_once_and_ends_in_its_thread() {
    let env = Env::new();
    let gate = env.project.path().join("gate");
    // The tool cannot finish before the test opens the gate.
    let command = format!(
        "while [ ! -e {gate} ]; do sleep 0.02; done; echo finished late",
        gate = gate.display()
    );
    let started = env.start_async(&command);
    let id = started["thread_id"].as_str().unwrap().to_owned();
    let mut keys: Vec<&str> = started
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "async",
            "execution_mode",
            "item_id",
            "metadata",
            "pid",
            "state",
            "status",
            "thread_id",
            "type"
        ],
        "{started:#}"
    );
    assert_eq!(started["async"], true);
    assert_eq!(started["state"], "running");
    assert_eq!(started["type"], "tool");
    assert_eq!(started["item_id"], "rye/bash/bash");
    // The command that asked has exited; its runner goes on.
    let runner = started["pid"].as_u64().unwrap() as u32;
    assert!(alive(runner), "the runner is not running");
    let shown = env.json(&["threads", "show", &id]);
    assert_eq!(shown["status"], "running", "{shown:#}");
    assert_eq!(shown["execution_mode"], "async");
    assert_eq!(shown["pid"], runner);

    std::fs::write(&gate, "").unwrap();
    let done = env.json(&["threads", "wait", &id, "--timeout", "60"]);
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(
        done["result"]["data"]["stdout"], "finished late\n",
        "{done:#}"
    );
    let kinds: Vec<&str> = done["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["started", "finished"], "{done:#}");
    assert_eq!(
        done["events"][1]["detail"]["result_hash"],
        done["result_hash"]
    );
    assert!(rye_test_artifacts::process_dies_soon(runner));

    // A failing tool ends its thread as an error, with the tool's output.
    let failed = env.start_async("echo broken >&2; exit 4");
    let id = failed["thread_id"].as_str().unwrap();
    let done = env.json(&["threads", "wait", id]);
    assert_eq!(done["status"], "error", "{done:#}");
    assert_eq!(done["result"]["data"]["stderr"], "broken\n", "{done:#}");

    // The original's refusals: knowledge and inline directives are
    // returned, not run, and a dry run returns at once anyway.
    for kind in ["knowledge", "directive"] {
        let out = env.rye(&["execute", kind, "rye/any", "--async"]);
        assert!(!out.status.success());
        let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            reply["error"]
                .as_str()
                .unwrap()
                .contains("async is not available"),
            "{reply:#}"
        );
    }
    let out = env.rye(&["execute", "tool", "rye/bash/bash", "--async", "--dry-run"]);
    assert!(!out.status.success());
    // Nothing of these was recorded.
    assert_eq!(
        env.json(&["--json", "threads", "list"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn cancel_stops_an_async_run_and_everything_it_started() {
    let env = Env::new();
    for grace in ["5", "0"] {
        let marker = env.project.path().join(format!("grandchild-{grace}.pid"));
        // A grandchild in a session of its own, out of the tool's process
        // group.
        let command = format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 120' & sleep 120",
            marker.display()
        );
        let started = env.start_async(&command);
        let id = started["thread_id"].as_str().unwrap().to_owned();
        let runner = started["pid"].as_u64().unwrap() as u32;
        let grandchild = pid_in(&marker);
        assert!(alive(grandchild));

        let cancelled = env.json(&["threads", "cancel", &id, "--grace", grace]);
        // Given time, the runner stops the run itself; given none, it is
        // killed and what it left is stopped by the canceller.
        let expected = if grace == "0" { "killed" } else { "stopped" };
        assert_eq!(cancelled["outcome"], expected, "{cancelled:#}");
        assert_eq!(cancelled["status"], "cancelled", "{cancelled:#}");
        assert!(
            rye_test_artifacts::process_dies_soon(grandchild),
            "the grandchild outlived the cancel (grace {grace})"
        );
        assert!(rye_test_artifacts::process_dies_soon(runner));
        assert_eq!(env.status(&id), "cancelled");

        // Cancelling again says it had finished.
        let again = env.json(&["threads", "cancel", &id]);
        assert_eq!(again["outcome"], "finished", "{again:#}");
    }

    // A synchronous run is cancelled where it runs, not by a signal to a
    // host that may serve others.
    let ran = env.execute("rye/bash/bash", json!({"command": "true"}));
    let id = ran["metadata"]["thread_id"].as_str().unwrap();
    let again = env.json(&["threads", "cancel", id]);
    assert_eq!(again["outcome"], "finished");
    let out = env.rye(&["threads", "cancel", "no-such-thread"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no thread no-such-thread"));
}

#[test]
fn a_component_tool_runs_async_in_its_thread_and_a_cancel_stops_it_in_the_engine() {
    let env = Env::new();
    let p = env.project.path();
    let tools = p.join(".ai/tools/demo");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::create_dir_all(p.join(".ai/state/counter")).unwrap();
    std::fs::copy(rye_test_artifacts::TOOL_PROBE, tools.join("counter.wasm")).unwrap();
    std::fs::write(
        tools.join("counter.yaml"),
        "version: \"1.0.0\"\ntool_type: wasm_component\nexecutor_id: rye/core/runtimes/wasm/component\n\
         category: demo\ndescription: Counts until stopped\nconfig:\n  component: counter.wasm\n  \
         capabilities:\n    files: [{path: \"{project_path}/.ai/state/counter\", access: write}]\n    \
         limits: {deadline_ms: 600000}\n",
    )
    .unwrap();
    env.ok(&["sign", "tool", "demo/counter"]);
    let start = |params: Value| {
        let started = env.json(&[
            "execute",
            "tool",
            "demo/counter",
            "--async",
            "--params",
            &params.to_string(),
        ]);
        assert_eq!(started["status"], "success", "{started:#}");
        (
            started["thread_id"].as_str().unwrap().to_owned(),
            started["pid"].as_u64().unwrap() as u32,
        )
    };
    let (id, _) = start(json!({"do": "echo", "value": "async"}));
    let done = env.json(&["threads", "wait", &id, "--timeout", "60"]);
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(done["result"]["data"], json!({"echo": "async"}), "{done:#}");

    let count = p
        .join(".ai/state/counter")
        .canonicalize()
        .unwrap()
        .join("count");
    let (id, runner) = start(json!({"do": "count", "path": count}));
    let began = Instant::now();
    while !count.exists() {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the count never began"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Given time, the runner stops the run itself: the engine interrupts
    // the tool, no process to signal.
    let cancelled = env.json(&["threads", "cancel", &id, "--grace", "10"]);
    assert_eq!(cancelled["outcome"], "stopped", "{cancelled:#}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled:#}");
    assert!(rye_test_artifacts::process_dies_soon(runner));
    let stopped = std::fs::read_to_string(&count).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(std::fs::read_to_string(&count).unwrap(), stopped);
}

#[test]
fn an_async_runner_killed_mid_run_is_marked_killed_and_leaves_nothing() {
    let env = Env::new();
    let marker = env.project.path().join("grandchild.pid");
    let command = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 120' & sleep 120",
        marker.display()
    );
    let started = env.start_async(&command);
    let id = started["thread_id"].as_str().unwrap().to_owned();
    let runner = started["pid"].as_u64().unwrap() as u32;
    let grandchild = pid_in(&marker);
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &runner.to_string()])
            .status()
            .unwrap()
            .success()
    );
    assert!(rye_test_artifacts::process_dies_soon(runner));
    // Any rye command afterwards finds the run dead and what it left.
    let listed = env.json(&["--json", "threads", "list"]);
    assert_eq!(listed[0]["thread_id"], id.as_str());
    assert_eq!(listed[0]["status"], "killed", "{listed:#}");
    assert!(
        rye_test_artifacts::process_dies_soon(grandchild),
        "the run's grandchild outlived its killed runner"
    );
}

#[test]
fn a_runner_is_no_door_to_someone_elses_thread() {
    let env = Env::new();
    // A request on stdin for a thread the registry does not hold (or holds
    // for another process) runs nothing.
    let marker = env.project.path().join("ran");
    let request = json!({
        "item_type": "tool",
        "item_id": "rye/bash/bash",
        "parameters": {"command": format!("touch {}", marker.display())},
        "project": env.project.path(),
        "host": {
            "enforce": true,
            "allow_unsigned_project": false,
            "trusted_keys": [],
            "user_base": null,
            "system_base": env.project.path().join("nowhere"),
        },
    });
    let ran = env.execute("rye/bash/bash", json!({"command": "true"}));
    let finished = ran["metadata"]["thread_id"].as_str().unwrap().to_owned();
    for id in ["no-such-thread", finished.as_str()] {
        let mut child = env
            .command(&["threads", "run", id])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(request.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success(), "{id}");
        assert!(!marker.exists(), "a runner ran {id}");
    }
    // Garbage, an unknown field, or too much on stdin: refused; nothing on
    // stdin: the asking host went away, so nothing to do.
    let mut unknown = request.clone();
    unknown["extra"] = json!(true);
    for input in [
        b"not json".to_vec(),
        unknown.to_string().into_bytes(),
        vec![b' '; (16 << 20) + 10],
        Vec::new(),
    ] {
        let mut child = env
            .command(&["threads", "run", "x"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let size = input.len();
        let writer = std::thread::spawn(move || {
            use std::io::Write as _;
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        assert_eq!(out.status.success(), size == 0, "{size} bytes: {out:?}");
        assert!(!marker.exists());
    }
}

/// A command whose output (100,000 bytes) makes a result too large to
/// keep in the registry.
const LARGE_OUTPUT: &str = "head -c 100000 /dev/zero | tr '\\0' k";

#[test]
fn a_large_result_is_a_file_in_the_store_and_a_result_changed_on_disk_is_refused() {
    let env = Env::new();
    let ran = env.execute("rye/bash/bash", json!({"command": LARGE_OUTPUT}));
    assert_eq!(ran["status"], "success", "{ran:#}");
    let large = ran["metadata"]["thread_id"].as_str().unwrap().to_owned();
    let ran = env.execute("rye/bash/bash", json!({"command": "echo kept"}));
    let small = ran["metadata"]["thread_id"].as_str().unwrap().to_owned();

    let shown = env.json(&["threads", "show", &large]);
    assert_eq!(shown["result"]["data"]["stdout"], "k".repeat(100_000));
    let files = env.stored_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let hash = shown["result_hash"].as_str().unwrap();
    assert!(files[0].ends_with(format!("{}/{}/{hash}.json", &hash[..2], &hash[2..4])));
    let shown = env.json(&["threads", "show", &small]);
    assert_eq!(shown["result"]["data"]["stdout"], "kept\n");

    // A result changed where it is kept is refused, naming where and why.
    let changed = env
        .registry()
        .execute(
            "UPDATE results SET object = CAST(replace(CAST(object AS TEXT), 'kept', 'lost') AS BLOB)",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let out = env.rye(&["threads", "show", &small]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("registry.db") && stderr.contains("not the recorded"),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&files[0]).unwrap();
    std::fs::write(&files[0], text.replacen("kkk", "kkl", 1)).unwrap();
    let out = env.rye(&["threads", "show", &large]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(hash), "{stderr}");
}

#[test]
fn prune_removes_ended_threads_and_their_results_never_running_ones() {
    let env = Env::new();
    let ran = env.execute("rye/bash/bash", json!({"command": "echo old"}));
    let small = ran["metadata"]["thread_id"].as_str().unwrap().to_owned();
    let ran = env.execute("rye/bash/bash", json!({"command": LARGE_OUTPUT}));
    let old = ran["metadata"]["thread_id"].as_str().unwrap().to_owned();
    let object = env.stored_files();
    assert_eq!(object.len(), 1, "{object:?}");
    let object = &object[0];
    let gate = env.project.path().join("gate");
    let running = env.start_async(&format!(
        "while [ ! -e {} ]; do sleep 0.02; done",
        gate.display()
    ));
    let running = running["thread_id"].as_str().unwrap().to_owned();

    // Nothing is old enough by default.
    let kept = env.json(&["--json", "threads", "prune"]);
    assert_eq!(kept, json!({"threads": 0, "objects": 0}));
    let pruned = env.json(&["--json", "threads", "prune", "--older-than", "0s"]);
    assert_eq!(pruned, json!({"threads": 2, "objects": 2}), "{pruned:#}");
    assert!(!object.exists());
    for gone in [&old, &small] {
        let out = env.rye(&["threads", "show", gone]);
        assert!(!out.status.success());
    }
    let kept: i64 = env
        .registry()
        .query_row("SELECT count(*) FROM results", [], |row| row.get(0))
        .unwrap();
    assert_eq!(kept, 0);
    assert_eq!(env.status(&running), "running");

    std::fs::write(&gate, "").unwrap();
    let done = env.json(&["threads", "wait", &running]);
    assert_eq!(done["status"], "completed");
    for bad in ["30", "x", "-1d", "1w", ""] {
        let out = env.rye(&["threads", "prune", &format!("--older-than={bad}")]);
        assert!(!out.status.success(), "{bad:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is not an age"),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn tail_follows_an_async_run_live_until_it_ends() {
    let env = Env::new();
    let gate = env.project.path().join("gate");
    // It writes 5 bytes to stdout and 4 to stderr, then waits.
    let started = env.start_async(&format!(
        "printf 'ready'; printf 'warn' >&2; while [ ! -e {} ]; do sleep 0.02; done; echo out",
        gate.display()
    ));
    let id = started["thread_id"].as_str().unwrap().to_owned();
    let mut tail = env
        .command(&["threads", "tail", &id])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(tail.stdout.take().unwrap()));
    let mut next = || -> Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };
    assert_eq!(next()["kind"], "started");
    // The run is still going: the runner says so while it waits.
    let progress = next();
    assert_eq!(progress["kind"], "progress", "{progress}");
    assert!(progress["detail"]["elapsed_ms"].as_u64().unwrap() >= 1000);
    // With what it has written so far.
    assert_eq!(progress["detail"]["stdout_bytes"], 5, "{progress}");
    assert_eq!(progress["detail"]["stderr_bytes"], 4, "{progress}");
    std::fs::write(&gate, "").unwrap();
    let finished = loop {
        let event = next();
        if event["kind"] != "progress" {
            break event;
        }
    };
    assert_eq!(finished["kind"], "finished", "{finished}");
    assert_eq!(finished["detail"]["status"], "completed");
    assert!(tail.wait().unwrap().success());
}
