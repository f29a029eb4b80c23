//! Running an item on the node: a workspace holding exactly the
//! snapshot's files (kept from run to run of a project and brought to
//! each run's snapshot by what differs), an `execute` of the item in it
//! by a `rye serve` started there under the spawner's containment (the
//! node's own program, as a process of its own: a run that crashes or
//! hangs takes nothing of the node with it, and its whole process group
//! goes with it), and what the run left under `.ai/state/` and
//! `.ai/knowledge/state/` gathered as its outputs.
//!
//! The `rye serve` stays with its workspace for the project's next runs
//! (a [`Worker`]), so a run costs an MCP call rather than a process
//! start, a host's start and its caches filled again. It is started
//! anew whenever what it was started with changes (the environment, the
//! caller's key), after it failed, timed out or went quiet for
//! [`Runner::keep_hosts`], and after [`WORKER_RUNS`] runs; its own records (its
//! thread registry and store) are cleared with it. A run given secrets
//! gets a host of its own, ended with the run: secrets live in a
//! process's environment no longer than the run that needs them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rye_cas::{Cas, ContentHash, Storage};
use rye_sync::SyncError;
use rye_sync::manifest::Passed;
use rye_sync::materialize::{self, Synced};
use rye_sync::stamps::Stamps;
use serde_json::Value;

use crate::watch::{Watch, folders_of};

/// The folders a run's outputs are gathered from, relative to the
/// project.
pub const OUTPUT_FOLDERS: [&str; 2] = [".ai/state", ".ai/knowledge/state"];
/// What the inner host keeps for itself under `.ai/state/`: its thread
/// registry and store, which are no output of the run.
const OWN_STATE: [&str; 2] = [".ai/state/threads", ".ai/state/objects"];
/// How many runs one worker serves before it is started anew with its
/// records cleared (they grow with every run).
pub const WORKER_RUNS: u32 = 256;
/// How long a worker of a free workspace may wait for its project's
/// next run, unless the runner says otherwise.
pub const WORKER_IDLE: Duration = Duration::from_secs(300);
/// Output files larger than this are left out (and reported).
pub const MAX_OUTPUT_FILE: u64 = 64 * 1024 * 1024;

/// How runs are started.
#[derive(Debug, Clone)]
pub struct Runner {
    /// The `rye` program that runs items.
    pub program: PathBuf,
    /// Environment every run gets (the node's cache and state folders,
    /// `PATH`); each run adds its own `HOME`, `USER_SPACE` and signing-key
    /// folder, and nothing else of the node's environment reaches it.
    pub env: Vec<(String, String)>,
    /// How long a run may take before it and all it started are killed.
    pub timeout: Duration,
    /// How long a workspace's `rye serve` may wait for its project's next
    /// run ([`WORKER_IDLE`] by default); zero keeps none, so every run
    /// starts one of its own.
    pub keep_hosts: Duration,
}

/// Why a run produced no result.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the run could not start: {0}")]
    Spawn(String),
    #[error("the run timed out after {0:?}")]
    TimedOut(Duration),
    #[error("the run ended without a result: {0}")]
    Lost(String),
}

/// A `rye serve` kept in a workspace for its project's runs.
pub struct Worker {
    session: rye_mcp_client::Connection,
    /// What it was started with, and the caller's key it trusts: a run
    /// that differs in either gets a worker of its own.
    plan: rye_process::Plan,
    key: Vec<u8>,
    runs: u32,
    idle_since: std::time::Instant,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("pid", &self.session.pid())
            .field("runs", &self.runs)
            .finish_non_exhaustive()
    }
}

/// The folders runs happen in, kept from run to run per principal and
/// project. A run takes a free one (or a new one), brings it to its
/// snapshot by writing only what differs and removing everything else
/// ([`materialize::sync`]), and gives it back once its changes have been
/// read; one that is not given back is removed. A project of ten
/// thousand files changed in one is thus one file written per run, not
/// ten thousand.
pub struct Workspaces {
    root: PathBuf,
    free: Mutex<Vec<Workspace>>,
    next: AtomicU64,
    /// How many free ones are kept; past that the oldest go.
    keep: usize,
    /// Workspaces whose run has been answered and is still being read
    /// back, by key: a run of their project waits for one rather than
    /// start from nothing.
    reading: Mutex<HashMap<String, usize>>,
    read: tokio::sync::Notify,
}

