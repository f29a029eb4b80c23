//! A storage that notes what is written through it, so the objects a
//! request or a run stored become the principal's in the database: the
//! bytes go to the object store first, the row that says they exist
//! after, and never the other way round. Each hash is staged in the
//! database before its bytes are written, so garbage collection does not
//! delete them between the write and the row.

use std::collections::HashSet;
use std::io;
use std::sync::{Arc, Mutex};

use rye_cas::Storage;
use serde_json::Value;

use crate::db::{Db, Held};

/// `S`, with every write noted.
#[derive(Debug, Clone)]
pub struct Tracked<S> {
    inner: S,
    written: Arc<Mutex<Vec<Held>>>,
    stage: Option<Stage>,
}

/// Where writes are staged, for how long, what was staged already and
/// when the first of them was.
#[derive(Debug, Clone)]
struct Stage {
    db: Db,
    lease: i64,
    staged: Arc<Mutex<HashSet<String>>>,
    first: Arc<Mutex<Option<std::time::Instant>>>,
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl<S> Tracked<S> {
    /// `inner`, its writes noted but not staged.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            written: Arc::default(),
            stage: None,
        }
    }

    /// `inner`, each write staged in `db` for `lease` seconds first.
    pub fn staged(inner: S, db: Db, lease: i64) -> Self {
        Self {
            inner,
            written: Arc::default(),
            stage: Some(Stage {
                db,
                lease,
                staged: Arc::default(),
                first: Arc::default(),
            }),
        }
    }

    /// Stages `hashes` at once (one statement for a batch about to be
    /// written): their writes then stage nothing more.
    pub async fn stage(&self, hashes: &[String]) -> io::Result<()> {
        let Some(stage) = &self.stage else {
            return Ok(());
        };
        let fresh: Vec<String> = {
            let staged = stage.staged.lock().expect("staged hashes");
            hashes
                .iter()
                .filter(|h| !staged.contains(*h))
                .cloned()
                .collect()
        };
        if fresh.is_empty() {
            return Ok(());
        }
        let now = now_secs();
        stage
            .first
            .lock()
            .expect("first stage")
            .get_or_insert_with(std::time::Instant::now);
        stage
            .db
            .stage(&fresh, now, now + stage.lease)
            .await
            .map_err(io::Error::other)?;
        stage.staged.lock().expect("staged hashes").extend(fresh);
        Ok(())
    }

    /// What was written since the last call, each once, to be held now;
    /// refused if the first of them was staged more than half the lease
    /// ago (the lease may run out before the rows are written, and a
    /// collection delete their bytes: they are to be written again). A
    /// lease of zero stages nothing lasting and checks nothing: only for
    /// one writer at a time.
    pub fn to_hold(&self) -> io::Result<Vec<Held>> {
        if let Some(stage) = &self.stage
            && stage.lease > 0
            && let Some(first) = *stage.first.lock().expect("first stage")
            && let took = first.elapsed().as_secs() as i64
            && took * 2 >= stage.lease
        {
            return Err(io::Error::other(format!(
                "writing took {took} s, too close to the {} s written objects are kept from \
                 collection before they are held: write them again",
                stage.lease
            )));
        }
        if let Some(stage) = &self.stage {
            // What is written after this is staged anew.
            *stage.first.lock().expect("first stage") = None;
            stage.staged.lock().expect("staged hashes").clear();
        }
        Ok(self.take())
    }

    /// What was written since the last call, each once.
    pub fn take(&self) -> Vec<Held> {
        let mut written = std::mem::take(&mut *self.written.lock().expect("tracked writes"));
        written.sort_by(|a, b| a.hash.cmp(&b.hash));
        written.dedup_by(|a, b| a.hash == b.hash);
        written
    }
}

/// The class (`blob` or `object`) and hash a store's key names.
fn named(key: &str) -> Option<(&'static str, &str)> {
    let name = key.rsplit('/').next()?;
    if key.starts_with("blobs/") {
        Some(("blob", name))
    } else {
        Some(("object", name.strip_suffix(".json")?))
    }
}

/// What a write of `bytes` at `key` holds: the hash and class from the
/// key, an object's kind and an item source's blob from the bytes.
pub fn held(key: &str, bytes: &[u8]) -> Option<Held> {
    let (kind, hash) = named(key)?;
    let (object_kind, content_blob) = if kind == "object" {
        // Only two fields are wanted: the rest (a manifest's thousands of
        // paths) is skipped over, never built.
        #[derive(serde::Deserialize)]
        struct Fields {
            kind: Option<Value>,
            content_blob_hash: Option<Value>,
        }
        let fields: Fields = serde_json::from_slice(bytes).ok()?;
        let text = |v: Option<Value>| v.and_then(|v| v.as_str().map(str::to_owned));
        let object_kind = text(fields.kind);
        let blob = (object_kind.as_deref() == Some("item_source"))
            .then(|| text(fields.content_blob_hash))
            .flatten();
        (object_kind, blob)
    } else {
        (None, None)
    };
    Some(Held {
        hash: hash.to_owned(),
        kind,
        size: bytes.len() as u64,
        object_kind,
        content_blob,
    })
}

impl<S: Storage> Storage for Tracked<S> {
    async fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        self.inner.get(key).await
    }

    async fn put(&self, key: &str, bytes: &[u8]) -> io::Result<()> {
        if let Some((_, hash)) = named(key) {
            self.stage(&[hash.to_owned()]).await?;
        }
        self.inner.put(key, bytes).await?;
        if let Some(held) = held(key, bytes) {
            self.written.lock().expect("tracked writes").push(held);
        }
        Ok(())
    }

    async fn exists(&self, key: &str) -> io::Result<bool> {
        self.inner.exists(key).await
    }

    async fn delete(&self, key: &str) -> io::Result<()> {
        self.inner.delete(key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_held_later_than_half_their_stage_lease_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("node.db")).await.unwrap();
        let bytes = crate::bytes::ObjectBytes::local(&dir.path().join("objects")).unwrap();
        let tracked = Tracked::staged(bytes, db, 2);
        let key = format!("blobs/{}", "ab".repeat(32));
        tracked.put(&key, b"x").await.unwrap();
        assert_eq!(tracked.to_hold().unwrap().len(), 1, "held at once");
        tracked.put(&key, b"x").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
        let late = tracked.to_hold().unwrap_err().to_string();
        assert!(late.contains("write them again"), "{late}");
    }
}
