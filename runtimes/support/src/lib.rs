//! Pieces the built-in parser components share.

pub mod markdown;
pub mod metadata;
pub mod yaml;
