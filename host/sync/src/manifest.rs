//! A space's content as a `source_manifest`: every file under its item
//! folders (`.ai/directives`, `tools`, `knowledge`, `config`) as an
//! `item_source` object (the bytes as a blob, their hash, and the fields
//! of the signature line, when it has one), and, for a project, the files
//! outside `.ai/` its policy carries, each as a blob. Paths are relative
//! to the space's root, `/`-separated.
//!
//! The walk never follows a symbolic link (a link is left out and named in
//! what the build skipped), takes nothing the policy excludes, and leaves
//! out names that are not UTF-8: a manifest names only plain files inside
//! the space.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::Metadata;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use rye_cas::{Cas, ContentHash, Storage, object};
use rye_space::ItemKind;
use serde_json::{Map, Value, json};

use crate::SyncError;
use crate::policy::Policy;
use crate::stamps::{Stamp, Stamps};

/// The item folders under `.ai/` and the kind of item each holds.
pub const ITEM_FOLDERS: [(&str, ItemKind); 4] = [
    ("directives", ItemKind::Directive),
    ("tools", ItemKind::Tool),
    ("knowledge", ItemKind::Knowledge),
    ("config", ItemKind::Config),
];

/// Which space a manifest describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceKind {
    Project,
    User,
}

impl SpaceKind {
    pub fn name(self) -> &'static str {
        match self {
            SpaceKind::Project => "project",
            SpaceKind::User => "user",
        }
    }
}

/// A built manifest.
#[derive(Debug, Clone)]
pub struct Built {
    pub hash: ContentHash,
    pub manifest: Value,
    /// Paths left out, each with why.
    pub skipped: Vec<(String, &'static str)>,
    /// What the walk passed over.
    pub passed: Passed,
}

/// What a build passed over in a space's item folders: every entry it
/// did not take (links, odd files, excluded names, names that are not
/// UTF-8) and the folders it entered. With them a folder meant to hold
/// exactly a manifest's files is cleared of the rest without being
/// walked again ([`crate::materialize::clear_to`]).
#[derive(Debug, Clone, Default)]
pub struct Passed {
    pub untaken: Vec<PathBuf>,
    /// Each folder entered, relative to the root (`.ai/tools` and below).
    pub folders: Vec<String>,
}

/// Builds and stores the manifest of the space rooted at `root` (the
/// folder holding `.ai/`), storing every blob and `item_source` in `cas`.
pub async fn build<S: Storage>(
    cas: &Cas<S>,
    root: &Path,
    space: SpaceKind,
    policy: &Policy,
) -> Result<Built, SyncError> {
    Ok(build_stamped(cas, root, space, policy, None).await?.0)
}

/// [`build`], reading only the files `known` does not vouch for (their
/// entries, and the objects those name, are taken to be in `cas`); with
/// the stamps of every file it names, for the next build.
pub async fn build_stamped<S: Storage>(
    cas: &Cas<S>,
    root: &Path,
    space: SpaceKind,
    policy: &Policy,
    known: Option<&Stamps>,
) -> Result<(Built, Stamps), SyncError> {
    let mut stamps = Stamps::begin();
    let mut found = Found::default();
    // A space whose `.ai/`, or one of its item folders, is a link is not
    // walked through the link: what it points at is not the space's.
    let linked = |rel: &str| {
        std::fs::symlink_metadata(root.join(rel)).is_ok_and(|m| m.file_type().is_symlink())
    };
    if linked(".ai") {
        found.skipped.push((".ai".into(), "a symbolic link"));
        found.passed.untaken.push(root.join(".ai"));
    }
    for (folder, _) in ITEM_FOLDERS {
        if policy.skip_dirs.contains(folder) {
            continue;
        }
        let rel = format!(".ai/{folder}");
        if linked(".ai") {
            break;
        }
        if linked(&rel) {
            found.passed.untaken.push(root.join(&rel));
            found.skipped.push((rel, "a symbolic link"));
            continue;
        }
        walk(&root.join(&rel), &rel, policy, &mut found)?;
    }
    found.stat_listed()?;
    let mut items = BTreeMap::new();
    for (rel, meta) in std::mem::take(&mut found.files) {
        let entry = item_entry(cas, root, &rel, &meta, known).await?;
        stamps.insert(rel.clone(), Stamp::of(&meta, entry.clone()));
        items.insert(rel, Value::from(entry));
    }
    let mut files = BTreeMap::new();
    if space == SpaceKind::Project {
        walk_files(root, "", policy, &mut found)?;
        found.stat_listed()?;
        for (rel, meta) in std::mem::take(&mut found.files) {
            let entry = match known.and_then(|k| k.known(&rel, &meta)) {
                Some(stamp) => stamp.entry.clone(),
                None => {
                    let path = root.join(&rel);
                    let bytes = std::fs::read(&path).map_err(|e| SyncError::io(&path, e))?;
                    cas.put_blob(&bytes).await?.hex()
                }
            };
            stamps.insert(rel.clone(), Stamp::of(&meta, entry.clone()));
            files.insert(rel, Value::from(entry));
        }
    }
    let mut fields = Map::new();
    fields.insert("space".into(), json!(space.name()));
    fields.insert("items".into(), Value::Object(items.into_iter().collect()));
    fields.insert("files".into(), Value::Object(files.into_iter().collect()));
    let manifest = object("source_manifest", fields);
    let hash = cas.put_object(&manifest).await?;
    stamps.make_up(hash.hex());
    let built = Built {
        hash,
        manifest,
        skipped: found.skipped,
        passed: found.passed,
    };
    Ok((built, stamps))
}

/// Adds each folder above `path` (`a/b` and `a` for `a/b/c`) to
/// `folders`, stopping at the first already there.
pub fn add_folders_above<'a>(path: &'a str, folders: &mut BTreeSet<&'a str>) {
    let mut at = path;
    while let Some((parent, _)) = at.rsplit_once('/') {
        if !folders.insert(parent) {
            break;
        }
        at = parent;
    }
}

