//! Signing items and components, and checking files on request.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rye_components::World;
use rye_integrity::{
    IntegrityError, Keypair, format_for, sign_detached, sign_text, verify_detached, verify_text,
};
use rye_space::{Extractors, ItemKind, Space};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::layout::{COMPONENT_FOLDERS, component_folder};
use crate::lockfile::write_atomically;
use crate::parse::ParserLookup;
use crate::session::Session;
use crate::trust_state::declared_formats;
use crate::{HostError, Rye};

/// What can be signed: an item, or a component named by its folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Signable {
    Item(ItemKind),
    /// `parsers`, `adapters`, `validators` or `walkers`.
    Component(&'static str),
}

impl std::str::FromStr for Signable {
    type Err = HostError;

    fn from_str(s: &str) -> Result<Self, HostError> {
        match s {
            "parser" | "parsers" => Ok(Signable::Component("parsers")),
            "adapter" | "adapters" => Ok(Signable::Component("adapters")),
            "validator" | "validators" => Ok(Signable::Component("validators")),
            "walker" | "walkers" => Ok(Signable::Component("walkers")),
            other => other
                .parse()
                .map(Signable::Item)
                .map_err(|_| HostError::Unknown {
                    what: "kind to sign",
                    value: other.to_owned(),
                    expected: "directive, tool, knowledge, config, parser, adapter, validator or walker",
                }),
        }
    }
}

/// One file signed.
#[derive(Debug, Clone, Serialize)]
pub struct SignedFile {
    pub path: PathBuf,
    /// The signature written: the detached file for a component.
    pub signature_path: PathBuf,
    pub fingerprint: String,
    /// Whether the trust store of these spaces trusts the signing key.
    pub trusted: bool,
    /// False when the file already carried a valid signature by this key.
    pub changed: bool,
    /// Lockfiles removed because they pinned the old content.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed_lockfiles: Vec<PathBuf>,
}

/// One file of a bulk signing: signed, or the file and why not.
pub type SignOutcome = Result<SignedFile, (PathBuf, HostError)>;

/// One file checked by [`Rye::verify_paths`].
#[derive(Debug, Clone, Serialize)]
pub struct FileCheck {
    pub path: PathBuf,
    /// `verified`, or the failure's code (`unsigned`, `modified`, …).
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl FileCheck {
    /// Whether the check failed (an unsigned config file only warns).
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }
}

impl Rye {
    /// The signing keypair (`rye keys generate` makes it).
    pub fn signing_key(&self) -> Result<Keypair, HostError> {
        let dir = self.key_dir.as_deref().ok_or(HostError::NoSigningKeyDir)?;
        Keypair::load(dir).map_err(|error| HostError::Integrity {
            path: dir.to_owned(),
            error,
        })
    }

    /// The folder of the signing keypair.
    pub fn key_dir(&self) -> Option<&Path> {
        self.key_dir.as_deref()
    }

    /// Writes a trusted-key file for `key` into `space` (user or project),
    /// signed with the signing key. Returns its path.
    pub fn trust_key(
        &self,
        project: Option<&Path>,
        key: &rye_integrity::PublicKey,
        owner: &str,
        space: Space,
    ) -> Result<PathBuf, HostError> {
        let spaces = self.spaces(project);
        let root = match space {
            Space::System => None,
            space => spaces.root(space),
        }
        .ok_or(match space {
            Space::System => HostError::SystemReadOnly {
                hint: "trust keys in the project or user space",
            },
            space => HostError::NoSpace {
                space,
                purpose: "to write a trusted key in",
            },
        })?;
        let signer = self.signing_key()?;
        let text = rye_integrity::trusted_key_toml(key, owner, &signer, SystemTime::now())
            .map_err(|error| HostError::Integrity {
                path: root.ai_dir.clone(),
                error,
            })?;
        let path = root
            .ai_dir
            .join(rye_integrity::TRUSTED_DIR)
            .join(format!("{}.toml", key.fingerprint()));
        write_atomically(&spaces, &path, text.as_bytes(), true)?;
        Ok(path)
    }

