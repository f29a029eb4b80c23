//! The on-disk cache of compiled components.
//!
//! An artifact's file name is the SHA-256 of the component's bytes and the
//! engine's fingerprint (wasmtime version and every setting that affects
//! code generation), so a changed component or a changed engine simply
//! misses. Files are written whole under a temporary name and renamed into
//! place, never modified afterwards, which is what makes mapping them into
//! memory sound.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

pub(crate) struct ArtifactCache {
    dir: PathBuf,
    fingerprint: [u8; 32],
}

impl ArtifactCache {
    pub(crate) fn new(dir: PathBuf, engine: &Engine) -> Self {
        Self {
            dir,
            fingerprint: engine_fingerprint(engine),
        }
    }

    pub(crate) fn path_for(&self, wasm_hash: &[u8; 32]) -> PathBuf {
        let mut key = Sha256::new();
        key.update(wasm_hash);
        key.update(self.fingerprint);
        self.dir
            .join(format!("{}.cwasm", hex::encode(key.finalize())))
    }

    /// The cached compilation of a component, if there is a usable one.
    pub(crate) fn load(&self, engine: &Engine, wasm_hash: &[u8; 32]) -> Option<Component> {
        let path = self.path_for(wasm_hash);
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file was produced by `Component::serialize` of an
        // engine with the same fingerprint and is never modified after it
        // is renamed into place (see the module docs). wasmtime still
        // checks its header and engine compatibility and errors on a
        // mismatch, which is handled below by recompiling.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "discarding unusable compiled component");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores a compiled component; failures only cost a later recompile.
    pub(crate) fn store(&self, component: &Component, wasm_hash: &[u8; 32]) {
        let path = self.path_for(wasm_hash);
        if let Err(e) = write_atomically(&self.dir, &path, component) {
            tracing::warn!(path = %path.display(), error = %e, "could not cache compiled component");
        }
    }
}

fn write_atomically(dir: &Path, path: &Path, component: &Component) -> std::io::Result<()> {
    let bytes = component.serialize().map_err(std::io::Error::other)?;
    create_private_dir(dir)?;
    let tmp = dir.join(format!(
        ".tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
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
