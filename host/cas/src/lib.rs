//! Rye's content-addressed store.
//!
//! Two kinds of content, both addressed by the SHA-256 of their bytes:
//! **blobs** (raw bytes) and **objects** (JSON values stored as
//! [canonical JSON](canonical), each carrying `schema` and `kind`). The
//! layout is the original's (`.ai/state/objects/` in a project):
//!
//! ```text
//! blobs/ab/cd/abcd…            raw bytes
//! objects/ab/cd/abcd….json     canonical JSON
//! refs/<name>.json             {"hash": "<h>"}, moved by compare-and-swap
//! ```
//!
//! Content goes through a [`Storage`], so the same objects can live in
//! local files ([`LocalStorage`]) or, on a node, in an object store. A
//! storage only ever writes a key once with the bytes its name promises;
//! nothing depends on it honouring conditional writes. Every read is
//! checked against its hash: a corrupted or substituted file is an error,
//! never content. Refs are mutable, so they are not content: [`LocalRefs`]
//! keeps them in files here; a node keeps them in its database.

pub mod canonical;
mod refs;
mod storage;

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use refs::{LocalRefs, RefError};
pub use storage::{LocalStorage, Storage};

/// The object schema this store writes (the original's second).
pub const SCHEMA: u64 = 2;

/// A SHA-256, written as 64 lower-case hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash([u8; 32]);

impl ContentHash {
    /// The hash of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The hash in hex.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({})", self.hex())
    }
}

impl FromStr for ContentHash {
    type Err = CasError;

    /// Exactly 64 lower-case hex digits, as the store writes them.
    fn from_str(s: &str) -> Result<Self, CasError> {
        let valid = s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !valid {
            return Err(CasError::BadHash(s.chars().take(80).collect()));
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(s, &mut bytes).map_err(|_| CasError::BadHash(s.to_owned()))?;
        Ok(Self(bytes))
    }
}

/// Blob or object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Blob,
    Object,
}

impl Class {
    /// Where content of this class with `hash` lives in a storage.
    pub fn key(self, hash: &ContentHash) -> String {
        let h = hash.hex();
        match self {
            Class::Blob => format!("blobs/{}/{}/{h}", &h[..2], &h[2..4]),
            Class::Object => format!("objects/{}/{}/{h}.json", &h[..2], &h[2..4]),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CasError {
    #[error("{0:?} is not a content hash (64 lower-case hex digits)")]
    BadHash(String),
    #[error(
        "{key}: the content's hash is {actual}, not the {expected} its name promises; the copy is corrupt or was replaced"
    )]
    Corrupt {
        key: String,
        expected: ContentHash,
        actual: ContentHash,
    },
    #[error("{key}: not an object: {reason}")]
    NotAnObject { key: String, reason: String },
    #[error("an object must be a JSON mapping with an integer `schema` and a text `kind`: {0}")]
    Shape(String),
    #[error("{key}: {source}")]
    Io {
        key: String,
        #[source]
        source: std::io::Error,
    },
}

/// A content-addressed store over a [`Storage`].
#[derive(Debug, Clone)]
pub struct Cas<S> {
    storage: S,
}

impl<S: Storage> Cas<S> {
    pub fn new(storage: S) -> Self {
        Self { storage }
    }

    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// Stores `bytes` as a blob; its hash.
    pub async fn put_blob(&self, bytes: &[u8]) -> Result<ContentHash, CasError> {
        let hash = ContentHash::of(bytes);
        self.put(Class::Blob, &hash, bytes).await?;
        Ok(hash)
    }

    /// Stores `value` as an object, written canonically; its hash. The
    /// value must be a mapping with an integer `schema` and a text `kind`
    /// (see [`object`]).
    pub async fn put_object(&self, value: &Value) -> Result<ContentHash, CasError> {
        self.put_value(value, false).await
    }

    /// [`Cas::put_object`] for an object that cannot be in the store yet
    /// (it names something just made, such as a fresh thread id): the
    /// store does not look for it before writing it.
    pub async fn put_new_object(&self, value: &Value) -> Result<ContentHash, CasError> {
        self.put_value(value, true).await
    }

    /// Stores `value` as an object, written canonically, through
    /// [`Storage::put_new`] when it is `new`.
    async fn put_value(&self, value: &Value, new: bool) -> Result<ContentHash, CasError> {
        check_shape(value)?;
        let bytes = canonical::to_vec(value);
        let hash = ContentHash::of(&bytes);
        let key = Class::Object.key(&hash);
        let stored = if new {
            self.storage.put_new(&key, &bytes).await
        } else {
            self.storage.put(&key, &bytes).await
        };
        stored.map_err(|e| io(&key, e))?;
        Ok(hash)
    }

