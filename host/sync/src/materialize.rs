//! A manifest made into files again: the workspace a node runs in, and
//! what `pull` writes.
//!
//! Every path is checked before anything is written: a path that is
//! absolute, empty, has an empty, `.` or `..` part, a backslash or a NUL
//! is refused with the path named. Writes then go through a capability
//! handle on the target folder (`cap-std`): no write can land outside it,
//! whatever links the folder holds. A workspace is first cleared of
//! anything the manifest does not name, links included (removed, never
//! followed). Each file is written to a temporary name and renamed into
//! place.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use rye_cas::{Cas, ContentHash, Storage};
use serde_json::Value;

use crate::SyncError;
use crate::manifest::{Passed, add_folders_above, entry_of};
use crate::stamps::{Stamp, Stamps};

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

/// What [`sync`] did to a folder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Synced {
    /// Files already holding what the manifest says.
    pub kept: usize,
    pub written: usize,
    /// Files, links and folders removed.
    pub removed: usize,
}

/// Makes the folder `target` (made if missing) hold exactly the files
/// `manifest` names and the folders they are in. A file that `known`
/// vouches for, or whose bytes are read and found right, is left alone;
/// the rest are written; everything else there (what an earlier run
/// left, links, anything not a plain file or folder) is removed, never
/// followed. Every path of the manifest is checked before anything is
/// touched. What it did, and the stamps of the files it now holds.
///
/// A folder kept from run to run is brought to the next run's snapshot
/// by writing what differs, where checking out afresh writes every file.
pub async fn sync<S: Storage>(
    cas: &Cas<S>,
    manifest: &Value,
    target: &Path,
    known: Option<&Stamps>,
) -> Result<(Synced, Stamps), SyncError> {
    let mut stamps = Stamps::begin();
    let (wanted, folders) = wanted(manifest)?;
    std::fs::create_dir_all(target).map_err(|e| SyncError::io(target, e))?;
    let mut done = Synced::default();
    let mut present = BTreeMap::new();
    prune(
        target,
        "",
        &wanted,
        &folders,
        &mut present,
        &mut done.removed,
    )?;
    let dir =
        Dir::open_ambient_dir(target, ambient_authority()).map_err(|e| SyncError::io(target, e))?;
    for (path, (entry, item)) in &wanted {
        if let Some(meta) = present.get(*path) {
            if let Some(stamp) = known
                .and_then(|k| k.known(path, meta))
                .filter(|s| s.entry == *entry)
            {
                stamps.insert((*path).to_owned(), stamp.clone());
                done.kept += 1;
                continue;
            }
            let bytes = dir.read(path).map_err(|e| failed(target, path, e))?;
            if entry_of(path, &bytes, *item).is_some_and(|h| h.hex() == *entry) {
                stamps.insert((*path).to_owned(), Stamp::of(meta, (*entry).to_owned()));
                done.kept += 1;
                continue;
            }
        }
        let stamp = write_entry(cas, &dir, target, path, entry, *item).await?;
        stamps.insert((*path).to_owned(), stamp);
        done.written += 1;
    }
    Ok((done, stamps))
}

/// [`sync`] for a folder known to hold exactly the items of the manifest
/// `holds` (the files stamped in `stamps`) and nothing
/// else, as [`clear_to`] leaves one: only what differs is touched, and
/// the folder is not walked. The paths it holds were checked when they
/// were written, so only those to be written are checked now (against
/// every path of `manifest`), all before anything is touched. What it
/// did, and the stamps of the files it now holds (those kept keep
/// theirs).
pub async fn sync_known<S: Storage>(
    cas: &Cas<S>,
    manifest: &Value,
    target: &Path,
    holds: &Value,
    mut stamps: Stamps,
) -> Result<(Synced, Stamps), SyncError> {
    let wanted = Sorted::of(manifest)?;
    let mut done = Synced::default();
    let (gone, written) = differences(&Sorted::of_items(holds), &wanted, &mut done.kept);
    for (path, entry, _) in &written {
        wanted.check(path, entry)?;
    }
    let dir =
        Dir::open_ambient_dir(target, ambient_authority()).map_err(|e| SyncError::io(target, e))?;
    // Removals first: a file in the way of a folder goes before the
    // folder is made, and a folder emptied goes before a file takes its
    // name.
    for path in gone {
        match dir.remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(target, path, e)),
        }
        stamps.remove(path);
        done.removed += 1;
        let mut at = path;
        while let Some((parent, _)) = at.rsplit_once('/') {
            if wanted.holds_under(parent) || dir.remove_dir(parent).is_err() {
                break;
            }
            at = parent;
        }
    }
    for (path, entry, item) in written {
        let stamp = write_entry(cas, &dir, target, path, entry, item).await?;
        stamps.insert(path.to_owned(), stamp);
        done.written += 1;
    }
    Ok((done, stamps))
}

