use std::path::PathBuf;

use rye_components::ComponentError;
use rye_space::{ItemKind, Space, SpaceError, display_paths};

/// Errors of the host's operations. Each names the file, id or component
/// it is about, and the rule that was broken.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Space(#[from] SpaceError),

    #[error(transparent)]
    Component(#[from] ComponentError),

    #[error(transparent)]
    Chain(#[from] crate::ChainError),

    #[error("{}: the {kind} extractor ({}) maps no parser to {extension:?} files", path.display(), extractor.display())]
    NoParserMapped {
        path: PathBuf,
        kind: ItemKind,
        extension: String,
        extractor: PathBuf,
    },

    #[error("{}: its parser {name:?} was not found (looked for {})", path.display(), display_paths(searched))]
    ParserNotFound {
        path: PathBuf,
        name: String,
        searched: Vec<PathBuf>,
    },

    #[error("{}: not UTF-8 text", path.display())]
    NotText { path: PathBuf },

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{}: already exists; pass force to overwrite it", path.display())]
    Exists { path: PathBuf },

    #[error("{}: {error}", path.display())]
    Integrity {
        path: PathBuf,
        error: rye_integrity::IntegrityError,
    },

    #[error("{}: refused by a validator: {report}", path.display())]
    Validation { path: PathBuf, report: String },

    /// A write the gate does not allow.
    #[error(transparent)]
    WriteDenied(#[from] rye_gate::WriteDenied),

    /// The environment withholding setting cannot be read.
    #[error(transparent)]
    Withholding(#[from] rye_gate::BadPattern),

    /// The host cannot start: no cache folder to keep its state in.
    #[error("no cache directory: set RYE_CACHE_DIR or HOME")]
    NoCacheDir,

    /// The WebAssembly engine could not be made.
    #[error("cannot start the WebAssembly engine: {0}")]
    Engine(String),

    /// Signing needs a key folder and none is configured.
    #[error("no signing key folder: set RYE_SIGNING_KEY_DIR or a user space")]
    NoSigningKeyDir,

    /// A request names a value of `what` that is not one of `expected`.
    #[error("{what} {value:?} is not known: expected {expected}")]
    Unknown {
        what: &'static str,
        value: String,
        expected: &'static str,
    },

    /// A key fingerprint that is not 16 hex digits.
    #[error("{0:?} is not a key fingerprint (16 hex digits)")]
    Fingerprint(String),

    /// A search scope that cannot be read.
    #[error(
        "scope {scope:?} {why}; use directive, tool, knowledge or all, optionally with a namespace such as tool.rye.core.*"
    )]
    Scope { scope: String, why: &'static str },

    /// A search query that cannot be read.
    #[error(transparent)]
    Query(#[from] rye_space::query::QueryError),

    /// A search source this host cannot search.
    #[error("source {0:?} is not available: this host has no registry provider")]
    SourceUnavailable(String),

    /// The request needs a space this host was not given.
    #[error("there is no {space} space here {purpose}")]
    NoSpace { space: Space, purpose: &'static str },

    /// The request would write to the system space.
    #[error("the system space is read-only: {hint}")]
    SystemReadOnly { hint: &'static str },

    /// A component named for signing is not there.
    #[error("{}: no such component to sign", path.display())]
    NoComponent { path: PathBuf },

    /// An item its own parser finds invalid is not signed.
    #[error("{}: not signed, its parser {parser} finds it invalid: {failure}", path.display())]
    ParserRefused {
        path: PathBuf,
        parser: String,
        failure: String,
    },

    /// `.ai/config/keys/` is the key store, not config items.
    #[error(
        "config {id:?} is in the key store (.ai/config/keys/), which `rye keys` manages; it is not a config item"
    )]
    KeyStore { id: String },

    /// A `<name>.config-schema` tool that cannot serve as a schema: a
    /// config it applies to is never left unchecked for that.
    #[error("{}: cannot serve as a config schema: {reason}", path.display())]
    ConfigSchema { path: PathBuf, reason: String },

    /// Copying an item would leave its destination space two files for it.
    #[error("{}: copying would give the {space} space a second file for {kind} {id:?}; remove it first", existing.display())]
    CopyConflict {
        existing: PathBuf,
        space: Space,
        kind: ItemKind,
        id: String,
    },

    /// A tree to validate without its `.ai/` folder.
    #[error("{}: no .ai/ folder to validate", root.display())]
    NoAiFolder { root: PathBuf },

    /// A `verify_deps` rule with a scope that is not one of the four.
    #[error("verify_deps.scope {0:?} is not tool_file, tool_siblings, tool_dir or anchor")]
    DepsScope(String),

    /// The runtime adapter a chain needs is not found.
    #[error("runtime adapter {name:?} not found (looked for {}){}", display_paths(searched), named_by.as_ref().map(|id| format!("; {id} names it")).unwrap_or_default())]
    AdapterNotFound {
        name: String,
        searched: Vec<PathBuf>,
        named_by: Option<String>,
    },

    /// The runtime adapter refused to plan.
    #[error("runtime adapter {}: {failure}", path.display())]
    AdapterFailed { path: PathBuf, failure: String },
}

impl HostError {
    /// The class of failure results report as `error_type`.
    pub fn error_type(&self) -> &'static str {
        match self {
            HostError::Integrity { .. } => "integrity",
            HostError::Chain(_) => "chain",
            HostError::Validation { .. } => "validation",
            HostError::Component(_) => "component",
            HostError::Space(_) => "resolution",
            HostError::WriteDenied(_) | HostError::Withholding(_) => "policy",
            HostError::NoParserMapped { .. }
            | HostError::ParserNotFound { .. }
            | HostError::NotText { .. }
            | HostError::Io { .. }
            | HostError::Exists { .. }
            | HostError::NoCacheDir
            | HostError::Engine(_)
            | HostError::NoSigningKeyDir
            | HostError::Unknown { .. }
            | HostError::Fingerprint(_)
            | HostError::Scope { .. }
            | HostError::Query(_)
            | HostError::SourceUnavailable(_)
            | HostError::NoSpace { .. }
            | HostError::SystemReadOnly { .. }
            | HostError::NoComponent { .. }
            | HostError::ParserRefused { .. }
            | HostError::ConfigSchema { .. }
            | HostError::KeyStore { .. }
            | HostError::CopyConflict { .. }
            | HostError::NoAiFolder { .. }
            | HostError::DepsScope(_)
            | HostError::AdapterNotFound { .. }
            | HostError::AdapterFailed { .. } => "host",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HostError::Io {
            path: path.into(),
            source,
        }
    }
}
