//! Builds the test components and the examples, and writes a constant per
//! component holding the path of its `.wasm`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    let mut code = String::new();
    for workspace in ["tests/test-programs/Cargo.toml", "examples/Cargo.toml"] {
        for component in rye_wasm_build::build_workspace(&root.join(workspace)) {
            let name = component.package.to_uppercase().replace('-', "_");
            writeln!(
                code,
                "/// `{}` built for wasm32-wasip2.\npub const {name}: &str = {:?};",
                component.package,
                component.wasm.display().to_string()
            )
            .unwrap();
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("components.rs");
    std::fs::write(out, code).unwrap();
}
