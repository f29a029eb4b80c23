//! Folding what a run changed back into its project's history (spec §9):
//! the run started from snapshot `base`; its project's manifest after the
//! run is `ran`.
//!
//! - the same manifest as `base`'s: `no-op`, nothing stored;
//! - else a snapshot of the run (`source: execution`, parent `base`), and
//!   then, up to five attempts: when the head is still `base`, it moves to
//!   the run's snapshot by compare-and-swap (`fast-forward`); when it has
//!   moved, the run's manifest is merged three ways with the head's, and a
//!   clean merge becomes a snapshot with both as parents that the head
//!   moves to (`merge`), while a conflict leaves the head where it is
//!   (`conflict`, the conflicts and the run's unmerged snapshot returned).
//!   A lost compare-and-swap waits `50·2^attempt` ms and a random part of
//!   50 ms and tries again; after five, `retry_exhausted`.
//!
//! The head lives where the caller keeps mutable facts (a node's
//! database); [`Heads`] is all this needs of it.

use std::future::Future;
use std::time::Duration;

use rye_cas::{Cas, ContentHash, Storage, object};
use serde_json::{Map, Value, json};

use crate::SyncError;
use crate::merge::{Merged, Tree, three_way};
use crate::snapshot::{NewSnapshot, Source, store};

/// How many times a fold-back tries to move the head.
pub const ATTEMPTS: u32 = 5;

/// A project's head, moved only by compare-and-swap.
pub trait Heads: Send + Sync {
    /// The head now, if the project has one.
    fn head(&self) -> impl Future<Output = Result<Option<ContentHash>, SyncError>> + Send;
    /// Moves the head from `expected` to `new`; `false` when it was not
    /// `expected` any more (another writer moved it).
    fn advance(
        &self,
        expected: Option<ContentHash>,
        new: ContentHash,
    ) -> impl Future<Output = Result<bool, SyncError>> + Send;
}

/// How a fold-back ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeType {
    NoOp,
    FastForward,
    Merge,
    Conflict,
    RetryExhausted,
}

impl MergeType {
    pub fn name(self) -> &'static str {
        match self {
            MergeType::NoOp => "no-op",
            MergeType::FastForward => "fast-forward",
            MergeType::Merge => "merge",
            MergeType::Conflict => "conflict",
            MergeType::RetryExhausted => "retry_exhausted",
        }
    }
}

/// What a fold-back did.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    pub merge_type: MergeType,
    /// The head the project now has, when this fold-back moved it.
    pub head: Option<ContentHash>,
    /// The run's own snapshot (none for a no-op).
    pub run_snapshot: Option<ContentHash>,
    /// The merge's conflicts, when it had some.
    pub conflicts: Option<Merged>,
}

/// The run that ended and what it left.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The snapshot the run started from.
    pub base: ContentHash,
    /// The project's manifest after the run.
    pub manifest: ContentHash,
    /// The item the run executed and its thread.
    pub item: String,
    pub thread_id: String,
    /// The time snapshots record.
    pub now: String,
}

async fn snapshot_of<S: Storage>(cas: &Cas<S>, hash: &ContentHash) -> Result<Value, SyncError> {
    let value = cas.get_object(hash).await?.ok_or_else(|| {
        SyncError::Manifest(format!("snapshot {} is not in the store", hash.hex()))
    })?;
    if value.get("kind").and_then(Value::as_str) != Some("project_snapshot") {
        return Err(SyncError::Manifest(format!(
            "{} is no project_snapshot",
            hash.hex()
        )));
    }
    Ok(value)
}

fn hash_field(snapshot: &Value, key: &str) -> Result<Option<ContentHash>, SyncError> {
    match snapshot.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_str()
            .and_then(|h| h.parse().ok())
            .map(Some)
            .ok_or_else(|| SyncError::Manifest(format!("a snapshot's {key} is no hash"))),
    }
}

