//! What the host's integration tests share.

#![allow(dead_code, reason = "each test file uses a different part")]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rye_host::rye_integrity::{self, Keypair};
use rye_host::{HostConfig, IntegrityPolicy, ItemKind, Rye, RyeConfig};

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
    Rye::new(config(user, system)).unwrap()
}

/// The configuration [`rye_with_system`] uses: the test key is trusted.
pub fn config(user: &Path, system: Option<&Path>) -> RyeConfig {
    let cache = shared_cache();
    RyeConfig {
        cache_dir: cache.clone(),
        user_base: Some(user.to_owned()),
        system_base: system.map(Path::to_owned),
        components: HostConfig {
            cache_dir: Some(cache.join("components")),
            cache_key_file: Some(cache.join("cache.key")),
            ..HostConfig::default()
        },
        watch: true,
        snapshot: false,
        integrity: IntegrityPolicy::default(),
        trusted_keys: vec![(test_key().public().clone(), "test".into())],
        signing_key_dir: None,
        executable: None,
        record_threads: true,
    }
}

/// The key this test process signs its items with; the hosts of
/// [`rye`] trust it.
pub fn test_key() -> &'static Keypair {
    static KEY: OnceLock<Keypair> = OnceLock::new();
    KEY.get_or_init(|| Keypair::generate().unwrap())
}

/// Writes `content` at `base/relative`, creating folders, signed by the
/// test key when it is an item (UTF-8, under `.ai/<kind folder>/`) or a
/// component (a detached signature beside it).
pub fn write(base: &Path, relative: &str, content: impl AsRef<[u8]>) -> PathBuf {
    let path = write_unsigned(base, relative, content.as_ref());
    sign_file(&path);
    path
}

/// Writes `content` at `base/relative` as it is.
pub fn write_unsigned(base: &Path, relative: &str, content: impl AsRef<[u8]>) -> PathBuf {
    let path = base.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, content).unwrap();
    path
}

/// Signs the file at `path` in place with the test key, as its place
/// under `.ai/` says: items get a signature line, components a detached
/// `.sig`. Other files are left alone.
pub fn sign_file(path: &Path) {
    let text = path.to_string_lossy().replace('\\', "/");
    let Some(after) = text.rsplit_once("/.ai/").map(|(_, after)| after.to_owned()) else {
        return;
    };
    let folder = after.split('/').next().unwrap_or_default();
    let now = std::time::SystemTime::now();
    // A component tool's `.wasm` sits among the tools.
    if ["parsers", "adapters", "validators", "tools"].contains(&folder)
        && path.extension().is_some_and(|e| e == "wasm")
    {
        use sha2::Digest;
        let hash: [u8; 32] = sha2::Sha256::digest(std::fs::read(path).unwrap()).into();
        std::fs::write(
            rye_integrity::detached_path(path),
            rye_integrity::sign_detached(&hash, test_key(), now),
        )
        .unwrap();
        return;
    }
    if ["parsers", "adapters", "validators"].contains(&folder) {
        return;
    }
    let Ok(kind) = folder.parse::<ItemKind>() else {
        return;
    };
    let name = path.file_name().unwrap().to_str().unwrap();
    let Ok(format) = rye_integrity::format_for(kind, name, &[]) else {
        return;
    };
    let Ok(content) = std::fs::read_to_string(path) else {
        return;
    };
    let signed = rye_integrity::sign_text(&content, &format, test_key(), now).unwrap();
    std::fs::write(path, signed).unwrap();
}

/// Copies `from` to `to` and signs the copy (see [`sign_file`]).
pub fn copy_signed(from: impl AsRef<Path>, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap();
    sign_file(to);
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
