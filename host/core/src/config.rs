use std::path::PathBuf;

use rye_components::HostConfig;
use rye_integrity::PublicKey;

use crate::HostError;

/// Where the host finds its spaces and keeps its caches.
#[derive(Debug, Clone)]
pub struct RyeConfig {
    /// Compiled components and the materialized system space live here.
    pub cache_dir: PathBuf,
    /// The base of the user space (the folder holding `.ai/`).
    pub user_base: Option<PathBuf>,
    /// The base of the system space; `None` uses the bundle embedded in the
    /// binary, written under `cache_dir` on first use.
    pub system_base: Option<PathBuf>,
    pub components: HostConfig,
    /// Watch listed trees so later searches and chain builds read nothing
    /// from disk while nothing changed (Linux). Worth it for a long-running
    /// host; a one-shot command should turn it off.
    pub watch: bool,
    /// Without watching: list each tree once and keep the listing for the
    /// life of the host. For a one-shot command over a tree nobody changes
    /// while it runs; a validation of thousands of tools would otherwise
    /// walk the trees for every chain.
    pub snapshot: bool,
    /// What is demanded of signatures.
    pub integrity: IntegrityPolicy,
    /// Keys trusted in addition to the system key and the spaces'
    /// trusted-key files, with their owners.
    pub trusted_keys: Vec<(PublicKey, String)>,
    /// Where the signing keypair is kept; `None` means
    /// `<user space>/.ai/config/keys/signing`.
    pub signing_key_dir: Option<PathBuf>,
    /// The program that is this host. Shown to runtime adapters, and so to
    /// the processes they plan, as `RYE_EXECUTABLE`, so a tool can ask the
    /// host for what only the host does (the system tool `rye/mcp/manager`
    /// runs `rye mcp manage`); `None` shows nothing.
    pub executable: Option<PathBuf>,
    /// Record every tool run as a thread in its project's
    /// `.ai/state/threads/` (see the `threads` module).
    pub record_threads: bool,
}

impl RyeConfig {
    /// Reads the environment:
    ///
    /// | variable           | meaning                                   | default                      |
    /// |--------------------|-------------------------------------------|------------------------------|
    /// | `RYE_CACHE_DIR`    | cache directory                           | `$XDG_CACHE_HOME/rye`, `~/.cache/rye` |
    /// | `RYE_STATE_DIR`    | the host's own state (cache key, live runs) | `$XDG_STATE_HOME/rye`, `~/.local/state/rye` |
    /// | `RYE_CACHE_KEY`    | secret authenticating compiled components (kept out of the cache) | `<state dir>/cache.key` |
    /// | `USER_SPACE`       | user space base (holds `.ai/`)            | the home directory           |
    /// | `RYE_SYSTEM_SPACE` | system space base (holds `.ai/`)          | the embedded bundle          |
    /// | `RYE_POOLING`      | `0` turns the pooling allocator off       | on where the machine allows  |
    /// | `RYE_SIGNING_KEY_DIR` | the signing keypair's folder           | `<user space>/.ai/config/keys/signing` |
    /// | `RYE_ALLOW_UNSIGNED_PROJECT` | `1` lets unsigned project items run (development) | off |
    /// | `RYE_THREADS`      | `0` runs tools without recording them as threads | on |
    pub fn from_env() -> Result<Self, HostError> {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = var("HOME");
        let cache_dir = var("RYE_CACHE_DIR")
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("rye")))
            .or_else(|| home.as_ref().map(|h| h.join(".cache/rye")))
            .ok_or(HostError::NoCacheDir)?;
        let user_base = var("USER_SPACE")
            .map(expand_home(home.as_ref()))
            .or(home.clone());
        let system_base = var("RYE_SYSTEM_SPACE").map(expand_home(home.as_ref()));
        let cache_key_file = var("RYE_CACHE_KEY")
            .map(expand_home(home.as_ref()))
            .or_else(|| state_dir_from_env().map(|d| d.join("cache.key")));
        let components = HostConfig {
            cache_dir: Some(cache_dir.join("components")),
            cache_key_file,
            pooling: std::env::var("RYE_POOLING").map_or(true, |v| v != "0"),
            // The bundled components as the build compiled them, unless
            // RYE_PRECOMPILED=0 asks for them to be compiled here.
            precompiled: std::env::var("RYE_PRECOMPILED")
                .map_or(true, |v| v != "0")
                .then_some(rye_system::precompiled as rye_components::Precompiled),
            ..HostConfig::default()
        };
        Ok(Self {
            cache_dir,
            user_base,
            system_base,
            components,
            watch: true,
            snapshot: false,
            integrity: IntegrityPolicy {
                allow_unsigned_project: std::env::var("RYE_ALLOW_UNSIGNED_PROJECT")
                    .is_ok_and(|v| v == "1"),
                ..IntegrityPolicy::default()
            },
            trusted_keys: Vec::new(),
            signing_key_dir: var("RYE_SIGNING_KEY_DIR").map(expand_home(home.as_ref())),
            executable: None,
            record_threads: std::env::var("RYE_THREADS").map_or(true, |v| v != "0"),
        })
    }
}

impl RyeConfig {
    /// The folder of the signing keypair.
    pub fn key_dir(&self) -> Option<PathBuf> {
        self.signing_key_dir.clone().or_else(|| {
            self.user_base
                .as_ref()
                .map(|u| u.join(".ai/config/keys/signing"))
        })
    }
}

fn expand_home(home: Option<&PathBuf>) -> impl Fn(PathBuf) -> PathBuf + '_ {
    move |path| match (path.strip_prefix("~"), home) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path,
    }
}

/// The folder of the host's own state (the cache key, records of live
/// runs): `RYE_STATE_DIR`, else `$XDG_STATE_HOME/rye`, else
/// `~/.local/state/rye`.
pub fn state_dir_from_env() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("RYE_STATE_DIR")
        .or_else(|| var("XDG_STATE_HOME").map(|d| d.join("rye")))
        .or_else(|| var("HOME").map(|h| h.join(".local/state/rye")))
}

/// What the host demands of the files it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntegrityPolicy {
    /// Verify signatures at all. Off only for hosts that verify by other
    /// means (and for measuring what verification costs).
    pub enforce: bool,
    /// Let unsigned items and components of the project space run, for
    /// development. Signed but modified or untrusted files still fail, and
    /// every result that used an unsigned file says so in `warnings`.
    pub allow_unsigned_project: bool,
}

impl Default for IntegrityPolicy {
    fn default() -> Self {
        Self {
            enforce: true,
            allow_unsigned_project: false,
        }
    }
}
