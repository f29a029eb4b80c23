//! Moving a project between a machine and a node: the policy of what a
//! space carries, the manifests that name its content by hash, the object
//! exchange that moves what the other side lacks, the snapshots of a
//! project's history, and the three-way merge that folds two lines of
//! change back into one.

use std::path::Path;

pub mod auth;
pub mod foldback;
pub mod manifest;
pub mod materialize;
pub mod merge;
pub mod objects;
pub mod policy;
pub mod snapshot;
pub mod stamps;

/// Why a manifest could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("the manifest policy: {0}")]
    Policy(String),
    #[error("{0}")]
    Manifest(String),
    #[error(transparent)]
    Cas(#[from] rye_cas::CasError),
}

impl SyncError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        SyncError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
