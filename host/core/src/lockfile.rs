//! Lockfiles: after a tool's first successful run, the integrity of every
//! element of its chain is pinned in `.ai/lockfiles/<tool id>@<version>.lock.json`
//! (project space when there is a project, else user space). A later run
//! whose chain differs from the pin fails until the lock is refreshed.
//! The format is the original system's (lockfile_version 1).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use rye_space::{Space, Spaces};
use serde_json::{Value, json};

use crate::{Chain, ChainElement, HostError, Rye};

/// Where lockfiles live under `.ai/`.
pub use rye_gate::LOCKFILES_DIR;

/// The provider id of elements of the bundled system space.
const SYSTEM_PROVIDER: &str = "rye-system";

fn system_version() -> String {
    format!(
        "{}+{}",
        env!("CARGO_PKG_VERSION"),
        &rye_system::hash()[..16]
    )
}

/// The version lockfiles are named by: the item's `version`, else 0.0.0.
pub(crate) fn version_text(metadata: &serde_json::Map<String, Value>) -> String {
    match metadata.get("version") {
        Some(Value::String(v)) => v.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0.0.0".into(),
    }
}

fn version_of(element: &ChainElement) -> String {
    version_text(&element.metadata)
}

fn integrity(element: &ChainElement) -> String {
    element.signed.integrity(&element.content_hash)
}

fn provider(element: &ChainElement) -> (String, String) {
    match element.space {
        Space::System => (SYSTEM_PROVIDER.into(), system_version()),
        space => (space.to_string(), version_of(element)),
    }
}

/// `generated_at` as the original writes it: ISO 8601 with microseconds
/// and `+00:00`.
fn generated_at() -> String {
    let now = SystemTime::now();
    let micros = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_micros());
    let stamp = rye_integrity::utc_timestamp(now);
    format!("{}.{micros:06}+00:00", stamp.trim_end_matches('Z'))
}

/// The lockfile document for `chain`.
fn document(chain: &Chain) -> Value {
    let tool = chain.tool();
    let (provider_id, provider_version) = provider(tool);
    let resolved: Vec<Value> = chain
        .elements
        .iter()
        .map(|e| {
            let mut entry = json!({
                "item_id": e.item_id,
                "space": e.space,
                "tool_type": e.metadata.get("tool_type").cloned().unwrap_or(Value::Null),
                "executor_id": e.executor_id(),
                "integrity": integrity(e),
            });
            if e.space == Space::System {
                let (id, version) = provider(e);
                entry["provider_id"] = json!(id);
                entry["provider_version"] = json!(version);
            }
            entry
        })
        .collect();
    json!({
        "lockfile_version": 1,
        "generated_at": generated_at(),
        "root": {
            "tool_id": tool.item_id,
            "version": version_of(tool),
            "integrity": integrity(tool),
            "provider_id": provider_id,
            "provider_version": provider_version,
        },
        "resolved_chain": resolved,
        "registry": null,
        "verified_deps": null,
    })
}

fn file_name(tool: &ChainElement) -> String {
    format!("{}@{}.lock.json", tool.item_id, version_of(tool))
}

/// How a run stands against its lockfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LockState {
    /// A lockfile matched the chain.
    Used(PathBuf),
    /// None applies; one is written after a successful run.
    Absent,
    /// Integrity checks are off.
    Off,
}

