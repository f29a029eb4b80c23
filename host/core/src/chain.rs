//! Execution chains: a tool, the runtimes it names through `executor_id`,
//! down to a primitive.
//!
//! Building follows `executor_id` from the tool. An element found in the
//! project space may name executors in any space; one in the user space
//! only in the user and system spaces; one in the system space only in the
//! system space (so a system tool can never depend on a mutable one). An
//! executor that exists only where its dependent may not reach is reported
//! as that rule broken, not as "not found". Every element's metadata comes
//! from its parser component and is cached by file stamp and parser.
//!
//! Validation then checks each pair (child, parent): space precedence,
//! system → mutable, declared inputs against declared outputs, and the
//! parent's `child_constraints` version range for the child.

use std::path::PathBuf;
use std::sync::Arc;

use rye_space::{FileStamp, ItemKind, Location, Space};
use serde::Serialize;
use serde_json::{Map, Value};

use sha2::{Digest, Sha256};

use crate::cache::ElementEntry;
use crate::chain_rules::{ChainError, MAX_DEPTH, PRIMITIVE_ALIASES, PRIMITIVES};
use crate::parse::ParserLookup;
use crate::session::Session;
use crate::{HostError, Rye, Signed, normalize};

/// One element of a chain.
#[derive(Debug, Clone)]
pub struct ChainElement {
    pub item_id: String,
    pub space: Space,
    pub path: PathBuf,
    /// SHA-256 of the file.
    pub content_hash: [u8; 32],
    /// The element's normalized metadata (see [`normalize`]).
    pub metadata: Arc<Map<String, Value>>,
    /// The same as JSON text, as components are shown it.
    pub metadata_json: Arc<str>,
    /// Files of the same id this one hides.
    pub shadowed: Vec<Location>,
    /// The element's signature, verified.
    pub signed: Signed,
}

impl ChainElement {
    pub fn executor_id(&self) -> Option<&str> {
        self.metadata.get("executor_id").and_then(Value::as_str)
    }

    fn text(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).and_then(Value::as_str)
    }

    /// The element as results show it.
    pub fn summary(&self) -> ChainSummary {
        ChainSummary {
            item_id: self.item_id.clone(),
            space: self.space,
            tool_type: self.text("tool_type").map(str::to_owned),
            executor_id: self.executor_id().map(str::to_owned),
            integrity: hex::encode(self.content_hash),
            signed_by: self.signed.fingerprint().map(str::to_owned),
            path: self.path.clone(),
        }
    }
}

/// An element as results show it.
#[derive(Debug, Clone, Serialize)]
pub struct ChainSummary {
    pub item_id: String,
    pub space: Space,
    pub tool_type: Option<String>,
    pub executor_id: Option<String>,
    /// SHA-256 of the element's file.
    pub integrity: String,
    /// Fingerprint of the key that signed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    pub path: PathBuf,
}

/// A built and validated chain, tool first, primitive last.
#[derive(Debug, Clone)]
pub struct Chain {
    pub elements: Vec<ChainElement>,
    /// What the signatures of the elements and their parsers leave to say:
    /// unsigned files allowed by the policy, parts the original signature
    /// rule leaves uncovered.
    pub warnings: Vec<String>,
}

impl Chain {
    pub fn tool(&self) -> &ChainElement {
        &self.elements[0]
    }

    pub fn primitive(&self) -> &ChainElement {
        self.elements.last().expect("a chain has elements")
    }

    pub fn summaries(&self) -> Vec<ChainSummary> {
        self.elements.iter().map(ChainElement::summary).collect()
    }
}

fn canonical(id: &str) -> &str {
    PRIMITIVE_ALIASES
        .iter()
        .find(|(alias, _)| *alias == id)
        .map_or(id, |(_, real)| real)
}

/// The spaces an element of `space` may name executors in.
pub(crate) fn reachable(space: Space) -> &'static [Space] {
    match space {
        Space::Project => &[Space::Project, Space::User, Space::System],
        Space::User => &[Space::User, Space::System],
        Space::System => &[Space::System],
    }
}

impl Rye {
    /// Builds and validates the chain of tool `tool_id` for `project`.
    pub fn chain(
        &self,
        project: Option<&std::path::Path>,
        tool_id: &str,
    ) -> Result<Chain, HostError> {
        self.build_chain(&self.session(project), tool_id)
    }

    /// The chain of `tool_id` in `session`'s spaces: as last built while
    /// no watched folder has changed since (every file it was built from
    /// was vouched for by a watch), else built again.
    pub(crate) fn build_chain(&self, session: &Session, tool_id: &str) -> Result<Chain, HostError> {
        let Some(before) = self.listings.quiet() else {
            return self.walk_chain(session, tool_id);
        };
        let at = std::time::Instant::now();
        let key = crate::cache::memo_key("chain", &session.spaces, &[tool_id.as_bytes()]);
        if let Some(kept) = self.memos.get::<Built>(before, &key) {
            let (chain, extractors, trust) = &kept.value;
            session.prime(extractors.clone(), trust.clone());
            return Ok(chain.clone());
        }
        let chain = self.walk_chain(session, tool_id)?;
        let built = (
            chain.clone(),
            session.extractors(self)?,
            session.trust(self),
        );
        self.memos.keep(&self.listings, (before, at), key, built);
        Ok(chain)
    }