async fn tree_of<S: Storage>(cas: &Cas<S>, manifest: &ContentHash) -> Result<Tree, SyncError> {
    let value = cas.get_object(manifest).await?.ok_or_else(|| {
        SyncError::Manifest(format!("manifest {} is not in the store", manifest.hex()))
    })?;
    Ok(Tree::of_manifest(&value))
}

/// Folds `ran` back into the project whose head `heads` keeps.
pub async fn fold_back<S: Storage>(
    cas: &Cas<S>,
    heads: &impl Heads,
    ran: &Ran,
) -> Result<Folded, SyncError> {
    let base = snapshot_of(cas, &ran.base).await?;
    let base_manifest = hash_field(&base, "project_manifest_hash")?
        .ok_or_else(|| SyncError::Manifest("the base snapshot names no project manifest".into()))?;
    if base_manifest == ran.manifest {
        return Ok(Folded {
            merge_type: MergeType::NoOp,
            head: None,
            run_snapshot: None,
            conflicts: None,
        });
    }
    let mut metadata = Map::new();
    metadata.insert("thread_id".into(), json!(ran.thread_id));
    let run_snapshot = store(
        cas,
        &NewSnapshot {
            project_manifest: ran.manifest,
            user_manifest: hash_field(&base, "user_manifest_hash")?,
            parents: vec![ran.base],
            source: Source::Execution,
            source_detail: ran.item.clone(),
            metadata,
        },
        &ran.now,
    )
    .await?;
    for attempt in 0..ATTEMPTS {
        let head = heads.head().await?;
        let (moved_to, merge_type) = if head == Some(ran.base) {
            (run_snapshot, MergeType::FastForward)
        } else {
            let Some(head) = head else {
                return Err(SyncError::Manifest(
                    "the project has no head to fold the run into".into(),
                ));
            };
            let head_snapshot = snapshot_of(cas, &head).await?;
            let head_manifest = hash_field(&head_snapshot, "project_manifest_hash")?
                .ok_or_else(|| SyncError::Manifest("the head names no project manifest".into()))?;
            let merged = three_way(
                cas,
                &tree_of(cas, &base_manifest).await?,
                &tree_of(cas, &head_manifest).await?,
                &tree_of(cas, &ran.manifest).await?,
            )
            .await?;
            if !merged.conflicts.is_empty() {
                return Ok(Folded {
                    merge_type: MergeType::Conflict,
                    head: None,
                    run_snapshot: Some(run_snapshot),
                    conflicts: Some(merged),
                });
            }
            let mut fields = Map::new();
            fields.insert("space".into(), json!("project"));
            fields.insert("items".into(), json!(merged.tree.items));
            fields.insert("files".into(), json!(merged.tree.files));
            let manifest = cas.put_object(&object("source_manifest", fields)).await?;
            let mut metadata = Map::new();
            metadata.insert("base".into(), json!(ran.base.hex()));
            metadata.insert("thread_id".into(), json!(ran.thread_id));
            let merge = store(
                cas,
                &NewSnapshot {
                    project_manifest: manifest,
                    user_manifest: hash_field(&head_snapshot, "user_manifest_hash")?,
                    parents: vec![head, run_snapshot],
                    source: Source::Merge,
                    source_detail: ran.item.clone(),
                    metadata,
                },
                &ran.now,
            )
            .await?;
            (merge, MergeType::Merge)
        };
        if heads.advance(head, moved_to).await? {
            return Ok(Folded {
                merge_type,
                head: Some(moved_to),
                run_snapshot: Some(run_snapshot),
                conflicts: None,
            });
        }
        tokio::time::sleep(backoff(attempt)).await;
    }
    Ok(Folded {
        merge_type: MergeType::RetryExhausted,
        head: None,
        run_snapshot: Some(run_snapshot),
        conflicts: None,
    })
}

/// The wait after losing attempt `attempt`'s race.
fn backoff(attempt: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u32(attempt);
    Duration::from_millis(50 * 2u64.pow(attempt) + random.finish() % 50)
}

#[cfg(test)]
mod tests;
