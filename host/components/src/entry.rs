//! How a tool's component is entered: as a `wasi:cli` command or through
//! the `tool` world's export.

use wasmtime_wasi::p2::bindings::sync::CommandPre;

use crate::bindings::tool::ToolPre;
use crate::sandbox::CallState;

pub(crate) enum Entry {
    /// `wasi:cli/run`: parameters on stdin, the answer on stdout.
    Command(CommandPre<CallState>),
    /// `rye:plugin/running`: parameters in, data or a typed error out.
    Tool(ToolPre<CallState>),
}
