//! The on-disk cache of compiled components.
//!
//! An artifact's file name is the SHA-256 of the component's bytes and the
//! engine's fingerprint (wasmtime version and every setting that affects
//! code generation), so a changed component or a changed engine simply
//! misses. Files are written whole under a temporary name and renamed into
//! place.
//!
//! Deserializing an artifact runs its machine code, so a cache folder is
//! never trusted for what it holds: it may be a restored CI cache, shared,
//! or tampered with. Every artifact carries an HMAC-SHA256 tag, keyed by a
//! secret that lives outside the cache folder (the key file, 0600, made on
//! first use), over the component's hash, the engine fingerprint and the
//! artifact. An artifact is read into memory, its tag checked, and only
//! then deserialized from those same bytes; one whose tag does not verify
//! (damaged, made by another host or key, or copied from another
//! component's name) is discarded and the component recompiled.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// What an artifact file starts with: a format marker, then the tag.
const MAGIC: &[u8; 8] = b"RYECWM1\n";
const TAG_LEN: usize = 32;
const HEADER_LEN: usize = MAGIC.len() + TAG_LEN;

/// A temporary file older than this was left by a process that died
/// while writing it.
const STALE_TEMPORARY: Duration = Duration::from_secs(3600);

/// The prefix of temporary files in the cache folder.
const TEMPORARY_PREFIX: &str = ".tmp-";

type HmacSha256 = Hmac<Sha256>;

pub(crate) struct ArtifactCache {
    dir: PathBuf,
    fingerprint: [u8; 32],
    key: [u8; 32],
}

impl ArtifactCache {
    /// A cache in `dir` whose artifacts are authenticated by the secret in
    /// `key_file` (created when missing). `None`, with a warning, when the
    /// key cannot be had: components are then compiled in every process.
    pub(crate) fn new(dir: PathBuf, key_file: &Path, engine: &Engine) -> Option<Self> {
        match read_or_create_key(key_file) {
            Ok(key) => Some(Self {
                dir,
                fingerprint: engine_fingerprint(engine),
                key,
            }),
            Err(e) => {
                tracing::warn!(key = %key_file.display(), error = %e, "no cache key, so compiled components are not cached");
                None
            }
        }
    }

    pub(crate) fn path_for(&self, wasm_hash: &[u8; 32]) -> PathBuf {
        let mut key = Sha256::new();
        key.update(wasm_hash);
        key.update(self.fingerprint);
        self.dir
            .join(format!("{}.cwasm", hex::encode(key.finalize())))
    }

    fn mac(&self, wasm_hash: &[u8; 32]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(wasm_hash);
        mac.update(&self.fingerprint);
        mac
    }

    /// The cached compilation of a component, if there is one this host
    /// made and nobody changed since.
    pub(crate) fn load(&self, engine: &Engine, wasm_hash: &[u8; 32]) -> Option<Component> {
        let path = self.path_for(wasm_hash);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read compiled component");
                return None;
            }
        };
        let discard = |why: &dyn std::fmt::Display| {
            tracing::warn!(path = %path.display(), reason = %why, "discarding compiled component; recompiling");
            let _ = std::fs::remove_file(&path);
            None
        };
        let Some(artifact) = self.verified(wasm_hash, &bytes) else {
            return discard(
                &"it was not made by this host with this cache key, or it changed since",
            );
        };
        // SAFETY: `artifact` is the output of `Component::serialize` by an
        // engine with this fingerprint: its HMAC, keyed by a secret only
        // this user's hosts hold, was computed over exactly these bytes
        // when this host stored them, and they are in memory now, out of
        // reach of changes to the file. wasmtime still checks the header
        // and engine compatibility.
        match unsafe { Component::deserialize(engine, artifact) } {
            Ok(component) => Some(component),
            Err(e) => discard(&e),
        }
    }

    /// The artifact in `bytes` when its tag verifies.
    fn verified<'a>(&self, wasm_hash: &[u8; 32], bytes: &'a [u8]) -> Option<&'a [u8]> {
        if bytes.len() < HEADER_LEN || &bytes[..MAGIC.len()] != MAGIC {
            return None;
        }
        let (tag, artifact) = bytes[MAGIC.len()..].split_at(TAG_LEN);
        let mut mac = self.mac(wasm_hash);
        mac.update(artifact);
        mac.verify_slice(tag).ok().map(|()| artifact)
    }

    /// Stores a compiled component; failures only cost a later recompile.
    pub(crate) fn store(&self, component: &Component, wasm_hash: &[u8; 32]) {
        let path = self.path_for(wasm_hash);
        let written = component
            .serialize()
            .map_err(std::io::Error::other)
            .and_then(|artifact| {
                let mut mac = self.mac(wasm_hash);
                mac.update(&artifact);
                let tag = mac.finalize().into_bytes();
                write_atomically(&self.dir, &path, &[MAGIC, tag.as_slice(), &artifact])
            });
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "could not cache compiled component");
        }
        remove_stale_temporaries(&self.dir);
    }
}

/// Writes `parts` to `path` through a temporary file renamed into place.
fn write_atomically(dir: &Path, path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
    create_private_dir(dir)?;
    let tmp = dir.join(format!(
        "{TEMPORARY_PREFIX}{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    {
        let mut file = std::fs::File::create(&tmp)?;
        for part in parts {
            file.write_all(part)?;
        }
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Removes temporary files that a process killed mid-write left behind.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let stale = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(TEMPORARY_PREFIX))
            && entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > STALE_TEMPORARY);
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The 32-byte secret in `path`, made (from the OS's random source, mode
/// 0600, in a 0700 folder) when the file does not exist yet. Two processes
/// making it at once agree: the first link into place wins and both read
/// what it wrote.
fn read_or_create_key(path: &Path) -> std::io::Result<[u8; 32]> {
    let read = |path: &Path| -> std::io::Result<[u8; 32]> {
        let bytes = std::fs::read(path)?;
        bytes.try_into().map_err(|b: Vec<u8>| {
            std::io::Error::other(format!(
                "the key file holds {} bytes, not 32; remove it to make a new one",
                b.len()
            ))
        })
    };
    match read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        other => return other,
    }
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the key file has no folder"))?;
    create_private_dir(dir)?;
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| std::io::Error::other(format!("no randomness for the cache key: {e}")))?;
    let tmp = dir.join(format!(".key-{}", std::process::id()));
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp)?;
        file.write_all(&key)?;
        file.sync_all()?;
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(path),
        Err(e) => Err(e),
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// SHA-256 over what wasmtime says decides whether a compiled artifact
/// fits this engine.
fn engine_fingerprint(engine: &Engine) -> [u8; 32] {
    struct ShaHasher(Sha256);
    impl Hasher for ShaHasher {
        fn finish(&self) -> u64 {
            unreachable!("only the digest is used")
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut hasher = ShaHasher(Sha256::new());
    env!("CARGO_PKG_VERSION").hash(&mut hasher);
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.0.finalize().into()
}
