//! Remote execution through the real binary on both sides: a `rye node
//! serve` process on loopback and `rye remote` clients. A project pushed,
//! a tool run on the node writing state, its changes folded back and
//! pulled; a push landing while a run is under way merged with it, or
//! reported as a conflict with the head left alone; and what a run leaves
//! that points out of its space kept out of its outputs. Replicas of one
//! node on a real PostgreSQL server and a real S3 server; the whole suite
//! runs on those with `RYE_TEST_NODE_STORES=postgres-s3`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;

/// A node process, killed when dropped.
struct NodeProcess {
    child: Child,
    url: String,
    /// What it logged after saying where it serves.
    logs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Env {
    root: tempfile::TempDir,
    node: NodeProcess,
    shared: Shared,
}

/// A node's database, object store and key set apart from its folder, as
/// replicas share them; none: all in the folder.
struct Shared {
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Where the object store keeps the node's objects as files.
    objects: Option<PathBuf>,
}

impl Shared {
    fn none() -> Shared {
        Shared {
            args: Vec::new(),
            env: Vec::new(),
            objects: None,
        }
    }

    /// What every node of this test process runs on: its own folder, or,
    /// with `RYE_TEST_NODE_STORES=postgres-s3` (as `.ci/run` runs this
    /// suite a second time), the test servers with the key in `key_dir`.
    fn chosen(key_dir: &Path) -> Shared {
        match std::env::var("RYE_TEST_NODE_STORES").as_deref() {
            Ok("postgres-s3") => {
                Shared::servers(key_dir).expect("the PostgreSQL and S3 servers asked for")
            }
            _ => Shared::none(),
        }
    }

    /// A new database and bucket of the test servers, and the key in
    /// `key_dir`; none where the servers are not installed.
    fn servers(key_dir: &Path) -> Option<Shared> {
        use rye_test_artifacts::servers::{Postgres, S3};
        let (cluster, s3) = match (Postgres::shared(), S3::shared()) {
            (Ok(cluster), Ok(s3)) => (cluster, s3),
            (Err(missing), _) | (_, Err(missing)) => {
                rye_test_artifacts::skip("replicas on PostgreSQL and S3", &missing);
                return None;
            }
        };
        let bucket = s3.bucket();
        Some(Shared {
            objects: Some(s3.bucket_dir(&bucket).join("node")),
            args: vec![
                "--database".into(),
                cluster.database(),
                "--objects".into(),
                format!("s3://{bucket}/node"),
                "--key-dir".into(),
                key_dir.to_str().unwrap().into(),
            ],
            env: s3
                .options()
                .into_iter()
                .map(|(k, v)| (k.to_uppercase(), v))
                .collect(),
        })
    }

    fn apply<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command.args(&self.args).envs(self.env.iter().cloned())
    }
}

/// Starts `rye node serve` on a free loopback port over the node folder
/// `base`, from `node_home`, on the stores `shared` names, with `extra`
/// arguments.
fn start_replica_with(
    node_home: &Path,
    base: &Path,
    shared: &Shared,
    extra: &[&str],
) -> NodeProcess {
    let mut command = rye_in(
        node_home,
        node_home,
        &[
            "node",
            "serve",
            "--base",
            base.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            // Small enough that a push of a few megabytes takes several
            // requests.
            "--max-request-bytes",
            "1100000",
        ],
    );
    let mut child = shared
        .apply(command.args(extra))
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // What it logs before (a restart's report of runs cut short), then
    // where it serves.
    let url = loop {
        let line = lines
            .next()
            .expect("the node says where it serves")
            .unwrap();
        if let Some(at) = line.strip_prefix("serving node ") {
            break at.split(" at ").nth(1).unwrap().trim().to_owned();
        }
        // The same, as a JSON log line.
        if let Ok(logged) = serde_json::from_str::<Value>(&line)
            && logged["fields"]["message"] == "serving node"
        {
            break logged["fields"]["url"].as_str().unwrap().to_owned();
        }
    };
    // Keep what the node logs.
    let logs = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&logs);
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            kept.lock().unwrap().push(line);
        }
    });
    NodeProcess { child, url, logs }
}

fn start_replica(node_home: &Path, base: &Path, shared: &Shared) -> NodeProcess {
    start_replica_with(node_home, base, shared, &[])
}

impl Env {
    /// Points the project's remote at `url`.
    fn remote_at(&self, url: &str) {
        let project = self.project();
        std::fs::create_dir_all(project.join(".ai/config/remotes")).unwrap();
        std::fs::write(
            project.join(".ai/config/remotes/remotes.yaml"),
            format!("defaults: {{timeout: 120}}\nproject_path: demo-project\nremotes:\n  default: {{url: \"{url}\"}}\n"),
        )
        .unwrap();
    }

    /// Kills the node with SIGKILL and starts it again over its folder.
    fn kill_and_restart_node(&mut self) {
        self.node.child.kill().unwrap();
        self.node.child.wait().unwrap();
        let root = self.root.path();
        self.node = start_replica(&root.join("node-home"), &root.join("node"), &self.shared);
        let url = self.node.url.clone();
        self.remote_at(&url);
    }

    fn project(&self) -> PathBuf {
        self.root.path().join("project")
    }

