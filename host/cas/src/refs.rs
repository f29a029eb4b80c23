//! Named pointers to content, moved only by compare-and-swap:
//! `refs/<name>.json` holds `{"hash": "<h>"}`.
//!
//! Two writers racing on one ref cannot both win: each takes the ref's
//! lock (a `flock` on a file beside it, released by the kernel if the
//! process dies), reads the current value, and writes only if it is the
//! one the writer expected. The new value goes to a temporary file that is
//! synced and renamed into place, so a crash leaves the old ref or the new
//! one, never a torn one.

use std::io::{self, Write};
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::storage::LocalStorage;
use crate::{CasError, ContentHash};

/// Refs in files under a store's folder.
#[derive(Debug, Clone)]
pub struct LocalRefs {
    files: LocalStorage,
}

#[derive(Debug, thiserror::Error)]
pub enum RefError {
    #[error(
        "{0:?} is not a ref name (segments of letters, digits, '.', '_' and '-', not starting with '.', joined by '/')"
    )]
    BadName(String),
    #[error("ref {name} moved: expected {}, found {}", show(.expected), show(.actual))]
    Conflict {
        name: String,
        expected: Option<ContentHash>,
        actual: Option<ContentHash>,
    },
    #[error("ref {name}: {reason}")]
    Corrupt { name: String, reason: String },
    #[error("ref {name}: {source}")]
    Io {
        name: String,
        #[source]
        source: io::Error,
    },
}

fn show(hash: &Option<ContentHash>) -> String {
    hash.map_or_else(|| "none".to_owned(), |h| h.hex())
}

impl LocalRefs {
    /// Refs under `root` (the store's folder: they go in `root/refs/`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            files: LocalStorage::new(root),
        }
    }

    fn key(name: &str) -> Result<String, RefError> {
        let valid = !name.is_empty()
            && name.len() <= 512
            && name.split('/').all(|segment| {
                !segment.is_empty()
                    && !segment.starts_with('.')
                    && segment
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            });
        if !valid {
            return Err(RefError::BadName(name.chars().take(120).collect()));
        }
        Ok(format!("refs/{name}.json"))
    }

    /// Where `name` points, if anywhere.
    pub fn get(&self, name: &str) -> Result<Option<ContentHash>, RefError> {
        let key = Self::key(name)?;
        let io_error = |source| RefError::Io {
            name: name.to_owned(),
            source,
        };
        let Some(bytes) = self.files.read(&key).map_err(io_error)? else {
            return Ok(None);
        };
        let corrupt = |reason: String| RefError::Corrupt {
            name: name.to_owned(),
            reason,
        };
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        let hash = value
            .get("hash")
            .and_then(Value::as_str)
            .ok_or_else(|| corrupt("no \"hash\"".into()))?;
        hash.parse()
            .map(Some)
            .map_err(|e: CasError| corrupt(e.to_string()))
    }

    /// Points `name` at `new` if it points at `expected` now (`None`: if
    /// it does not exist yet).
    pub fn compare_and_swap(
        &self,
        name: &str,
        expected: Option<ContentHash>,
        new: ContentHash,
    ) -> Result<(), RefError> {
        let key = Self::key(name)?;
        let io_error = |source| RefError::Io {
            name: name.to_owned(),
            source,
        };
        let target = self.files.root().join(&key);
        let dir = target.parent().unwrap_or(self.files.root()).to_owned();
        std::fs::create_dir_all(&dir).map_err(io_error)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(target.with_extension("json.lock"))
            .map_err(io_error)?;
        lock.lock().map_err(io_error)?;
        let actual = self.get(name)?;
        if actual != expected {
            return Err(RefError::Conflict {
                name: name.to_owned(),
                expected,
                actual,
            });
        }
        let temp = target.with_extension(format!("json.tmp.{}", std::process::id()));
        let written = (|| {
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(json!({"hash": new.hex()}).to_string().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temp, &target)?;
            // The rename itself is durable once the folder is synced.
            std::fs::File::open(&dir)?.sync_all()
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written.map_err(io_error)
    }
}
