//! Write Rye plugins in Rust.
//!
//! Rye runs every piece of extension logic (item parsers, runtime adapters,
//! validators) as a WebAssembly component in a sandbox. This crate is the
//! Rust side of that contract, the `rye:plugin@0.1.0` package in the
//! repository's `wit/` folder: implement one trait, call one macro, build
//! for `wasm32-wasip2`, and drop the `.wasm` into a space.
//!
//! Each component implements exactly one world, chosen by a cargo feature:
//!
//! | feature           | trait                               | macro                 | installed under          |
//! |-------------------|-------------------------------------|-----------------------|--------------------------|
//! | `parser`          | [`parser::Parser`]                  | [`export_parser!`]    | `.ai/parsers/<name>.wasm`|
//! | `runtime-adapter` | [`adapter::RuntimeAdapter`]         | [`export_adapter!`]   | `.ai/adapters/<name>.wasm`|
//! | `validator`       | [`validator::Validator`]            | [`export_validator!`] | `.ai/validators/<name>.wasm`|
//! | `graph-walker`    | [`walker::GraphWalker`]             | [`export_walker!`]    | `.ai/walkers/<name>.wasm`|
//! | `tool`            | [`tool::Tool`]                      | [`export_tool!`]      | beside its tool item, `.ai/tools/<category>/<name>.wasm`|
//!
//! # Example: a parser in a few lines
//!
//! ```no_run
//! # #[cfg(feature = "parser")] mod doc {
//! use rye_guest::parser::{ParseError, ParseInput, Parsed, Parser};
//! use rye_guest::serde_json::{Map, Value};
//!
//! /// Reads `key = value` lines into tool metadata.
//! struct KeyValue;
//!
//! impl Parser for KeyValue {
//!     fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
//!         let mut document = Map::new();
//!         for line in input.content.lines() {
//!             if let Some((key, value)) = line.split_once('=') {
//!                 document.insert(key.trim().into(), Value::from(value.trim()));
//!             }
//!         }
//!         Ok(Parsed::new(document))
//!     }
//! }
//!
//! rye_guest::export_parser!(KeyValue);
//! # }
//! ```
//!
//! Each world's module documents its trait with an example. The quickest
//! start is `rye component new parser|runtime-adapter|validator|graph-walker|tool NAME`,
//! which writes a crate with a working example of the world and this SDK
//! vendored, and `rye component build`, which builds, checks, installs and
//! signs it. Complete components, built and tested with the host, are in
//! the repository's `examples/`.
//!
//! The component declares the contract version it was built against through
//! the names of its exports (`rye:plugin/parsing@0.1.0`); the host reads
//! them before running anything and refuses a version it does not support.
#![deny(missing_docs)]

// Lets the generated bindings name this crate by its public path, so
// plugin crates depend on `rye-guest` alone.
extern crate self as rye_guest;

#[cfg(feature = "runtime-adapter")]
pub mod adapter;
#[cfg(feature = "parser")]
pub mod parser;
#[cfg(feature = "tool")]
pub mod tool;
#[cfg(feature = "validator")]
pub mod validator;
#[cfg(feature = "graph-walker")]
pub mod walker;

#[cfg(any(feature = "parser", feature = "runtime-adapter", feature = "validator"))]
mod diagnostics;

/// The JSON library the SDK speaks; re-exported so plugin crates need no
/// separate dependency to build documents.
pub use serde_json;

/// The `rye:plugin` contract version this SDK builds components against.
pub const CONTRACT_VERSION: &str = "0.1.0";

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;
}
