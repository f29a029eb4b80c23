//! What search keeps between requests: a document per item file, by path.

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::Arc;

use rye_space::{FileStamp, ItemKind};
use serde_json::{Map, Value};

use crate::normalize;

/// Characters of an item's text shown (and matched) as its preview.
pub(crate) const PREVIEW_CHARS: usize = 200;

/// What search knows about one item file.
#[derive(Debug)]
pub(crate) struct SearchDoc {
    pub(crate) name: String,
    pub(crate) title: String,
    pub(crate) description: String,
    pub(crate) preview: String,
    pub(crate) metadata: Map<String, Value>,
    pub(crate) error: Option<String>,
    /// Lowercase text per searchable field, in [`FIELDS`] order.
    pub(crate) fields: [String; FIELDS.len()],
    /// The non-empty fields joined by spaces: what a query must match.
    pub(crate) joined: String,
}

/// The fields search matches, and the names extractors weigh them by.
pub(crate) const FIELDS: [&str; 7] = [
    "name",
    "title",
    "id",
    "description",
    "tags",
    "category",
    "preview",
];

impl SearchDoc {
    pub(crate) fn field(&self, name: &str) -> &str {
        FIELDS
            .iter()
            .position(|f| *f == name)
            .map_or("", |i| self.fields[i].as_str())
    }
}

impl SearchDoc {
    pub(crate) fn new(
        kind: ItemKind,
        id: &str,
        document: Result<(&Map<String, Value>, &str), String>,
    ) -> Self {
        let (metadata, preview, error) = match document {
            Ok((document, content)) => {
                let metadata = normalize(kind, id, document);
                let text = match (kind, document.get("body")) {
                    (ItemKind::Tool, _) | (_, None) => content,
                    (_, Some(body)) => body.as_str().unwrap_or_default(),
                };
                (metadata, text.chars().take(PREVIEW_CHARS).collect(), None)
            }
            Err(error) => (normalize(kind, id, &Map::new()), String::new(), Some(error)),
        };
        let text = |key: &str| {
            metadata
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let name = text("name");
        let title = metadata
            .get("title")
            .and_then(Value::as_str)
            .map_or_else(|| name.clone(), str::to_owned);
        let description = text("description");
        let tags = match metadata.get("tags") {
            Some(Value::Array(tags)) => tags
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
            Some(Value::String(tag)) => tag.clone(),
            _ => String::new(),
        };
        let fields = [
            name.to_lowercase(),
            title.to_lowercase(),
            id.to_lowercase(),
            description.to_lowercase(),
            tags.to_lowercase(),
            text("category").to_lowercase(),
            preview.to_lowercase(),
        ];
        let joined = fields
            .iter()
            .filter(|f| !f.is_empty())
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" ");
        Self {
            name,
            title,
            description,
            preview,
            metadata,
            error,
            fields,
            joined,
        }
    }
}

pub(crate) struct IndexEntry {
    pub(crate) stamp: FileStamp,
    pub(crate) parser: [u8; 32],
    pub(crate) kind: ItemKind,
    pub(crate) id: String,
    pub(crate) doc: Arc<SearchDoc>,
}

/// Search documents by file path. Keyed by the path's bytes with a fast
/// hash: `Path`'s own hashing and equality walk its components, which is
/// most of a lookup's cost.
#[derive(Default)]
pub(crate) struct Index {
    pub(crate) entries: HashMap<OsString, IndexEntry, foldhash::fast::RandomState>,
}
