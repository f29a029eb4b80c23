//! The three-way merge of two snapshots of a project against the snapshot
//! they share: what a node does when a run's changes come back to a head
//! that moved meanwhile, and what `pull` does locally.
//!
//! Each side is a manifest: `items` (paths under `.ai/`, each the hash of
//! its `item_source` object) and `files` (other paths, each a blob hash).
//! Path by path, with `b`, `o` and `t` the hash in the base, ours and
//! theirs (or none):
//!
//! - `o == t`: kept (both deleted: gone);
//! - `b == o`: theirs; `b == t`: ours;
//! - no `b` (both added, differently): an `add/add` conflict;
//! - no `o` or no `t` (one deleted, the other changed): `delete/modify`
//!   or `modify/delete`;
//! - else the three blobs are merged line by line, each at most 1,000,000
//!   bytes of UTF-8; a clean merge is stored as a new blob, anything else
//!   (an overlap changed both ways, a hash that is no blob, as an item's
//!   `item_source` is) a `content` conflict.
//!
//! Then a merged path that is a folder of another (`a` and `a/b`) is a
//! `path_prefix` conflict for both, and a path that is an item on one side
//! and a file on another an `item_file_type` one. A conflicted path is
//! never in the merge: the caller decides, nothing is chosen silently.

use std::collections::{BTreeMap, BTreeSet};

use rye_cas::{Cas, CasError, ContentHash, Storage};
use serde_json::{Value, json};

/// Blobs larger than this are not merged line by line.
pub const MAX_MERGE_BYTES: usize = 1_000_000;

/// A manifest's paths: items and files, each path to a hash (hex).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    pub items: BTreeMap<String, String>,
    pub files: BTreeMap<String, String>,
}

