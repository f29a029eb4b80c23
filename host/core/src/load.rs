//! Loading an item, and copying it between spaces.

use std::path::PathBuf;

use rye_components::Diagnostic;
use rye_space::{ItemKind, Space, SpaceError};
use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::parse::ParserLookup;
use crate::search::ShadowRef;
use crate::{HostError, Rye, normalize};

/// A load, optionally copying the item into another space.
#[derive(Debug, Clone)]
pub struct LoadRequest {
    pub kind: ItemKind,
    pub id: String,
    /// Resolve only in this space.
    pub source: Option<Space>,
    /// Copy the file into this space (project or user) unless it already
    /// resolves there.
    pub destination: Option<Space>,
    /// Overwrite an existing file at the destination.
    pub force: bool,
    pub project: Option<PathBuf>,
}

impl LoadRequest {
    pub fn new(kind: ItemKind, id: impl Into<String>) -> Self {
        Self {
            kind,
            id: id.into(),
            source: None,
            destination: None,
            force: false,
            project: None,
        }
    }
}

/// A loaded item.
#[derive(Debug, Clone, Serialize)]
pub struct Loaded {
    pub status: &'static str,
    pub item_type: ItemKind,
    pub item_id: String,
    /// The file's text, exactly.
    pub content: String,
    /// SHA-256 of the file's text.
    #[serde(skip)]
    pub content_hash: [u8; 32],
    /// The item's metadata (see [`normalize`]) plus `path` and `extension`.
    pub metadata: Map<String, Value>,
    /// The parser's whole document: for a directive its inputs, process
    /// steps and permissions; for knowledge its body.
    pub parsed: Map<String, Value>,
    pub path: PathBuf,
    pub source: Space,
    /// Files of the same id this one hides in lower spaces.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<ShadowRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copied_to: Option<Space>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination_path: Option<PathBuf>,
    /// The parser's findings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
    /// Why the file could not be parsed, if it could not. The content is
    /// returned all the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parse_error: Option<String>,
    /// How the file's signature stands: `status` is `verified` (with the
    /// signer), `unsigned_allowed`, `not_checked`, or the failure
    /// (`unsigned`, `modified`, `untrusted`, …) with its `error`. Loading
    /// shows an item whatever its signature; executing requires a valid one.
    pub signature: Value,
    /// What the signatures of the file and its parser leave to say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The signature failure as an error message, when there is one,
    /// with its class (`error_type`): `integrity` for a signature that
    /// does not hold, another class when the check itself failed.
    #[serde(skip)]
    pub(crate) refused: Option<(String, &'static str)>,
}

/// How much of an item's text a `load` reply carries (once in `content`,
/// and in each long text of `parsed`, such as a knowledge body).
pub const LOAD_REPLY_TEXT: usize = 1 << 20;

impl Loaded {
    /// The reply an agent or a `--json` caller gets: this item as JSON,
    /// with `content` and every longer text in `parsed` cut to `max` bytes
    /// and a `truncated` member saying so, so a huge item cannot make a
    /// reply many times its size.
    pub fn reply(&self, max: usize) -> Value {
        let mut reply = serde_json::to_value(self).unwrap_or_default();
        let mut cut = 0usize;
        cap_strings(&mut reply["content"], max, &mut cut);
        cap_strings(&mut reply["parsed"], max, &mut cut);
        if cut > 0 {
            reply["truncated"] = serde_json::json!({
                "content_bytes": self.content.len(),
                "shown_bytes_per_text": max,
                "bytes_cut": cut,
                "reason": format!("texts longer than {max} bytes are cut in replies; read the file at `path` for all of it"),
            });
        }
        reply
    }
}

/// Cuts every string in `value` longer than `max` bytes, adding up what
/// was cut.
fn cap_strings(value: &mut Value, max: usize, cut: &mut usize) {
    match value {
        Value::String(text) if text.len() > max => {
            let end = text.floor_char_boundary(max);
            *cut += text.len() - end;
            text.truncate(end);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| cap_strings(v, max, cut)),
        Value::Object(map) => map.values_mut().for_each(|v| cap_strings(v, max, cut)),
        _ => {}
    }
}

impl Rye {
    /// Resolves an item, reads it with its parser, and copies it to
    /// `destination` if asked. Refuses to overwrite an existing file unless
    /// `force`, and refuses a copy that would give the destination space
    /// two files of one id.
    pub fn load(&self, request: &LoadRequest) -> Result<Loaded, HostError> {
        let session = self.session(request.project.as_deref());
        let spaces = &session.spaces;
        let extractors = session.extractors(self)?;
        let extractor = extractors.require(request.kind)?;
        let resolved = spaces.resolve(
            request.kind,
            &request.id,
            &extractor.extensions,
            request.source,
        )?;
        let path = resolved.location.path.clone();
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| format!(".{e}"))
            .unwrap_or_default();

