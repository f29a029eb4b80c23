//! The system space Rye ships with: every file of the repository's `.ai/`
//! plus the parser components built from `runtimes/`, embedded at build
//! time and signed there by a key whose public half is
//! [`public_key_pem`].
//!
//! Items and components are used as files (parsers are compiled from a
//! path; tools run from one), so [`materialize`] writes the bundle once per
//! distinct content under a cache directory and returns its base:
//!
//! ```no_run
//! let base = rye_system::materialize("/home/me/.cache/rye".as_ref())?;
//! assert!(base.join(".ai/parsers/python/ast.wasm").is_file());
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io;
use std::path::{Path, PathBuf};

mod bundle {
    include!(concat!(env!("OUT_DIR"), "/bundle.rs"));
}

mod precompiled {
    include!(concat!(env!("OUT_DIR"), "/precompiled.rs"));
}

/// The bundled component whose bytes hash to `wasm_hash` (SHA-256),
/// compiled for the machine the binary was built on under the host's
/// engine settings (`rye-engine`), if the build precompiled it. The host
/// deserializes it instead of compiling; an engine that finds it made for
/// another CPU or other settings refuses it and compiles as usual.
pub fn precompiled(wasm_hash: &[u8; 32]) -> Option<&'static [u8]> {
    precompiled::PRECOMPILED
        .iter()
        .find(|(hash, _)| hash == wasm_hash)
        .map(|(_, bytes)| *bytes)
}

/// How many components the build precompiled, and their bytes: what the
/// compiled code adds to the binary.
pub fn precompiled_size() -> (usize, usize) {
    let table = precompiled::PRECOMPILED;
    (
        table.len(),
        table.iter().map(|(_, bytes)| bytes.len()).sum(),
    )
}

/// The embedded files: paths relative to `.ai/`, and contents.
pub fn files() -> &'static [(&'static str, &'static [u8])] {
    bundle::FILES
}

/// SHA-256 over every embedded path and content.
pub fn hash() -> &'static str {
    bundle::HASH
}

/// The public key (PEM) that signed every embedded file. It was made for
/// this build; its private half was discarded once the bundle was signed.
pub fn public_key_pem() -> &'static str {
    bundle::PUBLIC_KEY_PEM
}

/// The `.ai/` folder the bundle was built from. A project whose `.ai/` is
/// this folder (the Rye repository itself) is the system space's source,
/// not a project of its own.
pub fn source_dir() -> &'static Path {
    Path::new(bundle::SOURCE_DIR)
}

/// Writes the bundle under `<cache_root>/system/<hash prefix>/.ai/` unless
/// an earlier run already did, and returns the base directory (the one
/// holding `.ai/`). Safe against concurrent processes: the tree is built
/// under a temporary name and renamed into place whole.
pub fn materialize(cache_root: &Path) -> io::Result<PathBuf> {
    let parent = cache_root.join("system");
    let target = parent.join(&hash()[..16]);
    let marker = target.join(".complete");
    if marker.is_file() {
        return Ok(target);
    }
    std::fs::create_dir_all(&parent)?;
    remove_abandoned(&parent);
    let tmp = parent.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let written = write_tree(&tmp).and_then(|()| std::fs::write(tmp.join(".complete"), hash()));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if target.exists() && !marker.is_file() {
        // A tree left incomplete by hand; replace it.
        let _ = std::fs::remove_dir_all(&target);
    }
    match std::fs::rename(&tmp, &target) {
        Ok(()) => Ok(target),
        Err(_) if marker.is_file() => {
            // Another process finished first; its tree is identical.
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(target)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

/// Removes the temporary trees of processes that died while unpacking
/// (killed mid-write, they never renamed theirs into place).
fn remove_abandoned(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(".tmp-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !process_alive(pid, &entry) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether process `pid` may still be writing `entry`: on Linux, whether it
/// exists; elsewhere, whether the entry changed in the last hour.
fn process_alive(pid: u32, entry: &std::fs::DirEntry) -> bool {
    if let Some(exists) = rye_space::process_exists(pid) {
        return exists;
    }
    entry
        .metadata()
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().unwrap_or_default() < std::time::Duration::from_secs(3600))
}

fn write_tree(base: &Path) -> io::Result<()> {
    let ai = base.join(".ai");
    for (relative, bytes) in files() {
        let path = ai.join(relative);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, bytes)?;
        let mut permissions = std::fs::metadata(&path)?.permissions();
        permissions.set_readonly(true);
        std::fs::set_permissions(&path, permissions)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_holds_items_and_parsers() {
        let names: Vec<_> = files().iter().map(|(p, _)| *p).collect();
        for expected in [
            "tools/rye/core/extractors/tool/tool_extractor.yaml",
            "parsers/python/ast.wasm",
            "parsers/markdown/xml.wasm",
            "parsers/markdown/xml.wasm.sig",
        ] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
    }

    #[test]
    fn every_file_is_signed_by_the_embedded_key() {
        use rye_integrity::{PublicKey, TrustStore, format_for, verify_detached, verify_text};
        use sha2::{Digest, Sha256};

        let key = PublicKey::from_pem(public_key_pem()).unwrap();
        let trust = TrustStore::builder().builtin(key, "rye-system").build();
        let all = files();
        for (relative, bytes) in all {
            if relative.ends_with(".sig") {
                continue;
            }
            if relative.ends_with(".wasm") {
                let sig = all
                    .iter()
                    .find(|(p, _)| *p == format!("{relative}.sig"))
                    .unwrap_or_else(|| panic!("{relative} has no detached signature"));
                let hash: [u8; 32] = Sha256::digest(bytes).into();
                verify_detached(&hash, std::str::from_utf8(sig.1).unwrap(), &trust)
                    .unwrap_or_else(|e| panic!("{relative}: {e}"));
                continue;
            }
            let kind: rye_space::ItemKind = relative.split('/').next().unwrap().parse().unwrap();
            let format = format_for(kind, relative, &[]).unwrap();
            verify_text(std::str::from_utf8(bytes).unwrap(), kind, &format, &trust)
                .unwrap_or_else(|e| panic!("{relative}: {e}"));
        }
    }

    #[test]
    fn materialize_is_idempotent() {
        let tmp = tempfile::tempdir().unwrap();
        let first = materialize(tmp.path()).unwrap();
        let second = materialize(tmp.path()).unwrap();
        assert_eq!(first, second);
        let wasm = std::fs::read(first.join(".ai/parsers/yaml/yaml.wasm")).unwrap();
        assert_eq!(&wasm[..4], b"\0asm");
        let leftovers: Vec<_> = std::fs::read_dir(tmp.path().join("system"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }
}