    /// Removes the trusted-key file of `fingerprint` from `space`.
    pub fn untrust_key(
        &self,
        project: Option<&Path>,
        fingerprint: &str,
        space: Space,
    ) -> Result<PathBuf, HostError> {
        if fingerprint.len() != 16 || !fingerprint.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(HostError::Fingerprint(fingerprint.to_owned()));
        }
        let spaces = self.spaces(project);
        let root = match space {
            Space::System => None,
            space => spaces.root(space),
        }
        .ok_or(HostError::NoSpace {
            space,
            purpose: "to remove a trusted key from",
        })?;
        let path = root
            .ai_dir
            .join(rye_integrity::TRUSTED_DIR)
            .join(format!("{}.toml", fingerprint.to_ascii_lowercase()));
        std::fs::remove_file(&path).map_err(|e| HostError::io(&path, e))?;
        Ok(path)
    }

    /// Signs item or component `id` of `what` in `space` (project or
    /// user). An item is first read by its parser and refused if the parser
    /// finds it invalid; a component is first loaded (compiled and checked
    /// against its world).
    pub fn sign(
        &self,
        project: Option<&Path>,
        what: Signable,
        id: &str,
        space: Space,
    ) -> Result<SignedFile, HostError> {
        if space == Space::System {
            return Err(HostError::SystemReadOnly {
                hint: "it is signed when Rye is built; sign items in the project or user space",
            });
        }
        let session = self.session(project);
        let spaces = &session.spaces;
        let root = spaces.root(space).ok_or(HostError::NoSpace {
            space,
            purpose: "to sign in",
        })?;
        let key = self.signing_key()?;
        match what {
            Signable::Component(folder) => {
                rye_space::validate_plugin_name(id)?;
                let path = root.ai_dir.join(folder).join(format!("{id}.wasm"));
                if !path.is_file() {
                    return Err(HostError::NoComponent { path });
                }
                self.sign_component(&session, &path, folder, &key)
            }
            Signable::Item(ItemKind::Config) if crate::layout::is_key_store(id) => {
                Err(HostError::KeyStore { id: id.to_owned() })
            }
            Signable::Item(kind) => {
                let extractors = session.extractors(self)?;
                let extractor = extractors.require(kind)?;
                let resolved = spaces.resolve(kind, id, &extractor.extensions, Some(space))?;
                self.sign_item(&session, kind, id, &resolved.location.path, space, &key)
            }
        }
    }

    fn sign_item(
        &self,
        session: &Session,
        kind: ItemKind,
        id: &str,
        path: &Path,
        space: Space,
        key: &Keypair,
    ) -> Result<SignedFile, HostError> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let (spaces, extractors) = (&session.spaces, session.extractors(self)?);
        let format = format_for(kind, name, &declared_formats(Some(&extractors), kind)).map_err(
            |error| HostError::Integrity {
                path: path.to_owned(),
                error,
            },
        )?;
        let mut parsers = ParserLookup::default();
        let parsed = self.parse_file(session, &mut parsers, (kind, id, space, path))?;
        if let Err(failure) = parsed.outcome.as_ref() {
            return Err(HostError::ParserRefused {
                path: path.to_owned(),
                parser: parsed.parser.clone(),
                failure: failure.to_string(),
            });
        }
        let trust = session.trust(self);
        let findings = self.enforce_validators(
            session,
            crate::validators::ItemRef {
                kind,
                id,
                space,
                path,
                content_hash: parsed.content_hash,
            },
            None,
        )?;
        if let Some(refused) = crate::validators::refusal(&findings) {
            return Err(refused);
        }
        let trusted = trust.get(key.fingerprint()).is_some();
        // A component tool's `.wasm` is signed with its item.
        if kind == ItemKind::Tool
            && let Ok(doc) = parsed.outcome.as_ref()
        {
            self.sign_tool_component(session, path, &doc.document, key)?;
        }
        let already = verify_text(&parsed.content, kind, &format, &only(key))
            .ok()
            .filter(|v| v.uncovered.is_none());
        if already.is_some() {
            return Ok(SignedFile {
                path: path.to_owned(),
                signature_path: path.to_owned(),
                fingerprint: key.fingerprint().to_owned(),
                trusted,
                changed: false,
                removed_lockfiles: Vec::new(),
            });
        }
        let signed =
            sign_text(&parsed.content, &format, key, SystemTime::now()).map_err(|error| {
                HostError::Integrity {
                    path: path.to_owned(),
                    error,
                }
            })?;
        write_atomically(spaces, path, signed.as_bytes(), true)?;
        let removed_lockfiles = if kind == ItemKind::Tool {
            let version = parsed.outcome.as_ref().as_ref().map_or_else(
                |_| "0.0.0".into(),
                |doc| crate::lockfile::version_text(&crate::normalize(kind, id, &doc.document)),
            );
            self.remove_locks(spaces, id, &version)
        } else {
            Vec::new()
        };
        Ok(SignedFile {
            path: path.to_owned(),
            signature_path: path.to_owned(),
            fingerprint: key.fingerprint().to_owned(),
            trusted,
            changed: true,
            removed_lockfiles,
        })
    }

    fn sign_component(
        &self,
        session: &Session,
        path: &Path,
        folder: &str,
        key: &Keypair,
    ) -> Result<SignedFile, HostError> {
        let world = World::ALL
            .into_iter()
            .find(|w| component_folder(*w) == folder)
            .unwrap_or(World::Validator);
        // Only a component that loads as its folder's world is signed.
        self.components.load(path, world)?;
        self.sign_detached_file(session, path, key)
    }

    /// Signs the `.wasm` a component tool's item names (`config.component`
    /// beside it), once it loads as a command.
    fn sign_tool_component(
        &self,
        session: &Session,
        item: &Path,
        document: &serde_json::Map<String, serde_json::Value>,
        key: &Keypair,
    ) -> Result<(), HostError> {
        let config = document
            .get("config")
            .and_then(serde_json::Value::as_object);
        let Some(name) = config
            .and_then(|c| c.get("component"))
            .and_then(serde_json::Value::as_str)
        else {
            return Ok(());
        };
        let dir = item.parent().unwrap_or(Path::new("."));
        // The same file, by the same rules, that running the tool loads.
        let path = crate::tool_component::component_path(config, dir)
            .ok()
            .filter(|p| p.is_file())
            .ok_or_else(|| HostError::NoComponent {
                path: dir.join(name),
            })?;
        self.components
            .load_command(&path, |_| Ok::<(), std::convert::Infallible>(()))?
            .unwrap_or_else(|never| match never {});
        self.sign_detached_file(session, &path, key).map(drop)
    }

    /// Writes the detached signature of the component at `path`, unless
    /// one by `key` of its bytes is there already.
    fn sign_detached_file(
        &self,
        session: &Session,
        path: &Path,
        key: &Keypair,
    ) -> Result<SignedFile, HostError> {
        let bytes = std::fs::read(path).map_err(|e| HostError::io(path, e))?;
        let hash: [u8; 32] = Sha256::digest(&bytes).into();
        let signature_path = rye_integrity::detached_path(path);
        let (spaces, trust) = (&session.spaces, session.trust(self));
        let unchanged = std::fs::read_to_string(&signature_path)
            .ok()
            .is_some_and(|text| verify_detached(&hash, &text, &only(key)).is_ok());
        if !unchanged {
            write_atomically(
                spaces,
                &signature_path,
                sign_detached(&hash, key, SystemTime::now()).as_bytes(),
                true,
            )?;
        }
        Ok(SignedFile {
            path: path.to_owned(),
            signature_path,
            fingerprint: key.fingerprint().to_owned(),
            trusted: trust.get(key.fingerprint()).is_some(),
            changed: !unchanged,
            removed_lockfiles: Vec::new(),
        })
    }

    /// Signs every item and component of `space` (project or user), but
    /// not plain JSON data beside tools (no `executor_id`; a signature
    /// line would stop it being JSON). Returns each file's outcome; one
    /// failure does not stop the others.
    pub fn sign_all(
        &self,
        project: Option<&Path>,
        space: Space,
    ) -> Result<Vec<SignOutcome>, HostError> {
        if space == Space::System {
            return Err(HostError::SystemReadOnly {
                hint: "it is signed when Rye is built",
            });
        }
        let session = self.session(project);
        let root = session
            .spaces
            .root(space)
            .ok_or(HostError::NoSpace {
                space,
                purpose: "to sign in",
            })?
            .clone();
        let key = self.signing_key()?;
        let extractors = session.extractors(self)?;
        let mut outcomes = Vec::new();
        // Components first: signing an item runs its parser, which must
        // verify.
        for folder in COMPONENT_FOLDERS {
            let mut files = Vec::new();
            walk_files(&root.ai_dir.join(folder), &mut files);
            files.sort();
            for path in files
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
            {
                outcomes.push(
                    self.sign_component(&session, &path, folder, &key)
                        .map_err(|e| (path.clone(), e)),
                );
            }
        }
        let config = extractors.get(ItemKind::Config).map(|_| ItemKind::Config);
        for kind in ItemKind::PRIMARY.into_iter().chain(config) {
            let extractor = extractors.require(kind)?;
            let dir = root.kind_dir(kind);
            let mut files = Vec::new();
            walk_files(&dir, &mut files);
            files.sort();
            for path in files {
                let Some(id) = item_id(&dir, &path, &extractor.extensions) else {
                    continue;
                };
                if kind == ItemKind::Config && crate::layout::is_key_store(&id) {
                    continue;
                }
                if kind == ItemKind::Tool && is_json_data(&path) {
                    // package.json and other data beside tools: a signature
                    // line would stop them being JSON.
                    continue;
                }
                outcomes.push(
                    self.sign_item(&session, kind, &id, &path, space, &key)
                        .map_err(|e| (path.clone(), e)),
                );
            }
        }
        Ok(outcomes)
    }

    /// Checks the signature of each file, or of every file under each
    /// folder (items, components, config files; private keys, lockfiles,
    /// signature files and the runs' state under `.ai/state/` are
    /// skipped), against the trust store of
    /// `project`'s spaces.
    pub fn verify_paths(&self, project: Option<&Path>, paths: &[PathBuf]) -> Vec<FileCheck> {
        let session = self.session(project);
        let trust = session.trust(self);
        let extractors = session.extractors(self).ok();
        let mut files = Vec::new();
        for path in paths {
            if path.is_dir() {
                walk_files(path, &mut files);
            } else {
                files.push(path.clone());
            }
        }
        files.sort();
        files.dedup();
        files
            .into_iter()
            .filter(|p| !skipped(p))
            .map(|path| check_file(&path, &trust, extractors.as_deref()))
            .collect()
    }
}

