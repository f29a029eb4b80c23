//! What verification keeps between requests: trust stores by folder,
//! verdicts by content hash, lockfiles read, and how a used file stands
//! ([`Signed`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use rye_components::LoadedComponent;
use rye_integrity::{IntegrityError, PublicKey, SignatureFormat, TrustStore, Verified};
use rye_space::{Extractors, FileStamp, ItemKind};
use serde::Serialize;

use crate::cache::Generational;
use crate::config::IntegrityPolicy;

/// Verdicts kept in memory.
pub(crate) const VERDICT_CACHE_ENTRIES: usize = 50_000;

/// How a file the host used stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Signed {
    /// Signed by a trusted key and unchanged.
    Verified(Verified),
    /// Unsigned, allowed by the policy for the project space.
    UnsignedAllowed,
    /// Verification is off.
    NotChecked,
}

impl Signed {
    /// The warning a result carries for this file, if any.
    pub fn warning(&self, what: &str) -> Option<String> {
        match self {
            Signed::Verified(v) => v.uncovered.as_ref().map(|u| format!("{what}: {u}")),
            Signed::UnsignedAllowed => Some(format!(
                "{what}: unsigned, used because the policy allows unsigned project items"
            )),
            Signed::NotChecked => None,
        }
    }

    pub fn fingerprint(&self) -> Option<&str> {
        match self {
            Signed::Verified(v) => Some(&v.fingerprint),
            _ => None,
        }
    }

    /// The content hash a lockfile pins: the signed hash, or the file's
    /// SHA-256 when the file is unsigned.
    pub(crate) fn integrity(&self, file_hash: &[u8; 32]) -> String {
        match self {
            Signed::Verified(v) => v.hash.clone(),
            _ => hex::encode(file_hash),
        }
    }
}

/// A component found through the spaces and verified.
#[derive(Clone)]
pub(crate) struct FoundComponent {
    pub(crate) component: Arc<LoadedComponent>,
    pub(crate) signed: Signed,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct VerdictKey {
    pub(crate) content: [u8; 32],
    pub(crate) kind: ItemKind,
    pub(crate) format: SignatureFormat,
    pub(crate) trust: [u8; 32],
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct ComponentKey {
    pub(crate) content: [u8; 32],
    pub(crate) signature: Option<FileStamp>,
    pub(crate) trust: [u8; 32],
}

pub(crate) type Verdict = Result<Verified, IntegrityError>;

/// Trust stores by their folders, with the stamps they were read at.
pub(crate) type TrustCache = HashMap<Vec<PathBuf>, TrustEntry>;

pub(crate) struct TrustEntry {
    /// The folders of trusted keys then the key files read, and their
    /// stamps.
    pub(crate) paths: Vec<PathBuf>,
    pub(crate) stamps: Vec<Option<FileStamp>>,
    pub(crate) store: Arc<TrustStore>,
}

pub(crate) struct IntegrityState {
    pub(crate) policy: IntegrityPolicy,
    pub(crate) builtin: Option<PublicKey>,
    pub(crate) given: Vec<(PublicKey, String)>,
    pub(crate) trust: std::sync::Mutex<TrustCache>,
    pub(crate) verdicts: std::sync::Mutex<Generational<VerdictKey, Verdict>>,
    pub(crate) components: std::sync::Mutex<Generational<ComponentKey, Verdict>>,
    pub(crate) hashes: std::sync::Mutex<HashMap<PathBuf, (FileStamp, [u8; 32])>>,
    /// Lockfiles read, by path, with the stamp they were read at.
    pub(crate) locks: std::sync::Mutex<LockCache>,
}

pub(crate) type LockCache = HashMap<PathBuf, (FileStamp, Option<Arc<serde_json::Value>>)>;

impl IntegrityState {
    pub(crate) fn new(policy: IntegrityPolicy, given: Vec<(PublicKey, String)>) -> Self {
        Self {
            policy,
            builtin: PublicKey::from_pem(rye_system::public_key_pem()).ok(),
            given,
            trust: Default::default(),
            verdicts: std::sync::Mutex::new(Generational::new(VERDICT_CACHE_ENTRIES)),
            components: std::sync::Mutex::new(Generational::new(VERDICT_CACHE_ENTRIES)),
            hashes: Default::default(),
            locks: Default::default(),
        }
    }
}

/// The trusted-key folders followed by the files in them, whose stamps say
/// whether a trust store still holds; the files are those of the last
/// read (a file added or removed changes its folder's stamp, one
/// rewritten in place its own).
pub(crate) fn trust_paths(dirs: &[PathBuf], files: &[PathBuf]) -> Vec<PathBuf> {
    dirs.iter().chain(files).cloned().collect()
}

/// The trusted-key files a store was built from: those it kept and those
/// it left out.
pub(crate) fn files_read(store: &TrustStore) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = store
        .keys()
        .filter_map(|k| match &k.source {
            rye_integrity::KeySource::File { path, .. } => Some(path.clone()),
            _ => None,
        })
        .chain(store.ignored().iter().map(|(p, _)| p.clone()))
        .collect();
    files.sort();
    files
}

pub(crate) fn trusted_files(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

pub(crate) fn declared_formats(
    extractors: Option<&Extractors>,
    kind: ItemKind,
) -> Vec<(String, SignatureFormat)> {
    extractors
        .and_then(|e| e.get(kind))
        .map(|e| {
            e.signature_formats
                .iter()
                .map(|(ext, f)| {
                    (
                        ext.clone(),
                        SignatureFormat::new(&f.prefix, &f.suffix, f.after_shebang),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
