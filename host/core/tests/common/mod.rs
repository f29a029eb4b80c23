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
    rye_with_system(user, None)
}

/// A host whose system space is `system` (a folder holding `.ai/`), or the
/// embedded bundle for `None`.
pub fn rye_with_system(user: &Path, system: Option<&Path>) -> Rye {
    let cache = shared_cache();
    Rye::new(RyeConfig {
        cache_dir: cache.clone(),
        user_base: Some(user.to_owned()),
        system_base: system.map(Path::to_owned),
        components: HostConfig {
            cache_dir: Some(cache.join("components")),
            ..HostConfig::default()
        },
        watch: true,
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

/// A writable copy of the bundled system space, for tests that need system
/// items of their own.
pub fn system_copy() -> tempfile::TempDir {
    let bundled = rye(&tempfile::tempdir().unwrap().keep())
        .system_base()
        .to_owned();
    let copy = tempfile::tempdir().unwrap();
    copy_tree(&bundled.join(".ai"), &copy.path().join(".ai"));
    copy
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
            let mut permissions = std::fs::metadata(&target).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false, reason = "a test's own copy")]
            permissions.set_readonly(false);
            std::fs::set_permissions(&target, permissions).unwrap();
        }
    }
}