/// A trust store of `key` alone: "already signed by this key?"
fn only(key: &Keypair) -> rye_integrity::TrustStore {
    rye_integrity::TrustStore::builder()
        .anchor(key.public().clone(), "signer")
        .build()
}

/// Files `verify_paths` does not check in a folder walk.
fn skipped(path: &Path) -> bool {
    let text = path.to_string_lossy().replace('\\', "/");
    text.ends_with(".sig")
        || text.contains("/config/keys/signing/")
        || text.contains("/lockfiles/")
        || in_state(path)
        || path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
}

/// Whether `path` is under an `.ai/state/` folder, where runs keep their
/// records and objects.
fn in_state(path: &Path) -> bool {
    let parts: Vec<_> = path.components().map(|c| c.as_os_str()).collect();
    parts
        .windows(2)
        .any(|pair| pair[0] == ".ai" && pair[1] == "state")
}

/// The kind of the file at `path` from the folder under `.ai/` it sits in.
fn kind_of(path: &Path) -> Option<Result<ItemKind, &'static str>> {
    let parts: Vec<String> = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let at = parts.iter().rposition(|p| p == ".ai")?;
    let folder = parts.get(at + 1)?;
    if COMPONENT_FOLDERS.contains(&folder.as_str()) {
        return Some(Err("component"));
    }
    folder.parse().ok().map(Ok)
}