/// The manifest entry of the item file at `rel` (with metadata `meta`):
/// what its stamp in `known` says when it vouches for the file, else its
/// `item_source`, stored with its blob.
async fn item_entry<S: Storage>(
    cas: &Cas<S>,
    root: &Path,
    rel: &str,
    meta: &Metadata,
    known: Option<&Stamps>,
) -> Result<String, SyncError> {
    if let Some(stamp) = known.and_then(|k| k.known(rel, meta)) {
        return Ok(stamp.entry.clone());
    }
    let path = root.join(rel);
    let bytes = std::fs::read(&path).map_err(|e| SyncError::io(&path, e))?;
    let source = item_source(rel, &bytes)
        .ok_or_else(|| SyncError::Manifest(format!("{rel} is no item path")))?;
    cas.put_blob(&bytes).await?;
    Ok(cas.put_object(&source).await?.hex())
}

/// [`build_stamped`] for a project space last built as the manifest
/// `base` (its items only), every file of which `known` stamps (brought
/// to the new build, which they then make up), when
/// nothing but the paths `touched` (and what lies under them) can have
/// changed since: only those are looked at. What `base` holds elsewhere
/// is taken as it is, so the caller must know that nothing else changed
/// (a watch of the space's folders says so); a later full build can
/// confirm it.
///
/// `None` when a touched path is one this does not patch: the space's
/// root or `.ai/` itself, anything outside `.ai/`, the manifest policy
/// under `.ai/config/cas/`, a link, or anything but a plain file or
/// folder. Paths inside `.ai/` outside its item folders (a run's own
/// state) are no manifest's and change nothing.
pub async fn build_patched<S: Storage>(
    cas: &Cas<S>,
    root: &Path,
    policy: &Policy,
    base: &Value,
    known: &mut Stamps,
    touched: &BTreeSet<String>,
) -> Result<Option<Built>, SyncError> {
    if base
        .get("files")
        .and_then(Value::as_object)
        .is_some_and(|f| !f.is_empty())
    {
        return Ok(None);
    }
    // The touched paths that can hold items, none under another.
    let mut looked: Vec<&str> = Vec::new();
    for path in touched {
        let Some(rest) = path.strip_prefix(".ai/") else {
            return Ok(None);
        };
        let top = rest.split('/').next().unwrap_or_default();
        if top.is_empty() {
            return Ok(None);
        }
        if !ITEM_FOLDERS.iter().any(|(folder, _)| *folder == top) || policy.skip_dirs.contains(top)
        {
            continue;
        }
        if path == ".ai/config/cas" || path.starts_with(".ai/config/cas/") {
            return Ok(None);
        }
        let under = |p: &str| path == p || path.starts_with(&format!("{p}/"));
        if !looked.iter().any(|p| under(p)) {
            looked.push(path);
        }
    }
    let covered = |rel: &str| {
        looked.iter().any(|p| {
            rel == *p || (rel.starts_with(p) && rel.as_bytes().get(p.len()) == Some(&b'/'))
        })
    };
    let mut found = Found::default();
    for path in &looked {
        let at = root.join(path);
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(SyncError::io(&at, e)),
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        if meta.is_dir() {
            walk(&at, path, policy, &mut found)?;
        } else if meta.is_file() && !policy.excluded_name(name) {
            found.files.insert((*path).to_owned(), meta);
        } else {
            return Ok(None);
        }
    }
    found.stat_listed()?;
    let mut items: Vec<(String, Value)> = Vec::new();
    let held = base.get("items").and_then(Value::as_object);
    for (rel, entry) in held.into_iter().flatten() {
        if covered(rel) {
            known.remove(rel);
        } else {
            items.push((rel.clone(), entry.clone()));
        }
    }
    // What was touched is read whatever its stamp says.
    for (rel, meta) in std::mem::take(&mut found.files) {
        let entry = item_entry(cas, root, &rel, &meta, None).await?;
        known.insert(rel.clone(), Stamp::of(&meta, entry.clone()));
        items.push((rel, Value::from(entry)));
    }
    items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut above = BTreeSet::new();
    for (rel, _) in &items {
        add_folders_above(rel, &mut above);
    }
    let mut folders: BTreeSet<String> = found.passed.folders.into_iter().collect();
    folders.extend(above.into_iter().map(str::to_owned));
    let mut fields = Map::new();
    fields.insert("space".into(), json!(SpaceKind::Project.name()));
    fields.insert("items".into(), Value::Object(items.into_iter().collect()));
    fields.insert("files".into(), Value::Object(Map::new()));
    let manifest = object("source_manifest", fields);
    let hash = cas.put_object(&manifest).await?;
    known.make_up(hash.hex());
    Ok(Some(Built {
        hash,
        manifest,
        skipped: found.skipped,
        passed: Passed {
            untaken: found.passed.untaken,
            folders: folders.into_iter().collect(),
        },
    }))
}