    /// Where the node's object store keeps its objects as files.
    fn node_objects(&self) -> PathBuf {
        match &self.shared.objects {
            Some(dir) => dir.clone(),
            None => self.root.path().join("node/objects"),
        }
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    fn command(&self, args: &[&str]) -> Command {
        rye_in(&self.project(), &self.home(), args)
    }

    fn rye(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> Value {
        let out = self.rye(args);
        assert!(
            out.status.success(),
            "rye {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// `rye remote <args>`, its JSON answer whatever the exit.
    fn remote(&self, args: &[&str]) -> Value {
        let mut all = vec!["remote"];
        all.extend_from_slice(args);
        let out = self.rye(&all);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// The shell tool run on the node as its head has the project,
    /// nothing pushed or pulled.
    fn on_node(&self, command: &str) -> Value {
        let params = shell(command);
        let mut args = vec!["remote"];
        args.extend(on_node_args(&params));
        self.ok(&args)
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.project().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.project().join(rel)).unwrap_or_default()
    }

    /// Waits for a run to end; its record.
    fn finished(&self, thread: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let shown = self.remote(&["threads", thread]);
            if !matches!(shown["status"].as_str(), Some("running" | "queued")) {
                return shown;
            }
            assert!(Instant::now() < deadline, "the run did not end: {shown:#}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn rye_in(project: &Path, home: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    command.args(args);
    common::clean_env(&mut command, project, home, &common::shared_cache());
    command
}

/// A signed project with a shell tool, a key, a node that authorizes
/// the key, and the node configured as the project's remote.
fn env() -> Env {
    env_on(Shared::chosen, &[])
}

/// [`env`] with the node on the stores `shared` names (given a folder for
/// the node's key), started with `extra` arguments.
fn env_on(shared: impl FnOnce(&Path) -> Shared, extra: &[&str]) -> Env {
    let root = tempfile::tempdir().unwrap();
    let shared = shared(&root.path().join("node-key"));
    let project = root.path().join("project");
    let home = root.path().join("home");
    let node_home = root.path().join("node-home");
    for dir in [&project, &home, &node_home] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let run = |args: &[&str]| {
        let out = rye_in(&project, &home, args).output().unwrap();
        assert!(
            out.status.success(),
            "rye {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["keys", "generate"]);
    run(&["keys", "trust"]);
    std::fs::create_dir_all(project.join(".ai/tools/demo")).unwrap();
    std::fs::write(
        project.join(".ai/tools/demo/shell.yaml"),
        "version: \"1.0.0\"\ntool_type: shell\nexecutor_id: rye/core/runtimes/bash/bash\ncategory: demo\ndescription: Runs a command in the project.\n",
    )
    .unwrap();
    run(&["sign", "tool", "demo/shell"]);
    let base = root.path().join("node");
    let public = home.join(".ai/config/keys/signing/public_key.pem");
    let out = shared
        .apply(&mut rye_in(
            &node_home,
            &node_home,
            &[
                "node",
                "authorize",
                public.to_str().unwrap(),
                "--base",
                base.to_str().unwrap(),
                "--label",
                "tester",
                "--publish-namespace",
                "demo",
                "--expires-at",
                "2100-01-01T00:00:00Z",
            ],
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let node = start_replica_with(&node_home, &base, &shared, extra);
    let env = Env { root, node, shared };
    env.remote_at(&env.node.url.clone());
    env
}

fn shell(command: &str) -> String {
    json!({"command": command}).to_string()
}

/// `rye remote` arguments running the shell tool with `params` on the
/// node as its head has the project, nothing pushed or pulled.
fn on_node_args(params: &str) -> [&str; 7] {
    [
        "execute",
        "tool",
        "demo/shell",
        "--no-push",
        "--no-pull",
        "--params",
        params,
    ]
}

#[test]
fn a_push_after_edits_sends_just_them_and_the_node_holds_the_project_as_it_is_here() {
    let env = env();
    for name in ["a", "b", "c"] {
        env.write(
            &format!(".ai/knowledge/notes/{name}.md"),
            &format!("# {name}\n"),
        );
    }
    let first = env.ok(&["remote", "push"]);
    assert_eq!(first["status"], "pushed", "{first:#}");

    // An edit, an addition, a removal, and a file renamed with its
    // content kept: the push sends them as a delta of the manifest the
    // node acknowledged, without asking what it holds first.
    let notes = env.project().join(".ai/knowledge/notes");
    env.write(".ai/knowledge/notes/a.md", "# a, edited\n");
    env.write(".ai/knowledge/notes/d.md", "# d\n");
    std::fs::remove_file(notes.join("b.md")).unwrap();
    std::fs::rename(notes.join("c.md"), notes.join("e.md")).unwrap();
    let pushed = env.ok(&["remote", "push"]);
    assert_eq!(pushed["status"], "pushed", "{pushed:#}");
    assert_eq!(pushed["asked"], 0, "{pushed:#}");
    assert_eq!(pushed["requests"], 2, "a put and a push: {pushed:#}");

    let listed = |env: &Env| {
        let ran = env.on_node(
            "cd .ai/knowledge/notes && for f in *; do printf '%s:' \"$f\"; cat \"$f\"; done",
        );
        assert_eq!(ran["result"]["status"], "success", "{ran:#}");
        ran["result"]["data"]["stdout"].as_str().unwrap().to_owned()
    };
    let want = "a.md:# a, edited\nd.md:# d\ne.md:# c\n";
    assert_eq!(listed(&env), want);

    // Stamps lost: the push reads every file and still sends a delta of
    // the same changes.
    env.write(".ai/knowledge/notes/d.md", "# d, again\n");
    let stamps = env.project().join(".ai/state/objects/stamps");
    std::fs::remove_dir_all(&stamps).unwrap();
    let pushed = env.ok(&["remote", "push"]);
    assert_eq!(pushed["status"], "pushed", "{pushed:#}");
    assert_eq!(pushed["requests"], 2, "{pushed:#}");
    assert_eq!(
        listed(&env),
        "a.md:# a, edited\nd.md:# d, again\ne.md:# c\n"
    );
}

/// A run is answered on what the kernel saw it touch among the
/// project's items, without a walk of every file; one that changes an
/// item where the kernel cannot see it (through a hard link made in a
/// folder not watched) is still found by the walk that follows the
/// answer, folded back then, and its thread says so.
#[test]
fn a_change_the_watch_cannot_see_is_folded_back_after_the_answer() {
    let env = env();
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    let pushed = env.ok(&["remote", "push"]);
    let run = |command: &str| env.on_node(command);

    let ran = run("mkdir -p .ai/state/out && echo 1 > .ai/state/out/n.txt");
    assert_eq!(ran["read_back"], "watched", "{ran:#}");
    assert_eq!(ran["merge_type"], "no-op", "{ran:#}");
    assert_eq!(
        ran["runtime_output_files"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        [".ai/state/out/n.txt"],
        "{ran:#}"
    );

    // An item written: the manifest is patched where the watch saw it.
    let ran = run("echo '# b' > .ai/knowledge/notes/b.md");
    assert_eq!(ran["read_back"], "watched", "{ran:#}");
    assert_eq!(ran["merge_type"], "fast-forward", "{ran:#}");
    // Beside `.ai/`, where the policy decides: walked.
    let ran = run("echo x > beside.txt");
    assert_eq!(ran["read_back"], "walked", "{ran:#}");
    assert_eq!(ran["merge_type"], "no-op", "{ran:#}");
    let head = env.ok(&["remote", "history"])["head"].clone();

    // Written through a second name in the run's home: no event reaches
    // the folders watched, so the answer is a no-op.
    let ran = run("ln .ai/knowledge/notes/a.md ../home/a && echo 'sneaked in' >> ../home/a");
    assert_eq!(ran["result"]["status"], "success", "{ran:#}");
    assert_eq!(ran["read_back"], "watched", "{ran:#}");
    assert_eq!(ran["merge_type"], "no-op", "{ran:#}");
    let thread = ran["thread_id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let shown = loop {
        let shown = env.ok(&["remote", "threads", &thread]);
        if shown.get("late_fold_back").is_some() {
            break shown;
        }
        assert!(Instant::now() < deadline, "no late fold-back: {shown:#}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        shown["late_fold_back"]["merge_type"], "fast-forward",
        "{shown:#}"
    );
    let history = env.ok(&["remote", "history"]);
    assert_eq!(
        history["head"], shown["late_fold_back"]["head"],
        "{history:#}"
    );
    assert_ne!(history["head"], head);
    assert_ne!(history["head"], pushed["snapshot_hash"]);

    // The next run sees the project as folded, not as the link left it
    // behind, and nothing of the link stays in its workspace.
    let ran = run("cat .ai/knowledge/notes/a.md; ls ../home | wc -l");
    assert_eq!(
        ran["result"]["data"]["stdout"], "# a\nsneaked in\n0\n",
        "{ran:#}"
    );
    env.ok(&["remote", "pull"]);
    assert_eq!(env.read(".ai/knowledge/notes/a.md"), "# a\nsneaked in\n");

    // Collected now: everything was held within the grace period, so
    // nothing goes, and the count says what would past it.
    let counted = env.ok(&[
        "remote",
        "gc",
        "--dry-run",
        "--retention-days",
        "0",
        "--keep-pushes",
        "1",
    ]);
    assert_eq!(counted["status"], "ok", "{counted:#}");
    assert!(
        counted["kept_snapshots"].as_u64().unwrap() >= 1,
        "{counted:#}"
    );
    assert_eq!(counted["swept_objects"], 0, "{counted:#}");
    let collected = env.ok(&["remote", "gc"]);
    assert_eq!(collected["swept_objects"], 0, "{collected:#}");
    let stats = env.ok(&["remote", "gc", "stats"]);
    assert_eq!(stats["last"][0]["reason"], "asked", "{stats:#}");
    assert!(stats["stored_bytes"].as_u64().unwrap() > 0, "{stats:#}");
    assert_eq!(env.read(".ai/knowledge/notes/b.md"), "# b\n");
}

#[test]
fn a_run_on_the_node_folds_its_state_back_and_pull_brings_it_home() {
    let env = env();
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    let pushed = env.ok(&["remote", "push"]);
    assert_eq!(pushed["status"], "pushed", "{pushed:#}");
    assert!(pushed["sent"].as_u64().unwrap() > 0);
    let pinned = env.ok(&["remote", "list"]);
    assert!(
        pinned["remotes"][0]["pinned"]
            .as_str()
            .unwrap()
            .starts_with("fp:"),
        "{pinned:#}"
    );

    // Unchanged: one request, the same snapshot.
    let again = env.ok(&["remote", "push"]);
    assert_eq!(again["status"], "unchanged", "{again:#}");
    assert_eq!(again["requests"], 1);
    assert_eq!(again["snapshot_hash"], pushed["snapshot_hash"]);

    // Left on the node, to be pulled below.
    let ran = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--no-pull",
        "--params",
        &shell(
            "mkdir -p .ai/knowledge/state .ai/state/reports && echo '# seen' > .ai/knowledge/state/seen.md && echo 42 > .ai/state/reports/answer.txt",
        ),
    ]);
    assert_eq!(ran["pushed"]["status"], "unchanged", "{ran:#}");
    assert!(ran.get("pulled").is_none(), "{ran:#}");
    assert_eq!(ran["status"], "completed", "{ran:#}");
    assert_eq!(ran["result"]["status"], "success", "{ran:#}");
    assert_eq!(ran["merge_type"], "fast-forward", "{ran:#}");
    assert_eq!(ran["snapshot_hash"], pushed["snapshot_hash"]);
    let outputs = ran["runtime_output_files"].as_object().unwrap();
    let paths: Vec<&str> = outputs.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            ".ai/knowledge/state/seen.md",
            ".ai/state/reports/answer.txt"
        ],
        "{ran:#}"
    );
    // The run's own records never count as its outputs, and nothing
    // else of the run lingers on the node: the workspace kept for the
    // next run (cleared once the run is read back, which may follow the
    // answer) holds the project's files and, beside them, only the
    // records of the host kept there for the project's runs.
    assert!(!paths.iter().any(|p| p.starts_with(".ai/state/threads")));
    let executions = env.root.path().join("node/executions");
    let deadline = Instant::now() + Duration::from_secs(30);
    let lingers = |p: &String| {
        (p.contains("/project/.ai/state/")
            && !p.contains("/project/.ai/state/threads/")
            && !p.contains("/project/.ai/state/objects/"))
            || p.contains("/home/")
    };
    let kept = loop {
        let kept = files_under(&executions);
        if !kept.iter().any(lingers) || Instant::now() > deadline {
            break kept;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        kept.iter()
            .any(|p| p.ends_with("/project/.ai/knowledge/notes/a.md")),
        "{kept:?}"
    );
    assert!(!kept.iter().any(lingers), "{kept:?}");
    assert_eq!(ran["workspace"]["written"], 3, "{ran:#}");

    let history = env.ok(&["remote", "history"]);
    let sources: Vec<&str> = history["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["execution", "push"], "{history:#}");
    assert_eq!(history["head"], ran["head"]);
    assert_eq!(
        history["snapshots"][0]["metadata"]["thread_id"],
        ran["thread_id"]
    );

    let threads = env.ok(&["remote", "threads"]);
    assert_eq!(threads["threads"][0]["thread_id"], ran["thread_id"]);
    assert_eq!(threads["threads"][0]["status"], "completed");

    // A local change the node has not seen stays through the pull.
    env.write(".ai/knowledge/notes/local.md", "# local\n");
    let pulled = env.ok(&["remote", "pull"]);
    assert_eq!(pulled["status"], "merged", "{pulled:#}");
    assert_eq!(env.read(".ai/knowledge/state/seen.md"), "# seen\n");
    assert_eq!(env.read(".ai/knowledge/notes/local.md"), "# local\n");
    let up = env.ok(&["remote", "pull"]);
    assert_eq!(up["status"], "up-to-date");
    // The next push carries the local note on top of the run's.
    let next = env.ok(&["remote", "push"]);
    assert_eq!(next["status"], "pushed", "{next:#}");
    let history = env.ok(&["remote", "history"]);
    assert_eq!(history["snapshots"][1]["_hash"], ran["head"]);

    // The next run (pushing the change first) reuses the workspace,
    // writing only what changed since (the local note, and the note
    // changed below).
    env.write(".ai/knowledge/notes/a.md", "# a, changed\n");
    let next = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--params",
        &shell("cat .ai/knowledge/notes/a.md && test ! -e .ai/state/reports"),
    ]);
    assert_eq!(next["result"]["status"], "success", "{next:#}");
    assert_eq!(next["pushed"]["status"], "pushed", "{next:#}");
    assert_eq!(next["workspace"]["written"], 2, "{next:#}");
    assert!(
        next["result"].to_string().contains("a, changed"),
        "{next:#}"
    );
}

/// `rye remote execute` as a user means it: what was edited here runs
/// there without a push of its own, and what the run writes comes home;
/// a head another run moved meanwhile is merged here first, and one that
/// clashes with a local edit stops the round before anything runs.
#[test]
fn execute_pushes_what_changed_here_runs_it_and_brings_the_result_home() {
    let env = env();
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    let ran = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--params",
        &shell(
            "cat .ai/knowledge/notes/a.md && mkdir -p .ai/knowledge/state && echo '# from the node' > .ai/knowledge/state/out.md",
        ),
    ]);
    assert_eq!(ran["pushed"]["status"], "pushed", "{ran:#}");
    assert_eq!(ran["merge_type"], "fast-forward", "{ran:#}");
    assert!(ran["result"].to_string().contains("# a"), "{ran:#}");
    assert_eq!(ran["pulled"]["status"], "merged", "{ran:#}");
    assert_eq!(env.read(".ai/knowledge/state/out.md"), "# from the node\n");
    // The project now is the head's manifest, and its stamps say so: the
    // next push is read from them as a delta.
    let history = env.ok(&["remote", "history"]);
    let head_manifest = history["snapshots"][0]["project_manifest_hash"]
        .as_str()
        .unwrap();
    let stamps = env.project().join(".ai/state/objects/stamps");
    let project_stamps = std::fs::read_dir(&stamps)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("project-")
        })
        .unwrap();
    let text = std::fs::read_to_string(&project_stamps).unwrap();
    let header = text.lines().next().unwrap();
    assert!(header.ends_with(&format!(" {head_manifest}")), "{header}");
    assert_eq!(env.ok(&["remote", "pull"])["status"], "up-to-date");

    // An edit here, and meanwhile a run moves the head there.
    let async_run = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--async",
        "--params",
        &shell("mkdir -p .ai/knowledge/state && echo '# async' > .ai/knowledge/state/async.md"),
    ]);
    let folded = env.finished(async_run["thread_id"].as_str().unwrap());
    assert_eq!(folded["merge_type"], "fast-forward", "{folded:#}");
    env.write(".ai/knowledge/notes/a.md", "# a, edited here\n");
    // A plain push from behind is refused; execute merges the head first.
    let behind = env.rye(&["remote", "push"]);
    assert!(!behind.status.success());
    let ran = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--params",
        &shell("cat .ai/knowledge/notes/a.md .ai/knowledge/state/async.md"),
    ]);
    assert_eq!(ran["pushed"]["status"], "pushed", "{ran:#}");
    let said = ran["result"].to_string();
    assert!(
        said.contains("edited here") && said.contains("# async"),
        "{ran:#}"
    );
    assert_eq!(env.read(".ai/knowledge/state/async.md"), "# async\n");
    assert_eq!(env.read(".ai/knowledge/notes/a.md"), "# a, edited here\n");

    // The same note changed there and here: nothing runs.
    let async_run = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--async",
        "--params",
        &shell("echo '# the node says' > .ai/knowledge/notes/a.md"),
    ]);
    env.finished(async_run["thread_id"].as_str().unwrap());
    env.write(".ai/knowledge/notes/a.md", "# the user says\n");
    let marker = env.root.path().join("ran");
    let out = env.rye(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--params",
        &shell(&format!("touch {}", marker.display())),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("conflicts") && stderr.contains(".ai/knowledge/notes/a.md"),
        "{stderr}"
    );
    assert!(!marker.exists(), "nothing ran");
    assert_eq!(env.read(".ai/knowledge/notes/a.md"), "# the user says\n");
}