        let mut parsers = ParserLookup::default();
        let item = (
            request.kind,
            request.id.as_str(),
            resolved.location.space,
            path.as_path(),
        );
        let (content, document, diagnostics, parse_error) =
            match self.parse_file(&session, &mut parsers, item) {
                Ok(parsed) => match parsed.outcome.as_ref() {
                    Ok(doc) => (
                        parsed.content.clone(),
                        doc.document.clone(),
                        doc.diagnostics.clone(),
                        None,
                    ),
                    Err(failure) => (
                        parsed.content.clone(),
                        Map::new(),
                        Vec::new(),
                        Some(failure.to_string()),
                    ),
                },
                Err(HostError::Io { path, source }) => return Err(HostError::Io { path, source }),
                Err(e) => {
                    let bytes = crate::parse::read_item(spaces, resolved.location.space, &path)?;
                    (
                        String::from_utf8_lossy(&bytes).into_owned(),
                        Map::new(),
                        Vec::new(),
                        Some(e.to_string()),
                    )
                }
            };

        let trust = session.trust(self);
        let mut warnings = std::mem::take(&mut parsers.warnings);
        let hash: [u8; 32] = Sha256::digest(content.as_bytes()).into();
        let verdict = self.verify_item(
            &trust,
            Some(&extractors),
            (request.kind, resolved.location.space, &path),
            hash,
            Some(content.as_bytes()),
        );
        let (signature, refused) = match verdict {
            Ok(signed) => {
                warnings.extend(signed.warning(&path.display().to_string()));
                (serde_json::to_value(&signed).unwrap_or_default(), None)
            }
            Err(HostError::Integrity { error, .. }) => (
                json!({"status": error.code(), "error": error.to_string()}),
                Some((format!("{}: {error}", path.display()), "integrity")),
            ),
            Err(e) => (
                json!({"status": "error", "error": e.to_string()}),
                Some((e.to_string(), e.error_type())),
            ),
        };

        let mut metadata = normalize(request.kind, &request.id, &document);
        let parsed = document;
        metadata.insert("path".into(), Value::from(path.display().to_string()));
        metadata.insert("extension".into(), Value::from(extension.clone()));

        let mut loaded = Loaded {
            status: "success",
            item_type: request.kind,
            item_id: request.id.clone(),
            content,
            content_hash: hash,
            metadata,
            parsed,
            path: path.clone(),
            source: resolved.location.space,
            shadows: resolved
                .shadowed
                .iter()
                .map(|l| ShadowRef {
                    source: l.space,
                    path: l.path.clone(),
                })
                .collect(),
            copied_to: None,
            destination_path: None,
            diagnostics,
            parse_error,
            signature,
            warnings,
            refused,
        };

        if let Some(destination) = request.destination
            && destination != resolved.location.space
        {
            let root = match destination {
                Space::System => {
                    return Err(HostError::SystemReadOnly {
                        hint: "copy to the project or user space",
                    });
                }
                space => spaces.root(space).ok_or(HostError::NoSpace {
                    space,
                    purpose: "to copy to (no folder for it was given)",
                })?,
            };
            let target = root
                .kind_dir(request.kind)
                .join(format!("{}{extension}", request.id));
            match spaces.resolve(
                request.kind,
                &request.id,
                &extractor.extensions,
                Some(destination),
            ) {
                Ok(existing) if existing.location.path != target => {
                    return Err(HostError::CopyConflict {
                        existing: existing.location.path,
                        space: destination,
                        kind: request.kind,
                        id: request.id.clone(),
                    });
                }
                Ok(_) | Err(SpaceError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            // The bytes copied are the bytes shown and verified; a new copy
            // of a read-only system file is writable where it lands; no
            // link on the way is followed.
            crate::lockfile::write_atomically(
                spaces,
                &target,
                loaded.content.as_bytes(),
                request.force,
            )?;
            loaded.copied_to = Some(destination);
            loaded.destination_path = Some(target);
        }
        Ok(loaded)
    }
}
