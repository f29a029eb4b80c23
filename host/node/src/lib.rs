//! A remote node: a stateless HTTP service over a database of every
//! mutable fact and an object store of immutable bytes, to which clients
//! push projects and on which they run items, each run's changes folded
//! back into the project's history.

pub mod bytes;
pub mod client;
pub mod db;
pub mod keys;
pub mod limits;
pub mod metrics;
mod parsed;
pub mod run;
pub mod service;
pub mod tracked;
pub mod watch;
pub mod webhook;

pub use service::{Node, Settings, StartError, authorize_key, doctor, router, serve};
