//! `cargo bench -p rye --bench replicas`: push and execute throughput of
//! one node replica against two, sharing one PostgreSQL database and one
//! S3 bucket (the test servers: PostgreSQL from the system's packages,
//! s3s-fs), through the release binary.
//!
//! Eight clients, each with a project of its own (20 notes and a shell
//! tool), do six rounds each of: change a note and push; run the tool on
//! the node, which writes a state file that folds back into the head.
//! With one replica every client talks to it; with two, half talk to
//! each. The two setups run alternately, twice, in one process, each on
//! a fresh database and bucket.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rye_node::client::{Client, Remote};
use rye_test_artifacts::servers::{Postgres, S3};
use serde_json::{Value, json};

const CLIENTS: usize = 8;
const ROUNDS: usize = 6;

struct Replica(Child);

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rye(dir: &Path, home: &Path, env: &[(String, String)], args: &[&str]) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    command.args(args);
    common::clean_env(&mut command, dir, home, &common::shared_cache())
        .env("RYE_LOG", "error")
        .envs(env.iter().cloned());
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "rye {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// A project of 20 notes and a signed shell tool at `dir`.
fn project(dir: &Path, home: &Path) {
    std::fs::create_dir_all(dir.join(".ai/tools/demo")).unwrap();
    std::fs::write(
        dir.join(".ai/tools/demo/shell.yaml"),
        "version: \"1.0.0\"\ntool_type: shell\nexecutor_id: rye/core/runtimes/bash/bash\ncategory: demo\ndescription: Runs a command in the project.\n",
    )
    .unwrap();
    rye(dir, home, &[], &["sign", "tool", "demo/shell"]);
    let notes = dir.join(".ai/knowledge/notes");
    std::fs::create_dir_all(&notes).unwrap();
    for i in 0..20 {
        std::fs::write(notes.join(format!("n{i:02}.md")), format!("# Note {i}\n")).unwrap();
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

/// What one setup measured.
struct Measured {
    elapsed: Duration,
    pushes: Vec<Duration>,
    runs: Vec<Duration>,
}

fn measure(replicas: usize, root: &Path, home: &Path, template: &Path) -> Measured {
    let (cluster, s3) = (Postgres::shared().unwrap(), S3::shared().unwrap());
    let bucket = s3.bucket();
    let trial = root.join(format!("trial-{}", bucket));
    let key_dir = trial.join("node-key");
    let node_home = trial.join("node-home");
    std::fs::create_dir_all(&node_home).unwrap();
    let stores = vec![
        "--database".to_owned(),
        cluster.database(),
        "--objects".to_owned(),
        format!("s3://{bucket}/node"),
        "--key-dir".to_owned(),
        key_dir.to_str().unwrap().to_owned(),
    ];
    let env: Vec<(String, String)> = s3
        .options()
        .into_iter()
        .map(|(k, v)| (k.to_uppercase(), v))
        .collect();
    let public = home.join(".ai/config/keys/signing/public_key.pem");
    let mut args = vec!["node", "authorize", public.to_str().unwrap()];
    args.extend(stores.iter().map(String::as_str));
    rye(&node_home, &node_home, &env, &args);
    let mut urls = Vec::new();
    let mut running = Vec::new();
    for r in 0..replicas {
        let base = trial.join(format!("replica-{r}"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
        command
            .args(["node", "serve", "--base", base.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0", "--gc-every", "0"])
            .args(&stores);
        common::clean_env(
            &mut command,
            &node_home,
            &node_home,
            &common::shared_cache(),
        )
        .env("RYE_LOG", "error")
        .envs(env.iter().cloned());
        let mut child = command
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        urls.push(first.split(" at ").nth(1).unwrap().trim().to_owned());
        std::thread::spawn(move || for _ in lines.by_ref() {});
        running.push(Replica(child));
    }
    let pins = trial.join("known_nodes.json");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let (pushes, runs) = runtime.block_on(async {
        let mut clients = Vec::new();
        for c in 0..CLIENTS {
            let folder = trial.join(format!("client-{c}"));
            copy(template, &folder);
            let remote = Remote {
                name: format!("r{}", c % replicas),
                url: urls[c % replicas].clone(),
                node_id: None,
                timeout: Duration::from_secs(300),
                key_env: None,
            };
            let key = rye_integrity::Keypair::load(&home.join(".ai/config/keys/signing")).unwrap();
            let pins = pins.clone();
            clients.push(tokio::spawn(async move {
                let client = Client::connect(&remote, key, &pins).await.unwrap();
                let project_path = format!("p{c}");
                let (mut pushes, mut runs) = (Vec::new(), Vec::new());
                for round in 0..ROUNDS {
                    std::fs::write(
                        folder.join(format!(".ai/knowledge/notes/n{:02}.md", round)),
                        format!("# Note {round}, changed by {c}\n"),
                    )
                    .unwrap();
                    let t = Instant::now();
                    client.push(&folder, None, &[], &project_path).await.unwrap();
                    pushes.push(t.elapsed());
                    let t = Instant::now();
                    let ran = client
                        .execute(
                            &project_path,
                            "tool:demo/shell",
                            &json!({"command": format!(
                                "mkdir -p .ai/knowledge/state && echo '# round {round}' > .ai/knowledge/state/s.md"
                            )}),
                            false,
                        )
                        .await
                        .unwrap();
                    assert_eq!(ran["status"], "completed", "{ran:#}");
                    runs.push(t.elapsed());
                    // The next push starts from the head the run moved.
                    client.pull(&folder, &[], &project_path).await.unwrap();
                }
                (pushes, runs)
            }));
        }
        let (mut pushes, mut runs) = (Vec::new(), Vec::new());
        for client in clients {
            let (p, r) = client.await.unwrap();
            pushes.extend(p);
            runs.extend(r);
        }
        (pushes, runs)
    });
    let elapsed = started.elapsed();
    drop(running);
    Measured {
        elapsed,
        pushes,
        runs,
    }
}

fn copy(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn main() {
    if let Err(missing) = Postgres::shared().and_then(|_| S3::shared()) {
        println!("replicas: not measured ({missing})");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let template: PathBuf = root.path().join("template");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&template).unwrap();
    rye(&template, &home, &[], &["keys", "generate"]);
    rye(&template, &home, &[], &["keys", "trust"]);
    project(&template, &home);
    // Past the two seconds in which a file's stamp is not trusted.
    std::thread::sleep(Duration::from_millis(2500));
    println!(
        "{CLIENTS} clients x {ROUNDS} rounds (push, run with fold-back, pull) against PostgreSQL + S3:"
    );
    for trial in 0..2 {
        for replicas in [1, 2] {
            let m = measure(replicas, root.path(), &home, &template);
            let rounds = (CLIENTS * ROUNDS) as f64;
            println!(
                "trial {trial}, {replicas} replica(s): {:.1} s, {:.1} rounds/s | push median {} | execute median {}",
                m.elapsed.as_secs_f64(),
                rounds / m.elapsed.as_secs_f64(),
                ms(median(m.pushes)),
                ms(median(m.runs)),
            );
        }
    }
}
