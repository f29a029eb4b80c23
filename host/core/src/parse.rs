//! Reading item files through parser components.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rye_components::{
    ComponentError, ComponentHost, LoadedComponent, ParseFailure, ParseRequest, ParsedDocument,
    ValidatorInfo, World,
};
use rye_space::{Extractors, FileStamp, ItemKind, ListingCache, Space, Spaces, same_dir};
use sha2::{Digest, Sha256};

use rye_integrity::TrustStore;

use crate::cache::ElementCache;
use crate::cache::Generational;
use crate::search_index::Index;
use crate::{HostError, RyeConfig};

/// Parse results kept in memory, by parser and content.
const PARSE_CACHE_ENTRIES: usize = 50_000;

pub(crate) type Outcome = Arc<Result<ParsedDocument, ParseFailure>>;

#[derive(Clone, PartialEq, Eq, Hash)]
struct ParseKey {
    parser: [u8; 32],
    content: [u8; 32],
    kind: ItemKind,
    id: String,
    file_name: String,
}

/// The host. Share one per process (it is `Send + Sync`); it keeps the
/// compiled components and every cache.
pub struct Rye {
    pub(crate) components: ComponentHost,
    system_base: PathBuf,
    user_base: Option<PathBuf>,
    parses: Mutex<Generational<ParseKey, Outcome>>,
    pub(crate) index: Mutex<Index>,
    pub(crate) listings: ListingCache,
    pub(crate) elements: Mutex<ElementCache>,
    /// Per project folder: is it the system space's source, is it the
    /// user base.
    projects: Mutex<HashMap<PathBuf, (bool, bool)>>,
    /// Extractors per set of candidate files, with the files' stamps.
    extractor_cache: Mutex<ExtractorCache>,
    pub(crate) integrity: crate::trust_state::IntegrityState,
    pub(crate) key_dir: Option<PathBuf>,
    /// What each validator component says of itself, by content hash.
    pub(crate) validator_info: Mutex<HashMap<[u8; 32], Result<ValidatorInfo, ComponentError>>>,
    /// Validation results for `execute` and `sign`: by the validators'
    /// hashes and the subjects'.
    pub(crate) validations: Mutex<Generational<[u8; 32], Arc<Vec<crate::Finding>>>>,
}

