//! Search across the spaces.
//!
//! Every item file of the requested kinds is read once through its parser
//! and kept in an index entry that stays valid while the file's stamp and
//! its parser component are unchanged, so a repeated search costs a walk
//! of the folders, a `stat` per file and the scoring.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use rye_space::query::{Document, Matching, Query};
use rye_space::{ItemKind, Listed, Space};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::parse::ParserLookup;
use crate::search_index::{IndexEntry, SearchDoc};
use crate::session::Session;
use crate::{HostError, Rye};

/// Which spaces a search covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceFilter {
    /// All three spaces.
    All,
    /// All three spaces (the original's name for "not the registry").
    Local,
    Project,
    User,
    System,
}

impl SourceFilter {
    pub fn parse(s: &str) -> Result<Self, HostError> {
        Ok(match s {
            "all" => Self::All,
            "local" => Self::Local,
            "project" => Self::Project,
            "user" => Self::User,
            "system" => Self::System,
            "registry" => {
                return Err(HostError::SourceUnavailable("registry".into()));
            }
            other => {
                return Err(HostError::Unknown {
                    what: "source",
                    value: other.to_owned(),
                    expected: "all, local, project, user or system",
                });
            }
        })
    }

    fn includes(self, space: Space) -> bool {
        match self {
            Self::All | Self::Local => true,
            Self::Project => space == Space::Project,
            Self::User => space == Space::User,
            Self::System => space == Space::System,
        }
    }
}

/// A search.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// An item kind (`directive`, `tool`, `knowledge`) or `all`, optionally
    /// narrowed to a namespace: `tool.rye.core.*` searches tools whose id
    /// is under `rye/core/`. The capability form `rye.search.tool.rye.core.*`
    /// is accepted too.
    pub scope: String,
    /// The query (see [`rye_space::query`]); empty matches everything.
    pub query: String,
    pub source: SourceFilter,
    pub limit: usize,
    pub offset: usize,
    /// The project folder (holding `.ai/`), if any.
    pub project: Option<PathBuf>,
    /// Queries each named field must match besides `query`:
    /// `("name", "bash")` is `name:bash` in the query.
    pub fields: Vec<(String, String)>,
    /// Conditions on results (see [`Filters`]).
    pub filters: Filters,
    pub sort_by: SortBy,
    /// Fuzzy terms and proximity.
    pub matching: Matching,
}

/// How results are ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SortBy {
    /// Best score first (then project before user before system, and id).
    #[default]
    Score,
    /// Newest `created_at` first; items without one last.
    Date,
    /// By name, A to Z.
    Name,
}

impl std::str::FromStr for SortBy {
    type Err = HostError;

    fn from_str(s: &str) -> Result<Self, HostError> {
        match s {
            "score" => Ok(Self::Score),
            "date" => Ok(Self::Date),
            "name" => Ok(Self::Name),
            other => Err(HostError::Unknown {
                what: "sort_by",
                value: other.to_owned(),
                expected: "score, date or name",
            }),
        }
    }
}

/// Conditions every result must meet, by field (a top-level field such as
/// `name`, `category`, `id`, `source` or `type`, else a metadata key):
///
/// - `date_from` / `date_to`: ISO dates compared with `created_at`
///   (inclusive; an item without one passes);
/// - a list: the item's value is one of them, or shares one with them
///   when it is a list itself (tags);
/// - `"!x"`: the value is not `x`;
/// - `">=1.2"`, `"<=…"`, `">…"`, `"<…"`: dotted versions compared by
///   number (padded to three parts);
/// - anything else: equal, ignoring case (a member, for a list value).
#[derive(Debug, Clone, Default)]
pub struct Filters(Vec<(String, Value)>);

