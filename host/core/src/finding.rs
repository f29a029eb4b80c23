//! What a check says about a file.

use std::path::PathBuf;

use rye_components::Severity;
use serde::Serialize;

/// One finding about one file.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub path: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
    pub severity: Severity,
    /// What kind of check found it: `parse`, `chain`, `signature`, or the
    /// parser's own rule name.
    pub rule: String,
    pub message: String,
    /// The validator component that reported it (or that it is about).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validator: Option<String>,
}

impl Finding {
    /// An error about a whole file (no position), from the host itself.
    pub fn error(path: &std::path::Path, rule: &str, message: String) -> Self {
        Self {
            path: path.to_owned(),
            line: None,
            column: None,
            severity: Severity::Error,
            rule: rule.into(),
            message,
            validator: None,
        }
    }
}
