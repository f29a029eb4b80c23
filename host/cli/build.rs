//! Lays out a release build's code by `link-order.txt`: the functions a
//! warm call runs, which `.ci/link-order` finds, go side by side at the
//! start of the code, so a call touches fewer pages of it.
//!
//! Only where the linker is known to read such a file: on
//! `x86_64-unknown-linux-gnu`, where rustc links with its own LLD unless
//! told otherwise, with no other linker named. A profile-guided build
//! (`.ci/pgo`) lays its code out by its own counts and is left alone, and
//! `RYE_LINK_ORDER=0` turns the layout off (to measure what it gives).

use std::path::Path;

fn main() {
    let order = Path::new(env!("CARGO_MANIFEST_DIR")).join("link-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    for var in [
        "RYE_LINK_ORDER",
        "RUSTC_LINKER",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let wanted = var("PROFILE") == "release"
        && var("TARGET") == "x86_64-unknown-linux-gnu"
        && var("RYE_LINK_ORDER") != "0"
        && var("RUSTC_LINKER").is_empty()
        && var("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_empty()
        && !flags.contains("linker")
        && !flags.contains("profile-use")
        && !flags.contains("profile-generate");
    if wanted && order.is_file() {
        // Each through -Xlinker, whole: a path may hold a comma, which
        // -Wl would split at.
        let ordering = format!("--symbol-ordering-file={}", order.display());
        // Names the build no longer has (the file is older than the code)
        // are passed over without a word.
        for arg in [ordering.as_str(), "--no-warn-symbol-ordering"] {
            println!("cargo:rustc-link-arg-bin=rye=-Xlinker");
            println!("cargo:rustc-link-arg-bin=rye={arg}");
        }
    }
}
