//! Reading item files through parser components.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rye_components::{LoadedComponent, ParseRequest, World};
use rye_space::{ItemKind, Space, Spaces};
use sha2::{Digest, Sha256};

use crate::cache::{Outcome, ParseKey};
use crate::session::Session;
use crate::{HostError, Rye};

/// One item file read by its parser.
#[derive(Debug, Clone)]
pub struct ParsedItem {
    pub kind: ItemKind,
    pub id: String,
    pub space: Space,
    pub path: PathBuf,
    /// The file's text.
    pub content: String,
    /// SHA-256 of the file's bytes.
    pub content_hash: [u8; 32],
    /// The parser's name and the component file that answered.
    pub parser: String,
    pub parser_path: PathBuf,
    /// The parser's document, or its verdict that the file is invalid.
    pub outcome: Outcome,
}

impl Rye {
    /// The parser component `name`, from the first space that has
    /// `.ai/parsers/<name>.wasm`, once its signature checks out.
    pub fn parser_component(
        &self,
        spaces: &Spaces,
        name: &str,
    ) -> Result<Result<Arc<LoadedComponent>, Vec<PathBuf>>, HostError> {
        let trust = self.trust_store(spaces);
        Ok(self
            .find_component(spaces, &trust, name, World::Parser)?
            .map(|found| found.component))
    }

    /// Reads `path` (an item of `kind` with id `id`) with the parser its
    /// extractor names. `parsers` memoizes parser lookups across the calls
    /// of one request.
    pub(crate) fn parse_file(
        &self,
        session: &Session,
        parsers: &mut ParserLookup,
        item: (ItemKind, &str, Space, &Path),
    ) -> Result<ParsedItem, HostError> {
        let bytes = read_item(&session.spaces, item.2, item.3)?;
        self.parse_bytes(session, parsers, item, bytes)
    }

    /// Like [`Rye::parse_file`], for bytes already read from the file.
    pub(crate) fn parse_bytes(
        &self,
        session: &Session,
        parsers: &mut ParserLookup,
        item: (ItemKind, &str, Space, &Path),
        bytes: Vec<u8>,
    ) -> Result<ParsedItem, HostError> {
        let (kind, id, space, path) = item;
        let content_hash: [u8; 32] = Sha256::digest(&bytes).into();
        let content = String::from_utf8(bytes).map_err(|_| HostError::NotText {
            path: path.to_owned(),
        })?;
        let (name, parser) = parsers.for_file(self, session, kind, path)?;
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();

        let key = ParseKey {
            parser: parser.hash,
            content: content_hash,
            kind,
            id: id.to_owned(),
            file_name,
        };
        let cached = self.parses.lock().expect("parse cache lock").get(&key);
        let outcome = match cached {
            Some(outcome) => outcome,
            None => {
                let request = ParseRequest {
                    kind: crate::metadata::plugin_kind(kind),
                    item_id: id,
                    file_name: &key.file_name,
                    content: &content,
                };
                let outcome: Outcome = Arc::new(self.components.parse(&parser, &request)?);
                self.parses
                    .lock()
                    .expect("parse cache lock")
                    .insert(key, outcome.clone());
                outcome
            }
        };
        Ok(ParsedItem {
            kind,
            id: id.to_owned(),
            space,
            path: path.to_owned(),
            content,
            content_hash,
            parser: name,
            parser_path: parser.path.clone(),
            outcome,
        })
    }
}

/// Parser components resolved during one request (or one worker's share
/// of it), by name.
#[derive(Default)]
pub(crate) struct ParserLookup {
    found: HashMap<String, Result<Arc<LoadedComponent>, Vec<PathBuf>>>,
    /// What the parsers' signatures leave to say (see [`Signed::warning`]).
    pub(crate) warnings: Vec<String>,
}

impl ParserLookup {
    /// The parser the session's extractor for `kind` names for `path`,
    /// found in the session's spaces and verified against its trust.
    pub(crate) fn for_file(
        &mut self,
        rye: &Rye,
        session: &Session,
        kind: ItemKind,
        path: &Path,
    ) -> Result<(String, Arc<LoadedComponent>), HostError> {
        let extractors = session.extractors(rye)?;
        let extractor = extractors.require(kind)?;
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| format!(".{e}"))
            .unwrap_or_default();
        let name = extractor
            .parser_for(&extension)
            .ok_or_else(|| HostError::NoParserMapped {
                path: path.to_owned(),
                kind,
                extension: extension.clone(),
                extractor: extractor.source.clone(),
            })?;
        let found = match self.found.get(name) {
            Some(found) => found.clone(),
            None => {
                let found = rye
                    .find_component(&session.spaces, &session.trust(rye), name, World::Parser)?
                    .map(|found| {
                        let what = format!("parser {name} ({})", found.component.path.display());
                        self.warnings.extend(found.signed.warning(&what));
                        found.component
                    });
                self.found.insert(name.to_owned(), found.clone());
                found
            }
        };
        match found {
            Ok(component) => Ok((name.to_owned(), component)),
            Err(searched) => Err(HostError::ParserNotFound {
                path: path.to_owned(),
                name: name.to_owned(),
                searched,
            }),
        }
    }
}

/// Reads an item file of `space`, following links only while they stay in
/// the space (see [`rye_space::read_within`]).
pub(crate) fn read_item(spaces: &Spaces, space: Space, path: &Path) -> Result<Vec<u8>, HostError> {
    match spaces.root(space) {
        Some(root) => rye_space::read_within(&root.ai_dir, path).map_err(|e| match e {
            rye_space::SpaceError::Io { path, source } => HostError::Io { path, source },
            other => other.into(),
        }),
        None => std::fs::read(path).map_err(|e| HostError::io(path, e)),
    }
}