impl Tree {
    /// The `items` and `files` of a `source_manifest` object (either may be
    /// missing: none).
    pub fn of_manifest(manifest: &Value) -> Self {
        let paths = |key: &str| {
            manifest
                .get(key)
                .and_then(Value::as_object)
                .map(|map| {
                    map.iter()
                        .filter_map(|(path, hash)| Some((path.clone(), hash.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default()
        };
        Tree {
            items: paths("items"),
            files: paths("files"),
        }
    }

    fn get(&self, path: &str) -> Option<(&str, Kind)> {
        self.items
            .get(path)
            .map(|h| (h.as_str(), Kind::Item))
            .or_else(|| self.files.get(path).map(|h| (h.as_str(), Kind::File)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Item,
    File,
}

/// Why a path could not be merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictKind {
    /// Added on both sides, differently.
    AddAdd,
    /// Deleted in ours, changed in theirs.
    DeleteModify,
    /// Changed in ours, deleted in theirs.
    ModifyDelete,
    /// Changed on both sides in a way lines cannot reconcile.
    Content,
    /// A file where the other side has a folder of the same name.
    PathPrefix,
    /// An item on one side and a file on the other.
    ItemFileType,
}

impl ConflictKind {
    /// The name the spec gives it.
    pub fn name(self) -> &'static str {
        match self {
            ConflictKind::AddAdd => "add/add",
            ConflictKind::DeleteModify => "delete/modify",
            ConflictKind::ModifyDelete => "modify/delete",
            ConflictKind::Content => "content",
            ConflictKind::PathPrefix => "path_prefix",
            ConflictKind::ItemFileType => "item_file_type",
        }
    }
}

/// One conflicted path: its hash on each side (none where absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub base: Option<String>,
    pub ours: Option<String>,
    pub theirs: Option<String>,
    pub kind: ConflictKind,
}

/// What a merge gives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    pub tree: Tree,
    pub conflicts: BTreeMap<String, Conflict>,
}

impl Merged {
    /// The result as the spec's JSON: `merged_items`, `merged_files`,
    /// `conflicts {path: {base, ours, theirs, type}}`.
    pub fn to_json(&self) -> Value {
        let conflicts: serde_json::Map<String, Value> = self
            .conflicts
            .iter()
            .map(|(path, c)| {
                (
                    path.clone(),
                    json!({"base": c.base, "ours": c.ours, "theirs": c.theirs, "type": c.kind.name()}),
                )
            })
            .collect();
        json!({
            "merged_items": self.tree.items,
            "merged_files": self.tree.files,
            "conflicts": conflicts,
        })
    }
}

/// Merges `ours` and `theirs` against `base`, reading blobs from and
/// storing merged ones in `cas`.
pub async fn three_way<S: Storage>(
    cas: &Cas<S>,
    base: &Tree,
    ours: &Tree,
    theirs: &Tree,
) -> Result<Merged, CasError> {
    let paths: BTreeSet<&String> = [base, ours, theirs]
        .iter()
        .flat_map(|t| t.items.keys().chain(t.files.keys()))
        .collect();
    let mut merged = Merged::default();
    // Path to its merged hash, and whether it is an item.
    let mut taken: BTreeMap<String, (String, Kind)> = BTreeMap::new();
    for path in paths {
        let (b, o, t) = (base.get(path), ours.get(path), theirs.get(path));
        let hash = |side: Option<(&str, Kind)>| side.map(|(h, _)| h.to_owned());
        let conflict = |kind| Conflict {
            base: hash(b),
            ours: hash(o),
            theirs: hash(t),
            kind,
        };
        let kinds: BTreeSet<Kind> = [b, o, t].iter().flatten().map(|(_, k)| *k).collect();
        if kinds.len() > 1 {
            merged
                .conflicts
                .insert(path.clone(), conflict(ConflictKind::ItemFileType));
            continue;
        }
        let kind = kinds.into_iter().next().unwrap_or(Kind::File);
        let (bh, oh, th) = (hash(b), hash(o), hash(t));
        let result = if oh == th {
            oh
        } else if bh == oh {
            th
        } else if bh == th {
            oh
        } else {
            match (&bh, &oh, &th) {
                (None, _, _) => {
                    merged
                        .conflicts
                        .insert(path.clone(), conflict(ConflictKind::AddAdd));
                    continue;
                }
                (_, None, _) => {
                    merged
                        .conflicts
                        .insert(path.clone(), conflict(ConflictKind::DeleteModify));
                    continue;
                }
                (_, _, None) => {
                    merged
                        .conflicts
                        .insert(path.clone(), conflict(ConflictKind::ModifyDelete));
                    continue;
                }
                (Some(bh), Some(oh), Some(th)) => match text_merge(cas, bh, oh, th).await? {
                    Some(hash) => Some(hash),
                    None => {
                        merged
                            .conflicts
                            .insert(path.clone(), conflict(ConflictKind::Content));
                        continue;
                    }
                },
            }
        };
        if let Some(hash) = result {
            taken.insert(path.clone(), (hash, kind));
        }
    }
    // A path that is a folder of another cannot be both.
    let prefixed: BTreeSet<String> = taken
        .keys()
        .filter(|path| {
            let folder = format!("{path}/");
            taken
                .range::<String, _>(folder.clone()..)
                .next()
                .is_some_and(|(other, _)| other.starts_with(&folder))
        })
        .cloned()
        .collect();
    for folder in &prefixed {
        let inside = format!("{folder}/");
        let clashing: Vec<String> = taken
            .keys()
            .filter(|p| *p == folder || p.starts_with(&inside))
            .cloned()
            .collect();
        for path in clashing {
            let side = |tree: &Tree| tree.get(&path).map(|(h, _)| h.to_owned());
            let conflict = Conflict {
                base: side(base),
                ours: side(ours),
                theirs: side(theirs),
                kind: ConflictKind::PathPrefix,
            };
            taken.remove(&path);
            merged.conflicts.insert(path, conflict);
        }
    }
    for (path, (hash, kind)) in taken {
        match kind {
            Kind::Item => merged.tree.items.insert(path, hash),
            Kind::File => merged.tree.files.insert(path, hash),
        };
    }
    Ok(merged)
}

/// The line merge of three blobs, stored; `None` when it conflicts or a
/// side is no blob, too large, or not UTF-8.
async fn text_merge<S: Storage>(
    cas: &Cas<S>,
    base: &str,
    ours: &str,
    theirs: &str,
) -> Result<Option<String>, CasError> {
    let mut texts = Vec::with_capacity(3);
    for hash in [base, ours, theirs] {
        let Ok(hash) = hash.parse::<ContentHash>() else {
            return Ok(None);
        };
        let Some(bytes) = cas.get_blob(&hash).await? else {
            return Ok(None);
        };
        if bytes.len() > MAX_MERGE_BYTES {
            return Ok(None);
        }
        match String::from_utf8(bytes) {
            Ok(text) => texts.push(text),
            Err(_) => return Ok(None),
        }
    }
    match merge_lines(&texts[0], &texts[1], &texts[2]) {
        Some(text) => Ok(Some(cas.put_blob(text.as_bytes()).await?.hex())),
        None => Ok(None),
    }
}

/// The line-level three-way merge of `ours` and `theirs` from `base`:
/// changes to separate lines both kept, the same change made on both sides
/// kept once; `None` when both sides changed the same lines differently.
pub fn merge_lines(base: &str, ours: &str, theirs: &str) -> Option<String> {
    diffy::merge(base, ours, theirs).ok()
}

#[cfg(test)]
mod tests;
