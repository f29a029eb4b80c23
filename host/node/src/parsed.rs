//! Manifests parsed lately, kept by hash.
//!
//! One push's manifest is read by the `put` that brings it, the `push`
//! that checks its closure, the next push (as the head's) and every run
//! in it; parsing one of ten thousand paths costs milliseconds each
//! time. An object never changes under its hash, so a kept one is never
//! stale; whether a principal holds it is still asked of the database
//! before it is used, so keeping one grants nothing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rye_cas::{Cas, CasError, ContentHash, Storage};
use serde_json::Value;

/// Paths (items and files) kept in all, at most: about 60 MB of parsed
/// manifests.
const KEPT_PATHS: usize = 200_000;

#[derive(Default)]
pub struct Parsed {
    /// Oldest first.
    kept: Mutex<VecDeque<(ContentHash, Arc<Value>, usize)>>,
}

fn paths(manifest: &Value) -> usize {
    ["items", "files"]
        .iter()
        .filter_map(|k| manifest.get(k).and_then(Value::as_object))
        .map(|m| m.len())
        .sum::<usize>()
        .max(1)
}

impl Parsed {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(ContentHash, Arc<Value>, usize)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The manifest with `hash`, if kept (it becomes the newest).
    pub fn get(&self, hash: &ContentHash) -> Option<Arc<Value>> {
        let mut kept = self.lock();
        let at = kept.iter().position(|(h, _, _)| h == hash)?;
        let entry = kept.remove(at)?;
        let value = Arc::clone(&entry.1);
        kept.push_back(entry);
        Some(value)
    }

    /// Keeps `manifest` (a `source_manifest` stored under `hash`); the
    /// oldest go past the budget. Other objects are not kept.
    pub fn keep(&self, hash: ContentHash, manifest: Arc<Value>) {
        if manifest.get("kind").and_then(Value::as_str) != Some("source_manifest") {
            return;
        }
        let size = paths(&manifest);
        if size > KEPT_PATHS {
            return;
        }
        let mut kept = self.lock();
        if kept.iter().any(|(h, _, _)| *h == hash) {
            return;
        }
        kept.push_back((hash, manifest, size));
        let mut total: usize = kept.iter().map(|(_, _, n)| n).sum();
        while total > KEPT_PATHS {
            match kept.pop_front() {
                Some((_, _, n)) => total -= n,
                None => break,
            }
        }
    }

    /// The object with `hash`: a kept manifest, else read from `cas`
    /// (and kept when it is a manifest).
    pub async fn object<S: Storage>(
        &self,
        cas: &Cas<S>,
        hash: &ContentHash,
    ) -> Result<Option<Arc<Value>>, CasError> {
        if let Some(kept) = self.get(hash) {
            return Ok(Some(kept));
        }
        let Some(value) = cas.get_object(hash).await? else {
            return Ok(None);
        };
        let value = Arc::new(value);
        self.keep(*hash, Arc::clone(&value));
        Ok(Some(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest(n: usize) -> Arc<Value> {
        let items: serde_json::Map<String, Value> =
            (0..n).map(|i| (format!("p{i}"), json!("h"))).collect();
        Arc::new(json!({"kind": "source_manifest", "items": items, "files": {}}))
    }

    #[test]
    fn manifests_are_kept_within_the_budget_and_the_least_used_go_first() {
        let parsed = Parsed::default();
        let hash = |n: u8| ContentHash::of(&[n]);
        parsed.keep(hash(1), manifest(90_000));
        parsed.keep(hash(2), manifest(90_000));
        // Used again: the newest.
        assert!(parsed.get(&hash(1)).is_some());
        parsed.keep(hash(3), manifest(90_000));
        assert!(parsed.get(&hash(2)).is_none(), "the least used went");
        assert!(parsed.get(&hash(1)).is_some() && parsed.get(&hash(3)).is_some());
        // Too large alone, and no manifest: never kept.
        parsed.keep(hash(4), manifest(KEPT_PATHS + 1));
        assert!(parsed.get(&hash(4)).is_none());
        parsed.keep(hash(5), Arc::new(json!({"kind": "project_snapshot"})));
        assert!(parsed.get(&hash(5)).is_none());
    }
}