/// A manifest's files sorted by path: path, entry, whether an item.
struct Sorted<'a>(Vec<(&'a str, &'a str, bool)>);

impl<'a> Sorted<'a> {
    /// Every file `manifest` names, refusing a path named twice.
    fn of(manifest: &'a Value) -> Result<Sorted<'a>, SyncError> {
        let files = Self::from(manifest, &[("items", true), ("files", false)]);
        if let Some(twice) = files.0.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(twice_named(twice[0].0));
        }
        Ok(files)
    }

    /// The items `manifest` names (a manifest a folder was found to hold).
    fn of_items(manifest: &'a Value) -> Sorted<'a> {
        Self::from(manifest, &[("items", true)])
    }

    /// The files of `sections` (each with whether it holds items).
    fn from(manifest: &'a Value, sections: &[(&str, bool)]) -> Sorted<'a> {
        let mut files = Vec::new();
        for &(section, item) in sections {
            let map = manifest.get(section).and_then(Value::as_object);
            files.extend(
                map.into_iter()
                    .flatten()
                    .map(|(path, entry)| (path.as_str(), entry.as_str().unwrap_or_default(), item)),
            );
        }
        files.sort_unstable_by(|a, b| a.0.cmp(b.0));
        Sorted(files)
    }

    fn names(&self, path: &str) -> bool {
        self.0.binary_search_by(|(p, ..)| (*p).cmp(path)).is_ok()
    }

    /// Whether a file named lies inside `folder`.
    fn holds_under(&self, folder: &str) -> bool {
        let prefix = format!("{folder}/");
        let at = self.0.partition_point(|(p, ..)| *p < prefix.as_str());
        self.0
            .get(at)
            .is_some_and(|(p, ..)| p.starts_with(prefix.as_str()))
    }

    /// Checks one of the files, `path` with `entry`, as [`wanted`] checks
    /// them all: a path that stays inside, a hash, and neither a folder
    /// above it nor itself also a folder of the manifest's files.
    fn check(&self, path: &str, entry: &str) -> Result<(), SyncError> {
        checked(path, Some(entry))?;
        let mut at = path;
        while let Some((parent, _)) = at.rsplit_once('/') {
            if self.names(parent) {
                return Err(both(parent));
            }
            at = parent;
        }
        if self.holds_under(path) {
            return Err(both(path));
        }
        Ok(())
    }
}

/// `entry`, the entry of `path`, if `path` stays inside the folder and
/// `entry` is a hash.
fn checked<'e>(path: &str, entry: Option<&'e str>) -> Result<&'e str, SyncError> {
    if let Some(why) = unsafe_path(path) {
        return Err(SyncError::Manifest(format!(
            "the manifest names {path:?}, which is not written: {why}"
        )));
    }
    entry
        .filter(|entry| entry.parse::<ContentHash>().is_ok())
        .ok_or_else(|| SyncError::Manifest(format!("{path}: no hash")))
}

fn twice_named(path: &str) -> SyncError {
    SyncError::Manifest(format!("the manifest names {path:?} twice"))
}

fn both(path: &str) -> SyncError {
    SyncError::Manifest(format!(
        "the manifest names {path:?} as a file and as a folder"
    ))
}

