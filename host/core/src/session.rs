//! One request's view of the host.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rye_integrity::TrustStore;
use rye_space::{Extractors, Spaces};

use crate::{HostError, Rye};

/// What one request works with: the project it is for, that project's
/// spaces and, made on first use and then kept for the request, their
/// extractors and trust store. A request makes one and hands it down,
/// rather than each step working the spaces out again or taking them as
/// loose arguments.
pub(crate) struct Session {
    pub(crate) project: Option<PathBuf>,
    pub(crate) spaces: Spaces,
    extractors: OnceLock<Arc<Extractors>>,
    trust: OnceLock<Arc<TrustStore>>,
}

impl Rye {
    /// A session for a request about `project`.
    pub(crate) fn session(&self, project: Option<&Path>) -> Session {
        Session {
            project: project.map(Path::to_owned),
            spaces: self.spaces(project),
            extractors: OnceLock::new(),
            trust: OnceLock::new(),
        }
    }
}

/// The project folder a request is about: the one given, else the
/// working directory.
pub(crate) fn project_dir(project: Option<&Path>) -> PathBuf {
    project
        .map(Path::to_owned)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default()
}

impl Session {
    /// The project folder this session is about (see [`project_dir`]).
    pub(crate) fn project_dir(&self) -> PathBuf {
        project_dir(self.project.as_deref())
    }

    /// The extractors in effect for the spaces (see [`Rye::extractors`]).
    pub(crate) fn extractors(&self, rye: &Rye) -> Result<Arc<Extractors>, HostError> {
        if let Some(extractors) = self.extractors.get() {
            return Ok(extractors.clone());
        }
        let extractors = rye.extractors(&self.spaces)?;
        Ok(self.extractors.get_or_init(|| extractors).clone())
    }

    /// Takes `extractors` and `trust` as this session's, where it has
    /// not worked them out yet: they were worked out for the same spaces
    /// from files unchanged since.
    pub(crate) fn prime(&self, extractors: Arc<Extractors>, trust: Arc<TrustStore>) {
        let _ = self.extractors.set(extractors);
        let _ = self.trust.set(trust);
    }

    /// The keys trusted for the spaces (see [`Rye::trust_store`]).
    pub(crate) fn trust(&self, rye: &Rye) -> Arc<TrustStore> {
        self.trust
            .get_or_init(|| rye.trust_store(&self.spaces))
            .clone()
    }
}