    fn walk_chain(&self, session: &Session, tool_id: &str) -> Result<Chain, HostError> {
        let spaces = &session.spaces;
        let extractors = session.extractors(self)?;
        let extensions = &extractors.require(ItemKind::Tool)?.extensions;
        let mut parsers = ParserLookup::default();
        let mut elements: Vec<ChainElement> = Vec::new();
        let mut current = canonical(tool_id).to_owned();
        let mut within = reachable(Space::Project);
        let ids = |elements: &[ChainElement], next: &str| {
            let mut path: Vec<String> = elements.iter().map(|e| e.item_id.clone()).collect();
            path.push(next.to_owned());
            path
        };

        loop {
            if elements.iter().any(|e| e.item_id == current) {
                return Err(ChainError::Cycle {
                    path: ids(&elements, &current),
                }
                .into());
            }
            if elements.len() == MAX_DEPTH {
                return Err(ChainError::TooDeep {
                    path: ids(&elements, &current),
                }
                .into());
            }
            let resolved =
                spaces.resolve_cached(&self.listings, ItemKind::Tool, &current, extensions, within);
            let (resolved, stamp) = match (resolved, elements.last()) {
                (Ok(found), _) => found,
                (Err(rye_space::SpaceError::NotFound { searched, .. }), None) => {
                    return Err(ChainError::ToolNotFound {
                        id: tool_id.to_owned(),
                        searched,
                    }
                    .into());
                }
                (Err(rye_space::SpaceError::NotFound { .. }), Some(child)) => {
                    let anywhere = spaces.resolve_cached(
                        &self.listings,
                        ItemKind::Tool,
                        &current,
                        extensions,
                        &Space::ALL,
                    );
                    return Err(match anywhere {
                        Ok((found, _)) => ChainError::Invalid {
                            child: child.item_id.clone(),
                            child_space: child.space,
                            parent: current,
                            parent_space: found.location.space,
                            rule: format!(
                                "an element may depend only on elements of equal or lower precedence, and this \
                                 executor exists only in the {} space ({})",
                                found.location.space,
                                found.location.path.display()
                            ),
                        },
                        Err(_) => ChainError::ExecutorNotFound {
                            missing: current,
                            referenced_by: child.item_id.clone(),
                            path: child.path.clone(),
                        },
                    }
                    .into());
                }
                (Err(e), _) => return Err(e.into()),
            };

            let element = self.element(session, &mut parsers, &resolved, stamp)?;
            let next = match element.metadata.get("executor_id") {
                None | Some(Value::Null) => None,
                Some(Value::String(next)) => Some(canonical(next).to_owned()),
                Some(other) => {
                    return Err(ChainError::Unreadable {
                        id: element.item_id,
                        path: element.path,
                        reason: format!("executor_id must be a tool id or null, found {other}"),
                    }
                    .into());
                }
            };
            within = reachable(element.space);
            elements.push(element);
            match next {
                Some(next) => current = next,
                None => break,
            }
        }

        let root = elements.last().expect("at least the tool");
        if !PRIMITIVES.contains(&root.item_id.as_str()) {
            return Err(ChainError::NotAPrimitive {
                id: root.item_id.clone(),
                path: root.path.clone(),
            }
            .into());
        }
        validate(&elements)?;
        let mut warnings: Vec<String> = elements
            .iter()
            .filter_map(|e| {
                e.signed
                    .warning(&format!("{} ({})", e.item_id, e.path.display()))
            })
            .collect();
        warnings.append(&mut parsers.warnings);
        Ok(Chain { elements, warnings })
    }