#[test]
fn a_push_during_a_run_is_merged_and_a_clash_is_a_conflict_leaving_the_head() {
    let env = env();
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    env.ok(&["remote", "push"]);
    let gate = env.root.path().join("gate");
    let wait = format!(
        "while [ ! -e {g} ]; do sleep 0.05; done; rm {g}; ",
        g = gate.display()
    );

    // The run adds a note while the client pushes another.
    let started = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--async",
        "--params",
        &shell(&format!(
            "{wait}mkdir -p .ai/knowledge/state && echo '# run' > .ai/knowledge/state/run.md"
        )),
    ]);
    assert_eq!(started["status"], "accepted", "{started:#}");
    env.write(".ai/knowledge/notes/b.md", "# b\n");
    let pushed = env.ok(&["remote", "push"]);
    std::fs::write(&gate, "").unwrap();
    let merged = env.finished(started["thread_id"].as_str().unwrap());
    assert_eq!(merged["merge_type"], "merge", "{merged:#}");
    let history = env.ok(&["remote", "history"]);
    let head = &history["snapshots"][0];
    assert_eq!(head["source"], "merge", "{history:#}");
    assert_eq!(head["parent_hashes"][0], pushed["snapshot_hash"]);
    assert_eq!(head["parent_hashes"][1], merged["run_snapshot_hash"]);
    env.ok(&["remote", "pull"]);
    assert_eq!(env.read(".ai/knowledge/state/run.md"), "# run\n");
    assert_eq!(env.read(".ai/knowledge/notes/b.md"), "# b\n");

    // Now both change the same note.
    let started = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--async",
        "--params",
        &shell(&format!(
            "{wait}echo '# the run says' > .ai/knowledge/notes/a.md && mkdir -p .ai/state && echo found > .ai/state/report.txt"
        )),
    ]);
    env.write(".ai/knowledge/notes/a.md", "# the user says\n");
    let pushed = env.ok(&["remote", "push"]);
    std::fs::write(&gate, "").unwrap();
    let clash = env.finished(started["thread_id"].as_str().unwrap());
    assert_eq!(clash["merge_type"], "conflict", "{clash:#}");
    assert_eq!(
        clash["conflicts"][".ai/knowledge/notes/a.md"]["type"], "content",
        "{clash:#}"
    );
    assert!(clash["unmerged_snapshot"].is_string());
    let history = env.ok(&["remote", "history"]);
    assert_eq!(
        history["head"], pushed["snapshot_hash"],
        "a conflict leaves the head where the push put it"
    );

    // The run's outputs can still be had, one run's at a time; a local
    // change to one is kept unless forced.
    let thread = clash["thread_id"].as_str().unwrap();
    let got = env.ok(&["remote", "pull", "--thread", thread]);
    assert_eq!(got["written"], json!([".ai/state/report.txt"]), "{got:#}");
    assert_eq!(env.read(".ai/state/report.txt"), "found\n");
    assert_eq!(env.read(".ai/knowledge/notes/a.md"), "# the user says\n");
    let again = env.ok(&["remote", "pull", "--thread", thread]);
    assert_eq!(again["written"], json!([]), "{again:#}");
    assert!(
        again["unchanged"]
            .as_array()
            .unwrap()
            .contains(&json!(".ai/state/report.txt")),
        "{again:#}"
    );
    env.write(".ai/state/report.txt", "edited here\n");
    let kept = env.ok(&["remote", "pull", "--thread", thread]);
    assert_eq!(kept["status"], "kept", "{kept:#}");
    assert_eq!(kept["kept"], json!([".ai/state/report.txt"]));
    assert_eq!(env.read(".ai/state/report.txt"), "edited here\n");
    let forced = env.ok(&["remote", "pull", "--thread", thread, "--force"]);
    assert_eq!(
        forced["written"],
        json!([".ai/state/report.txt"]),
        "{forced:#}"
    );
    assert_eq!(env.read(".ai/state/report.txt"), "found\n");
    let none = env.rye(&["remote", "pull", "--thread", "rye-remote-none-1"]);
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("no thread"));
}

