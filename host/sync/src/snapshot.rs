//! A project's history: `project_snapshot` objects, each naming the
//! project's (and the user space's) manifest and the snapshots it came
//! from (none for the first, the previous head after a push or a run, the
//! head and the run's snapshot after a merge).

use rye_cas::{Cas, ContentHash, Storage, object};
use serde_json::{Map, Value, json};

use crate::SyncError;

/// How a snapshot came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A client pushed it.
    Push,
    /// A run on the node changed the project.
    Execution,
    /// A run's changes were merged with a head that had moved.
    Merge,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Push => "push",
            Source::Execution => "execution",
            Source::Merge => "merge",
        }
    }
}

/// What a new snapshot records.
#[derive(Debug, Clone)]
pub struct NewSnapshot {
    pub project_manifest: ContentHash,
    pub user_manifest: Option<ContentHash>,
    pub parents: Vec<ContentHash>,
    pub source: Source,
    /// What caused it (the item a run executed), or empty.
    pub source_detail: String,
    /// `{}`, or the run's `thread_id` (and the merge's `base`).
    pub metadata: Map<String, Value>,
}

/// Stores the snapshot; its hash. `now` is the time it records
/// (ISO-8601 UTC with `+00:00`, as the spec writes it).
pub async fn store<S: Storage>(
    cas: &Cas<S>,
    new: &NewSnapshot,
    now: &str,
) -> Result<ContentHash, SyncError> {
    let mut fields = Map::new();
    fields.insert(
        "project_manifest_hash".into(),
        json!(new.project_manifest.hex()),
    );
    fields.insert(
        "user_manifest_hash".into(),
        json!(new.user_manifest.map(|h| h.hex())),
    );
    fields.insert(
        "parent_hashes".into(),
        json!(new.parents.iter().map(ContentHash::hex).collect::<Vec<_>>()),
    );
    fields.insert("source".into(), json!(new.source.name()));
    fields.insert("source_detail".into(), json!(new.source_detail));
    fields.insert("timestamp".into(), json!(now));
    fields.insert("metadata".into(), Value::Object(new.metadata.clone()));
    Ok(cas.put_object(&object("project_snapshot", fields)).await?)
}

/// The history from `head` back along first parents, newest first, at
/// most `limit` snapshots, each with its hash as `_hash`. The head
/// missing from the store is an error naming it; an older one missing
/// ends the walk there (history past a node's retention is collected).
pub async fn history<S: Storage>(
    cas: &Cas<S>,
    head: &ContentHash,
    limit: usize,
) -> Result<Vec<Value>, SyncError> {
    let mut out = Vec::new();
    let mut next = Some(*head);
    while let Some(hash) = next.take() {
        if out.len() >= limit {
            break;
        }
        let Some(mut snapshot) = cas.get_object(&hash).await? else {
            if !out.is_empty() {
                break;
            }
            return Err(SyncError::Manifest(format!(
                "snapshot {} is not in the store",
                hash.hex()
            )));
        };
        if snapshot.get("kind").and_then(Value::as_str) != Some("project_snapshot") {
            return Err(SyncError::Manifest(format!(
                "{} is no project_snapshot",
                hash.hex()
            )));
        }
        next = snapshot
            .get("parent_hashes")
            .and_then(|p| p.get(0))
            .and_then(Value::as_str)
            .map(|h| {
                h.parse().map_err(|_| {
                    SyncError::Manifest(format!(
                        "snapshot {} has a parent that is no hash",
                        hash.hex()
                    ))
                })
            })
            .transpose()?;
        snapshot["_hash"] = json!(hash.hex());
        out.push(snapshot);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_cas::LocalStorage;

    #[tokio::test]
    async fn history_follows_first_parents_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let cas = Cas::new(LocalStorage::new(dir.path()));
        let manifest = ContentHash::of(b"manifest");
        let snapshot = |parents: Vec<ContentHash>, source| NewSnapshot {
            project_manifest: manifest,
            user_manifest: None,
            parents,
            source,
            source_detail: String::new(),
            metadata: Map::new(),
        };
        let now = "2026-11-24T00:00:00+00:00";
        let first = store(&cas, &snapshot(vec![], Source::Push), now)
            .await
            .unwrap();
        let side = store(&cas, &snapshot(vec![first], Source::Execution), now)
            .await
            .unwrap();
        let second = store(
            &cas,
            &snapshot(vec![first], Source::Push),
            "2026-11-24T00:00:01+00:00",
        )
        .await
        .unwrap();
        let merged = store(&cas, &snapshot(vec![second, side], Source::Merge), now)
            .await
            .unwrap();
        let walked = history(&cas, &merged, 10).await.unwrap();
        let hashes: Vec<&str> = walked
            .iter()
            .map(|s| s["_hash"].as_str().unwrap())
            .collect();
        assert_eq!(hashes, [merged.hex(), second.hex(), first.hex()]);
        assert_eq!(walked[0]["source"], "merge");
        assert_eq!(
            walked[0]["parent_hashes"],
            json!([second.hex(), side.hex()])
        );
        assert_eq!(walked[2]["user_manifest_hash"], Value::Null);
        assert_eq!(history(&cas, &merged, 2).await.unwrap().len(), 2);
        let error = history(&cas, &manifest, 5).await.unwrap_err().to_string();
        assert!(error.contains("is not in the store"), "{error}");
        // The oldest collected: the walk ends before it.
        cas.delete(rye_cas::Class::Object, &first).await.unwrap();
        let walked = history(&cas, &merged, 10).await.unwrap();
        assert_eq!(walked.len(), 2);
        assert_eq!(walked[1]["_hash"], second.hex());
    }
}