    /// An element's metadata, from the cache while its file and parser are
    /// unchanged.
    pub(crate) fn element(
        &self,
        session: &Session,
        parsers: &mut ParserLookup,
        resolved: &rye_space::Resolved,
        stamp: FileStamp,
    ) -> Result<ChainElement, HostError> {
        let path = &resolved.location.path;
        let space = resolved.location.space;
        let (extractors, trust) = (session.extractors(self)?, session.trust(self));
        let (_, parser) = parsers.for_file(self, session, ItemKind::Tool, path)?;
        let make = |content_hash, (metadata, metadata_json), signed| ChainElement {
            item_id: resolved.id.clone(),
            space,
            path: path.clone(),
            content_hash,
            metadata,
            metadata_json,
            shadowed: resolved.shadowed.clone(),
            signed,
        };
        let cached = self
            .elements
            .lock()
            .expect("element cache lock")
            .entries
            .get(path.as_os_str())
            .filter(|entry| entry.stamp == stamp && entry.parser == parser.hash)
            .map(|entry| {
                (
                    entry.content_hash,
                    (entry.metadata.clone(), entry.metadata_json.clone()),
                )
            });
        if let Some((content_hash, metadata)) = cached {
            let signed = self.verify_item(
                &trust,
                Some(&extractors),
                (ItemKind::Tool, space, path),
                content_hash,
                None,
            )?;
            return Ok(make(content_hash, metadata, signed));
        }

        // Verified before it is parsed; the bytes parsed are the bytes
        // verified.
        let bytes = crate::parse::read_item(&session.spaces, space, path)?;
        let signed = self.verify_item(
            &trust,
            Some(&extractors),
            (ItemKind::Tool, space, path),
            Sha256::digest(&bytes).into(),
            Some(&bytes),
        )?;

        let item = (
            ItemKind::Tool,
            resolved.id.as_str(),
            resolved.location.space,
            path.as_path(),
        );
        let parsed = self.parse_bytes(session, parsers, item, bytes)?;
        let document = match parsed.outcome.as_ref() {
            Ok(document) => document,
            Err(failure) => {
                return Err(ChainError::Unreadable {
                    id: resolved.id.clone(),
                    path: path.clone(),
                    reason: failure.to_string(),
                }
                .into());
            }
        };
        let metadata = Arc::new(normalize(ItemKind::Tool, &resolved.id, &document.document));
        let metadata_json: Arc<str> = Value::Object((*metadata).clone()).to_string().into();
        self.elements
            .lock()
            .expect("element cache lock")
            .entries
            .insert(
                path.clone().into_os_string(),
                ElementEntry {
                    stamp,
                    parser: parser.hash,
                    content_hash: parsed.content_hash,
                    metadata: metadata.clone(),
                    metadata_json: metadata_json.clone(),
                },
            );
        Ok(make(parsed.content_hash, (metadata, metadata_json), signed))
    }
}

/// A chain as it was built, with the extractors and trust store its
/// session worked it out with.
type Built = (
    Chain,
    Arc<rye_space::Extractors>,
    Arc<rye_integrity::TrustStore>,
);

/// Checks every (child, parent) pair of a chain.
pub fn validate(elements: &[ChainElement]) -> Result<(), ChainError> {
    for pair in elements.windows(2) {
        let (child, parent) = (&pair[0], &pair[1]);
        let invalid = |rule: String| ChainError::Invalid {
            child: child.item_id.clone(),
            child_space: child.space,
            parent: parent.item_id.clone(),
            parent_space: parent.space,
            rule,
        };
        if child.space == Space::System && parent.space != Space::System {
            return Err(invalid(
                "a system element may not depend on a project or user element".into(),
            ));
        }
        if child.space.precedence() < parent.space.precedence() {
            return Err(invalid(
                "an element may depend only on elements of equal or lower precedence".into(),
            ));
        }
        if let (Some(Value::Array(outputs)), Some(Value::Array(inputs))) =
            (child.metadata.get("outputs"), parent.metadata.get("inputs"))
        {
            let name = |v: &Value| {
                v.get("name")
                    .and_then(Value::as_str)
                    .or(v.as_str())
                    .map(str::to_owned)
            };
            let given: Vec<String> = outputs.iter().filter_map(name).collect();
            let missing: Vec<String> = inputs
                .iter()
                .filter_map(name)
                .filter(|i| !given.contains(i))
                .collect();
            if !missing.is_empty() {
                return Err(invalid(format!(
                    "the parent's declared inputs {missing:?} are not among the child's declared outputs {given:?}"
                )));
            }
        }
        if let Some(constraint) = parent
            .metadata
            .get("child_constraints")
            .and_then(|c| c.get(&child.item_id))
        {
            check_version(child, constraint).map_err(invalid)?;
        }
    }
    Ok(())
}

fn check_version(child: &ChainElement, constraint: &Value) -> Result<(), String> {
    let version_text = match child.metadata.get("version") {
        Some(Value::String(v)) => v.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => {
            return Err(
                "the parent constrains the child's version, but the child declares none".into(),
            );
        }
    };
    let version = semver::Version::parse(&version_text).map_err(|e| {
        format!(
            "the child's version {version_text:?} is not semver ({e}), but the parent constrains it"
        )
    })?;
    for (key, allowed) in [("min_version", true), ("max_version", false)] {
        let Some(bound) = constraint.get(key) else {
            continue;
        };
        let bound_text = bound
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| bound.to_string());
        let bound = semver::Version::parse(&bound_text).map_err(|e| {
            format!("{key} {bound_text:?} in the parent's child_constraints is not semver ({e})")
        })?;
        let within = if allowed {
            version >= bound
        } else {
            version <= bound
        };
        if !within {
            return Err(format!(
                "version {version} of the child is outside the parent's child_constraints ({key} {bound})"
            ));
        }
    }
    Ok(())
}
