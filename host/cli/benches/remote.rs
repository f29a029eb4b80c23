//! `cargo bench -p rye --bench remote`: a project pushed to a node and
//! run there, through the release binary on both sides of loopback.
//!
//! A project of 10,000 knowledge items (about 300 bytes each) and a shell
//! tool: the first push; an unchanged push; 1 % of the items changed and
//! pushed (five rounds), with the requests and request bytes the client
//! sent against the bytes that changed; then one item changed, pushed and
//! a tool run on the node that writes state, folded back: the whole as a
//! user waits for it (one `rye remote execute --no-pull`), and the pull
//! that brings the run's change home timed apart, fifteen rounds, for the
//! large project and for a small one (10 items).

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Bench {
    _root: tempfile::TempDir,
    project: PathBuf,
    home: PathBuf,
    node: Child,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.node.kill();
        let _ = self.node.wait();
    }
}

fn rye(project: &Path, home: &Path, args: &[&str]) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    command.args(args);
    common::clean_env(&mut command, project, home, &common::shared_cache()).env("RYE_LOG", "error");
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "rye {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn note(i: usize, round: usize) -> String {
    format!(
        "# Note {i}\n\nRound {round}. A knowledge entry of a project pushed to a node: a few \
         sentences of text, as notes, runbooks and findings are, so that the bytes on the \
         wire can be set against the bytes that changed.\n"
    )
}

