//! The fixed rules of execution chains, and how a chain breaks them.

use std::path::PathBuf;

use rye_space::Space;

/// At most this many elements: tool, runtimes, primitive.
pub const MAX_DEPTH: usize = 10;

/// The primitive that runs processes, and the older id accepted for it.
pub const EXECUTE_PRIMITIVE: &str = "rye/core/primitives/execute";
pub(crate) const PRIMITIVE_ALIASES: &[(&str, &str)] =
    &[("rye/core/primitives/subprocess", EXECUTE_PRIMITIVE)];
/// The primitive that sends HTTP requests.
pub const HTTP_PRIMITIVE: &str = "rye/core/primitives/http_client";
/// The primitive that calls tools on MCP servers.
pub const MCP_PRIMITIVE: &str = "rye/core/primitives/mcp_client";
/// The primitive that walks state graphs.
pub const GRAPH_PRIMITIVE: &str = "rye/core/primitives/state_graph";
/// The primitive that runs a tool's own WebAssembly component.
pub const COMPONENT_PRIMITIVE: &str = "rye/core/primitives/wasm_component";
/// The primitives a chain may end in.
pub const PRIMITIVES: &[&str] = &[
    EXECUTE_PRIMITIVE,
    HTTP_PRIMITIVE,
    MCP_PRIMITIVE,
    GRAPH_PRIMITIVE,
    COMPONENT_PRIMITIVE,
];

/// Why a chain could not be built or is not valid. Each names the
/// elements involved and the rule.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error(
        "tool {id:?} not found (searched {})",
        rye_space::display_paths(searched)
    )]
    ToolNotFound { id: String, searched: Vec<PathBuf> },

    #[error("executor {missing:?} not found: {referenced_by:?} ({}) names it as its executor_id", path.display())]
    ExecutorNotFound {
        missing: String,
        referenced_by: String,
        path: PathBuf,
    },

    #[error("circular dependency: {}", path.join(" -> "))]
    Cycle { path: Vec<String> },

    #[error("chain too deep: more than {MAX_DEPTH} elements ({} -> ...)", path.join(" -> "))]
    TooDeep { path: Vec<String> },

    #[error("{}: cannot read {id:?} as a chain element: {reason}", path.display())]
    Unreadable {
        id: String,
        path: PathBuf,
        reason: String,
    },

    #[error("chain root {id:?} ({}) has no executor_id but is not a primitive this host runs (known: {})", path.display(), PRIMITIVES.join(", "))]
    NotAPrimitive { id: String, path: PathBuf },

    #[error("{child:?} ({child_space}) -> {parent:?} ({parent_space}): {rule}")]
    Invalid {
        child: String,
        child_space: Space,
        parent: String,
        parent_space: Space,
        rule: String,
    },
}
