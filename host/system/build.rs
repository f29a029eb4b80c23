//! Builds the components in `runtimes/` (parsers), `runtimes/adapters/`,
//! `runtimes/validators/` and `runtimes/walkers/`
//! and embeds them, with every file of the repository's `.ai/`, into the
//! crate, so the binary carries its system space and works from any
//! directory.
//!
//! Every embedded file is signed by a key made for this build: items get a
//! signature line, components a detached `.sig`. Only the public half of
//! the key is kept (embedded, trusted by the host); the private half never
//! leaves this process.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rye_integrity::{Keypair, format_for, sign_detached, sign_text};
use rye_space::ItemKind;
use sha2::{Digest, Sha256};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    let ai = root.join(".ai");
    println!("cargo:rerun-if-changed={}", ai.display());

    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for entry in walkdir::WalkDir::new(&ai).sort_by_file_name() {
        let entry = entry.unwrap_or_else(|e| panic!("reading {}: {e}", ai.display()));
        if !entry.file_type().is_file() {
            continue;
        }
        let relative = entry
            .path()
            .strip_prefix(&ai)
            .unwrap()
            .to_str()
            .expect("UTF-8 paths in .ai/");
        // A run's records and objects, if tools were run with this
        // folder as their project, are no part of the system space.
        if relative.starts_with("state/") {
            continue;
        }
        if relative.ends_with(".wasm") {
            println!(
                "cargo:warning=ignoring {relative}: components in the system space are built from runtimes/"
            );
            continue;
        }
        files.push((
            relative.replace(std::path::MAIN_SEPARATOR, "/"),
            entry.into_path(),
        ));
    }

    let built = [
        "runtimes/Cargo.toml",
        "runtimes/adapters/Cargo.toml",
        "runtimes/validators/Cargo.toml",
        "runtimes/walkers/Cargo.toml",
    ]
    .iter()
    .flat_map(|workspace| rye_wasm_build::build_workspace(&root.join(workspace)));
    for component in built {
        let install = component.metadata["install"].as_str().unwrap_or_else(|| {
            panic!(
                "package {} needs [package.metadata.rye] install = \"<path under .ai/>\"",
                component.package
            )
        });
        files.push((install.to_owned(), component.wasm));
    }
    files.sort();

    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let signed_dir = out_dir.join("signed");
    let _ = std::fs::remove_dir_all(&signed_dir);
    let key = Keypair::generate().expect("a signing key for the system space");
    let now = std::time::SystemTime::now();
    let mut signed_files = Vec::new();
    for (relative, path) in &files {
        let bytes =
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let target = signed_dir.join(relative);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        // A run's records and objects, if tools were run with this
        // folder as their project, are no part of the system space.
        if relative.starts_with("state/") {
            continue;
        }
        if relative.ends_with(".wasm") {
            let hash: [u8; 32] = Sha256::digest(&bytes).into();
            let sig = signed_dir.join(format!("{relative}.sig"));
            std::fs::write(&sig, sign_detached(&hash, &key, now)).unwrap();
            signed_files.push((format!("{relative}.sig"), sig));
            signed_files.push((relative.clone(), path.clone()));
            continue;
        }
        let kind: ItemKind = relative
            .split('/')
            .next()
            .and_then(|folder| folder.parse().ok())
            .unwrap_or_else(|| panic!(".ai/{relative} is not under an item folder"));
        let name = relative.rsplit('/').next().unwrap();
        let format = format_for(kind, name, &[])
            .unwrap_or_else(|e| panic!(".ai/{relative} cannot be signed: {e}"));
        let text =
            String::from_utf8(bytes).unwrap_or_else(|_| panic!(".ai/{relative} is not UTF-8 text"));
        let signed = sign_text(&text, &format, &key, now)
            .unwrap_or_else(|e| panic!(".ai/{relative} cannot be signed: {e}"));
        std::fs::write(&target, signed).unwrap();
        signed_files.push((relative.clone(), target));
    }
    let files = signed_files;

    let mut hash = Sha256::new();
    let mut table = String::new();
    for (relative, path) in &files {
        let bytes =
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        hash.update(relative.as_bytes());
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
        writeln!(
            table,
            "    ({relative:?}, include_bytes!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    let code = format!(
        "pub(crate) static FILES: &[(&str, &[u8])] = &[\n{table}];\n\
         pub(crate) const HASH: &str = {:?};\n\
         pub(crate) const SOURCE_DIR: &str = {:?};\n\
         pub(crate) const PUBLIC_KEY_PEM: &str = {:?};\n",
        hex::encode(hash.finalize()),
        ai.display().to_string(),
        key.public().pem(),
    );
    let out = out_dir.join("bundle.rs");
    std::fs::write(out, code).unwrap();

    precompile(&files, &out_dir);
}

/// Compiles every bundled component for this machine under the host's
/// engine settings and writes a table of the artifacts by the SHA-256 of
/// the component they came from, so a first run deserializes instead of
/// compiling. Cross builds embed none (the artifact must match the CPU it
/// runs on), nor does a build with `RYE_PRECOMPILE=0`; the host then
/// compiles as usual, as it does for any artifact its engine refuses.
fn precompile(files: &[(String, PathBuf)], out_dir: &Path) {
    println!("cargo:rerun-if-env-changed=RYE_PRECOMPILE");
    let cross = std::env::var("TARGET").ok() != std::env::var("HOST").ok();
    let off = std::env::var_os("RYE_PRECOMPILE").is_some_and(|v| v == "0");
    let dir = out_dir.join("precompiled");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let components: Vec<&PathBuf> = if cross || off {
        Vec::new()
    } else {
        files
            .iter()
            .filter(|(relative, _)| relative.ends_with(".wasm"))
            .map(|(_, path)| path)
            .collect()
    };
    let artifacts: Vec<([u8; 32], PathBuf)> = std::thread::scope(|scope| {
        let jobs: Vec<_> = components
            .iter()
            .map(|path| {
                let dir = &dir;
                scope.spawn(move || {
                    let wasm = std::fs::read(path)
                        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
                    let hash: [u8; 32] = Sha256::digest(&wasm).into();
                    let artifact = rye_engine::precompile(&wasm)
                        .unwrap_or_else(|e| panic!("precompiling {}: {e:#}", path.display()));
                    let target = dir.join(format!("{}.cwasm", hex::encode(hash)));
                    std::fs::write(&target, artifact).unwrap();
                    (hash, target)
                })
            })
            .collect();
        jobs.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let mut table = String::new();
    for (hash, path) in &artifacts {
        let bytes: Vec<String> = hash.iter().map(|b| format!("{b:#04x}")).collect();
        writeln!(
            table,
            "    ([{}], include_bytes!({:?})),",
            bytes.join(", "),
            path.display().to_string()
        )
        .unwrap();
    }
    std::fs::write(
        out_dir.join("precompiled.rs"),
        format!("pub(crate) static PRECOMPILED: &[([u8; 32], &[u8])] = &[\n{table}];\n"),
    )
    .unwrap();
}