impl Rye {
    /// Checks `chain` against the first lockfile for its tool (project,
    /// user, system). A lockfile that cannot be read is treated as absent;
    /// one pinned to another release of the system space is discarded.
    pub(crate) fn check_lock(
        &self,
        spaces: &Spaces,
        chain: &Chain,
    ) -> Result<LockState, HostError> {
        if !self.integrity.policy.enforce {
            return Ok(LockState::Off);
        }
        let name = file_name(chain.tool());
        let Some((path, locked)) = spaces.roots().iter().find_map(|root| {
            let path = root.ai_dir.join(LOCKFILES_DIR).join(&name);
            self.read_lock(&path).map(|doc| (path, doc))
        }) else {
            return Ok(LockState::Absent);
        };
        let stale_release = |entry: &Value| {
            entry["provider_id"] == SYSTEM_PROVIDER
                && entry["provider_version"].as_str() != Some(&system_version())
        };
        if stale_release(&locked["root"])
            || locked["resolved_chain"]
                .as_array()
                .is_some_and(|entries| entries.iter().any(stale_release))
        {
            // Pinned to another release of the bundled system space.
            let _ = std::fs::remove_file(&path);
            return Ok(LockState::Absent);
        }
        let tool = chain.tool();
        // Built only for a refusal: the warm path allocates nothing here.
        let refresh = || {
            format!(
                "If the change is intended, sign the changed file (`rye sign tool <id>`) and refresh the lock \
                 (`rye lock {} --refresh`), or delete {}",
                tool.item_id,
                path.display()
            )
        };
        let now = integrity(tool);
        let pinned = locked["root"]["integrity"].as_str().unwrap_or_default();
        if pinned != now {
            return Err(HostError::Integrity {
                path: tool.path.clone(),
                error: rye_integrity::IntegrityError::StaleLock(format!(
                    "integrity mismatch for tool {:?}: {} pins {}…, the tool is now {}…. {}",
                    tool.item_id,
                    path.display(),
                    &pinned[..pinned.len().min(16)],
                    &now[..16],
                    refresh()
                )),
            });
        }
        let entries: &[Value] = locked["resolved_chain"]
            .as_array()
            .map_or(&[], Vec::as_slice);
        let pinned_ids: Vec<&str> = entries
            .iter()
            .filter_map(|e| e["item_id"].as_str())
            .collect();
        let ids: Vec<&str> = chain.elements.iter().map(|e| e.item_id.as_str()).collect();
        if pinned_ids != ids {
            return Err(HostError::Integrity {
                path: tool.path.clone(),
                error: rye_integrity::IntegrityError::StaleLock(format!(
                    "{} pins the chain {} but the tool now resolves to {}. {}",
                    path.display(),
                    pinned_ids.join(" -> "),
                    ids.join(" -> "),
                    refresh()
                )),
            });
        }
        for (entry, element) in entries.iter().zip(&chain.elements) {
            let now = integrity(element);
            let pinned = entry["integrity"].as_str().unwrap_or_default();
            let space_now = element.space.to_string();
            if entry["space"].as_str() != Some(space_now.as_str()) || pinned != now {
                return Err(HostError::Integrity {
                    path: element.path.clone(),
                    error: rye_integrity::IntegrityError::StaleLock(format!(
                        "integrity mismatch for chain element {:?}: {} pins {}… in the {} space, \
                         it is now {}… in the {} space. {}",
                        element.item_id,
                        path.display(),
                        &pinned[..pinned.len().min(16)],
                        entry["space"].as_str().unwrap_or("?"),
                        &now[..16],
                        space_now,
                        refresh()
                    )),
                });
            }
        }
        Ok(LockState::Used(path))
    }

    /// The lockfile at `path`, parsed; re-read only when the file changed.
    /// A file that is not a lockfile counts as none.
    fn read_lock(&self, path: &Path) -> Option<Arc<Value>> {
        let stamp = self.listings.stamp(path).ok()?;
        let mut cache = self.integrity.locks.lock().expect("lockfile cache lock");
        if let Some((known, doc)) = cache.get(path)
            && *known == stamp
        {
            return doc.clone();
        }
        let doc = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .filter(is_lockfile)
            .map(Arc::new);
        if doc.is_none() {
            tracing::warn!("ignoring {}: not a lockfile", path.display());
        }
        cache.insert(path.to_owned(), (stamp, doc.clone()));
        doc
    }

    /// Writes the lockfile of `chain` (replacing any) into the project
    /// space, or the user space when there is no project.
    pub(crate) fn write_lock(&self, spaces: &Spaces, chain: &Chain) -> Result<PathBuf, HostError> {
        let root = spaces
            .root(Space::Project)
            .or_else(|| spaces.root(Space::User))
            .ok_or(HostError::NoSpace {
                space: Space::User,
                purpose: "(nor a project space) to keep the lockfile in",
            })?;
        let path = root
            .ai_dir
            .join(LOCKFILES_DIR)
            .join(file_name(chain.tool()));
        let text = serde_json::to_string_pretty(&document(chain)).expect("JSON") + "\n";
        write_atomically(spaces, &path, text.as_bytes(), true)?;
        Ok(path)
    }

