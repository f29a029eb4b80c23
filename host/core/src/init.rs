//! `rye init`: a project a newcomer can use at once. One sample tool,
//! directive and knowledge entry under `.ai/`, a signing key made and
//! trusted when there is none, and every file it wrote signed. It never
//! replaces a file: run again, it keeps what is there.

use std::path::{Path, PathBuf};

use rye_space::{ItemKind, Space};
use serde::Serialize;

use crate::sign::Signable;
use crate::{HostError, Rye};

/// The samples: kind, id, file under the kind's folder, text.
const SAMPLES: &[(ItemKind, &str, &str, &str)] = &[
    (
        ItemKind::Tool,
        "hello/greet",
        "hello/greet.py",
        include_str!("init/greet.py"),
    ),
    (
        ItemKind::Directive,
        "hello/welcome",
        "hello/welcome.md",
        include_str!("init/welcome.md"),
    ),
    (
        ItemKind::Knowledge,
        "hello/rye",
        "hello/rye.md",
        include_str!("init/rye.md"),
    ),
];

/// The sample tool, as `rye execute tool` names it.
pub const SAMPLE_TOOL: &str = "hello/greet";

/// What `rye init` did.
#[derive(Debug, Clone, Serialize)]
pub struct InitReport {
    /// The project folder (the one holding `.ai/`).
    pub project: PathBuf,
    /// Files written (and signed).
    pub created: Vec<PathBuf>,
    /// Files that were there already and were left as they were.
    pub kept: Vec<PathBuf>,
    pub key: InitKey,
}

/// The signing key `rye init` signed with.
#[derive(Debug, Clone, Serialize)]
pub struct InitKey {
    pub fingerprint: String,
    pub dir: PathBuf,
    /// Made by this run (there was none).
    pub made: bool,
    /// The trusted-key file this run wrote in the user space (the key was
    /// not trusted yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trusted_in: Option<PathBuf>,
}

impl Rye {
    /// Lays out `project/.ai/` with the samples, keeping any file already
    /// there, makes and trusts a signing key if there is none, and signs
    /// what it wrote.
    pub fn init_project(&self, project: &Path) -> Result<InitReport, HostError> {
        let ai = project.join(".ai");
        match std::fs::symlink_metadata(&ai) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(HostError::io(
                    &ai,
                    std::io::Error::other("is not a folder (a link or a file is not followed)"),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&ai).map_err(|e| HostError::io(&ai, e))?;
            }
            Err(e) => return Err(HostError::io(&ai, e)),
        }
        let key = self.init_key(project)?;
        let spaces = self.spaces(Some(project));
        let mut report = InitReport {
            project: project.to_owned(),
            created: Vec::new(),
            kept: Vec::new(),
            key,
        };
        for (kind, id, file, text) in SAMPLES {
            let path = ai.join(kind.folder()).join(file);
            match crate::lockfile::write_atomically(&spaces, &path, text.as_bytes(), false) {
                Ok(()) => {
                    self.sign(Some(project), Signable::Item(*kind), id, Space::Project)?;
                    report.created.push(path);
                }
                Err(HostError::Exists { .. }) => report.kept.push(path),
                Err(e) => return Err(e),
            }
        }
        Ok(report)
    }

    /// The signing key, made when there is none, and trusted in the user
    /// space when the spaces of `project` do not trust it yet.
    fn init_key(&self, project: &Path) -> Result<InitKey, HostError> {
        let dir = self.key_dir().ok_or(HostError::NoSigningKeyDir)?.to_owned();
        let (key, made) = match self.signing_key() {
            Ok(key) => (key, false),
            Err(HostError::Integrity {
                error: rye_integrity::IntegrityError::NoKeys { .. },
                ..
            }) => {
                let key =
                    rye_integrity::Keypair::generate().map_err(|error| HostError::Integrity {
                        path: dir.clone(),
                        error,
                    })?;
                key.save(&dir).map_err(|error| HostError::Integrity {
                    path: dir.clone(),
                    error,
                })?;
                (key, true)
            }
            // A key is there but cannot be read: never replace it (saving
            // refuses to, too).
            Err(e) => return Err(e),
        };
        let fingerprint = key.fingerprint();
        let spaces = self.spaces(Some(project));
        let trusted = self
            .trust_store(&spaces)
            .keys()
            .any(|k| k.key.fingerprint() == fingerprint);
        let trusted_in = if trusted {
            None
        } else {
            Some(self.trust_key(Some(project), key.public(), "local", Space::User)?)
        };
        Ok(InitKey {
            fingerprint: fingerprint.to_owned(),
            dir,
            made,
            trusted_in,
        })
    }
}
