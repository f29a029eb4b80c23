//! The sync protocol's object exchange over a store (spec §4), as JSON in
//! and JSON out, for a node to answer and a client to check against:
//!
//! - `has {hashes}` → `{present, missing}`;
//! - `put {entries: [{hash, kind: blob|object, data: base64}]}` →
//!   `{stored}`; content that is UTF-8 may come as `text` instead of
//!   `data`, sparing base64's third. Every hash is computed again from
//!   the bytes (an object's from its canonical form, so any spelling of
//!   the same JSON is accepted) and every entry checked before anything
//!   is stored: one bad entry and the answer is a 400 listing `errors`,
//!   with nothing stored;
//! - `get {hashes}` → `{entries}`, blobs first, objects canonical, what is
//!   missing left out.
//!
//! And the closure of a manifest: every object and blob it names, checked
//! present and of the right kind, which a node requires before a head may
//! point at it and a client sends before it asks.

use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use std::collections::BTreeSet;

use base64::Engine as _;
use rye_cas::{Cas, Class, ContentHash, Storage};
use serde_json::{Value, json};

/// At most this many hashes or entries in one request.
pub const MAX_BATCH: usize = 10_000;

/// A request refused: the HTTP status and the body that says why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub status: u16,
    pub body: Value,
}

impl Refused {
    pub fn bad_request(error: impl Into<String>) -> Self {
        Refused {
            status: 400,
            body: json!({"error": error.into()}),
        }
    }

    fn store(error: rye_cas::CasError) -> Self {
        Refused {
            status: 500,
            body: json!({"error": format!("the store failed: {error}")}),
        }
    }
}

fn hash_of(value: &Value) -> Result<ContentHash, String> {
    let text = value
        .as_str()
        .ok_or_else(|| format!("{value} is no hash (64 lowercase hex digits)"))?;
    if text.len() != 64 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!("{text:?} is no hash (64 lowercase hex digits)"));
    }
    text.parse().map_err(|_| format!("{text:?} is no hash"))
}

/// The `hashes` of a request, at most [`MAX_BATCH`], each 64 hex.
pub fn hashes(request: &Value) -> Result<Vec<ContentHash>, Refused> {
    let list = request
        .get("hashes")
        .and_then(Value::as_array)
        .ok_or_else(|| Refused::bad_request("the request has no hashes (a list)"))?;
    if list.len() > MAX_BATCH {
        return Err(Refused::bad_request(format!(
            "{} hashes in one request, more than {MAX_BATCH}",
            list.len()
        )));
    }
    list.iter()
        .map(|h| hash_of(h).map_err(Refused::bad_request))
        .collect()
}

pub async fn has<S: Storage>(cas: &Cas<S>, request: &Value) -> Result<Value, Refused> {
    let mut present = Vec::new();
    let mut missing = Vec::new();
    for hash in hashes(request)? {
        match cas.has(&hash).await.map_err(Refused::store)? {
            Some(_) => present.push(hash.hex()),
            None => missing.push(hash.hex()),
        }
    }
    Ok(json!({"present": present, "missing": missing}))
}

/// One checked entry of a `put`.
enum Checked {
    Blob(Vec<u8>),
    Object(Value),
}

fn check_entry(entry: &Value) -> Result<(ContentHash, Checked), String> {
    let hash = hash_of(entry.get("hash").unwrap_or(&Value::Null))?;
    let bytes = match (entry.get("data"), entry.get("text")) {
        (Some(data), None) => base64::engine::general_purpose::STANDARD
            .decode(data.as_str().ok_or("the data is not text")?)
            .map_err(|e| format!("the data is not base64: {e}"))?,
        (None, Some(text)) => text
            .as_str()
            .ok_or("the text is not text")?
            .as_bytes()
            .to_vec(),
        _ => return Err("neither data (base64) nor text (UTF-8), or both".into()),
    };
    match entry.get("kind").and_then(Value::as_str) {
        Some("blob") => {
            let actual = ContentHash::of(&bytes);
            if actual != hash {
                return Err(format!("the bytes hash to {}", actual.hex()));
            }
            Ok((hash, Checked::Blob(bytes)))
        }
        Some("object") => {
            let value: Value =
                serde_json::from_slice(&bytes).map_err(|e| format!("the data is not JSON: {e}"))?;
            let actual = ContentHash::of(&rye_cas::canonical::to_vec(&value));
            if actual != hash {
                return Err(format!("the object hashes to {}", actual.hex()));
            }
            let shaped = value.get("schema").is_some_and(Value::is_u64)
                && value.get("kind").is_some_and(Value::is_string);
            if !shaped {
                return Err("the object has no integer schema and text kind".into());
            }
            Ok((hash, Checked::Object(value)))
        }
        other => Err(format!(
            "kind {} is neither \"blob\" nor \"object\"",
            other.map_or_else(|| "missing".to_owned(), |k| format!("{k:?}"))
        )),
    }
}