/// How long a run waits for a workspace of its project to be read back
/// before it takes a new one.
const READ_WAIT: Duration = Duration::from_secs(30);

/// A workspace noted as being read back, to be made a [`Reading`] where
/// the reading happens.
#[must_use]
pub struct Pending {
    key: String,
}

/// A workspace being read back after its run was answered; dropped, it
/// no longer holds runs of its project waiting (whether the workspace
/// was given back or not).
pub struct Reading<'a> {
    pool: &'a Workspaces,
    key: String,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut reading = self.pool.reading.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = reading.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                reading.remove(&self.key);
            }
        }
        drop(reading);
        self.pool.read.notify_waiters();
    }
}

impl Workspaces {
    /// Workspaces under `root`, which must hold nothing else: whatever an
    /// earlier start left there is removed.
    pub fn open(root: PathBuf, keep: usize) -> std::io::Result<Workspaces> {
        match std::fs::remove_dir_all(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::create_dir_all(&root)?;
        Ok(Workspaces {
            root,
            free: Mutex::new(Vec::new()),
            next: AtomicU64::new(0),
            keep,
            reading: Mutex::new(HashMap::new()),
            read: tokio::sync::Notify::new(),
        })
    }

    fn key(principal: &str, project: &str) -> String {
        ContentHash::of(format!("{principal}\n{project}").as_bytes()).hex()[..16].to_owned()
    }

    /// A free workspace of `principal`'s `project`, else (after waiting
    /// for one being read back, when there is one) a new one.
    pub async fn take(&self, principal: &str, project: &str) -> Workspace {
        let key = Workspaces::key(principal, project);
        let deadline = tokio::time::Instant::now() + READ_WAIT;
        loop {
            let read = self.read.notified();
            tokio::pin!(read);
            read.as_mut().enable();
            {
                let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(at) = free.iter().rposition(|w| w.key == key) {
                    return free.remove(at);
                }
            }
            let waiting = self
                .reading
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&key);
            if !waiting || tokio::time::timeout_at(deadline, read).await.is_err() {
                return self.fresh(principal, project);
            }
        }
    }

    /// Notes that `workspace` is being read back after its run was
    /// answered, until the guard [`Workspaces::read_by`] makes of the
    /// note is dropped.
    pub fn reading(&self, workspace: &Workspace) -> Pending {
        *self
            .reading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(workspace.key.clone())
            .or_default() += 1;
        Pending {
            key: workspace.key.clone(),
        }
    }

    /// The guard of a workspace's reading back.
    pub fn read_by(&self, pending: Pending) -> Reading<'_> {
        Reading {
            pool: self,
            key: pending.key,
        }
    }

    /// A new, empty workspace of `principal`'s `project`.
    pub fn fresh(&self, principal: &str, project: &str) -> Workspace {
        let key = Workspaces::key(principal, project);
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Workspace {
            root: self.root.join(&key).join(n.to_string()),
            key,
            project_stamps: None,
            user_stamps: None,
            holds: None,
            used: false,
            worker: None,
        }
    }

    /// Keeps `workspace` for the next run of its project.
    pub fn give_back(&self, workspace: Workspace) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.push(workspace);
        if free.len() > self.keep {
            // Dropped (and removed) outside the lock.
            let oldest = free.remove(0);
            drop(free);
            drop(oldest);
        }
    }

    /// How many workspaces are free.
    pub fn free(&self) -> usize {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Ends the workers of free workspaces that have waited `idle` or
    /// longer for a run; how many it ended. The workspaces stay.
    pub fn end_idle_workers(&self, idle: Duration) -> usize {
        let ended: Vec<Worker> = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            free.iter_mut()
                .filter(|w| {
                    w.worker
                        .as_ref()
                        .is_some_and(|worker| worker.idle_since.elapsed() >= idle)
                })
                .filter_map(|w| w.worker.take())
                .collect()
        };
        // Killed outside the lock; their records are cleared when their
        // workspace is next prepared.
        ended.len()
    }
}

/// One run's folder: `project/` and `user/` as the snapshot has them, an
/// empty `home/`; removed when dropped.
#[derive(Debug)]
pub struct Workspace {
    pub root: PathBuf,
    key: String,
    /// What `project/` and `user/` held when last synced or read.
    project_stamps: Option<Stamps>,
    user_stamps: Option<Stamps>,
    /// What `project/` holds, exactly, when that is known: after a run
    /// whose changes were read and whatever else it left cleared away.
    /// The next sync then touches only what differs, without a walk.
    holds: Option<Arc<Value>>,
    /// Whether a run has used it.
    used: bool,
    /// The `rye serve` its runs go to, while one is kept.
    worker: Option<Worker>,
}