#[test]
fn what_a_run_leaves_pointing_out_of_its_space_is_not_an_output() {
    let env = env();
    env.ok(&["remote", "push"]);
    let outside = env.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "not for the node").unwrap();
    let ran = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--params",
        &shell(&format!(
            "mkdir -p .ai/state .ai/knowledge && ln -s {o}/secret.txt .ai/state/link.txt && ln -s {o} .ai/knowledge/state && echo fine > .ai/state/plain.txt",
            o = outside.display()
        )),
    ]);
    assert_eq!(ran["status"], "completed", "{ran:#}");
    let outputs: Vec<&String> = ran["runtime_output_files"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(outputs, [".ai/state/plain.txt"], "{ran:#}");
    let skipped = ran["skipped_outputs"].to_string();
    assert!(skipped.contains(".ai/state/link.txt"), "{ran:#}");
    assert!(skipped.contains(".ai/knowledge/state"), "{ran:#}");
    // The linked folder's files are no items of the project either.
    let history = env.ok(&["remote", "history"]);
    assert_eq!(
        history["snapshots"].as_array().unwrap().len(),
        1,
        "a no-op: {history:#}"
    );
    assert_eq!(ran["merge_type"], "no-op");
}

#[test]
fn bad_remote_requests_are_answered_with_what_is_wrong() {
    let env = env();
    // Never pushed: nothing to run in.
    let out = env.rye(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--no-push",
        "--params",
        "{}",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("never pushed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.ok(&["remote", "push"]);
    for id in ["../../etc/passwd", "-rf", "a//b"] {
        let out = env.rye(&["remote", "execute", "tool", "--", id]);
        assert!(!out.status.success(), "{id}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("answered 400"),
            "{id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = env.rye(&["remote", "push", "--remote", "elsewhere"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("there are: default"));
    let missing = env.remote(&["threads", "rye-remote-none-1"]);
    assert!(missing["error"].as_str().unwrap().contains("no thread"));
    assert!(env.node.url.starts_with("http://127.0.0.1:"));
}

/// `execute` with `target: remote` from a real MCP client: the tool runs
/// on the node through the system tool `rye/core/remote/remote`, and the
/// argument rules refuse what cannot run remotely.
#[test]
fn an_mcp_client_runs_a_tool_on_the_node_with_target_remote() {
    use rmcp::ServiceExt as _;
    use rmcp::model::CallToolRequestParams;

    let env = env();
    env.ok(&["remote", "push"]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_rye"));
        command.arg("serve");
        common::clean_env(
            command.as_std_mut(),
            &env.project(),
            &env.home(),
            &common::shared_cache(),
        );
        let client = ()
            .serve(rmcp::transport::TokioChildProcess::new(command).unwrap())
            .await
            .unwrap();
        let execute = |extra: Value| {
            let mut arguments = json!({
                "item_type": "tool",
                "item_id": "demo/shell",
                "project_path": env.project(),
                "parameters": {"command": "mkdir -p .ai/knowledge/state && echo '# via mcp' > .ai/knowledge/state/mcp.md"},
            });
            for (k, v) in extra.as_object().unwrap() {
                arguments[k] = v.clone();
            }
            let Value::Object(arguments) = arguments else {
                unreachable!()
            };
            CallToolRequestParams::new("execute").with_arguments(arguments)
        };
        let ran = client
            .call_tool(execute(json!({"target": "remote"})))
            .await
            .unwrap()
            .structured_content
            .unwrap();
        assert_eq!(ran["status"], "success", "{ran:#}");
        assert_eq!(ran["execution_mode"], "remote", "{ran:#}");
        assert_eq!(ran["item_id"], "demo/shell");
        assert_eq!(ran["merge_type"], "fast-forward", "{ran:#}");
        assert!(ran["thread_id"].as_str().unwrap().starts_with("rye-remote-demo-shell-"));

        let named = client
            .call_tool(execute(json!({"target": "remote:default", "parameters": {"command": "true"}})))
            .await
            .unwrap()
            .structured_content
            .unwrap();
        assert_eq!(named["merge_type"], "no-op", "{named:#}");

        for (extra, needle) in [
            (json!({"target": "remote:"}), "remote name cannot be empty"),
            (json!({"target": "elsewhere"}), "Unknown target"),
            (json!({"target": "remote", "dry_run": true}), "dry run"),
            (json!({"target": "remote:nowhere"}), "no remote nowhere"),
            (json!({"target": "remote", "item_type": "directive"}), "directive"),
            (json!({"target": "remote", "item_type": "knowledge"}), "target must be local"),
        ] {
            let refused = client
                .call_tool(execute(extra.clone()))
                .await
                .unwrap()
                .structured_content
                .unwrap();
            assert_eq!(refused["status"], "error", "{extra}: {refused:#}");
            assert!(
                refused["error"].as_str().unwrap().contains(needle),
                "{needle} not in {refused:#}"
            );
        }
        client.cancel().await.unwrap();
    });
}

/// The files under `dir`, relative to it (none if it does not exist).
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn a_node_killed_mid_run_restarts_with_the_run_interrupted_and_nothing_half_done() {
    let mut env = env();
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    let pushed = env.ok(&["remote", "push"]);
    let gate = env.root.path().join("gate");
    let woke = env.root.path().join("woke");
    let started = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--async",
        "--params",
        &shell(&format!(
            "mkdir -p .ai/state && echo half > .ai/state/half.txt && while [ ! -e {g} ]; do sleep 0.05; done; echo woke > {w}",
            g = gate.display(),
            w = woke.display()
        )),
    ]);
    let thread = started["thread_id"].as_str().unwrap().to_owned();
    let executions = env.root.path().join("node/executions");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !files_under(&executions)
        .iter()
        .any(|p| p.ends_with("/project/.ai/state/half.txt"))
    {
        assert!(
            Instant::now() < deadline,
            "the run never wrote its first output"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    env.kill_and_restart_node();
    let shown = env.ok(&["remote", "threads", &thread]);
    assert_eq!(shown["status"], "interrupted", "{shown:#}");
    assert!(shown["finished_at"].is_i64(), "{shown:#}");
    let history = env.ok(&["remote", "history"]);
    assert_eq!(history["head"], pushed["snapshot_hash"], "{history:#}");
    assert_eq!(history["snapshots"].as_array().unwrap().len(), 1);
    assert!(
        !executions.exists() || std::fs::read_dir(&executions).unwrap().count() == 0,
        "the cut-short run's space is swept"
    );
    // What the run had started went down with the node: opening its gate
    // wakes nothing.
    std::fs::write(&gate, "").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(!woke.exists(), "the run outlived its node");
    // And the node serves on: the next run completes and folds back.
    let ran = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--params",
        &shell("mkdir -p .ai/knowledge/state && echo '# whole' > .ai/knowledge/state/whole.md"),
    ]);
    assert_eq!(ran["status"], "completed", "{ran:#}");
    assert_eq!(ran["merge_type"], "fast-forward", "{ran:#}");
    let outputs: Vec<&String> = ran["runtime_output_files"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(outputs, [".ai/knowledge/state/whole.md"], "{ran:#}");
}

#[test]
fn a_push_killed_midway_leaves_no_head_and_the_next_push_sends_only_the_rest() {
    let env = env();
    // About 5 MB, so the push takes several 1 MB requests.
    let filler = "a line of a note that is long enough to weigh something\n".repeat(45);
    for i in 0..2_000 {
        env.write(
            &format!(".ai/knowledge/notes/n{i:04}.md"),
            &format!("# note {i}\n{filler}"),
        );
    }
    let objects = env.node_objects();
    let said = env.root.path().join("push.err");
    let mut push = env
        .command(&["remote", "push"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&said).unwrap())
        .spawn()
        .unwrap();
    // Killed once the node has stored a first request's worth of what it
    // was sent.
    let deadline = Instant::now() + Duration::from_secs(120);
    while walk_files(&objects) < 200 {
        if let Some(ended) = push.try_wait().unwrap() {
            panic!(
                "the push ended ({ended}) before it was killed, with {} files stored: {}",
                walk_files(&objects),
                std::fs::read_to_string(&said).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "nothing was stored");
        std::thread::sleep(Duration::from_millis(5));
    }
    push.kill().unwrap();
    let killed = push.wait().unwrap();
    assert!(!killed.success(), "the push finished before it was killed");
    // The node finishes storing the request it had whole (and records it
    // as the key's): wait for the store to settle.
    let mut seen = walk_files(&objects);
    loop {
        std::thread::sleep(Duration::from_millis(700));
        let now = walk_files(&objects);
        if now == seen {
            break;
        }
        seen = now;
    }

    // No head moved: the project is not on the node.
    let out = env.rye(&["remote", "history"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("never pushed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let pushed = env.ok(&["remote", "push"]);
    assert_eq!(pushed["status"], "pushed", "{pushed:#}");
    let (asked, sent) = (pushed["asked"].as_u64(), pushed["sent"].as_u64());
    assert!(
        sent.unwrap() as usize + seen <= asked.unwrap() as usize,
        "the {seen} objects the killed push stored are not sent again: {pushed:#}"
    );
    let history = env.ok(&["remote", "history"]);
    assert_eq!(history["head"], pushed["snapshot_hash"], "{history:#}");
    let again = env.ok(&["remote", "push"]);
    assert_eq!(again["status"], "unchanged", "{again:#}");
}

/// How many files are under `dir` (none if it does not exist).
fn walk_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() { walk_files(&path) } else { 1 }
        })
        .sum()
}

#[test]
fn a_push_whose_stamps_outlived_the_objects_they_vouch_for_reads_every_file_again() {
    let env = env();
    for i in 0..5 {
        env.write(&format!(".ai/knowledge/notes/n{i}.md"), &format!("# {i}\n"));
    }
    // Written an hour ago, as far as the stamps can tell: old enough for
    // them to vouch for.
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for rel in files_under(&env.project().join(".ai/knowledge")) {
        let file = std::fs::File::options()
            .write(true)
            .open(env.project().join(".ai/knowledge").join(rel))
            .unwrap();
        file.set_modified(hour_ago).unwrap();
    }
    env.ok(&["remote", "push"]);
    let store = env.project().join(".ai/state/objects");
    let stamps = files_under(&store.join("stamps"));
    assert_eq!(
        stamps.len(),
        2,
        "the project's and the user space's: {stamps:?}"
    );
    // The objects go, the stamps stay; one note changes.
    for part in ["objects", "blobs"] {
        std::fs::remove_dir_all(store.join(part)).unwrap();
    }
    env.write(".ai/knowledge/notes/n0.md", "# zero\n");
    let pushed = env.ok(&["remote", "push"]);
    assert_eq!(pushed["status"], "pushed", "{pushed:#}");
    let history = env.ok(&["remote", "history"]);
    assert_eq!(history["head"], pushed["snapshot_hash"]);
    // What the node now holds is the project as it is: a pull changes
    // nothing.
    let pulled = env.ok(&["remote", "pull"]);
    assert_eq!(pulled["status"], "up-to-date", "{pulled:#}");
}

/// Two replicas of one node on one PostgreSQL database, one bucket and
/// one key, each with a folder of its own. One is killed with SIGKILL
/// mid-run; once its lease runs out, the other marks its run interrupted,
/// runs again from the start the one whose caller allowed a retry, and
/// serves on: a run there folds back and comes home.
#[test]
fn a_replica_killed_mid_run_has_its_runs_marked_or_retried_by_the_other_which_serves_on() {
    if let Err(missing) = rye_test_artifacts::servers::Postgres::shared()
        .and_then(|_| rye_test_artifacts::servers::S3::shared())
    {
        rye_test_artifacts::skip("replicas on PostgreSQL and S3", &missing);
        return;
    }
    let mut env = env_on(
        |key| Shared::servers(key).expect("checked above"),
        &["--lease", "2"],
    );
    let root = env.root.path().to_owned();
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    let pushed = env.ok(&["remote", "push"]);
    let gate = root.join("gate");
    let woke = root.join("woke");
    let started = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--async",
        "--params",
        &shell(&format!(
            "mkdir -p .ai/state && echo half > .ai/state/half.txt && while [ ! -e {g} ]; do sleep 0.05; done; echo woke > {w}",
            g = gate.display(),
            w = woke.display()
        )),
    ]);
    let thread = started["thread_id"].as_str().unwrap().to_owned();
    // A run safe to start again: its first attempt waits forever, a
    // second one ends at once.
    let first_try = root.join("first-try");
    let retried = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--async",
        "--retries",
        "1",
        "--params",
        &shell(&format!(
            "mkdir -p .ai/knowledge/state; if [ -e {m} ]; then echo '# again' > .ai/knowledge/state/again.md; \
             else touch {m}; while true; do sleep 0.05; done; fi",
            m = first_try.display()
        )),
    ]);
    let retried = retried["thread_id"].as_str().unwrap().to_owned();
    let executions = root.join("node/executions");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !files_under(&executions)
        .iter()
        .any(|p| p.ends_with("/project/.ai/state/half.txt"))
        || !first_try.exists()
    {
        assert!(Instant::now() < deadline, "the runs never began");
        std::thread::sleep(Duration::from_millis(20));
    }
    let first_replica = env.remote(&["threads", &retried]);
    assert_eq!(first_replica["status"], "running", "{first_replica:#}");
    // The other replica starts only now: started earlier, it could claim
    // one of the runs itself, and that one would outlive the kill.
    let other = start_replica_with(
        &root.join("node-home"),
        &root.join("other"),
        &env.shared,
        &["--lease", "2"],
    );

    env.node.child.kill().unwrap();
    env.node.child.wait().unwrap();
    env.remote_at(&other.url);
    let killed = Instant::now();
    let shown = loop {
        let shown = env.remote(&["threads", &thread]);
        if shown["status"] != "running" {
            break shown;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the other replica never marked the run: {shown:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(shown["status"], "interrupted", "{shown:#}");
    let again = env.finished(&retried);
    assert_eq!(again["status"], "completed", "{again:#}");
    assert_eq!(again["attempts"], 2, "{again:#}");
    assert_eq!(
        again["snapshot_hash"], pushed["snapshot_hash"],
        "the second attempt starts where the first did: {again:#}"
    );
    assert_eq!(again["merge_type"], "fast-forward", "{again:#}");
    assert_eq!(
        again["runtime_output_files"]
            .as_object()
            .map(|files| files.keys().cloned().collect::<Vec<_>>()),
        Some(vec![".ai/knowledge/state/again.md".to_owned()]),
        "only the second attempt's outputs: {again:#}"
    );
    let history = env.ok(&["remote", "history"]);
    assert_eq!(history["head"], again["head"], "{history:#}");
    std::fs::write(&gate, "").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(!woke.exists(), "the run outlived its replica");

    let ran = env.ok(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--params",
        &shell("mkdir -p .ai/knowledge/state && echo '# from the other' > .ai/knowledge/state/other.md"),
    ]);
    assert_eq!(ran["status"], "completed", "{ran:#}");
    assert_eq!(ran["merge_type"], "fast-forward", "{ran:#}");
    assert_eq!(
        env.read(".ai/knowledge/state/other.md"),
        "# from the other\n"
    );
    assert_eq!(env.read(".ai/knowledge/state/again.md"), "# again\n");
    drop(other);
}

/// Signs and sends a webhook delivery with Python's own `hmac`, `hashlib`
/// and `base64` (an implementation independent of the node's): `form` is
/// `spec` (`X-Webhook-*`, over `<timestamp>.<body>`) or `standard`
/// (Standard Webhooks, over `<id>.<timestamp>.<body>`, keyed by the
/// base64 decoding of the secret after `whsec_`). `change` adjusts the
/// headers after signing (JSON: a header to set, or to drop when null).
const DELIVER: &str = r#"
import base64, hashlib, hmac, json, sys, urllib.error, urllib.request
url, secret, form, ts, did, body, change = sys.argv[1:8]
data = body.encode()
if form == "spec":
    mac = hmac.new(secret.encode(), ts.encode() + b"." + data, hashlib.sha256).hexdigest()
    headers = {"X-Webhook-Timestamp": ts, "X-Webhook-Signature": "sha256=" + mac,
               "X-Webhook-Delivery-Id": did}
else:
    key = base64.b64decode(secret.split("_", 1)[1])
    mac = hmac.new(key, did.encode() + b"." + ts.encode() + b"." + data, hashlib.sha256).digest()
    headers = {"webhook-id": did, "webhook-timestamp": ts,
               "webhook-signature": "v1," + base64.b64encode(mac).decode()}
for name, value in json.loads(change).items():
    if value is None:
        headers.pop(name, None)
    else:
        headers[name] = value
headers["Content-Type"] = "application/json"
request = urllib.request.Request(url + "/execute", data=data, headers=headers, method="POST")
try:
    answer = urllib.request.urlopen(request, timeout=120)
    status, text = answer.status, answer.read().decode()
except urllib.error.HTTPError as e:
    status, text = e.code, e.read().decode()
print(json.dumps({"status": status, "body": json.loads(text)}))
"#;

/// A webhook binding runs its item on its project once per delivery, in
/// the spec's form and in the Standard Webhooks form; a delivery sent
/// again is answered "already processed" without running, and a replay
/// under a new id, a stale timestamp, a forged signature, an unknown hook,
/// a missing delivery id and a request signed both ways are refused.
#[test]
fn a_webhook_runs_its_binding_once_per_delivery_and_refuses_replays_and_forgeries() {
    let python = match Command::new("python3").arg("--version").output() {
        Ok(out) if out.status.success() => "python3",
        _ => {
            rye_test_artifacts::skip("webhook deliveries", "no python3");
            return;
        }
    };
    let env = env();
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    env.ok(&["remote", "push"]);
    let bound = env.ok(&[
        "remote",
        "webhook",
        "bind",
        "tool:demo/shell",
        "--description",
        "nightly",
    ]);
    let hook = bound["hook_id"].as_str().unwrap().to_owned();
    let secret = bound["hmac_secret"].as_str().unwrap().to_owned();
    assert!(hook.starts_with("wh_") && hook.len() == 35, "{bound:#}");
    assert!(
        secret.starts_with("whsec_") && secret.len() == 70,
        "{bound:#}"
    );
    let listed = env.ok(&["remote", "webhook", "list"]);
    assert_eq!(listed["bindings"][0]["hook_id"], json!(hook), "{listed:#}");
    assert!(
        !listed.to_string().contains(&secret[6..]),
        "the secret is shown once"
    );

    let url = env.node.url.clone();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .to_string()
    };
    let deliver = |secret: &str, form: &str, ts: &str, id: &str, body: &Value, change: Value| {
        let out = Command::new(python)
            .args(["-c", DELIVER, &url, secret, form, ts, id])
            .arg(body.to_string())
            .arg(change.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        (answer["status"].as_u64().unwrap(), answer["body"].clone())
    };
    let append = |line: &str| {
        json!({"hook_id": hook, "parameters": {"command": format!(
            "mkdir -p .ai/knowledge/state && echo {line} >> .ai/knowledge/state/hook.md")}})
    };
    let snapshots = || {
        env.ok(&["remote", "history"])["snapshots"]
            .as_array()
            .unwrap()
            .len()
    };

    let body = append("spec");
    let ts = now();
    let (status, ran) = deliver(&secret, "spec", &ts, "d-1", &body, json!({}));
    assert_eq!(status, 200, "{ran:#}");
    assert_eq!(ran["status"], "completed", "{ran:#}");
    assert_eq!(ran["merge_type"], "fast-forward", "{ran:#}");
    let after_one = snapshots();

    // The same delivery again: answered, not run.
    let (status, again) = deliver(&secret, "spec", &ts, "d-1", &body, json!({}));
    assert_eq!(status, 200, "{again:#}");
    assert_eq!(again["status"], "already processed", "{again:#}");
    // The same signed bytes under a new delivery id: a replay.
    let (status, replay) = deliver(&secret, "spec", &ts, "d-2", &body, json!({}));
    assert_eq!(
        (status, &replay["error"]),
        (401, &json!("Invalid webhook auth"))
    );
    // Stale, forged, unknown, and from the future.
    let stale = (now().parse::<u64>().unwrap() - 400).to_string();
    let future = (now().parse::<u64>().unwrap() + 120).to_string();
    for (secret, ts, body, why) in [
        (secret.as_str(), stale.as_str(), append("stale"), "stale"),
        (secret.as_str(), future.as_str(), append("future"), "future"),
        ("whsec_forged", ts.as_str(), append("forged"), "forged"),
        (
            secret.as_str(),
            ts.as_str(),
            json!({"hook_id": "wh_00000000000000000000000000000000"}),
            "unknown hook",
        ),
    ] {
        let (status, refused) = deliver(secret, "spec", ts, &format!("d-{why}"), &body, json!({}));
        assert_eq!(status, 401, "{why}: {refused:#}");
        assert_eq!(refused["error"], "Invalid webhook auth", "{why}");
    }
    let (status, refused) = deliver(
        &secret,
        "spec",
        &now(),
        "d-3",
        &append("no-id"),
        json!({"X-Webhook-Delivery-Id": null}),
    );
    assert_eq!(status, 400, "{refused:#}");
    let (status, refused) = deliver(
        &secret,
        "spec",
        &now(),
        "d-4",
        &append("both"),
        json!({"X-Rye-Signature": "c2lnbmVk"}),
    );
    assert_eq!(status, 401, "{refused:#}");
    assert_eq!(snapshots(), after_one, "nothing refused ran");

    // The Standard Webhooks form: the id is signed, so a new id on the
    // same signature does not pass.
    let body = append("standard");
    let ts = now();
    let (status, ran) = deliver(&secret, "standard", &ts, "msg_1", &body, json!({}));
    assert_eq!(status, 200, "{ran:#}");
    assert_eq!(ran["status"], "completed", "{ran:#}");
    let (status, again) = deliver(&secret, "standard", &ts, "msg_1", &body, json!({}));
    assert_eq!(
        (status, &again["status"]),
        (200, &json!("already processed"))
    );
    let signed = Command::new(python)
        .args(["-c", "import base64,hashlib,hmac,sys; k=base64.b64decode(sys.argv[1].split('_',1)[1]); print('v1,'+base64.b64encode(hmac.new(k, sys.argv[2].encode(), hashlib.sha256).digest()).decode())"])
        .arg(&secret)
        .arg(format!("msg_1.{ts}.{body}"))
        .output()
        .unwrap();
    let signature = String::from_utf8(signed.stdout).unwrap().trim().to_owned();
    let (status, replay) = deliver(
        &secret,
        "standard",
        &ts,
        "msg_2",
        &body,
        json!({"webhook-signature": signature}),
    );
    assert_eq!(status, 401, "{replay:#}");

    // Unbound: its deliveries are refused like any unknown hook's.
    let gone = env.ok(&["remote", "webhook", "unbind", &hook]);
    assert_eq!(gone["deleted"], json!(hook));
    let (status, _) = deliver(&secret, "spec", &now(), "d-5", &append("late"), json!({}));
    assert_eq!(status, 401);

    // Each delivery that ran, ran once.
    env.ok(&["remote", "pull"]);
    assert_eq!(env.read(".ai/knowledge/state/hook.md"), "spec\nstandard\n");
}

/// Secrets reach a run's environment and nowhere else: one sealed to the
/// node's box key by `--secret` (from the caller's environment), one kept
/// sealed in the key's vault and named by `--vault-key`. The run sees
/// both; its record names them without their values; the node's database
/// holds neither in the clear; a reserved name is skipped and reported;
/// a name not set here, or gone from the vault, stops the run before it
/// starts.
#[test]
fn a_run_gets_its_secrets_in_its_environment_and_nowhere_else() {
    let env = env();
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    env.ok(&["remote", "push"]);
    let run = |args: &[&str], vars: &[(&str, &str)]| {
        let mut command = env.command(args);
        for (name, value) in vars {
            command.env(name, value);
        }
        command.output().unwrap()
    };
    let stored = run(
        &["remote", "vault", "set", "DB_PASSWORD"],
        &[("DB_PASSWORD", "vault-value-9f2")],
    );
    assert!(
        stored.status.success(),
        "{}",
        String::from_utf8_lossy(&stored.stderr)
    );
    let listed = env.ok(&["remote", "vault", "list"]);
    assert_eq!(listed["names"], json!(["DB_PASSWORD"]));

    let check = r#"[ "$API_TOKEN" = tok-sealed-41 ] && [ "$DB_PASSWORD" = vault-value-9f2 ] && [ -n "$PATH" ] && echo both-seen"#;
    let ran = run(
        &[
            "remote",
            "execute",
            "tool",
            "demo/shell",
            "--secret",
            "API_TOKEN",
            "--secret",
            "PATH",
            "--vault-key",
            "DB_PASSWORD",
            "--params",
            &shell(check),
        ],
        &[("API_TOKEN", "tok-sealed-41")],
    );
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let ran: Value = serde_json::from_slice(&ran.stdout).unwrap();
    assert_eq!(ran["result"]["data"]["stdout"], "both-seen\n", "{ran:#}");
    assert_eq!(
        ran["secrets"],
        json!({"names": ["API_TOKEN", "DB_PASSWORD"], "skipped": ["PATH"]})
    );
    let thread = ran["thread_id"].as_str().unwrap();
    let shown = env.ok(&["remote", "threads", thread]).to_string();
    for secret in ["tok-sealed-41", "vault-value-9f2"] {
        assert!(!ran.to_string().contains(secret), "{secret} in the answer");
        assert!(!shown.contains(secret), "{secret} in the thread record");
    }
    // The node's database (where a node keeps it in its folder) holds
    // neither value in the clear.
    let node = env.root.path().join("node");
    for file in ["node.db", "node.db-wal"] {
        if let Ok(bytes) = std::fs::read(node.join(file)) {
            for secret in ["tok-sealed-41", "vault-value-9f2"] {
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "{secret} in {file}"
                );
            }
        }
    }

    // A webhook binding carries secrets for its runs the same way.
    let bound = run(
        &[
            "remote",
            "webhook",
            "bind",
            "tool:demo/shell",
            "--secret",
            "API_TOKEN",
            "--vault-key",
            "DB_PASSWORD",
        ],
        &[("API_TOKEN", "tok-sealed-41")],
    );
    assert!(
        bound.status.success(),
        "{}",
        String::from_utf8_lossy(&bound.stderr)
    );
    let bound: Value = serde_json::from_slice(&bound.stdout).unwrap();
    assert_eq!(bound["has_secret_envelope"], true, "{bound:#}");
    assert_eq!(bound["vault_keys"], json!(["DB_PASSWORD"]), "{bound:#}");
    assert!(!bound.to_string().contains("tok-sealed-41"));
    if Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .to_string();
        let body = json!({"hook_id": bound["hook_id"], "parameters": {"command": check}});
        let out = Command::new("python3")
            .args(["-c", DELIVER, &env.node.url])
            .arg(bound["hmac_secret"].as_str().unwrap())
            .args(["spec", &stamp, "with-secrets"])
            .arg(body.to_string())
            .arg("{}")
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer["status"], 200, "{answer:#}");
        assert_eq!(
            answer["body"]["result"]["data"]["stdout"], "both-seen\n",
            "{answer:#}"
        );
    } else {
        rye_test_artifacts::skip("a webhook delivery with secrets", "no python3");
    }

    // A secret not set here is an error before anything is sent.
    let unset = run(
        &[
            "remote",
            "execute",
            "tool",
            "demo/shell",
            "--secret",
            "RYE_TEST_UNSET_SECRET",
            "--params",
            &shell("true"),
        ],
        &[],
    );
    assert!(!unset.status.success());
    assert!(
        String::from_utf8_lossy(&unset.stderr).contains("RYE_TEST_UNSET_SECRET"),
        "{}",
        String::from_utf8_lossy(&unset.stderr)
    );
    // A name gone from the vault stops the run before it starts.
    let gone = env.ok(&["remote", "vault", "delete", "DB_PASSWORD"]);
    assert_eq!(gone["deleted"], "DB_PASSWORD");
    let refused = env.remote(&[
        "execute",
        "tool",
        "demo/shell",
        "--vault-key",
        "DB_PASSWORD",
        "--params",
        &shell("true"),
    ]);
    assert!(refused.to_string().contains("no secret"), "{refused:#}");
    // A reserved name is refused by the vault outright.
    let reserved = run(
        &["remote", "vault", "set", "LD_PRELOAD"],
        &[("LD_PRELOAD", "x")],
    );
    assert!(!reserved.status.success());
}