fn setup(items: usize) -> Bench {
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("project");
    let home = root.path().join("home");
    let node_home = root.path().join("node-home");
    for dir in [&project, &home, &node_home] {
        std::fs::create_dir_all(dir).unwrap();
    }
    rye(&project, &home, &["keys", "generate"]);
    rye(&project, &home, &["keys", "trust"]);
    std::fs::create_dir_all(project.join(".ai/tools/demo")).unwrap();
    std::fs::write(
        project.join(".ai/tools/demo/shell.yaml"),
        "version: \"1.0.0\"\ntool_type: shell\nexecutor_id: rye/core/runtimes/bash/bash\ncategory: demo\ndescription: Runs a command in the project.\n",
    )
    .unwrap();
    rye(&project, &home, &["sign", "tool", "demo/shell"]);
    let notes = project.join(".ai/knowledge/notes");
    std::fs::create_dir_all(&notes).unwrap();
    for i in 0..items {
        std::fs::write(notes.join(format!("n{i:05}.md")), note(i, 0)).unwrap();
    }
    let base = root.path().join("node");
    let public = home.join(".ai/config/keys/signing/public_key.pem");
    rye(
        &node_home,
        &node_home,
        &[
            "node",
            "authorize",
            public.to_str().unwrap(),
            "--base",
            base.to_str().unwrap(),
        ],
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    command.args([
        "node",
        "serve",
        "--base",
        base.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    common::clean_env(
        &mut command,
        &node_home,
        &node_home,
        &common::shared_cache(),
    );
    let mut node = command
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(node.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first.split(" at ").nth(1).unwrap().trim().to_owned();
    std::thread::spawn(move || for _ in lines.by_ref() {});
    std::fs::create_dir_all(project.join(".ai/config/remotes")).unwrap();
    std::fs::write(
        project.join(".ai/config/remotes/remotes.yaml"),
        format!("defaults: {{timeout: 300}}\nremotes:\n  default: {{url: \"{url}\"}}\n"),
    )
    .unwrap();
    // A project's files were not all written in the last instant: past
    // the two seconds in which a file's stamp is not trusted.
    std::thread::sleep(Duration::from_millis(2500));
    Bench {
        _root: root,
        project,
        home,
        node,
    }
}

fn timed(bench: &Bench, args: &[&str]) -> (Value, Duration) {
    let started = Instant::now();
    let value = rye(&bench.project, &bench.home, args);
    (value, started.elapsed())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Per round: `rye remote execute` pushing one change, running a tool
/// that writes state and folding it back (`--no-pull`: the issue's
/// round), and the pull that brings the run's change home; the last
/// run's record.
fn push_run_fold(bench: &Bench, rounds: usize) -> (Vec<[Duration; 2]>, Value) {
    let mut took = Vec::new();
    let mut last = Value::Null;
    for round in 0..rounds {
        std::fs::write(
            bench.project.join(".ai/knowledge/notes/n00000.md"),
            note(0, 1000 + round),
        )
        .unwrap();
        let started = Instant::now();
        let ran = rye(&bench.project, &bench.home, &[
            "remote",
            "execute",
            "tool",
            "demo/shell",
            "--no-pull",
            "--params",
            &json!({"command": format!("mkdir -p .ai/knowledge/state && echo 'round {round}' > .ai/knowledge/state/s.md")}).to_string(),
        ]);
        let round_trip = started.elapsed();
        assert_eq!(ran["pushed"]["status"], "pushed", "{ran:#}");
        assert_eq!(ran["merge_type"], "fast-forward", "{ran:#}");
        let started = Instant::now();
        let pulled = rye(&bench.project, &bench.home, &["remote", "pull"]);
        let pull = started.elapsed();
        assert_eq!(pulled["status"], "merged", "{pulled:#}");
        took.push([round_trip, pull]);
        last = ran;
    }
    (took, last)
}

fn report(items: usize, rounds: &[[Duration; 2]], last: &Value) {
    let part = |k: usize| median(rounds.iter().map(|r| r[k]).collect());
    let fastest = rounds.iter().map(|r| r[0]).min().unwrap();
    println!(
        "push one change + remote execute + fold-back, {items} items: median {:.0} ms, \
         fastest {:.0} ms; the pull after it {:.0} ms",
        ms(part(0)),
        ms(fastest),
        ms(part(1)),
    );
    // The node's first runs of a project make and read back its
    // workspace; the rounds after them are what a user sees from then on.
    let (first, then) = rounds.split_at(3.min(rounds.len()));
    println!(
        "  the first three rounds {} ms; the {} after them: median {:.0} ms",
        first
            .iter()
            .map(|r| format!("{:.0}", ms(r[0])))
            .collect::<Vec<_>>()
            .join(", "),
        then.len(),
        ms(median(then.iter().map(|r| r[0]).collect())),
    );
    println!(
        "  last round: client phases (ms) {}; on the node: workspace {}, phases (ms) {}",
        last["client_ms"], last["workspace"], last["timings_ms"]
    );
}

fn main() {
    let items = 10_000;
    let bench = setup(items);
    let (first, took) = timed(&bench, &["remote", "push"]);
    println!(
        "first push of {items} items: {:.0} ms, {} requests, {} bytes sent",
        ms(took),
        first["requests"],
        first["sent_bytes"]
    );

    let mut unchanged = Vec::new();
    for _ in 0..5 {
        let (answer, took) = timed(&bench, &["remote", "push"]);
        assert_eq!(answer["status"], "unchanged");
        unchanged.push(took);
        println!(
            "unchanged push: {} request(s), {} bytes, {:.0} ms",
            answer["requests"],
            answer["sent_bytes"],
            ms(took)
        );
    }
    println!("unchanged push median {:.0} ms", ms(median(unchanged)));

    let mut changed_times = Vec::new();
    for round in 1..=5 {
        let mut changed_bytes = 0;
        for k in 0..items / 100 {
            let i = (k * 100 + round * 7) % items;
            let text = note(i, round);
            changed_bytes += text.len();
            std::fs::write(
                bench
                    .project
                    .join(format!(".ai/knowledge/notes/n{i:05}.md")),
                text,
            )
            .unwrap();
        }
        let (answer, took) = timed(&bench, &["remote", "push"]);
        changed_times.push(took);
        let sent = answer["sent_bytes"].as_u64().unwrap();
        let limit = changed_bytes as f64 * 1.1 + 65_536.0;
        println!(
            "1% changed ({} items, {changed_bytes} bytes): {} requests, {sent} bytes sent \
             ({:.2}x the change; target <= {limit:.0}), {:.0} ms",
            items / 100,
            answer["requests"],
            sent as f64 / changed_bytes as f64,
            ms(took)
        );
    }
    println!("1% changed push median {:.0} ms", ms(median(changed_times)));

    let (large, last) = push_run_fold(&bench, 15);
    report(items, &large, &last);
    drop(bench);

    let small = setup(10);
    timed(&small, &["remote", "push"]);
    let (times, last) = push_run_fold(&small, 15);
    report(10, &times, &last);
}