impl Workspace {
    pub fn project(&self) -> PathBuf {
        self.root.join("project")
    }

    pub fn user(&self) -> PathBuf {
        self.root.join("user")
    }

    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    /// Whether an earlier run used it.
    pub fn reused(&self) -> bool {
        self.used
    }

    /// Makes `project/` hold exactly `project` (a manifest), `user/`
    /// exactly `user` (none: empty) and `home/` nothing; what the project
    /// sync did.
    pub async fn prepare<S: Storage>(
        &mut self,
        cas: &Cas<S>,
        project: &Value,
        user: Option<&Value>,
    ) -> Result<Synced, SyncError> {
        if self.holds.is_none() {
            // A full sync clears whatever the manifest does not name,
            // the worker's records with the rest.
            self.worker = None;
        }
        if self.worker.is_none() {
            remove_state(&self.project(), &[])?;
        }
        let (done, stamps) = match (self.holds.take(), self.project_stamps.take()) {
            (Some(holds), Some(stamps)) => {
                materialize::sync_known(cas, project, &self.project(), &holds, stamps).await?
            }
            (_, stamps) => {
                materialize::sync(cas, project, &self.project(), stamps.as_ref()).await?
            }
        };
        // No one but the node writes here: what it wrote more than the
        // stamps' margin ago is trusted when the run is read back, rather
        // than read, hashed and stored again (on a first run, every file).
        self.project_stamps = Some(stamps.retaken());
        let empty = serde_json::json!({});
        let (_, stamps) = materialize::sync(
            cas,
            user.unwrap_or(&empty),
            &self.user(),
            self.user_stamps.as_ref(),
        )
        .await?;
        self.user_stamps = Some(stamps.retaken());
        empty_folder(&self.home())?;
        Ok(done)
    }

    /// A watch over `project/` while it holds exactly `manifest` (as
    /// [`Workspace::prepare`] leaves it), when the manifest names items
    /// only: what changes there is then known without a walk.
    pub fn watch(&self, manifest: &Value) -> Option<Watch> {
        let files = manifest.get("files").and_then(Value::as_object);
        if files.is_some_and(|f| !f.is_empty()) {
            return None;
        }
        Watch::start(&self.project(), folders_of(manifest))
    }

    /// What `project/` held when last synced or read.
    pub fn project_stamps(&self) -> Option<&Stamps> {
        self.project_stamps.as_ref()
    }

    /// The same, to be brought up to date.
    pub fn project_stamps_mut(&mut self) -> Option<&mut Stamps> {
        self.project_stamps.as_mut()
    }

