use std::path::PathBuf;

use crate::{ItemKind, Space};

/// What can go wrong finding items and reading the data that describes
/// them. Every variant names the file or id it is about.
#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    #[error("invalid {what} {id:?}: {rule}")]
    InvalidId {
        what: &'static str,
        id: String,
        rule: &'static str,
    },

    #[error("unknown item kind {0:?}: expected directive, tool, knowledge or config")]
    UnknownKind(String),

    #[error("unknown space {0:?}: expected project, user or system")]
    UnknownSpace(String),

    #[error("{kind} {id:?} not found (searched {})", display_paths(searched))]
    NotFound {
        kind: ItemKind,
        id: String,
        searched: Vec<PathBuf>,
    },

    #[error(
        "{kind} {id:?} is defined by more than one file in the {space} space: {}; keep one",
        display_paths(paths)
    )]
    Ambiguous {
        kind: ItemKind,
        id: String,
        space: Space,
        paths: Vec<PathBuf>,
    },

    #[error("no extractor for {kind} items in any space (expected {expected})")]
    NoExtractor { kind: ItemKind, expected: String },

    #[error("{}: {message}", path.display())]
    Data { path: PathBuf, message: String },

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SpaceError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SpaceError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Paths as an error message lists them.
pub fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
