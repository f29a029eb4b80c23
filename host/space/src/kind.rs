use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The kinds of items kept under `.ai/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemKind {
    Directive,
    Tool,
    Knowledge,
    Config,
}

impl ItemKind {
    /// The kinds agents search, load and execute.
    pub const PRIMARY: [ItemKind; 3] = [ItemKind::Directive, ItemKind::Tool, ItemKind::Knowledge];

    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Directive => "directive",
            ItemKind::Tool => "tool",
            ItemKind::Knowledge => "knowledge",
            ItemKind::Config => "config",
        }
    }

    /// The folder under `.ai/` that holds items of this kind.
    pub fn folder(self) -> &'static str {
        match self {
            ItemKind::Directive => "directives",
            ItemKind::Tool => "tools",
            ItemKind::Knowledge => "knowledge",
            ItemKind::Config => "config",
        }
    }
}

impl fmt::Display for ItemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no item kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown item kind {0:?}: expected directive, tool, knowledge or config")]
pub struct UnknownKind(pub String);

impl FromStr for ItemKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "directive" | "directives" => Ok(ItemKind::Directive),
            "tool" | "tools" => Ok(ItemKind::Tool),
            "knowledge" => Ok(ItemKind::Knowledge),
            "config" => Ok(ItemKind::Config),
            other => Err(UnknownKind(other.to_owned())),
        }
    }
}