/// What of the items a folder holds (`holds`) goes and what of `wanted`
/// is written (path, entry, whether an item), in one pass over both
/// sorted by path; the files that stay are counted in `kept`.
fn differences<'a>(
    holds: &Sorted<'a>,
    wanted: &Sorted<'a>,
    kept: &mut usize,
) -> (Vec<&'a str>, Vec<(&'a str, &'a str, bool)>) {
    use std::cmp::Ordering;
    let mut gone: Vec<&str> = Vec::new();
    let mut written: Vec<(&str, &str, bool)> = Vec::new();
    let mut held = holds.0.iter().peekable();
    let mut want = wanted.0.iter().peekable();
    loop {
        let order = match (held.peek(), want.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((h, ..)), Some((w, ..))) => h.cmp(w),
        };
        match order {
            Ordering::Less => gone.push(held.next().expect("peeked").0),
            Ordering::Greater => written.push(*want.next().expect("peeked")),
            Ordering::Equal => {
                let (_, had, _) = held.next().expect("peeked");
                let wanted = want.next().expect("peeked");
                if *had != wanted.1 {
                    written.push(*wanted);
                } else {
                    *kept += 1;
                }
            }
        }
    }
    (gone, written)
}

/// Clears the folder `root`, whose `manifest` was just built from
/// it (nothing having changed it since), of everything that manifest
/// does not name: what the build passed over (`passed`), folders left holding none
/// of its files, and everything beside `.ai/`'s item folders; it then
/// holds exactly the manifest's items, as [`sync_known`] needs. `false`,
/// with nothing cleared or promised, when the manifest names files
/// outside `.ai/` (their policy may leave out what the build never
/// looked at). The folders `spare` names (root-relative, outside the
/// item folders) stay as they are, and so do the folders above them.
pub fn clear_to(
    root: &Path,
    manifest: &Value,
    passed: &Passed,
    spare: &[&str],
) -> Result<bool, SyncError> {
    if manifest
        .get("files")
        .and_then(Value::as_object)
        .is_some_and(|files| !files.is_empty())
    {
        return Ok(false);
    }
    let entered: BTreeSet<&str> = passed.folders.iter().map(String::as_str).collect();
    for (folder, keep) in [(root.to_owned(), ".ai"), (root.join(".ai"), "")] {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(SyncError::io(&folder, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| SyncError::io(&folder, e))?;
            let name = entry.file_name();
            let stays = match name.to_str() {
                Some(name) if keep.is_empty() => entered.contains(format!(".ai/{name}").as_str()),
                Some(name) => name == keep && entry.file_type().is_ok_and(|t| t.is_dir()),
                None => false,
            };
            if !stays {
                let inside = match name.to_str() {
                    Some(name) if keep.is_empty() => format!(".ai/{name}"),
                    Some(name) => name.to_owned(),
                    None => String::new(),
                };
                remove_but(&entry.path(), &inside, spare)?;
            }
        }
    }
    for path in &passed.untaken {
        gone(path)?;
    }
    let mut needed = BTreeSet::new();
    let items = manifest.get("items").and_then(Value::as_object);
    for path in items.into_iter().flat_map(|m| m.keys()) {
        add_folders_above(path, &mut needed);
    }
    for folder in &passed.folders {
        if !needed.contains(folder.as_str()) {
            gone(&root.join(folder))?;
        }
    }
    Ok(true)
}

/// Removes `path` (a file, link or folder; nothing when it is not
/// there).
fn gone(path: &Path) -> Result<(), SyncError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(SyncError::io(path, e)),
    };
    let removed = if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(SyncError::io(path, e)),
        _ => Ok(()),
    }
}

/// Removes `path`, which is `relative` under some root, but for the
/// folders of `spare` (relative to the same root): a folder above one
/// of them keeps it and loses everything else. A link is removed, never
/// entered, even where a spared folder would be.
pub fn remove_but(path: &Path, relative: &str, spare: &[&str]) -> Result<(), SyncError> {
    let is_folder = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    if is_folder && spare.contains(&relative) {
        return Ok(());
    }
    let above = |s: &&str| {
        s.strip_prefix(relative)
            .is_some_and(|rest| rest.starts_with('/'))
    };
    if relative.is_empty() || !is_folder || !spare.iter().any(above) {
        return gone(path);
    }
    let entries = std::fs::read_dir(path).map_err(|e| SyncError::io(path, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| SyncError::io(path, e))?;
        match entry.file_name().to_str() {
            Some(name) => remove_but(&entry.path(), &format!("{relative}/{name}"), spare)?,
            None => gone(&entry.path())?,
        }
    }
    Ok(())
}

