//! A storage that notes what is written through it, so the objects a
//! request or a run stored become the principal's in the database: the
//! bytes go to the object store first, the row that says they exist
//! after, and never the other way round.

use std::io;
use std::sync::{Arc, Mutex};

use rye_cas::Storage;
use serde_json::Value;

use crate::db::Held;

/// `S`, with every write noted.
#[derive(Debug, Clone)]
pub struct Tracked<S> {
    inner: S,
    written: Arc<Mutex<Vec<Held>>>,
}

impl<S> Tracked<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            written: Arc::default(),
        }
    }

    /// What was written since the last call, each once.
    pub fn take(&self) -> Vec<Held> {
        let mut written = std::mem::take(&mut *self.written.lock().expect("tracked writes"));
        written.sort_by(|a, b| a.hash.cmp(&b.hash));
        written.dedup_by(|a, b| a.hash == b.hash);
        written
    }
}

/// What a write of `bytes` at `key` holds: the hash and class from the
/// key, an object's kind and an item source's blob from the bytes.
pub fn held(key: &str, bytes: &[u8]) -> Option<Held> {
    let name = key.rsplit('/').next()?;
    let (kind, hash) = if key.starts_with("blobs/") {
        ("blob", name)
    } else {
        ("object", name.strip_suffix(".json")?)
    };
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
