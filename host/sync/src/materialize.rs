//! A manifest made into files again: what a node runs in, and what `pull`
//! writes.
//!
//! Every path is checked before anything is written: a path that is
//! absolute, empty, has an empty, `.` or `..` part, a backslash or a NUL
//! is refused with the path named. Writes then go through a capability
//! handle on the target folder (`cap-std`): no write can land outside it,
//! whatever links the folder holds, so a link planted in a cached
//! snapshot is refused rather than followed. Each file is written to a
//! temporary name and renamed into place.
//!
//! A snapshot is checked out once into `<cache>/snapshots/<hash>/`: built
//! in a staging folder beside it, marked complete, then renamed into
//! place, so a crash never leaves a half-built snapshot where a run would
//! use it.

use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use rye_cas::{Cas, ContentHash, Storage};
use serde_json::Value;

use crate::SyncError;

/// The marker of a complete checkout, holding the snapshot's hash.
pub const COMPLETE_MARKER: &str = ".snapshot_complete";

/// Why `path` may not be written, if it may not.
pub fn unsafe_path(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("it is empty");
    }
    if path.starts_with('/') {
        return Some("it is absolute");
    }
    if path.contains('\\') || path.contains('\0') {
        return Some("it holds a backslash or a NUL");
    }
    for part in path.split('/') {
        match part {
            "" => return Some("it has an empty part"),
            "." | ".." => return Some("it has a . or .. part"),
            _ => {}
        }
    }
    None
}

/// The bytes each path of `manifest` holds: an item's through its
/// `item_source`, a file's blob directly.
async fn contents<S: Storage>(
    cas: &Cas<S>,
    manifest: &Value,
) -> Result<Vec<(String, Vec<u8>)>, SyncError> {
    let mut out = Vec::new();
    for (section, via_source) in [("items", true), ("files", false)] {
        let Some(map) = manifest.get(section).and_then(Value::as_object) else {
            continue;
        };
        for (path, hash) in map {
            if let Some(why) = unsafe_path(path) {
                return Err(SyncError::Manifest(format!(
                    "the manifest names {path:?}, which is not written: {why}"
                )));
            }
            let parse = |value: Option<&Value>| -> Result<ContentHash, SyncError> {
                value
                    .and_then(Value::as_str)
                    .and_then(|h| h.parse().ok())
                    .ok_or_else(|| SyncError::Manifest(format!("{path}: no hash")))
            };
            let mut blob = parse(Some(hash))?;
            if via_source {
                let source = cas.get_object(&blob).await?.ok_or_else(|| {
                    SyncError::Manifest(format!("{path}: item_source {} is missing", blob.hex()))
                })?;
                blob = parse(source.get("content_blob_hash"))?;
            }
            let bytes = cas.get_blob(&blob).await?.ok_or_else(|| {
                SyncError::Manifest(format!("{path}: blob {} is missing", blob.hex()))
            })?;
            out.push((path.clone(), bytes));
        }
    }
    Ok(out)
}

/// Writes the files `manifest` names into the folder `target` (made if
/// missing). Nothing is written unless every path is safe and every
/// object and blob present.
pub async fn materialize<S: Storage>(
    cas: &Cas<S>,
    manifest: &Value,
    target: &Path,
) -> Result<usize, SyncError> {
    let files = contents(cas, manifest).await?;
    std::fs::create_dir_all(target).map_err(|e| SyncError::io(target, e))?;
    let dir =
        Dir::open_ambient_dir(target, ambient_authority()).map_err(|e| SyncError::io(target, e))?;
    for (path, bytes) in &files {
        write_within(&dir, path, bytes).map_err(|e| {
            SyncError::Manifest(format!(
                "{path} could not be written inside {}: {e}",
                target.display()
            ))
        })?;
    }
    Ok(files.len())
}

