//! Running an item on the node: a fresh execution space copied from the
//! snapshot's checkout, a `rye execute` of the item in it under the
//! spawner's containment (the node's own program, as a process of its
//! own: a run that crashes or hangs takes nothing of the node with it),
//! and what the run left under `.ai/state/` and `.ai/knowledge/state/`
//! gathered as its outputs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rye_cas::{Cas, ContentHash, Storage};
use serde_json::Value;

/// The folders a run's outputs are gathered from, relative to the
/// project.
pub const OUTPUT_FOLDERS: [&str; 2] = [".ai/state", ".ai/knowledge/state"];
/// What the inner host keeps for itself under `.ai/state/`: its thread
/// registry and store, which are no output of the run.
const OWN_STATE: [&str; 2] = [".ai/state/threads", ".ai/state/objects"];
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
}

/// Why a run produced no result.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the run could not start: {0}")]
    Spawn(String),
    #[error("the run timed out after {0:?}")]
    TimedOut(Duration),
    #[error("the run ended without a result (exit {code:?}): {stderr}")]
    NoResult { code: Option<i32>, stderr: String },
}

/// A run's own folder, removed when dropped: `project/` and `user/`
/// copied from a checkout, and an empty `home/`.
#[derive(Debug)]
pub struct ExecSpace {
    pub root: PathBuf,
}

impl ExecSpace {
    /// Copies the checkout `from` (with `project/` and maybe `user/`) to
    /// `<under>/<name>/`.
    pub fn prepare(from: &Path, under: &Path, name: &str) -> std::io::Result<ExecSpace> {
        let root = under.join(name);
        if root.exists() {
            std::fs::remove_dir_all(&root)?;
        }
        std::fs::create_dir_all(root.join("home"))?;
        let space = ExecSpace { root };
        for part in ["project", "user"] {
            let source = from.join(part);
            if source.is_dir() {
                copy_tree(&source, &space.root.join(part))?;
            } else {
                std::fs::create_dir_all(space.root.join(part))?;
            }
        }
        Ok(space)
    }

    pub fn project(&self) -> PathBuf {
        self.root.join("project")
    }

    pub fn user(&self) -> PathBuf {
        self.root.join("user")
    }
}

impl Drop for ExecSpace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Copies the plain files and folders of `from` into `to`; a checkout
/// holds nothing else, and anything else is left behind.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

impl Runner {
    /// Runs `kind` `id` with `parameters` in `space`, trusting the key in
    /// the PEM file `trusted_key` besides the spaces' own; the engine's
    /// result.
    pub async fn run(
        &self,
        space: &ExecSpace,
        kind: &str,
        id: &str,
        parameters: &Value,
        trusted_key: &Path,
    ) -> Result<Value, RunError> {
        let text = |p: PathBuf| p.to_string_lossy().into_owned();
        let mut plan = rye_process::Plan::new(text(self.program.clone()))
            .arg("--json")
            .arg("--project")
            .arg(text(space.project()))
            .arg("--trusted-key")
            .arg(text(trusted_key.to_owned()))
            .arg("execute")
            .arg(kind)
            .arg(id)
            .arg("--params-file")
            .arg("-")
            .cwd(space.project())
            .stdin(parameters.to_string().into_bytes())
            .timeout(self.timeout);
        for (name, value) in &self.env {
            plan = plan.env(name, value);
        }
        plan = plan
            .env("HOME", text(space.root.join("home")))
            .env("USER_SPACE", text(space.user()))
            .env(
                "RYE_SIGNING_KEY_DIR",
                text(space.root.join("home/no-signing-key")),
            );
        let capture = rye_process::Capture::default();
        let outcome = rye_process::run(&plan, &capture)
            .await
            .map_err(|e| RunError::Spawn(e.to_string()))?;
        if outcome.timed_out {
            return Err(RunError::TimedOut(self.timeout));
        }
        match (
            outcome.code,
            serde_json::from_slice::<Value>(&outcome.stdout),
        ) {
            (Some(0 | 1), Ok(result)) if result.is_object() => Ok(result),
            (code, _) => {
                let stderr = String::from_utf8_lossy(&outcome.stderr);
                let tail: String = stderr
                    .chars()
                    .rev()
                    .take(2000)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                Err(RunError::NoResult {
                    code,
                    stderr: tail.trim().to_owned(),
                })
            }
        }
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