    /// Stores an object given as the bytes [`canonical::to_vec`] made of
    /// it (when they were needed anyway, to check a hash), so they are
    /// not made twice; its hash.
    pub async fn put_canonical(&self, bytes: &[u8]) -> Result<ContentHash, CasError> {
        let hash = ContentHash::of(bytes);
        self.put(Class::Object, &hash, bytes).await?;
        Ok(hash)
    }

    /// [`Cas::put_canonical`] for an object that cannot be in the store
    /// yet (see [`Cas::put_new_object`]).
    pub async fn put_new_canonical(&self, bytes: &[u8]) -> Result<ContentHash, CasError> {
        let hash = ContentHash::of(bytes);
        let key = Class::Object.key(&hash);
        self.storage
            .put_new(&key, bytes)
            .await
            .map_err(|e| io(&key, e))?;
        Ok(hash)
    }

    async fn put(&self, class: Class, hash: &ContentHash, bytes: &[u8]) -> Result<(), CasError> {
        let key = class.key(hash);
        self.storage.put(&key, bytes).await.map_err(|e| io(&key, e))
    }

    /// The blob with `hash`, checked; `None` when the store has none.
    pub async fn get_blob(&self, hash: &ContentHash) -> Result<Option<Vec<u8>>, CasError> {
        self.get(Class::Blob, hash).await
    }

    /// The object with `hash`, checked and parsed; `None` when the store
    /// has none.
    pub async fn get_object(&self, hash: &ContentHash) -> Result<Option<Value>, CasError> {
        let Some(bytes) = self.get(Class::Object, hash).await? else {
            return Ok(None);
        };
        let key = Class::Object.key(hash);
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| CasError::NotAnObject {
                key,
                reason: e.to_string(),
            })
    }

    async fn get(&self, class: Class, hash: &ContentHash) -> Result<Option<Vec<u8>>, CasError> {
        let key = class.key(hash);
        let Some(bytes) = self.storage.get(&key).await.map_err(|e| io(&key, e))? else {
            return Ok(None);
        };
        let actual = ContentHash::of(&bytes);
        if actual != *hash {
            return Err(CasError::Corrupt {
                key,
                expected: *hash,
                actual,
            });
        }
        Ok(Some(bytes))
    }

    /// Removes `hash` of `class` from the store (nothing when it is not
    /// there). The caller knows nothing else refers to it.
    pub async fn delete(&self, class: Class, hash: &ContentHash) -> Result<(), CasError> {
        let key = class.key(hash);
        self.storage.delete(&key).await.map_err(|e| io(&key, e))
    }

    /// Whether the store holds `hash` as a blob or an object.
    pub async fn has(&self, hash: &ContentHash) -> Result<Option<Class>, CasError> {
        for class in [Class::Blob, Class::Object] {
            let key = class.key(hash);
            if self.storage.exists(&key).await.map_err(|e| io(&key, e))? {
                return Ok(Some(class));
            }
        }
        Ok(None)
    }
}

fn io(key: &str, source: std::io::Error) -> CasError {
    CasError::Io {
        key: key.to_owned(),
        source,
    }
}

/// The canonical bytes of [`object`]`(kind, fields)`, written from
/// borrowed fields: what storing an object of values the caller keeps
/// costs without copying them into a value of its own.
pub fn object_bytes(kind: &str, fields: &[(&str, &Value)]) -> Vec<u8> {
    let schema = Value::from(SCHEMA);
    let kind = Value::from(kind);
    let mut entries: Vec<(&str, &Value)> = Vec::with_capacity(fields.len() + 2);
    entries.extend(
        fields
            .iter()
            .copied()
            .filter(|(key, _)| !matches!(*key, "schema" | "kind")),
    );
    entries.push(("schema", &schema));
    entries.push(("kind", &kind));
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = String::with_capacity(256);
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        canonical::write_str(key, &mut out);
        out.push(':');
        canonical::write_value(value, &mut out);
    }
    out.push('}');
    out.into_bytes()
}

/// An object of `kind` at the current [`SCHEMA`] with `fields`.
pub fn object(kind: &str, fields: Map<String, Value>) -> Value {
    let mut map = fields;
    map.insert("schema".into(), Value::from(SCHEMA));
    map.insert("kind".into(), Value::from(kind));
    Value::Object(map)
}

fn check_shape(value: &Value) -> Result<(), CasError> {
    let Value::Object(map) = value else {
        return Err(CasError::Shape("not a mapping".into()));
    };
    if !map.get("schema").is_some_and(|s| s.is_u64()) {
        return Err(CasError::Shape("no integer `schema`".into()));
    }
    if !map.get("kind").is_some_and(Value::is_string) {
        return Err(CasError::Shape("no text `kind`".into()));
    }
    Ok(())
}