/// Writes `writes` and removes `removals` inside the folder `target`,
/// every path checked first: nothing is touched unless all are safe, and
/// no write or removal can reach outside the folder.
pub fn apply(
    target: &Path,
    writes: &[(String, Vec<u8>)],
    removals: &[String],
) -> Result<(), SyncError> {
    for path in writes.iter().map(|(p, _)| p).chain(removals) {
        if let Some(why) = unsafe_path(path) {
            return Err(SyncError::Manifest(format!(
                "{path:?} is not written: {why}"
            )));
        }
    }
    let dir =
        Dir::open_ambient_dir(target, ambient_authority()).map_err(|e| SyncError::io(target, e))?;
    let failed = |path: &str, e: std::io::Error| {
        SyncError::Manifest(format!(
            "{path} could not be changed inside {}: {e}",
            target.display()
        ))
    };
    for (path, bytes) in writes {
        write_within(&dir, path, bytes).map_err(|e| failed(path, e))?;
    }
    for path in removals {
        match dir.remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(path, e)),
        }
    }
    Ok(())
}

fn write_within(dir: &Dir, path: &str, bytes: &[u8]) -> std::io::Result<()> {
    let (parent, name) = match path.rsplit_once('/') {
        Some((parent, name)) => (Some(parent), name),
        None => (None, path),
    };
    if let Some(parent) = parent {
        dir.create_dir_all(parent)?;
    }
    let temp = match parent {
        Some(parent) => format!("{parent}/.{name}.tmp.{}", std::process::id()),
        None => format!(".{name}.tmp.{}", std::process::id()),
    };
    dir.write(&temp, bytes)?;
    dir.rename(&temp, dir, path)
}

/// The folder of snapshot `snapshot` (a `project_snapshot` object's hash)
/// under `cache`, checked out if it is not yet: its project manifest's
/// files in `project/`, its user manifest's (if any) in `user/`.
pub async fn checkout<S: Storage>(
    cas: &Cas<S>,
    snapshot: &ContentHash,
    cache: &Path,
) -> Result<PathBuf, SyncError> {
    let snapshots = cache.join("snapshots");
    let done = snapshots.join(snapshot.hex());
    let marked = |folder: &Path| {
        std::fs::read_to_string(folder.join(COMPLETE_MARKER))
            .is_ok_and(|text| text.trim() == snapshot.hex())
    };
    if marked(&done) {
        return Ok(done);
    }
    let object = cas.get_object(snapshot).await?.ok_or_else(|| {
        SyncError::Manifest(format!("snapshot {} is not in the store", snapshot.hex()))
    })?;
    if object.get("kind").and_then(Value::as_str) != Some("project_snapshot") {
        return Err(SyncError::Manifest(format!(
            "{} is no project_snapshot",
            snapshot.hex()
        )));
    }
    let staging = snapshots.join(format!(
        ".staging-{}-{:012x}",
        snapshot.hex(),
        rand_suffix()
    ));
    let built = async {
        for (key, folder) in [
            ("project_manifest_hash", "project"),
            ("user_manifest_hash", "user"),
        ] {
            let Some(hash) = object.get(key).and_then(Value::as_str) else {
                continue;
            };
            let hash: ContentHash = hash.parse().map_err(|_| {
                SyncError::Manifest(format!("{key} of {} is no hash", snapshot.hex()))
            })?;
            let manifest = cas.get_object(&hash).await?.ok_or_else(|| {
                SyncError::Manifest(format!("manifest {} is not in the store", hash.hex()))
            })?;
            materialize(cas, &manifest, &staging.join(folder)).await?;
        }
        std::fs::create_dir_all(staging.join("project")).map_err(|e| SyncError::io(&staging, e))?;
        std::fs::write(staging.join(COMPLETE_MARKER), snapshot.hex())
            .map_err(|e| SyncError::io(&staging, e))
    };
    if let Err(e) = built.await {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(&staging, &done) {
        let _ = std::fs::remove_dir_all(&staging);
        // Another checkout of the same snapshot got there first.
        if marked(&done) {
            return Ok(done);
        }
        return Err(SyncError::io(&done, e));
    }
    Ok(done)
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish() & 0xffff_ffff_ffff
}

#[cfg(test)]
mod tests;