    /// Removes the lockfiles of tool `id` at `version` from the project and
    /// user spaces (signing a tool does, as its pin is then stale).
    pub(crate) fn remove_locks(&self, spaces: &Spaces, id: &str, version: &str) -> Vec<PathBuf> {
        [Space::Project, Space::User]
            .iter()
            .filter_map(|space| spaces.root(*space))
            .map(|root| {
                root.ai_dir
                    .join(LOCKFILES_DIR)
                    .join(format!("{id}@{version}.lock.json"))
            })
            .filter(|path| std::fs::remove_file(path).is_ok())
            .collect()
    }

    /// Builds, verifies and pins the chain of `tool_id` (replacing its
    /// lockfile): what `rye lock` does.
    pub fn lock(&self, project: Option<&Path>, tool_id: &str) -> Result<PathBuf, HostError> {
        let chain = self.chain(project, tool_id)?;
        let spaces = self.spaces(project);
        self.write_lock(&spaces, &chain)
    }

    /// The tool ids with a lockfile in the project space (or the user
    /// space without a project).
    pub fn locked_tools(&self, project: Option<&Path>) -> Result<Vec<String>, HostError> {
        let spaces = self.spaces(project);
        let Some(root) = spaces
            .root(Space::Project)
            .or_else(|| spaces.root(Space::User))
        else {
            return Ok(Vec::new());
        };
        let dir = root.ai_dir.join(LOCKFILES_DIR);
        let mut found = Vec::new();
        collect_locks(&dir, &dir, &mut found)?;
        found.sort();
        Ok(found)
    }
}

fn collect_locks(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), HostError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_locks(base, &path, out)?;
        } else if let Some(relative) = path
            .strip_prefix(base)
            .ok()
            .and_then(|p| p.to_str())
            .and_then(|p| p.strip_suffix(".lock.json"))
            && let Some((id, _version)) = relative.rsplit_once('@')
        {
            out.push(id.replace(std::path::MAIN_SEPARATOR, "/"));
        }
    }
    Ok(())
}

fn is_lockfile(doc: &Value) -> bool {
    doc["lockfile_version"] == 1
        && doc["generated_at"].is_string()
        && [
            "tool_id",
            "version",
            "integrity",
            "provider_id",
            "provider_version",
        ]
        .iter()
        .all(|k| doc["root"].get(*k).is_some())
        && doc["resolved_chain"].is_array()
}

/// Writes `path` whole or not at all, following no link on the way,
/// where the gate lets rye write (inside a folder of a project or user
/// space's `.ai/`). `replace`: an existing file is replaced (keeping its
/// permissions); otherwise it is [`HostError::Exists`].
pub(crate) fn write_atomically(
    spaces: &Spaces,
    path: &Path,
    bytes: &[u8],
    replace: bool,
) -> Result<(), HostError> {
    let plain = |p: &Path| rye_gate::lexical(p).unwrap_or_else(|| p.to_owned());
    let target = plain(path);
    let dirs: Vec<(Space, PathBuf)> = spaces
        .roots()
        .iter()
        .map(|r| (r.space, plain(&r.ai_dir)))
        .collect();
    let roots: Vec<rye_gate::WriteRoot<'_>> = dirs
        .iter()
        .map(|(space, ai_dir)| rye_gate::WriteRoot {
            space: *space,
            ai_dir,
        })
        .collect();
    let space = rye_gate::may_write(&target, &roots)?;
    let (_, space_dir) = dirs
        .iter()
        .find(|(s, _)| *s == space)
        .expect("the gate answers one of the roots");
    rye_space::write_within(space_dir, &target, bytes, replace).map_err(|e| match e {
        rye_space::SpaceError::Io { path, source } => HostError::Io { path, source },
        rye_space::SpaceError::Exists { path } => HostError::Exists { path },
        other => other.into(),
    })
}