/// The pids of live processes whose arguments `matching` accepts.
fn processes(matching: impl Fn(&[String]) -> bool) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z'))
        });
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !zombie && matching(&args) {
            found.push(pid);
        }
    }
    found
}

impl Env {
    /// The pids of live processes with an argument inside the node's
    /// workspaces (its run hosts, and a running tool's processes) that
    /// `also` accepts.
    fn in_workspaces(&self, also: impl Fn(&[String]) -> bool) -> Vec<u32> {
        let executions = self.root.path().join("node/executions");
        let executions = executions.to_str().unwrap();
        processes(|args| args.iter().any(|a| a.starts_with(executions)) && also(args))
    }
}

/// The node keeps a `rye serve` in a project's workspace for the
/// project's runs. A run past the node's timeout and a run that kills
/// that host each end in an error saying so, leave none of their
/// processes behind, and the next run is served by a new host; a run
/// given secrets has a host of its own that ends with it, so they never
/// outlive it nor reach a later run.
#[test]
fn a_kept_run_host_that_times_out_or_dies_is_replaced_and_secrets_stay_with_their_run() {
    let env = env_on(Shared::chosen, &["--timeout", "3"]);
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    env.ok(&["remote", "push"]);
    let hosts = || env.in_workspaces(|args| args.iter().any(|a| a == "serve"));
    let gone_within = |pids: &[u32], what: &str| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while pids.iter().any(|pid| processes(|_| true).contains(pid)) {
            assert!(Instant::now() < deadline, "{what} still runs");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let run = |command: &str| env.remote(&on_node_args(&shell(command)));

    let first = run("echo one");
    assert_eq!(first["result"]["data"]["stdout"], "one\n", "{first:#}");
    let host = hosts();
    assert_eq!(host.len(), 1, "one host for the project: {host:?}");
    let second = run("echo two");
    assert_eq!(second["result"]["data"]["stdout"], "two\n", "{second:#}");
    assert_eq!(hosts(), host, "the second run went to the same host");

    // Past the timeout: an error within it and a margin, the host and
    // the tool's processes killed.
    let started = Instant::now();
    let late = run("sleep 987");
    let took = started.elapsed();
    assert!(late.to_string().contains("timed out"), "{late:#}");
    assert!(took < Duration::from_secs(10), "answered after {took:?}");
    gone_within(&host, "the timed-out host");
    let sleeper =
        |args: &[String]| args.len() == 2 && args[0].ends_with("sleep") && args[1] == "987";
    assert_eq!(
        processes(sleeper),
        Vec::<u32>::new(),
        "the tool's process was left"
    );
    let after = run("echo three");
    assert_eq!(after["result"]["data"]["stdout"], "three\n", "{after:#}");
    let host = hosts();
    assert_eq!(host.len(), 1, "{host:?}");

    // A run that kills its host with SIGKILL.
    let killed = run(&format!("kill -9 {}; sleep 5", host[0]));
    assert!(
        killed.to_string().contains("without a result"),
        "{killed:#}"
    );
    gone_within(&host, "the killed host");
    let after = run("echo four");
    assert_eq!(after["result"]["data"]["stdout"], "four\n", "{after:#}");

    // A secret given to one run is not in the next run's environment.
    let mut given = env.command(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--no-push",
        "--no-pull",
        "--secret",
        "API_TOKEN",
        "--params",
        &shell("echo \"token=$API_TOKEN.\""),
    ]);
    given.env("API_TOKEN", "tok-given-77");
    let given: Value = serde_json::from_slice(&given.output().unwrap().stdout).unwrap();
    assert_eq!(
        given["result"]["data"]["stdout"], "token=tok-given-77.\n",
        "{given:#}"
    );
    // The host that held the secret ended with its run: no process of
    // the node's user can read it from an idle host's environment.
    gone_within(
        &env.in_workspaces(|_| true),
        "a host that was given a secret",
    );
    let without = run("echo \"token=$API_TOKEN.\"");
    assert_eq!(
        without["result"]["data"]["stdout"], "token=.\n",
        "{without:#}"
    );
}