fn failed(target: &Path, path: &str, e: std::io::Error) -> SyncError {
    SyncError::Manifest(format!(
        "{path} could not be written inside {}: {e}",
        target.display()
    ))
}

/// Writes the file of manifest entry `entry` (an item's source, or a
/// blob) at `path` inside `dir` (the folder `target`); its stamp.
async fn write_entry<S: Storage>(
    cas: &Cas<S>,
    dir: &Dir,
    target: &Path,
    path: &str,
    entry: &str,
    item: bool,
) -> Result<Stamp, SyncError> {
    let mut blob: ContentHash = entry
        .parse()
        .map_err(|_| SyncError::Manifest(format!("{path}: no hash")))?;
    if item {
        let source = cas.get_object(&blob).await?.ok_or_else(|| {
            SyncError::Manifest(format!("{path}: item_source {entry} is missing"))
        })?;
        blob = source
            .get("content_blob_hash")
            .and_then(Value::as_str)
            .and_then(|h| h.parse().ok())
            .ok_or_else(|| SyncError::Manifest(format!("{path}: no content blob")))?;
    }
    let bytes = cas
        .get_blob(&blob)
        .await?
        .ok_or_else(|| SyncError::Manifest(format!("{path}: blob {} is missing", blob.hex())))?;
    write_within(dir, path, &bytes).map_err(|e| failed(target, path, e))?;
    let written = target.join(path);
    let meta = std::fs::symlink_metadata(&written).map_err(|e| SyncError::io(&written, e))?;
    Ok(Stamp::of(&meta, entry.to_owned()))
}

type Wanted<'a> = BTreeMap<&'a str, (&'a str, bool)>;

/// The files `manifest` names (path to entry, and whether it is an
/// item) and the folders they are in, every path checked.
fn wanted(manifest: &Value) -> Result<(Wanted<'_>, BTreeSet<&str>), SyncError> {
    let mut wanted: Wanted = BTreeMap::new();
    for (section, item) in [("items", true), ("files", false)] {
        let Some(map) = manifest.get(section).and_then(Value::as_object) else {
            continue;
        };
        for (path, hash) in map {
            let hash = checked(path, hash.as_str())?;
            if wanted.insert(path.as_str(), (hash, item)).is_some() {
                return Err(twice_named(path));
            }
        }
    }
    let mut folders = BTreeSet::new();
    for path in wanted.keys() {
        add_folders_above(path, &mut folders);
    }
    if let Some(path) = wanted.keys().find(|p| folders.contains(*p)) {
        return Err(both(path));
    }
    Ok((wanted, folders))
}

/// Removes from the folder `rel` under `root` whatever is neither a
/// wanted file nor a folder holding one; the plain files that are wanted,
/// with their metadata, go to `present`.
fn prune(
    root: &Path,
    rel: &str,
    wanted: &Wanted<'_>,
    folders: &BTreeSet<&str>,
    present: &mut BTreeMap<String, std::fs::Metadata>,
    removed: &mut usize,
) -> Result<(), SyncError> {
    let here = if rel.is_empty() {
        root.to_owned()
    } else {
        root.join(rel)
    };
    let entries = std::fs::read_dir(&here).map_err(|e| SyncError::io(&here, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| SyncError::io(&here, e))?;
        let path = entry.path();
        // The entry itself, never what a link points at.
        let meta = entry.metadata().map_err(|e| SyncError::io(&path, e))?;
        let child = entry.file_name().to_str().map(|name| {
            if rel.is_empty() {
                name.to_owned()
            } else {
                format!("{rel}/{name}")
            }
        });
        match child {
            Some(child) if meta.is_dir() && folders.contains(child.as_str()) => {
                prune(root, &child, wanted, folders, present, removed)?;
            }
            Some(child) if meta.is_file() && wanted.contains_key(child.as_str()) => {
                present.insert(child, meta);
            }
            _ => {
                let gone = if meta.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                gone.map_err(|e| SyncError::io(&path, e))?;
                *removed += 1;
            }
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

#[cfg(test)]
mod tests;