    /// After a run whose changes were read (as `built`, with `stamps`,
    /// of the project as it then was, nothing having changed it since):
    /// the inner host's own state and the home folder go, and whatever
    /// else the manifest does not name, so nothing of the run lingers but
    /// the project's files, and the next sync knows them without a walk.
    pub fn ran(
        &mut self,
        manifest: Arc<Value>,
        passed: &Passed,
        stamps: Stamps,
    ) -> Result<(), SyncError> {
        self.used = true;
        self.project_stamps = Some(stamps);
        // A live worker keeps its own records; nothing else of the run
        // stays.
        let spare: &[&str] = if self.worker.is_some() {
            &OWN_STATE
        } else {
            &[]
        };
        self.holds =
            materialize::clear_to(&self.project(), &manifest, passed, spare)?.then_some(manifest);
        remove_state(&self.project(), spare)?;
        if let Some(worker) = &mut self.worker {
            worker.idle_since = std::time::Instant::now();
        }
        empty_folder(&self.home())
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // The worker's processes end before their folder goes.
        drop(self.worker.take());
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Removes `project`'s `.ai/state/` but for the folders of `spare`.
fn remove_state(project: &Path, spare: &[&str]) -> Result<(), SyncError> {
    materialize::remove_but(&project.join(".ai/state"), ".ai/state", spare)
}

/// Makes `folder` an empty folder.
fn empty_folder(folder: &Path) -> Result<(), SyncError> {
    let io = |e: std::io::Error| SyncError::Io {
        path: folder.display().to_string(),
        source: e,
    };
    match std::fs::remove_dir_all(folder) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    std::fs::create_dir_all(folder).map_err(io)
}

impl Runner {
    /// Runs `kind` `id` with `parameters` in `space`, trusting the key in
    /// the PEM file `trusted_key` besides the spaces' own, with `secrets`
    /// in its environment (names a run may take only); the engine's
    /// result. The run goes to the workspace's worker, started first when
    /// it has none fit for this run; the whole run, a start included, is
    /// held to the runner's timeout.
    pub async fn run(
        &self,
        space: &mut Workspace,
        kind: &str,
        id: &str,
        parameters: &Value,
        trusted_key: &Path,
        secrets: &std::collections::BTreeMap<String, String>,
    ) -> Result<Value, RunError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let plan = self.plan(space, trusted_key, secrets);
        let key = std::fs::read(trusted_key).map_err(|e| RunError::Spawn(e.to_string()))?;
        let fit = space.worker.as_ref().is_some_and(|w| {
            w.plan == plan && w.key == key && w.runs < WORKER_RUNS && w.session.is_open()
        });
        if !fit {
            if let Some(old) = space.worker.take() {
                // Its records go with it: the next one starts clean.
                drop(old);
                remove_state(&space.project(), &[]).map_err(|e| RunError::Spawn(e.to_string()))?;
            }
            let session = rye_mcp_client::Connection::open(
                "the run's host",
                &rye_mcp_client::Transport::Stdio(plan.clone()),
                self.timeout,
            )
            .await
            .map_err(|e| match e {
                rye_mcp_client::McpError::StartupTimeout { .. } => RunError::TimedOut(self.timeout),
                e => RunError::Spawn(e.to_string()),
            })?;
            space.worker = Some(Worker {
                session,
                plan,
                key,
                runs: 0,
                idle_since: std::time::Instant::now(),
            });
        }
        let project = space.project().to_string_lossy().into_owned();
        let worker = space.worker.as_mut().expect("a worker was just made");
        worker.runs += 1;
        let mut arguments = serde_json::Map::new();
        arguments.insert("item_type".into(), Value::from(kind));
        arguments.insert("item_id".into(), Value::from(id));
        arguments.insert("project_path".into(), Value::from(project));
        arguments.insert("parameters".into(), parameters.clone());
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let called = worker.session.call("execute", arguments, left).await;
        if !secrets.is_empty() || self.keep_hosts.is_zero() {
            // No host is kept when the runner keeps none, nor one holding
            // secrets in its environment: while it lived, any process of
            // the node's user could read them.
            space.worker = None;
        }
        match called {
            Ok(outcome) => match outcome.structured {
                Some(result) if result.is_object() => Ok(result),
                _ => {
                    space.worker = None;
                    Err(RunError::Lost(format!(
                        "its answer held no result document: {}",
                        outcome.text.chars().take(2000).collect::<String>()
                    )))
                }
            },
            Err(e) => {
                // Whatever went wrong, the worker is not trusted again:
                // ending it kills everything the run started.
                space.worker = None;
                match e {
                    rye_mcp_client::McpError::Timeout { .. } => {
                        Err(RunError::TimedOut(self.timeout))
                    }
                    e => Err(RunError::Lost(e.to_string())),
                }
            }
        }
    }

    /// How a worker for runs in `space` is started: `rye serve` in its
    /// project, trusting `trusted_key`, with the runner's environment,
    /// the run's `secrets` and the workspace's own home, user space and
    /// (empty) signing-key folder, and nothing else.
    fn plan(
        &self,
        space: &Workspace,
        trusted_key: &Path,
        secrets: &std::collections::BTreeMap<String, String>,
    ) -> rye_process::Plan {
        let text = |p: PathBuf| p.to_string_lossy().into_owned();
        let mut plan = rye_process::Plan::new(text(self.program.clone()))
            .arg("--project")
            .arg(text(space.project()))
            .arg("--trusted-key")
            .arg(text(trusted_key.to_owned()))
            .arg("serve")
            .cwd(space.project());
        for (name, value) in &self.env {
            plan = plan.env(name, value);
        }
        for (name, value) in secrets {
            plan = plan.env(name, value);
        }
        plan.env("HOME", text(space.home()))
            .env("USER_SPACE", text(space.user()))
            .env(
                "RYE_SIGNING_KEY_DIR",
                text(space.root.join("home/no-signing-key")),
            )
    }
}

/// Stores every plain file under the output folders of `project` (its
/// own state aside) as a blob: project-relative path to hash, and the
/// paths left out with why. Links are never followed, and a folder that
/// is a link is not entered.
pub async fn outputs<S: Storage>(
    cas: &Cas<S>,
    project: &Path,
) -> Result<(BTreeMap<String, ContentHash>, Vec<(String, String)>), rye_cas::CasError> {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for folder in OUTPUT_FOLDERS {
        // Every part of the folder's own path must be a folder, no link.
        let mut at = project.to_owned();
        let mut plain = true;
        for part in folder.split('/') {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    skipped.push((folder.to_owned(), "not a plain folder".to_owned()));
                    plain = false;
                    break;
                }
                Err(_) => {
                    plain = false;
                    break;
                }
            }
        }
        if plain {
            gather(&at, folder, &mut found, &mut skipped);
        }
    }
    let mut files = BTreeMap::new();
    for (rel, path) in found {
        match std::fs::read(&path) {
            Ok(bytes) => {
                files.insert(rel, cas.put_blob(&bytes).await?);
            }
            Err(e) => skipped.push((rel, e.to_string())),
        }
    }
    Ok((files, skipped))
}