fn check_file(
    path: &Path,
    trust: &rye_integrity::TrustStore,
    extractors: Option<&Extractors>,
) -> FileCheck {
    let mut check = FileCheck {
        path: path.to_owned(),
        status: "verified".into(),
        fingerprint: None,
        owner: None,
        error: None,
        warning: None,
    };
    let kind = kind_of(path).or_else(|| {
        // A trusted-key file outside a space.
        path.extension()
            .is_some_and(|e| e == "toml")
            .then_some(Ok(ItemKind::Config))
    });
    let verdict = match kind {
        None => Err(IntegrityError::Malformed(
            "not under a .ai/ item or component folder, so its kind is unknown".into(),
        )),
        Some(Err(_)) if path.extension().is_some_and(|e| e == "wasm") => std::fs::read(path)
            .map_err(|e| IntegrityError::Malformed(format!("unreadable: {e}")))
            .and_then(|bytes| {
                let hash: [u8; 32] = Sha256::digest(&bytes).into();
                crate::integrity::detached_verdict(path, &hash, trust)
                    .unwrap_or_else(|e| Err(IntegrityError::Malformed(format!("unreadable: {e}"))))
            }),
        Some(Err(_)) => {
            check.status = "skipped".into();
            return check;
        }
        Some(Ok(kind)) => {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let extension = name.rfind('.').map_or("", |dot| &name[dot..]);
            if let Some(extractor) = extractors.and_then(|e| e.get(kind))
                && (!extractor.handles(extension) || (kind == ItemKind::Tool && is_json_data(path)))
            {
                check.status = "skipped".into();
                return check;
            }
            format_for(kind, name, &declared_formats(extractors, kind)).and_then(|format| {
                match std::fs::read(path) {
                    Err(e) => Err(IntegrityError::Malformed(format!("unreadable: {e}"))),
                    Ok(bytes) => match String::from_utf8(bytes) {
                        Ok(text) => verify_text(&text, kind, &format, trust),
                        Err(_) => Err(IntegrityError::NotText),
                    },
                }
            })
        }
    };
    match verdict {
        Ok(verified) => {
            check.fingerprint = Some(verified.fingerprint);
            check.owner = Some(verified.owner);
            check.warning = verified.uncovered;
        }
        Err(e) if e.is_unsigned() && matches!(kind, Some(Ok(ItemKind::Config))) => {
            check.status = "unsigned".into();
            check.warning = Some("unsigned config file (allowed for config)".into());
        }
        Err(e) => {
            check.status = e.code().into();
            check.error = Some(e.to_string());
        }
    }
    check
}

fn walk_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if file_type.is_dir() {
            if !name.starts_with('.') && name != "__pycache__" && name != "node_modules" {
                walk_files(&entry.path(), out);
            }
        } else if file_type.is_file() {
            out.push(entry.path());
        }
    }
}

/// The id of the item file at `path` under the kind folder `dir`, if its
/// extension makes it an item.
fn item_id(dir: &Path, path: &Path, extensions: &[String]) -> Option<String> {
    let relative = path.strip_prefix(dir).ok()?.to_str()?;
    let relative = relative.replace(std::path::MAIN_SEPARATOR, "/");
    extensions
        .iter()
        .find_map(|ext| relative.strip_suffix(ext.as_str()))
        .filter(|id| !id.is_empty() && !id.split('/').any(|p| p.starts_with('.')))
        .map(str::to_owned)
}

/// A `.json` file under the tools folder that is plain JSON without an
/// `executor_id`: data (a `package.json`, say), not a tool.
fn is_json_data(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
        && std::fs::read_to_string(path)
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .is_some_and(|v| v.get("executor_id").is_none())
}