#[derive(Default)]
struct Found {
    /// Relative path to the file's metadata.
    files: BTreeMap<String, Metadata>,
    /// Files listed as plain and not yet stat'ed: relative path, entry,
    /// and whether one found to be no plain file after all is among what
    /// the walk passed over.
    listed: Vec<(String, std::fs::DirEntry, bool)>,
    skipped: Vec<(String, &'static str)>,
    passed: Passed,
}

/// Files listed per thread that stats them, at least.
const STAT_SHARE: usize = 2048;

impl Found {
    /// Stats each listed file (the entry itself, never what a link
    /// points at: relative to the folder read, before the file's bytes
    /// are), on several threads when there are thousands: stat is most
    /// of a walk's time, and the kernel answers them side by side. One
    /// that is no longer a plain file is named in `skipped`.
    fn stat_listed(&mut self) -> Result<(), SyncError> {
        let listed = std::mem::take(&mut self.listed);
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(4)
            .min(listed.len() / STAT_SHARE)
            .max(1);
        let stat = |part: &[(String, std::fs::DirEntry, bool)]| {
            part.iter()
                .map(|(_, entry, _)| entry.metadata())
                .collect::<Vec<_>>()
        };
        let metas: Vec<std::io::Result<Metadata>> = if threads == 1 {
            stat(&listed)
        } else {
            std::thread::scope(|scope| {
                let parts: Vec<_> = listed
                    .chunks(listed.len().div_ceil(threads))
                    .map(|part| scope.spawn(move || stat(part)))
                    .collect();
                parts
                    .into_iter()
                    .flat_map(|part| part.join().expect("a stat thread panicked"))
                    .collect()
            })
        };
        for ((rel, entry, untaken), meta) in listed.into_iter().zip(metas) {
            let meta = meta.map_err(|e| SyncError::io(&entry.path(), e))?;
            if meta.is_file() {
                self.files.insert(rel, meta);
            } else {
                self.skipped.push((rel, "not a plain file"));
                if untaken {
                    self.passed.untaken.push(entry.path());
                }
            }
        }
        Ok(())
    }
}

/// Every plain file under `dir` (at `rel` from the root) that the policy
/// takes.
fn walk(dir: &Path, rel: &str, policy: &Policy, found: &mut Found) -> Result<(), SyncError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(SyncError::io(dir, e)),
    };
    found.passed.folders.push(rel.to_owned());
    let mut listed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| SyncError::io(dir, e))?;
        listed.push((entry.file_name(), entry));
    }
    // Names in a folder are unique.
    listed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for (file_name, entry) in listed {
        let Some(name) = file_name.to_str() else {
            found.skipped.push((
                format!("{rel}/{}", file_name.to_string_lossy()),
                "its name is not UTF-8",
            ));
            found.passed.untaken.push(entry.path());
            continue;
        };
        let child = if rel.is_empty() {
            name.to_owned()
        } else {
            format!("{rel}/{name}")
        };
        let kind = entry
            .file_type()
            .map_err(|e| SyncError::io(&entry.path(), e))?;
        if kind.is_symlink() {
            found.skipped.push((child, "a symbolic link"));
            found.passed.untaken.push(entry.path());
        } else if kind.is_dir() {
            walk(&entry.path(), &child, policy, found)?;
        } else if !kind.is_file() {
            found.skipped.push((child, "not a plain file"));
            found.passed.untaken.push(entry.path());
        } else if policy.excluded_name(name) {
            found.skipped.push((child, "excluded by the policy"));
            found.passed.untaken.push(entry.path());
        } else {
            found.listed.push((child, entry, true));
        }
    }
    Ok(())
}