fn gather(
    dir: &Path,
    rel: &str,
    found: &mut Vec<(String, PathBuf)>,
    skipped: &mut Vec<(String, String)>,
) {
    if OWN_STATE.contains(&rel) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        skipped.push((rel.to_owned(), "could not be listed".to_owned()));
        return;
    };
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            skipped.push((rel.to_owned(), "a name that is not UTF-8".to_owned()));
            continue;
        };
        let child = format!("{rel}/{name}");
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            skipped.push((child, "a symbolic link".to_owned()));
        } else if meta.is_dir() {
            gather(&entry.path(), &child, found, skipped);
        } else if !meta.is_file() {
            skipped.push((child, "not a plain file".to_owned()));
        } else if meta.len() > MAX_OUTPUT_FILE {
            skipped.push((child, format!("larger than {MAX_OUTPUT_FILE} bytes")));
        } else {
            found.push((child, entry.path()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_workspace_goes_back_to_its_project_and_the_oldest_free_one_goes_away() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("executions");
        std::fs::create_dir_all(root.join("left/over")).unwrap();
        let pool = Workspaces::open(root.clone(), 2).unwrap();
        assert!(!root.join("left").exists(), "an earlier start's are swept");

        let a = pool.take("alice", "p").await;
        let a_root = a.root.clone();
        std::fs::create_dir_all(a.project()).unwrap();
        // Another project, another principal: never the same folder.
        let b = pool.take("bob", "p").await;
        let c = pool.take("alice", "q").await;
        assert_ne!(b.root, a_root);
        assert_ne!(c.root.parent(), a_root.parent());
        pool.give_back(a);
        let again = pool.take("alice", "p").await;
        assert_eq!(again.root, a_root);
        // Not given back: removed.
        drop(again);
        assert!(!a_root.exists());

        // Past two free ones, the oldest is removed.
        let roots: Vec<PathBuf> = [b, c, pool.take("carol", "r").await]
            .into_iter()
            .map(|w| {
                std::fs::create_dir_all(w.project()).unwrap();
                let root = w.root.clone();
                pool.give_back(w);
                root
            })
            .collect();
        assert_eq!(pool.free(), 2);
        assert!(!roots[0].exists());
        assert!(roots[1].exists() && roots[2].exists());

        // One being read back after its run is waited for, not replaced.
        let d = pool.take("dave", "p").await;
        std::fs::create_dir_all(d.project()).unwrap();
        let d_root = d.root.clone();
        let reading = pool.read_by(pool.reading(&d));
        let (taken, ()) = tokio::join!(pool.take("dave", "p"), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            pool.give_back(d);
            drop(reading);
        });
        assert_eq!(taken.root, d_root);
        // A reading that ends without giving its workspace back leaves
        // the waiting run a new one.
        let reading = pool.read_by(pool.reading(&taken));
        drop(taken);
        let (fresh, ()) = tokio::join!(pool.take("dave", "p"), async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(reading);
        });
        assert_ne!(fresh.root, d_root);
    }
}
