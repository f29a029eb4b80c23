//! A remote node: a stateless service over a database of every mutable
//! fact and an object store of immutable bytes, to which clients push
//! projects and on which they run items.

pub mod bytes;
pub mod db;