/// The project files outside `.ai/` the policy carries.
fn walk_files(root: &Path, rel: &str, policy: &Policy, found: &mut Found) -> Result<(), SyncError> {
    if !policy.include.iter().any(|p| !p.starts_with(".ai/")) {
        return Ok(());
    }
    let entries = match std::fs::read_dir(root.join(rel)) {
        Ok(entries) => entries,
        Err(e) => return Err(SyncError::io(&root.join(rel), e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| SyncError::io(&root.join(rel), e))?;
        names.push(entry);
    }
    names.sort_by_cached_key(|e| e.file_name());
    for entry in names {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let child = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let kind = entry
            .file_type()
            .map_err(|e| SyncError::io(&entry.path(), e))?;
        if kind.is_dir() && !kind.is_symlink() {
            let folder = format!("{child}/");
            if folder == ".ai/"
                || policy.excludes_path(&folder)
                || !policy.may_include_under(&folder)
            {
                continue;
            }
            walk_files(root, &child, policy, found)?;
        } else if kind.is_symlink() {
            if policy.includes_file(&child) {
                found.skipped.push((child, "a symbolic link"));
            }
        } else if kind.is_file() && policy.includes_file(&child) {
            if policy.excluded_name(&name) {
                found.skipped.push((child, "excluded by the policy"));
            } else {
                found.listed.push((child, entry, false));
            }
        }
    }
    Ok(())
}

/// The item a path under an item folder names: `.ai/tools/demo/wc.py` is
/// `tool:demo/wc` (the last extension dropped).
pub fn item_ref(rel: &str) -> Option<(ItemKind, String)> {
    let rest = rel.strip_prefix(".ai/")?;
    let (folder, path) = rest.split_once('/')?;
    let (_, kind) = ITEM_FOLDERS.iter().find(|(f, _)| *f == folder)?;
    let (dir, file) = match path.rsplit_once('/') {
        Some((dir, file)) => (Some(dir), file),
        None => (None, path),
    };
    let stem = match file.rfind('.') {
        Some(dot) if dot > 0 => &file[..dot],
        _ => file,
    };
    let id = match dir {
        Some(dir) => format!("{dir}/{stem}"),
        None => stem.to_owned(),
    };
    Some((*kind, id))
}

/// The manifest entry of the bytes `bytes` at `rel`: for an item (under
/// an item folder, `item` true) the hash of its `item_source` object, for
/// any other file the hash of the bytes. `None` when `item` is true but
/// `rel` names no item.
pub fn entry_of(rel: &str, bytes: &[u8], item: bool) -> Option<ContentHash> {
    if !item {
        return Some(ContentHash::of(bytes));
    }
    let source = item_source(rel, bytes)?;
    Some(ContentHash::of(&rye_cas::canonical::to_vec(&source)))
}

/// The `item_source` object of the file at `rel` holding `bytes`: its
/// ref, its content's blob hash, the hash of its bytes (`integrity`, the
/// same, as the spec has it) and its signature line's fields (`null` when
/// it has none or is no text).
pub fn item_source(rel: &str, bytes: &[u8]) -> Option<Value> {
    let (kind, id) = item_ref(rel)?;
    let hash = ContentHash::of(bytes).hex();
    let file_name = rel.rsplit('/').next().unwrap_or(rel);
    let signature = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| {
            let format = rye_integrity::format_for(kind, file_name, &[]).ok()?;
            rye_integrity::find_signature(text, &format).ok().flatten()
        })
        .map(|located| {
            let s = located.signature;
            let mut info = json!({
                "timestamp": s.timestamp,
                "hash": s.hash,
                "ed25519_sig": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s.signature),
                "pubkey_fp": s.fingerprint,
            });
            if let Some((provider, user)) = s.provenance {
                info["registry_provider"] = json!(provider);
                info["registry_username"] = json!(user);
            }
            info
        });
    let mut fields = Map::new();
    fields.insert("item_ref".into(), json!(format!("{kind}:{id}")));
    fields.insert("content_blob_hash".into(), json!(hash));
    fields.insert("integrity".into(), json!(hash));
    fields.insert("signature_info".into(), signature.unwrap_or(Value::Null));
    Some(object("item_source", fields))
}

#[cfg(test)]
mod tests;