/// A node told to keep no run hosts (`--keep-run-hosts 0`) starts one
/// for each run and leaves none behind it.
#[test]
fn a_node_keeping_no_run_hosts_leaves_none_after_a_run() {
    let env = env_on(Shared::chosen, &["--keep-run-hosts", "0"]);
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    env.ok(&["remote", "push"]);
    for word in ["one", "two"] {
        let ran = env.on_node(&format!("echo {word}"));
        assert_eq!(
            ran["result"]["data"]["stdout"],
            format!("{word}\n"),
            "{ran:#}"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while !env.in_workspaces(|_| true).is_empty() {
            assert!(Instant::now() < deadline, "a run host outlived its run");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A run host left idle for the node's `--keep-run-hosts` ends, and the
/// project's next run starts a new one.
#[test]
fn an_idle_run_host_ends_after_the_nodes_wait() {
    let env = env_on(Shared::chosen, &["--keep-run-hosts", "1"]);
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    env.ok(&["remote", "push"]);
    let hosts = || env.in_workspaces(|_| true);
    let ran = env.on_node("echo one");
    assert_eq!(ran["result"]["data"]["stdout"], "one\n", "{ran:#}");
    let kept = hosts();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while hosts().contains(&kept[0]) {
        assert!(
            Instant::now() < deadline,
            "an idle run host was kept past its wait"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ran = env.on_node("echo two");
    assert_eq!(ran["result"]["data"]["stdout"], "two\n", "{ran:#}");
}

/// `rye node doctor` checks what a node stands on: healthy on the node's
/// own stores (whichever this suite runs on), and naming what fails on a
/// database it cannot reach.
#[test]
fn the_doctor_names_what_a_node_stands_on_and_what_fails() {
    let env = env();
    let root = env.root.path();
    let doctor = |extra: &[&str]| {
        let mut command = rye_in(
            &root.join("node-home"),
            &root.join("node-home"),
            &[
                "node",
                "doctor",
                "--base",
                root.join("node").to_str().unwrap(),
            ],
        );
        if extra.is_empty() {
            env.shared.apply(&mut command);
        }
        command.args(extra);
        let out = command.output().unwrap();
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.success(), report)
    };
    let (ok, report) = doctor(&[]);
    assert!(ok, "{report:#}");
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    for name in [
        "database",
        "objects",
        "signing key",
        "box key",
        "private_key.pem permissions",
    ] {
        assert!(names.contains(&name), "{name}: {report:#}");
    }
    // A database that does not answer.
    let (ok, report) = doctor(&["--database", "postgres://rye@127.0.0.1:1/none"]);
    assert!(!ok);
    let database = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "database")
        .unwrap();
    assert_eq!(database["ok"], false, "{report:#}");
}

/// An API key made with `rye remote api-key create` reads and runs items
/// through a remote whose entry names `key_env`, with no signing key at
/// all; it cannot push; once revoked it is refused.
#[test]
fn an_api_key_named_by_key_env_runs_items_without_a_signing_key() {
    let env = env();
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    env.ok(&["remote", "push"]);
    let minted = env.ok(&[
        "remote",
        "api-key",
        "create",
        "--label",
        "ci",
        "--scope",
        "node:read",
        "--scope",
        "node:execute",
    ]);
    let token = minted["token"].as_str().unwrap().to_owned();
    let key_id = minted["key_id"].as_str().unwrap().to_owned();
    let remotes = env.project().join(".ai/config/remotes/remotes.yaml");
    let signed = std::fs::read_to_string(&remotes).unwrap();
    let bearing_remote = format!(
        "defaults: {{timeout: 120}}\nproject_path: demo-project\nremotes:\n  default: {{url: \"{}\", key_env: RYE_TEST_API_KEY}}\n",
        env.node.url
    );
    std::fs::write(&remotes, &bearing_remote).unwrap();
    let bearing = |args: &[&str]| {
        env.command(args)
            .env("RYE_TEST_API_KEY", &token)
            .env("RYE_SIGNING_KEY_DIR", env.root.path().join("no-keys"))
            .output()
            .unwrap()
    };

    let unset = env.rye(&["remote", "threads"]);
    assert!(!unset.status.success());
    assert!(
        String::from_utf8_lossy(&unset.stderr).contains("RYE_TEST_API_KEY"),
        "{}",
        String::from_utf8_lossy(&unset.stderr)
    );
    let ran = bearing(&[
        "remote",
        "execute",
        "tool",
        "demo/shell",
        "--no-push",
        "--no-pull",
        "--params",
        &shell("cat .ai/knowledge/notes/a.md"),
    ]);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let ran: Value = serde_json::from_slice(&ran.stdout).unwrap();
    assert_eq!(ran["status"], "completed", "{ran:#}");
    assert!(ran["result"].to_string().contains("# a"), "{ran:#}");
    env.write(".ai/knowledge/notes/b.md", "# b\n");
    let pushed = bearing(&["remote", "push"]);
    assert!(!pushed.status.success());
    assert!(
        String::from_utf8_lossy(&pushed.stderr).contains("may not node.push"),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );

    // Revoked by a signed request, it is refused.
    std::fs::write(&remotes, &signed).unwrap();
    let listed = env.ok(&["remote", "api-key", "list"]);
    assert_eq!(listed["api_keys"][0]["key_id"], json!(key_id), "{listed:#}");
    assert!(!listed.to_string().contains(&token), "{listed:#}");
    env.ok(&["remote", "api-key", "revoke", &key_id]);
    std::fs::write(&remotes, &bearing_remote).unwrap();
    let refused = bearing(&["remote", "threads"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("revoked"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// A node serving with `--log-format json` writes one JSON object a
/// line: each request with its route, status, latency and principal, and
/// each run as it ends; a secret given to a run appears in none of them.
#[test]
fn a_node_logs_requests_and_runs_as_json_lines_and_never_a_secret() {
    let env = env_on(Shared::chosen, &["--log-format", "json"]);
    env.write(".ai/knowledge/notes/a.md", "# a\n");
    env.ok(&["remote", "push"]);
    let ran = env
        .command(&[
            "remote",
            "execute",
            "tool",
            "demo/shell",
            "--secret",
            "RYE_TEST_SECRET",
            "--params",
            &shell("test \"$RYE_TEST_SECRET\" = sesame-4417-open && echo given"),
        ])
        .env("RYE_TEST_SECRET", "sesame-4417-open")
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let ran: Value = serde_json::from_slice(&ran.stdout).unwrap();
    assert!(ran["result"].to_string().contains("given"), "{ran:#}");
    let thread = ran["thread_id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    let logs: Vec<Value> = loop {
        let lines = env.node.logs.lock().unwrap().clone();
        let parsed: Vec<Value> = lines
            .iter()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: not JSON: {line}"))
            })
            .collect();
        if parsed
            .iter()
            .any(|l| l["fields"]["thread_id"] == json!(thread))
            || Instant::now() > deadline
        {
            assert!(
                !lines.iter().any(|line| line.contains("sesame-4417-open")),
                "a secret in the log"
            );
            break parsed;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for line in &logs {
        assert!(
            line["timestamp"].is_string() && line["level"].is_string(),
            "{line}"
        );
    }
    let push = logs
        .iter()
        .find(|l| l["target"] == "rye_node::access" && l["fields"]["route"] == "/push")
        .unwrap_or_else(|| panic!("no /push request logged: {logs:#?}"));
    assert_eq!(push["fields"]["status"], 200, "{push}");
    assert_eq!(push["fields"]["method"], "POST", "{push}");
    assert!(push["fields"]["ms"].as_f64().is_some(), "{push}");
    assert!(
        push["fields"]["principal"]
            .as_str()
            .is_some_and(|p| p.starts_with("fp:")),
        "{push}"
    );
    let run = logs
        .iter()
        .find(|l| l["target"] == "rye_node::runs")
        .unwrap_or_else(|| panic!("no run logged: {logs:#?}"));
    assert_eq!(run["fields"]["thread_id"], json!(thread), "{run}");
    assert_eq!(run["fields"]["status"], "completed", "{run}");
    assert_eq!(run["fields"]["item_id"], "tool:demo/shell", "{run}");
}
