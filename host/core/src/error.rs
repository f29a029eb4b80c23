use std::path::PathBuf;

use rye_components::ComponentError;
use rye_space::{ItemKind, SpaceError, display_paths};

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

    #[error("{0}")]
    Invalid(String),
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
            _ => "host",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HostError::Io {
            path: path.into(),
            source,
        }
    }
}
