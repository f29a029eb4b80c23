//! Builds a guest workspace (every `cdylib` and command in it) for `wasm32-wasip2` from a
//! build script, so a plain `cargo build` or `cargo test` of the host also
//! produces the components it embeds or tests against. No `.wasm` is ever
//! committed.
//!
//! ```no_run
//! // build.rs
//! let built = rye_wasm_build::build_workspace("../../runtimes/Cargo.toml".as_ref());
//! for component in &built {
//!     println!("{} -> {}", component.package, component.wasm.display());
//! }
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

/// The compilation target of every guest.
pub const TARGET: &str = "wasm32-wasip2";

/// One component produced by [`build_workspace`].
#[derive(Debug, Clone)]
pub struct Component {
    /// The cargo package name.
    pub package: String,
    /// The built `.wasm` file.
    pub wasm: PathBuf,
    /// The package's `[package.metadata.rye]` table (`null` when absent).
    pub metadata: serde_json::Value,
}

/// Builds every `cdylib` package of the workspace at `manifest` in release
/// mode, and every package that is a binary only (a `wasi:cli` command),
/// and returns the components, in package-name order.
///
/// All guest workspaces share one target directory (`target/wasm` of the
/// host workspace), so dependencies they have in common compile once.
/// Emits `cargo:rerun-if-changed` for every source the build depends on.
///
/// # Panics
///
/// Panics with cargo's own diagnostics when the build fails: this runs in a
/// build script, where a panic is how a failure is reported.
pub fn build_workspace(manifest: &Path) -> Vec<Component> {
    let manifest = manifest
        .canonicalize()
        .unwrap_or_else(|e| panic!("guest manifest {}: {e}", manifest.display()));
    let root = host_workspace_root();
    let target_dir = root.join("target").join("wasm");

    let packages = cdylib_packages(&manifest);
    for package in &packages {
        println!("cargo:rerun-if-changed={}", package.dir.display());
    }
    for shared in ["wit", "guest-sdk/src", "guest-sdk/Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", root.join(shared).display());
    }
    let lock = manifest.with_file_name("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());

    let mut cargo = guest_cargo();
    // Run from the guest workspace so its own `.cargo/config.toml` applies.
    cargo
        .current_dir(manifest.parent().expect("a manifest has a folder"))
        .arg("build")
        .arg("--release")
        .arg("--target")
        .arg(TARGET)
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir);
    let output = cargo
        .output()
        .unwrap_or_else(|e| panic!("failed to run cargo for {}: {e}", manifest.display()));
    if !output.status.success() {
        panic!(
            "building the guest workspace {} for {TARGET} failed \
             (is the target installed? `rustup target add {TARGET}`):\n{}",
            manifest.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let out = target_dir.join(TARGET).join("release");
    packages
        .into_iter()
        .map(|p| {
            let wasm = out.join(format!("{}.wasm", p.lib_name));
            assert!(
                wasm.is_file(),
                "cargo built {} but {} is missing",
                p.name,
                wasm.display()
            );
            Component {
                package: p.name,
                wasm,
                metadata: p.metadata,
            }
        })
        .collect()
}

struct Package {
    name: String,
    lib_name: String,
    dir: PathBuf,
    metadata: serde_json::Value,
}

fn cdylib_packages(manifest: &Path) -> Vec<Package> {
    let output = guest_cargo()
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(manifest)
        .output()
        .unwrap_or_else(|e| panic!("failed to run cargo metadata: {e}"));
    if !output.status.success() {
        panic!(
            "cargo metadata for {} failed:\n{}",
            manifest.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let mut packages: Vec<Package> = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let of_kind = |kind: &str| {
                p["targets"].as_array()?.iter().find(|t| {
                    t["crate_types"]
                        .as_array()
                        .is_some_and(|k| k.iter().any(|k| k == kind))
                })
            };
            // A library keeps its name with `_` for `-`; a binary (a
            // `wasi:cli` command) keeps its own.
            let lib_name = match of_kind("cdylib") {
                Some(lib) => lib["name"].as_str()?.replace('-', "_"),
                None => of_kind("bin")?["name"].as_str()?.to_owned(),
            };
            let manifest_path = PathBuf::from(p["manifest_path"].as_str()?);
            Some(Package {
                name: p["name"].as_str()?.to_owned(),
                lib_name,
                dir: manifest_path.parent()?.to_owned(),
                metadata: p["metadata"]["rye"].clone(),
            })
        })
        .collect();
    packages.sort_by(|a, b| a.name.cmp(&b.name));
    packages
}

/// A `cargo` command with the outer build's per-crate settings removed, so
/// flags meant for the host (target CPU, clippy as a wrapper, the host
/// target dir) never leak into the guest build. The jobserver is kept so
/// the nested build shares the outer one's parallelism.
fn guest_cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let keep = key == "CARGO_HOME"
            || key == "CARGO_MAKEFLAGS"
            || key.starts_with("CARGO_NET_")
            || key.starts_with("CARGO_HTTP_")
            || key.starts_with("CARGO_REGISTRIES_")
            || key.starts_with("CARGO_REGISTRY_");
        let drop = (key.starts_with("CARGO_") && !keep)
            || matches!(
                key,
                "RUSTFLAGS" | "RUSTC_WORKSPACE_WRAPPER" | "RUSTDOCFLAGS" | "TARGET" | "HOST"
            );
        if drop {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// The host workspace root: this crate lives at `host/wasm-build`.
fn host_workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("host workspace root exists")
}
