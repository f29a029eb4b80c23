//! Rye's privileged decisions, made in one place.
//!
//! Whatever gives a component or a write some power asks here first:
//!
//! - which host calls a component of each [`World`] may make, and so what
//!   its world's linker links ([`World::host_calls`]);
//! - which folders a component sees, read-only ([`file_views`]);
//! - which variables of the host environment a runtime adapter sees, and
//!   so which the tool it plans can run with ([`EnvPolicy`]);
//! - where under the spaces a write may land ([`may_write`]).
//!
//! The crate is pure: no engine, no file access, no environment read. Each
//! answer is a function of the question, which is what lets the tables in
//! its tests list the allowed and the denied cases side by side.

use std::path::{Component, Path, PathBuf};

use rye_space::{ItemKind, Space};

/// The worlds of the `rye:plugin` contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum World {
    Parser,
    RuntimeAdapter,
    Validator,
    GraphWalker,
}

/// A call of the `rye:plugin/host` interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostCall {
    GetEnv,
    Environment,
    Which,
    RunDeclaredCommand,
    ReadConfig,
}

impl HostCall {
    pub const ALL: [HostCall; 5] = [
        HostCall::GetEnv,
        HostCall::Environment,
        HostCall::Which,
        HostCall::RunDeclaredCommand,
        HostCall::ReadConfig,
    ];
}

impl World {
    pub const ALL: [World; 4] = [
        World::Parser,
        World::RuntimeAdapter,
        World::Validator,
        World::GraphWalker,
    ];

    pub fn name(self) -> &'static str {
        match self {
            World::Parser => "parser",
            World::RuntimeAdapter => "runtime-adapter",
            World::Validator => "validator",
            World::GraphWalker => "graph-walker",
        }
    }

    /// The host calls a component of this world may make. Parsers and
    /// validators are pure functions of their input, and a graph walker
    /// decides from what it is told: none. A runtime
    /// adapter plans a process, so it may ask about the machine it plans
    /// for.
    pub fn host_calls(self) -> &'static [HostCall] {
        match self {
            World::Parser | World::Validator | World::GraphWalker => &[],
            World::RuntimeAdapter => &HostCall::ALL,
        }
    }

    pub fn may_call(self, call: HostCall) -> bool {
        self.host_calls().contains(&call)
    }

    /// Whether this world's linker links the `rye:plugin/host` interface
    /// at all: a component of a world that may make no host call and
    /// imports it does not instantiate.
    pub fn links_host(self) -> bool {
        !self.host_calls().is_empty()
    }

    /// The folder under `.ai/` that holds the components of this world.
    pub const fn folder(self) -> &'static str {
        match self {
            World::Parser => "parsers",
            World::RuntimeAdapter => "adapters",
            World::Validator => "validators",
            World::GraphWalker => "walkers",
        }
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a component is being given views for.
#[derive(Debug, Clone, Copy, Default)]
pub struct ViewRequest<'a> {
    /// The project the call is for.
    pub project: Option<&'a Path>,
    /// The tool being planned (an adapter's call).
    pub tool_file: Option<&'a Path>,
    /// The user's home folder, which is never shown whole (nor anything
    /// holding it).
    pub home: Option<&'a Path>,
}

/// The folders a component of `world` sees, read-only, at their own
/// paths. Parsers and validators see none: their input is all they read.
/// A runtime adapter sees the project, the tool's folder and the folder
/// above it (where a tool's shared code sits). A folder that would show
/// the whole machine or the whole home folder (the root, the home folder
/// or a folder holding it), or that is not a plain absolute path, is not
/// given. Whether each exists is for the caller to check.
pub fn file_views(world: World, request: &ViewRequest<'_>) -> Vec<PathBuf> {
    if world != World::RuntimeAdapter {
        return Vec::new();
    }
    let tool_dir = request
        .tool_file
        .filter(|f| plain_absolute(f))
        .and_then(Path::parent);
    let candidates = [request.project, tool_dir, tool_dir.and_then(Path::parent)];
    let mut views: Vec<PathBuf> = Vec::new();
    for dir in candidates.into_iter().flatten() {
        if !plain_absolute(dir) || dir.parent().is_none() {
            continue;
        }
        if request
            .home
            .is_some_and(|home| plain_absolute(home) && home.starts_with(dir))
        {
            continue;
        }
        if !views.iter().any(|v| v == dir) {
            views.push(dir.to_owned());
        }
    }
    views
}

/// `path` made plain by reading its `.` and `..` as a shell's `cd` does,
/// or `None` for a relative path.
pub fn lexical(path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut plain = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                plain.pop();
            }
            Component::CurDir => {}
            other => plain.push(other),
        }
    }
    Some(plain)
}

/// An absolute path with no `.` or `..` in it.
fn plain_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// The variable that names what adapters (and so tools) are not shown.
pub const WITHHOLD_VAR: &str = "RYE_WITHHOLD_ENV";

/// Which host environment variables a runtime adapter sees. The chain
/// spec gives a tool the host's environment plus what its chain adds; the
/// user may withhold names from that (for instance a CI token), exactly
/// or by prefix (`AWS_*`), and a withheld variable is neither shown to the
/// adapter nor so in the environment it plans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    exact: Vec<String>,
    prefixes: Vec<String>,
}