type ExtractorCache = HashMap<Vec<PathBuf>, (Vec<Option<FileStamp>>, Arc<Extractors>)>;

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
    pub fn new(config: RyeConfig) -> Result<Self, HostError> {
        let key_dir = config.key_dir();
        let system_base = match config.system_base {
            Some(base) => base,
            None => rye_system::materialize(&config.cache_dir)
                .map_err(|e| HostError::io(&config.cache_dir, e))?,
        };
        let components = ComponentHost::new(config.components)
            .map_err(|e| HostError::Engine(format!("{e:#}")))?;
        Ok(Self {
            components,
            system_base,
            user_base: config.user_base,
            parses: Mutex::new(Generational::new(PARSE_CACHE_ENTRIES)),
            index: Mutex::default(),
            listings: if config.watch {
                ListingCache::new()
            } else if config.snapshot {
                ListingCache::snapshot()
            } else {
                ListingCache::unwatched()
            },
            elements: Mutex::default(),
            projects: Mutex::default(),
            extractor_cache: Mutex::default(),
            integrity: crate::trust_state::IntegrityState::new(
                config.integrity,
                config.trusted_keys,
            ),
            key_dir,
            validator_info: Mutex::default(),
            validations: Mutex::new(Generational::new(crate::cache::VALIDATION_CACHE_ENTRIES)),
        })
    }

    /// The base of the system space in use.
    pub fn system_base(&self) -> &Path {
        &self.system_base
    }

    /// The component host, for callers that load components directly.
    pub fn components(&self) -> &ComponentHost {
        &self.components
    }

    /// The spaces for a request about `project` (a folder holding `.ai/`).
    ///
    /// A project whose `.ai/` is the system space's own (or the folder the
    /// embedded system space was built from, i.e. the Rye repository) has
    /// no separate project space: its items are the system items.
    pub fn spaces(&self, project: Option<&Path>) -> Spaces {
        let Some(project) = project else {
            return Spaces::from_bases(None, self.user_base.as_deref(), &self.system_base);
        };
        let known = self
            .projects
            .lock()
            .expect("project cache lock")
            .get(project)
            .copied();
        let (is_system, is_user) = known.unwrap_or_else(|| {
            let is_system = same_dir(&project.join(".ai"), &self.system_base.join(".ai"))
                || same_dir(&project.join(".ai"), rye_system::source_dir());
            let is_user = self
                .user_base
                .as_deref()
                .is_some_and(|user| same_dir(project, user));
            // Only answers about folders that exist are kept: a project
            // folder may be created later.
            if project.is_dir() {
                self.projects
                    .lock()
                    .expect("project cache lock")
                    .insert(project.to_owned(), (is_system, is_user));
            }
            (is_system, is_user)
        });
        let user = self.user_base.as_deref().filter(|_| !is_user);
        Spaces::from_bases((!is_system).then_some(project), user, &self.system_base)
    }

    /// The extractors in effect for `spaces`, re-read only when one of
    /// their files appeared, changed or went away.
    pub(crate) fn extractors(&self, spaces: &Spaces) -> Result<Arc<Extractors>, HostError> {
        let candidates: Vec<PathBuf> = spaces
            .roots()
            .iter()
            .flat_map(|root| ItemKind::PRIMARY.map(|kind| Extractors::path_in(&root.ai_dir, kind)))
            .collect();
        let stamps: Vec<Option<FileStamp>> =
            candidates.iter().map(|p| FileStamp::read(p).ok()).collect();
        if let Some((known, extractors)) = self
            .extractor_cache
            .lock()
            .expect("extractor cache lock")
            .get(&candidates)
            && *known == stamps
        {
            return Ok(extractors.clone());
        }
        let extractors = Arc::new(Extractors::load(spaces)?);
        self.extractor_cache
            .lock()
            .expect("extractor cache lock")
            .insert(candidates, (stamps, extractors.clone()));
        Ok(extractors)
    }

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
        spaces: &Spaces,
        extractors: &Extractors,
        parsers: &mut ParserLookup,
        item: (ItemKind, &str, Space, &Path),
    ) -> Result<ParsedItem, HostError> {
        let bytes = read_item(spaces, item.2, item.3)?;
        self.parse_bytes(spaces, extractors, parsers, item, bytes)
    }

    /// Like [`Rye::parse_file`], for bytes already read from the file.
    pub(crate) fn parse_bytes(
        &self,
        spaces: &Spaces,
        extractors: &Extractors,
        parsers: &mut ParserLookup,
        item: (ItemKind, &str, Space, &Path),
        bytes: Vec<u8>,
    ) -> Result<ParsedItem, HostError> {
        let (kind, id, space, path) = item;
        let content_hash: [u8; 32] = Sha256::digest(&bytes).into();
        let content = String::from_utf8(bytes).map_err(|_| HostError::NotText {
            path: path.to_owned(),
        })?;
        let (name, parser) = parsers.for_file(self, spaces, extractors, kind, path)?;
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

/// Parser components resolved during one request, by name.
#[derive(Default)]
pub(crate) struct ParserLookup {
    found: HashMap<String, Result<Arc<LoadedComponent>, Vec<PathBuf>>>,
    trust: Option<Arc<TrustStore>>,
    /// What the parsers' signatures leave to say (see [`Signed::warning`]).
    pub(crate) warnings: Vec<String>,
}

impl ParserLookup {
    /// A lookup that verifies parsers against `trust`.
    pub(crate) fn with_trust(trust: Arc<TrustStore>) -> Self {
        Self {
            trust: Some(trust),
            ..Self::default()
        }
    }

    pub(crate) fn for_file(
        &mut self,
        rye: &Rye,
        spaces: &Spaces,
        extractors: &Extractors,
        kind: ItemKind,
        path: &Path,
    ) -> Result<(String, Arc<LoadedComponent>), HostError> {
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
                let trust = self
                    .trust
                    .get_or_insert_with(|| rye.trust_store(spaces))
                    .clone();
                let found = rye
                    .find_component(spaces, &trust, name, World::Parser)?
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
