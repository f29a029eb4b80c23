//! What the host's integration tests share.

#![allow(dead_code, reason = "each test file uses a different part")]

use std::path::{Path, PathBuf};

use rye_host::{HostConfig, Rye, RyeConfig};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A cache shared by every test of the run: compiled components are keyed
/// by content, so sharing is safe, and it spares each test a compile.
pub fn shared_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rye-test-cache")
}

/// A host whose user space is `user` (which may be empty) and whose system
/// space is the embedded bundle.
pub fn rye(user: &Path) -> Rye {
    let cache = shared_cache();
    Rye::new(RyeConfig {
        cache_dir: cache.clone(),
        user_base: Some(user.to_owned()),
        system_base: None,
        components: HostConfig {
            cache_dir: Some(cache.join("components")),
            ..HostConfig::default()
        },
    })
    .unwrap()
}

/// Writes `content` at `base/relative`, creating folders.
pub fn write(base: &Path, relative: &str, content: impl AsRef<[u8]>) -> PathBuf {
    let path = base.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, content).unwrap();
    path
}
