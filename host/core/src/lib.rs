//! The Rye host: finds items through the project, user and system spaces,
//! reads them with sandboxed parser components (themselves found through
//! the spaces), and answers searches and loads.
//!
//! ```no_run
//! use rye_host::{Rye, RyeConfig, SearchRequest};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rye = Rye::new(RyeConfig::from_env()?)?;
//! let found = rye.search(&SearchRequest::new("tool", "python").project("/work/project"))?;
//! for hit in &found.results {
//!     println!("{} {} ({})", hit.kind, hit.id, hit.source);
//! }
//! # Ok(()) }
//! ```

mod cache;
mod chain;
mod chain_rules;
mod config;
mod config_schema;
mod detached;
mod error;
mod execute;
mod finding;
mod init;
mod integrity;
mod layout;
mod load;
mod lockfile;
pub mod mcp;
mod mcp_servers;
mod metadata;
mod parse;
mod programs;
mod reply;
mod rye;
mod search;
mod search_index;
mod services;
mod session;
mod sign;
mod thread_view;
pub mod threads;
mod tool_component;
mod trace;
mod trust_state;
mod validate;
mod validators;

pub use chain::{Chain, ChainElement, ChainSummary};
pub use chain_rules::{
    COMPONENT_PRIMITIVE, ChainError, EXECUTE_PRIMITIVE, GRAPH_PRIMITIVE, HTTP_PRIMITIVE, MAX_DEPTH,
    MCP_PRIMITIVE,
};
pub use config::{RyeConfig, state_dir_from_env};
pub use mcp_servers::{Discovered, NewServer, ServerListing};

/// How the processes of runs are contained, and stopping them all.
pub mod runs {
    pub use rye_process::{
        Containment, RUN_MARKER, containment, init, settle, stop_abandoned_runs, stop_all,
    };
}
pub use config::IntegrityPolicy;
pub use detached::{Cancelled, DEFAULT_GRACE, DetachedRun, HostSettings};
pub use error::HostError;
pub use execute::{EXECUTABLE_VAR, ExecuteRequest, STANDARD_ADAPTER};
pub use finding::Finding;
pub use init::{InitKey, InitReport, SAMPLE_TOOL};
pub use layout::{COMPONENT_FOLDERS, component_folder};
pub use load::{LOAD_REPLY_TEXT, LoadRequest, Loaded};
pub use lockfile::LOCKFILES_DIR;
pub use metadata::normalize;
pub use parse::ParsedItem;
pub use reply::{
    DryRunReply, ErrorReply, ItemMetadata, ItemReply, MAX_ECHOED_ID, MAX_ERROR_TEXT, SignAllReply,
    SignEntry, SignReply, Took, ToolMetadata, ToolReply, Truncated, echo,
};
pub use rye::Rye;
/// For a server's async runtime: see [`rye_components::chores_when_idle`].
pub use rye_components::{chores_when_idle, idle_chores};
/// MCP's stdio framing, read the same way by the server and the client.
pub use rye_mcp_client::{LineRead, LineReader, MAX_LINE};
pub use rye_threads::{Status as ThreadStatus, Thread};
pub use thread_view::{Pruned, ThreadView};

/// How many bundled components the build compiled into the binary, and
/// their machine code's bytes.
pub fn bundled_artifacts() -> (usize, usize) {
    rye_system::precompiled_size()
}
pub use rye_components::{
    CONTRACT_VERSION, ComponentError, ComponentErrorKind, ComponentHost, Diagnostic, HostConfig,
    Inspection, Limits, ParseFailure, ParsedDocument, Planned, PlannedAction, PlannedCall,
    Position, Severity, World,
};
pub use rye_integrity;
pub use rye_space::query::{Fuzzy, Matching};
pub use rye_space::{ItemKind, Location, Space, SpaceError, Spaces, shorten, validate_plugin_name};
pub use search::{Filters, SearchHit, SearchRequest, SearchResponse, SortBy, SourceFilter};
pub use sign::{FileCheck, SignOutcome, Signable, SignedFile};
pub use trace::{CommandResult, Event, LockfileStatus, Step};
pub use trust_state::Signed;
pub use validate::{Report, ValidateOptions};
pub use validators::Validator;