/// The environment as the policy shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exposed {
    pub visible: Vec<(String, String)>,
    /// The names withheld (never their values), sorted.
    pub withheld: Vec<String>,
}

/// A withholding setting that cannot be read.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{WITHHOLD_VAR}: {pattern:?} {rule}")]
pub struct BadPattern {
    pub pattern: String,
    pub rule: &'static str,
}

impl EnvPolicy {
    /// The policy from the setting's text: names or `PREFIX*` patterns,
    /// separated by commas or white space.
    pub fn parse(setting: &str) -> Result<Self, BadPattern> {
        let mut policy = EnvPolicy::default();
        for pattern in setting
            .split([',', ' ', '\t', '\n'])
            .filter(|p| !p.is_empty())
        {
            let (name, prefix) = match pattern.strip_suffix('*') {
                Some(stem) => (stem, true),
                None => (pattern, false),
            };
            let bad = |rule| BadPattern {
                pattern: pattern.to_owned(),
                rule,
            };
            if name.is_empty() {
                return Err(bad("withholds everything; name the variables"));
            }
            if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(bad(
                    "is not a variable name (letters, digits and _, with * only at the end)",
                ));
            }
            if prefix {
                policy.prefixes.push(name.to_owned());
            } else {
                policy.exact.push(name.to_owned());
            }
        }
        Ok(policy)
    }

    pub fn withholds(&self, name: &str) -> bool {
        self.exact.iter().any(|n| n == name) || self.prefixes.iter().any(|p| name.starts_with(p))
    }

    /// Splits `env` into what is shown and the names withheld.
    pub fn expose(&self, env: impl IntoIterator<Item = (String, String)>) -> Exposed {
        let mut exposed = Exposed::default();
        for (name, value) in env {
            if self.withholds(&name) {
                exposed.withheld.push(name);
            } else {
                exposed.visible.push((name, value));
            }
        }
        exposed.withheld.sort();
        exposed.withheld.dedup();
        exposed
    }
}

/// A space's `.ai/` folder, as a write target.
#[derive(Debug, Clone, Copy)]
pub struct WriteRoot<'a> {
    pub space: Space,
    pub ai_dir: &'a Path,
}

/// Why a write may not happen.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WriteDenied {
    #[error("{}: a write needs an absolute path without `.` or `..`", path.display())]
    NotPlain { path: PathBuf },
    #[error("{}: outside every space's .ai folder", path.display())]
    Outside { path: PathBuf },
    #[error("{}: the system space is read-only", path.display())]
    SystemSpace { path: PathBuf },
    #[error("{}: rye writes files inside the folders of .ai, not {folder:?}", path.display())]
    Folder { path: PathBuf, folder: String },
    #[error("{}: only detached signatures are written beside components", path.display())]
    Component { path: PathBuf },
}

/// The folders under `.ai/` that rye writes files in: items of every
/// kind (signing, copies between spaces; trusted keys are config) and
/// lockfiles. Component folders take detached signatures only.
fn writable_folder(folder: &str) -> bool {
    [ItemKind::Config]
        .into_iter()
        .chain(ItemKind::PRIMARY)
        .any(|k| k.folder() == folder)
        || folder == LOCKFILES_DIR
}

/// Where lockfiles live under `.ai/`.
pub const LOCKFILES_DIR: &str = "lockfiles";

/// Whether a file may be written at `target`: a plain absolute path
/// strictly inside a folder of a project or user space's `.ai/` that rye
/// writes in (the innermost space holding it decides). Links on the way
/// are the writer's to refuse; this decides by the path alone. Answers
/// the space written to.
pub fn may_write(target: &Path, roots: &[WriteRoot<'_>]) -> Result<Space, WriteDenied> {
    let path = || target.to_owned();
    if !plain_absolute(target) {
        return Err(WriteDenied::NotPlain { path: path() });
    }
    let root = roots
        .iter()
        .filter(|r| plain_absolute(r.ai_dir) && target.starts_with(r.ai_dir))
        .max_by_key(|r| r.ai_dir.components().count())
        .ok_or_else(|| WriteDenied::Outside { path: path() })?;
    if root.space == Space::System {
        return Err(WriteDenied::SystemSpace { path: path() });
    }
    let inside: Vec<&str> = target
        .strip_prefix(root.ai_dir)
        .expect("starts with the root")
        .components()
        .map(|c| c.as_os_str().to_str().unwrap_or("\u{fffd}"))
        .collect();
    let folder = match inside.as_slice() {
        [] => return Err(WriteDenied::Outside { path: path() }),
        [file] => {
            return Err(WriteDenied::Folder {
                path: path(),
                folder: (*file).to_owned(),
            });
        }
        [folder, ..] => *folder,
    };
    if World::ALL.iter().any(|w| w.folder() == folder) {
        let signature = format!(".{}", rye_integrity::DETACHED_EXTENSION);
        return if inside.last().is_some_and(|name| name.ends_with(&signature)) {
            Ok(root.space)
        } else {
            Err(WriteDenied::Component { path: path() })
        };
    }
    if writable_folder(folder) {
        Ok(root.space)
    } else {
        Err(WriteDenied::Folder {
            path: path(),
            folder: folder.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests;