pub async fn put<S: Storage>(cas: &Cas<S>, request: &Value) -> Result<Value, Refused> {
    let entries = request
        .get("entries")
        .and_then(Value::as_array)
        .ok_or_else(|| Refused::bad_request("the request has no entries (a list)"))?;
    if entries.len() > MAX_BATCH {
        return Err(Refused::bad_request(format!(
            "{} entries in one request, more than {MAX_BATCH}",
            entries.len()
        )));
    }
    let mut checked = Vec::with_capacity(entries.len());
    let mut errors = Vec::new();
    for entry in entries {
        match check_entry(entry) {
            Ok(ok) => checked.push(ok),
            Err(error) => errors.push(json!({"hash": entry.get("hash"), "error": error})),
        }
    }
    if !errors.is_empty() {
        return Err(Refused {
            status: 400,
            body: json!({"stored": [], "errors": errors}),
        });
    }
    let stored: Vec<String> = stream::iter(checked)
        .map(|(hash, entry)| async move {
            match entry {
                Checked::Blob(bytes) => cas.put_blob(&bytes).await,
                Checked::Object(value) => cas.put_object(&value).await,
            }
            .map(|_| hash.hex())
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await
        .map_err(Refused::store)?;
    Ok(json!({"stored": stored}))
}

/// Reads and writes one request has under way at once: a store across a
/// network (S3) answers each in a round trip, which this many overlap.
const IN_FLIGHT: usize = 32;

pub async fn get<S: Storage>(cas: &Cas<S>, request: &Value) -> Result<Value, Refused> {
    let found: Vec<Option<Value>> = stream::iter(hashes(request)?)
        .map(|hash| async move {
            let found = match cas.get_blob(&hash).await? {
                Some(bytes) => Some(("blob", bytes)),
                None => cas
                    .get_object(&hash)
                    .await?
                    .map(|value| ("object", rye_cas::canonical::to_vec(&value))),
            };
            Ok::<_, rye_cas::CasError>(found.map(|(kind, bytes)| {
                json!({
                    "hash": hash.hex(),
                    "kind": kind,
                    "data": base64::engine::general_purpose::STANDARD.encode(bytes),
                })
            }))
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await
        .map_err(Refused::store)?;
    Ok(json!({"entries": found.into_iter().flatten().collect::<Vec<_>>()}))
}

/// Everything a manifest names, itself first: objects and blobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Closure {
    pub objects: BTreeSet<String>,
    pub blobs: BTreeSet<String>,
}

impl Closure {
    pub fn hashes(&self) -> impl Iterator<Item = &String> {
        self.objects.iter().chain(self.blobs.iter())
    }
}

/// The closure of the `source_manifest` `manifest`, every part checked
/// present and of its kind; refused (400) with what is wrong or missing
/// otherwise.
pub async fn closure<S: Storage>(cas: &Cas<S>, manifest: &ContentHash) -> Result<Closure, Refused> {
    let mut closure = Closure::default();
    let mut wrong = Vec::new();
    let object = cas.get_object(manifest).await.map_err(Refused::store)?;
    let Some(object) = object else {
        return Err(Refused {
            status: 400,
            body: json!({"error": "the manifest is not in the store", "missing": [manifest.hex()]}),
        });
    };
    if object.get("kind").and_then(Value::as_str) != Some("source_manifest")
        || !matches!(
            object.get("space").and_then(Value::as_str),
            Some("project" | "user")
        )
    {
        return Err(Refused::bad_request(format!(
            "{} is no source_manifest of a project or user space",
            manifest.hex()
        )));
    }
    if object.get("schema").and_then(Value::as_u64) != Some(rye_cas::SCHEMA) {
        return Err(Refused::bad_request(format!(
            "manifest {} is of schema {}, not {}",
            manifest.hex(),
            object.get("schema").unwrap_or(&Value::Null),
            rye_cas::SCHEMA
        )));
    }
    closure.objects.insert(manifest.hex());
    let named = |key: &str| -> Vec<(String, Value)> {
        object
            .get(key)
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    };
    let mut missing = Vec::new();
    for (path, hash) in named("items") {
        let hash = match hash_of(&hash) {
            Ok(hash) => hash,
            Err(error) => {
                wrong.push(format!("item {path}: {error}"));
                continue;
            }
        };
        let Some(source) = cas.get_object(&hash).await.map_err(Refused::store)? else {
            missing.push(hash.hex());
            continue;
        };
        if source.get("kind").and_then(Value::as_str) != Some("item_source") {
            wrong.push(format!("item {path}: {} is no item_source", hash.hex()));
            continue;
        }
        closure.objects.insert(hash.hex());
        match source.get("content_blob_hash").map(hash_of) {
            Some(Ok(blob)) => {
                if cas.has(&blob).await.map_err(Refused::store)? == Some(Class::Blob) {
                    closure.blobs.insert(blob.hex());
                } else {
                    missing.push(blob.hex());
                }
            }
            _ => wrong.push(format!(
                "item {path}: its item_source names no content blob"
            )),
        }
    }
    for (path, hash) in named("files") {
        match hash_of(&hash) {
            Ok(blob) => {
                if cas.has(&blob).await.map_err(Refused::store)? == Some(Class::Blob) {
                    closure.blobs.insert(blob.hex());
                } else {
                    missing.push(blob.hex());
                }
            }
            Err(error) => wrong.push(format!("file {path}: {error}")),
        }
    }
    if !wrong.is_empty() || !missing.is_empty() {
        missing.sort();
        missing.dedup();
        return Err(Refused {
            status: 400,
            body: json!({"error": "the manifest's content is incomplete or wrong",
                         "missing": missing, "wrong": wrong}),
        });
    }
    Ok(closure)
}

#[cfg(test)]
mod tests;
