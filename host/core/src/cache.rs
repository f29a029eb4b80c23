use std::any::Any;
use std::collections::HashMap;
use std::ffi::OsString;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use rye_components::{ParseFailure, ParsedDocument};
use rye_space::{FileStamp, ItemKind, ListingCache, Quiet};
use serde_json::{Map, Value};

/// A bounded map that forgets what has not been used lately: entries live
/// in a current and a previous generation; when the current one is full it
/// becomes the previous one (dropping the old previous), and a hit in the
/// previous generation moves the entry back to the current one.
pub(crate) struct Generational<K, V> {
    current: HashMap<K, V>,
    previous: HashMap<K, V>,
    capacity: usize,
}

impl<K: Eq + Hash, V: Clone> Generational<K, V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            current: HashMap::new(),
            previous: HashMap::new(),
            capacity,
        }
    }

    pub(crate) fn get(&mut self, key: &K) -> Option<V>
    where
        K: Clone,
    {
        if let Some(v) = self.current.get(key) {
            return Some(v.clone());
        }
        let v = self.previous.remove(key)?;
        self.insert(key.clone(), v.clone());
        Some(v)
    }

    pub(crate) fn insert(&mut self, key: K, value: V) {
        if self.current.len() >= self.capacity {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, value);
    }
}

/// Cached metadata of one element file.
pub(crate) struct ElementEntry {
    pub(crate) stamp: FileStamp,
    pub(crate) parser: [u8; 32],
    pub(crate) content_hash: [u8; 32],
    pub(crate) metadata: Arc<Map<String, Value>>,
    /// `metadata` as JSON text, as components are shown it.
    pub(crate) metadata_json: Arc<str>,
}

/// Element metadata by file path.
#[derive(Default)]
pub(crate) struct ElementCache {
    pub(crate) entries: HashMap<OsString, ElementEntry, foldhash::fast::RandomState>,
}

/// Validation results kept for `execute` and `sign`, by validator and
/// subject.
pub(crate) const VALIDATION_CACHE_ENTRIES: usize = 20_000;

/// Values worked out from the spaces' files alone (a chain, a server
/// item), each kept with the listings' token of the moment its work
/// began, and valid while that token is current: while no watched folder
/// has reported a change (see [`rye_space::Quiet::holds_at`]). One
/// table, keyed by what was worked out and for which spaces; a value is
/// kept only if everything it was worked out from was vouched for by a
/// watch ([`rye_space::ListingCache::vouched_since`]).
pub(crate) struct Memos(std::sync::Mutex<Generational<Vec<u8>, Arc<dyn Any + Send + Sync>>>);

/// Values kept per generation.
const MEMO_ENTRIES: usize = 2048;

/// A kept value, with the token it was worked out under and when.
pub(crate) struct Kept<T> {
    quiet: Quiet,
    pub(crate) at: Instant,
    pub(crate) value: T,
}

impl Default for Memos {
    fn default() -> Self {
        Self(std::sync::Mutex::new(Generational::new(MEMO_ENTRIES)))
    }
}

impl Memos {
    /// The value kept under `key`, if it is still current at `now`.
    pub(crate) fn get<T: Send + Sync + 'static>(
        &self,
        now: Quiet,
        key: &Vec<u8>,
    ) -> Option<Arc<Kept<T>>> {
        let kept = self.0.lock().expect("memo lock").get(key)?;
        let kept = kept.downcast::<Kept<T>>().ok()?;
        kept.quiet.holds_at(now).then_some(kept)
    }

    /// Keeps `value`, worked out since `before` (taken at `at`), under
    /// `key`: if nothing changed meanwhile and everything read was
    /// vouched for.
    pub(crate) fn keep<T: Send + Sync + 'static>(
        &self,
        listings: &ListingCache,
        (before, at): (Quiet, Instant),
        key: Vec<u8>,
        value: T,
    ) {
        if listings.vouched_since(before) {
            let kept = Kept {
                quiet: before,
                at,
                value,
            };
            self.0
                .lock()
                .expect("memo lock")
                .insert(key, Arc::new(kept));
        }
    }
}

/// The key of what `what` names, worked out for `spaces` (each space's
/// folder) and `parts`.
pub(crate) fn memo_key(what: &str, spaces: &rye_space::Spaces, parts: &[&[u8]]) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt as _;
    let mut key = Vec::with_capacity(256);
    key.extend_from_slice(what.as_bytes());
    key.push(0);
    for root in spaces.roots() {
        key.push(root.space as u8);
        key.extend_from_slice(root.ai_dir.as_os_str().as_bytes());
        key.push(0);
    }
    for part in parts {
        key.extend_from_slice(part);
        key.push(0);
    }
    key
}

/// Parse results kept in memory, by parser and content.
pub(crate) const PARSE_CACHE_ENTRIES: usize = 50_000;

pub(crate) type Outcome = Arc<Result<ParsedDocument, ParseFailure>>;

#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct ParseKey {
    pub(crate) parser: [u8; 32],
    pub(crate) content: [u8; 32],
    pub(crate) kind: ItemKind,
    pub(crate) id: String,
    pub(crate) file_name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_entries_survive_turnover() {
        let mut cache = Generational::new(2);
        cache.insert(1, "a");
        cache.insert(2, "b");
        cache.insert(3, "c");
        assert_eq!(cache.get(&1), Some("a"));
        cache.insert(4, "d");
        cache.insert(5, "e");
        assert_eq!(cache.get(&1), Some("a"));
        assert_eq!(cache.get(&2), None);
    }
}
