//! Builds the components in `runtimes/` (parsers) and `runtimes/adapters/`
//! and embeds them, with every file of
//! the repository's `.ai/`, into the crate, so the binary carries its
//! system space and works from any directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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

    let built = ["runtimes/Cargo.toml", "runtimes/adapters/Cargo.toml"]
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
         pub(crate) const SOURCE_DIR: &str = {:?};\n",
        hex::encode(hash.finalize()),
        ai.display().to_string(),
    );
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("bundle.rs");
    std::fs::write(out, code).unwrap();
}
