use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A failure of a component, as distinct from an error the component
/// reports about its input. Always names the component's file.
#[derive(Debug, Clone, thiserror::Error)]
#[error("component {}: {kind}", path.display())]
pub struct ComponentError {
    pub path: PathBuf,
    pub kind: ComponentErrorKind,
}

/// What went wrong, in a form a host can branch on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComponentErrorKind {
    /// The file could not be read.
    Io(String),
    /// The bytes are not WebAssembly at all.
    NotWasm,
    /// A core module, not a component.
    CoreModule,
    /// WebAssembly, but not a valid component.
    Invalid(String),
    /// A component built against another version of the contract.
    ContractVersion { component: String, host: String },
    /// A component of another world (or of none).
    WrongWorld {
        expected: String,
        found: Vec<String>,
    },
    /// It exports the right interface, with the wrong functions.
    Signature(String),
    /// It imports something its world does not grant.
    Import(String),
    /// It ran past its CPU deadline and was stopped.
    Timeout(Duration),
    /// It tried to use more memory than its cap.
    MemoryLimit { limit: usize },
    /// It trapped (a panic, an abort, an out-of-bounds access…).
    Trap { message: String, stderr: String },
    /// It returned something the contract does not allow.
    BadOutput(String),
    /// All of its world's instances are in use (this many).
    Busy(usize),
    /// A tool's component that is neither a `wasi:cli` command nor of the
    /// `tool` world.
    NotACommand(String),
}

impl fmt::Display for ComponentErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "cannot be read: {e}"),
            Self::NotWasm => f.write_str("is not a WebAssembly file (no \\0asm header)"),
            Self::CoreModule => f.write_str(
                "is a core WebAssembly module, not a component; build it for wasm32-wasip2 \
                 (or wrap it with `wasm-tools component new`)",
            ),
            Self::Invalid(e) => write!(f, "is not a valid component: {e}"),
            Self::ContractVersion { component, host } => write!(
                f,
                "was built against rye:plugin@{component}, but this host implements rye:plugin@{host}; \
                 rebuild it with a matching rye-guest"
            ),
            Self::WrongWorld { expected, found } if found.is_empty() => write!(
                f,
                "exports no rye:plugin interface; a {expected} component exports rye:plugin/{}",
                crate::World::ALL
                    .iter()
                    .find(|w| w.name() == expected)
                    .map_or("?", |w| crate::world::export_interface(*w))
            ),
            Self::WrongWorld { expected, found } => write!(
                f,
                "is not a {expected} component: it exports {}",
                found.join(", ")
            ),
            Self::Signature(e) => write!(f, "does not match the contract: {e}"),
            Self::NotACommand(e) => write!(
                f,
                "is not a wasi:cli command ({e}) nor a component of the rye:plugin tool world; \
                 build the tool as a binary for wasm32-wasip2, or export rye:plugin/running"
            ),
            Self::Import(e) => write!(f, "needs an import its world does not grant: {e}"),
            Self::Timeout(d) => write!(
                f,
                "ran past its CPU deadline of {} ms and was stopped",
                d.as_millis()
            ),
            Self::MemoryLimit { limit } => {
                write!(
                    f,
                    "tried to use more than its memory cap of {} MiB and was stopped",
                    limit / (1024 * 1024)
                )
            }
            Self::Trap { message, stderr } if stderr.trim().is_empty() => {
                write!(f, "trapped: {message}")
            }
            Self::Trap { message, stderr } => {
                write!(f, "trapped: {message}; it wrote: {}", stderr.trim())
            }
            Self::BadOutput(e) => write!(f, "returned output the contract does not allow: {e}"),
            Self::Busy(n) => write!(
                f,
                "cannot start: all {n} of its world's instances are in use"
            ),
        }
    }
}