impl Filters {
    /// The filters of a JSON object.
    pub fn from_object(filters: &Map<String, Value>) -> Self {
        Self(
            filters
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn pass(&self, item: &Listed, doc: &SearchDoc) -> bool {
        self.0.iter().all(|(key, wanted)| match key.as_str() {
            "date_from" | "date_to" => {
                let (Some(date), Some(bound)) = (created_at(doc), wanted.as_str()) else {
                    return true;
                };
                let date = &date[..date.len().min(bound.len())];
                if key == "date_from" {
                    date >= bound
                } else {
                    date <= bound
                }
            }
            _ => value_of(item, doc, key).is_some_and(|have| filter_holds(&have, wanted)),
        })
    }
}

/// An item's `created_at` (or `date`), as written.
fn created_at(doc: &SearchDoc) -> Option<&str> {
    ["created_at", "date"]
        .iter()
        .find_map(|k| doc.metadata.get(*k).and_then(Value::as_str))
}

/// The value of `key` for a result: a top-level field or a metadata key.
fn value_of(item: &Listed, doc: &SearchDoc, key: &str) -> Option<Value> {
    Some(match key {
        "id" => Value::from(item.id.as_str()),
        "name" => Value::from(doc.name.as_str()),
        "title" => Value::from(doc.title.as_str()),
        "description" => Value::from(doc.description.as_str()),
        "source" => Value::from(item.space.to_string()),
        "type" => Value::from(item.kind.to_string()),
        _ => doc.metadata.get(key)?.clone(),
    })
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.to_lowercase()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn filter_holds(have: &Value, wanted: &Value) -> bool {
    let members: Vec<String> = match have {
        Value::Array(items) => items.iter().filter_map(scalar_text).collect(),
        other => scalar_text(other).into_iter().collect(),
    };
    match wanted {
        Value::Array(options) => options
            .iter()
            .filter_map(scalar_text)
            .any(|o| members.contains(&o)),
        Value::String(condition) => {
            let condition = condition.to_lowercase();
            if let Some(not) = condition.strip_prefix('!') {
                return !members.iter().any(|m| m == not);
            }
            for (op, holds) in [
                (
                    ">=",
                    (|o| o != std::cmp::Ordering::Less) as fn(std::cmp::Ordering) -> bool,
                ),
                ("<=", |o| o != std::cmp::Ordering::Greater),
                (">", |o| o == std::cmp::Ordering::Greater),
                ("<", |o| o == std::cmp::Ordering::Less),
            ] {
                if let Some(bound) = condition.strip_prefix(op) {
                    return members
                        .iter()
                        .any(|m| holds(compare_versions(m, bound.trim())));
                }
            }
            members.contains(&condition)
        }
        other => scalar_text(other).is_some_and(|o| members.contains(&o)),
    }
}

/// Dotted versions compared part by part as numbers, padded to three
/// parts; a part that is not a number compares equal.
fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let parts = |v: &str| -> Vec<Option<u64>> {
        let mut parts: Vec<Option<u64>> = v.split('.').map(|p| p.trim().parse().ok()).collect();
        while parts.len() < 3 {
            parts.push(Some(0));
        }
        parts
    };
    let (a, b) = (parts(a), parts(b));
    for (x, y) in a.iter().zip(&b) {
        if let (Some(x), Some(y)) = (x, y)
            && x != y
        {
            return x.cmp(y);
        }
    }
    std::cmp::Ordering::Equal
}

impl SearchRequest {
    pub fn new(scope: impl Into<String>, query: impl Into<String>) -> Self {
        Self {
            scope: scope.into(),
            query: query.into(),
            source: SourceFilter::All,
            limit: 10,
            offset: 0,
            project: None,
            fields: Vec::new(),
            filters: Filters::default(),
            sort_by: SortBy::Score,
            matching: Matching::default(),
        }
    }

    pub fn project(mut self, project: impl Into<PathBuf>) -> Self {
        self.project = Some(project.into());
        self
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ShadowRef {
    pub source: Space,
    pub path: PathBuf,
}

/// One result.
#[derive(Debug, Clone, Serialize)]
pub struct SearchHit {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: ItemKind,
    pub name: String,
    pub title: String,
    pub description: String,
    /// The item's category, as its metadata says (also in `metadata`).
    pub category: String,
    pub preview: String,
    pub source: Space,
    pub path: PathBuf,
    pub score: f64,
    /// Whether the file is signed by a trusted key and unchanged since.
    pub signed: bool,
    /// The SHA-256 of the file when it is signed and verified.
    pub integrity: Option<String>,
    pub metadata: Map<String, Value>,
    /// The space whose item of the same id wins over this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadowed_by: Option<Space>,
    /// Items of the same id this one hides.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<ShadowRef>,
    /// Why the item could not be read, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchResponse {
    pub results: Vec<SearchHit>,
    /// Matches before `offset` and `limit` were applied.
    pub total: usize,
    pub query: String,
    pub scope: String,
    pub source: SourceFilter,
    pub limit: usize,
    pub offset: usize,
    pub sort_by: SortBy,
    pub search_type: &'static str,
}

/// Parses a scope into kinds and an optional id namespace.
fn parse_scope(scope: &str) -> Result<(Vec<ItemKind>, Option<String>), HostError> {
    let invalid = |why: &'static str| HostError::Scope {
        scope: scope.to_owned(),
        why,
    };
    let scope = scope.trim();
    let rest = ["rye.search.", "rye.fetch.", "rye.*."]
        .iter()
        .find_map(|p| scope.strip_prefix(p))
        .unwrap_or(scope);
    if rest.is_empty() {
        return Err(invalid("is empty"));
    }
    let (kind, namespace) = rest.split_once('.').unwrap_or((rest, ""));
    let kinds = match kind {
        "all" | "*" => ItemKind::PRIMARY.to_vec(),
        kind => {
            let kind: ItemKind = kind
                .parse()
                .map_err(|_| invalid("does not start with an item kind"))?;
            if kind == ItemKind::Config {
                return Err(invalid("names config, which is not searchable"));
            }
            vec![kind]
        }
    };
    let namespace = namespace
        .trim_end_matches('*')
        .trim_end_matches('.')
        .replace('.', "/");
    Ok((kinds, (!namespace.is_empty()).then_some(namespace)))
}

fn in_namespace(id: &str, namespace: Option<&str>) -> bool {
    namespace.is_none_or(|ns| {
        id == ns
            || id
                .strip_prefix(ns)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

impl Rye {
    /// Searches items; see [`SearchRequest`] and [`rye_space::query`].
    /// Results are ordered by score, then space (project first), kind and
    /// id, so equal queries give equal answers.
    pub fn search(&self, request: &SearchRequest) -> Result<SearchResponse, HostError> {
        // It reads and writes nothing in the spaces: one reading of their
        // watches serves every listing it checks.
        let _request = rye_space::RequestScope::begin();
        let (kinds, namespace) = parse_scope(&request.scope)?;
        let mut query = Query::parse(&request.query)?;
        for (field, text) in &request.fields {
            query = query.and_field(field, Query::parse(text)?)?;
        }
        let (filters, how) = (&request.filters, &request.matching);
        let session = self.session(request.project.as_deref());
        let spaces = &session.spaces;
        let extractors = session.extractors(self)?;

        // Every listed item (for shadowing, whether it matches or not), and
        // the matches as (score, index into `listed`, document).
        let mut listings = Vec::new();
        for kind in &kinds {
            let extractor = extractors.require(*kind)?;
            for root in spaces
                .roots()
                .iter()
                .filter(|r| request.source.includes(r.space))
            {
                listings.push(spaces.list_cached(
                    &self.listings,
                    *kind,
                    root.space,
                    &extractor.extensions,
                )?);
            }
        }
        let listed: Vec<&Listed> = listings
            .iter()
            .flat_map(|l| l.iter())
            .filter(|item| item.escape.is_none() && in_namespace(&item.id, namespace.as_deref()))
            .collect();

        // Documents and scores, computed on a few threads: on a warm index
        // this is lookups and matching, on a cold one mostly parsing.
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4);
        let chunk = listed.len().div_ceil(threads).max(1);
        let scored: Vec<Vec<(f64, usize, Arc<SearchDoc>)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = listed
                .chunks(chunk)
                .enumerate()
                .map(|(n, items)| {
                    let (session, extractors, query) = (&session, &extractors, &query);
                    let listed = &listed;
                    scope.spawn(move || {
                        let docs = self.search_docs(session, items);
                        let mut matches = Vec::new();
                        for (i, (item, doc)) in items.iter().zip(docs).enumerate() {
                            let Ok(extractor) = extractors.require(item.kind) else {
                                continue;
                            };
                            let fields: Vec<(f64, &str)> = extractor
                                .search_fields
                                .iter()
                                .map(|(field, weight)| (*weight, doc.field(field)))
                                .collect();
                            let weight = |name: &str| {
                                extractor
                                    .search_fields
                                    .iter()
                                    .find(|(field, _)| field == name)
                                    .map_or(1.0, |(_, w)| *w)
                            };
                            let index = n * chunk + i;
                            if let Some(score) =
                                query.score_document(doc.as_ref(), &fields, weight, how)
                                && filters.pass(listed[index], &doc)
                            {
                                matches.push((score, index, doc.clone()));
                            }
                        }
                        matches
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("search thread panicked"))
                .collect()
        });
        let mut matches: Vec<(f64, usize, Arc<SearchDoc>)> = scored.into_iter().flatten().collect();

        matches.sort_by(|(sa, ia, da), (sb, ib, db)| {
            let (a, b) = (&listed[*ia], &listed[*ib]);
            let by_score = || {
                sb.total_cmp(sa)
                    .then(a.space.cmp(&b.space))
                    .then(a.kind.cmp(&b.kind))
                    .then_with(|| a.id.cmp(&b.id))
            };
            match request.sort_by {
                SortBy::Score => by_score(),
                // Newest first; undated last.
                SortBy::Date => match (created_at(da), created_at(db)) {
                    (Some(x), Some(y)) => y.cmp(x),
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (None, None) => std::cmp::Ordering::Equal,
                }
                .then_with(by_score),
                SortBy::Name => da
                    .name
                    .to_lowercase()
                    .cmp(&db.name.to_lowercase())
                    .then_with(by_score),
            }
        });
        let total = matches.len();
        let page: Vec<_> = matches
            .into_iter()
            .skip(request.offset)
            .take(request.limit)
            .collect();

        // Listing is in space order, so the first of an id is the winner.
        let mut same: HashMap<(ItemKind, &str), Vec<usize>> = HashMap::new();
        if !page.is_empty() {
            for (index, item) in listed.iter().enumerate() {
                same.entry((item.kind, item.id.as_str()))
                    .or_default()
                    .push(index);
            }
        }
        let trust = session.trust(self);
        let results = page
            .iter()
            .map(|(score, index, doc)| {
                let item = &listed[*index];
                let mut hit = hit(item, doc, *score);
                // Search never refuses an item for its signature; it says
                // how the signature stands.
                let verified = self.file_hash(&item.path).ok().and_then(|hash| {
                    let signed = self
                        .verify_item(
                            &trust,
                            Some(&extractors),
                            (item.kind, item.space, &item.path),
                            hash,
                            None,
                        )
                        .ok()?;
                    matches!(signed, crate::Signed::Verified(_)).then_some(hash)
                });
                hit.signed = verified.is_some();
                hit.integrity = verified.map(hex::encode);
                let group = &same[&(item.kind, item.id.as_str())];
                if group[0] == *index {
                    hit.shadows = group[1..]
                        .iter()
                        .map(|&i| ShadowRef {
                            source: listed[i].space,
                            path: listed[i].path.clone(),
                        })
                        .collect();
                } else {
                    hit.shadowed_by = Some(listed[group[0]].space);
                }
                hit
            })
            .collect();
        Ok(SearchResponse {
            results,
            total,
            query: request.query.clone(),
            scope: request.scope.clone(),
            source: request.source,
            limit: request.limit,
            offset: request.offset,
            sort_by: request.sort_by,
            search_type: "keyword",
        })
    }

    /// The search documents of `items`, in order: from the index where
    /// the file and its parser are unchanged (one lock for the lot), read
    /// anew otherwise.
    fn search_docs(&self, session: &Session, items: &[&Listed]) -> Vec<Arc<SearchDoc>> {
        let mut parsers = ParserLookup::default();
        let parser_hashes: Vec<[u8; 32]> = items
            .iter()
            .map(|item| {
                parsers
                    .for_file(self, session, item.kind, &item.path)
                    .map_or([0; 32], |(_, component)| component.hash)
            })
            .collect();
        let mut docs: Vec<Option<Arc<SearchDoc>>> = {
            let index = self.index.lock().expect("index lock");
            items
                .iter()
                .zip(&parser_hashes)
                .map(|(item, parser)| {
                    index
                        .entries
                        .get(item.path.as_os_str())
                        .filter(|e| {
                            e.stamp == item.stamp
                                && e.parser == *parser
                                && e.kind == item.kind
                                && e.id == item.id
                                && item.conflicts.is_empty()
                        })
                        .map(|e| e.doc.clone())
                })
                .collect()
        };
        let mut fresh = Vec::new();
        for (i, slot) in docs.iter_mut().enumerate() {
            if slot.is_none() {
                let doc = Arc::new(self.read_doc(session, &mut parsers, items[i]));
                fresh.push((i, doc.clone()));
                *slot = Some(doc);
            }
        }
        if !fresh.is_empty() {
            let mut index = self.index.lock().expect("index lock");
            for (i, doc) in fresh {
                let item = &items[i];
                index.entries.insert(
                    item.path.clone().into_os_string(),
                    IndexEntry {
                        stamp: item.stamp,
                        parser: parser_hashes[i],
                        kind: item.kind,
                        id: item.id.clone(),
                        doc,
                    },
                );
            }
        }
        docs.into_iter()
            .map(|d| d.expect("every slot filled"))
            .collect()
    }

    /// Reads one item for search: its parser's document, or why it could
    /// not be read.
    fn read_doc(
        &self,
        session: &Session,
        parsers: &mut ParserLookup,
        listed: &Listed,
    ) -> SearchDoc {
        let item = (
            listed.kind,
            listed.id.as_str(),
            listed.space,
            listed.path.as_path(),
        );
        let mut doc = match self.parse_file(session, parsers, item) {
            Ok(parsed) => match parsed.outcome.as_ref() {
                Ok(document) => SearchDoc::new(
                    listed.kind,
                    &listed.id,
                    Ok((&document.document, &parsed.content)),
                ),
                Err(failure) => SearchDoc::new(listed.kind, &listed.id, Err(failure.to_string())),
            },
            Err(e) => SearchDoc::new(listed.kind, &listed.id, Err(e.to_string())),
        };
        if !listed.conflicts.is_empty() {
            let mut paths = vec![listed.path.display().to_string()];
            paths.extend(listed.conflicts.iter().map(|p| p.display().to_string()));
            doc.error = Some(format!(
                "{} {:?} is defined by more than one file in the {} space: {}; keep one",
                listed.kind,
                listed.id,
                listed.space,
                paths.join(", ")
            ));
        }
        doc
    }
}

fn hit(listed: &Listed, doc: &SearchDoc, score: f64) -> SearchHit {
    SearchHit {
        id: listed.id.clone(),
        kind: listed.kind,
        name: doc.name.clone(),
        title: doc.title.clone(),
        description: doc.description.clone(),
        category: doc
            .metadata
            .get("category")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        preview: doc.preview.clone(),
        source: listed.space,
        path: listed.path.clone(),
        score,
        signed: false,
        integrity: None,
        metadata: doc.metadata.clone(),
        shadowed_by: None,
        shadows: Vec::new(),
        error: doc.error.clone(),
    }
}

impl Document for SearchDoc {
    fn joined(&self) -> &str {
        &self.joined
    }

    fn field(&self, name: &str) -> Option<std::borrow::Cow<'_, str>> {
        use std::borrow::Cow;
        let name = if name == "content" { "preview" } else { name };
        if crate::search_index::FIELDS.contains(&name) {
            return Some(Cow::Borrowed(SearchDoc::field(self, name)));
        }
        match self.metadata.get(name)? {
            Value::Array(items) => Some(Cow::Owned(
                items
                    .iter()
                    .filter_map(scalar_text)
                    .collect::<Vec<_>>()
                    .join(" "),
            )),
            Value::Null => None,
            other => Some(Cow::Owned(
                scalar_text(other).unwrap_or_else(|| other.to_string().to_lowercase()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_hold_as_the_original_reads_them() {
        let s = |v: &str| Value::from(v);
        assert!(filter_holds(&s("Python"), &s("python")));
        assert!(!filter_holds(&s("python"), &s("!python")));
        assert!(filter_holds(&s("node"), &s("!python")));
        assert!(filter_holds(&s("1.10.0"), &s(">=1.9")));
        assert!(!filter_holds(&s("1.2"), &s(">1.2.0")));
        assert!(filter_holds(&s("2"), &s("<10")));
        assert!(
            filter_holds(&s("1.x"), &s(">=1.5")),
            "a part that is not a number is equal"
        );
        let tags = serde_json::json!(["web", "http"]);
        assert!(filter_holds(&tags, &serde_json::json!(["http", "ftp"])));
        assert!(!filter_holds(&tags, &serde_json::json!(["ftp"])));
        assert!(filter_holds(&tags, &s("web")));
        assert!(filter_holds(
            &s("python"),
            &serde_json::json!(["node", "python"])
        ));
        assert!(filter_holds(&Value::from(3), &Value::from(3)));
    }

    #[test]
    fn scopes() {
        assert_eq!(parse_scope("tool").unwrap(), (vec![ItemKind::Tool], None));
        assert_eq!(
            parse_scope("tool.rye.core.*").unwrap(),
            (vec![ItemKind::Tool], Some("rye/core".into()))
        );
        assert_eq!(
            parse_scope("rye.search.directive.*").unwrap(),
            (vec![ItemKind::Directive], None)
        );
        assert_eq!(parse_scope("all").unwrap().0.len(), 3);
        for bad in ["", "rye.search.", "config", "widget.x"] {
            assert!(parse_scope(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn namespaces_match_whole_segments() {
        assert!(in_namespace("rye/core/x", Some("rye/core")));
        assert!(!in_namespace("rye/core_x/y", Some("rye/core")));
        assert!(in_namespace("anything", None));
    }
}
