//! Rye's WebAssembly component host.
//!
//! One [`ComponentHost`] owns one wasmtime engine. Components are compiled
//! once and cached on disk under a key made of the SHA-256 of their bytes
//! and the engine's fingerprint, so a later process deserializes instead of
//! compiling; each is pre-instantiated once and every call gets a fresh
//! store. The sandbox grants nothing by default: no filesystem, network,
//! environment, arguments or real clocks; stdout is discarded and stderr
//! captured (a panic message becomes part of the error). Each call runs
//! under a CPU deadline (epoch interruption) and a memory cap. Failures are
//! typed [`ComponentError`]s naming the component file; the host stays
//! usable after any of them.
//!
//! ```no_run
//! use rye_components::{ComponentHost, HostConfig, ParseRequest, PluginKind, World};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let host = ComponentHost::new(HostConfig::default())?;
//! let parser = host.load("python/ast.wasm".as_ref(), World::Parser)?;
//! let outcome = host.parse(&parser, &ParseRequest {
//!     kind: PluginKind::Tool,
//!     item_id: "demo/count",
//!     file_name: "count.py",
//!     content: "__version__ = '1.0.0'\n",
//! })?;
//! println!("{:?}", outcome.map(|parsed| parsed.document));
//! # Ok(()) }
//! ```

mod adapter;
mod bindings;
mod cache;
mod command;
mod entry;
mod error;
mod host;
mod limits;
mod net;
mod parse;
mod plans;
mod sandbox;
mod services;
mod slots;
mod spare;
mod validate;
mod walker;
mod world;

pub use command::{
    AsyncRun, CommandGrants, CommandOutput, CommandStop, DirGrant, Spent, ToolError,
};
pub use error::{ComponentError, ComponentErrorKind};
pub use host::{
    ComponentHost, HostConfig, Inspection, LoadedCommand, LoadedComponent, Origin, Precompiled,
};
pub use limits::Limits;
pub use net::HostRule;
pub use parse::{
    Diagnostic, ParseFailure, ParseRequest, ParsedDocument, PluginKind, Position, Severity,
};
pub use plans::{
    PlanElement, PlanFailure, PlanRequest, Planned, PlannedAction, PlannedCall, PlannedProcess,
    PlannedRequest,
};
pub use services::{AdapterServices, PluginSpace};
pub use spare::{Busy, IDLE_QUEUED, chores_when_idle, idle_chores, idle_chores_waiting};
pub use validate::{
    ChainLink, ItemSubject, MAX_FINDINGS, MAX_TEXT, SchemaRef, Subject, Validated, ValidatorInfo,
};
pub use walker::{MAX_ACTIONS, WalkAction, WalkClock, WalkNext, WalkOutcome, WalkRequest, Walker};
pub use world::{CONTRACT_PACKAGE, CONTRACT_VERSION, World};
