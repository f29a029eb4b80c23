//! The one place the YAML crate is named, so it can be swapped for another
//! maintained fork without touching callers.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::SpaceError;

/// Parses YAML text from `path` into `T`; errors name the file, line and
/// column.
pub fn parse_yaml<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, SpaceError> {
    serde_yaml_ng::from_str(text).map_err(|e| SpaceError::Data {
        path: path.to_owned(),
        message: match e.location() {
            Some(at) => format!(
                "invalid YAML at line {}, column {}: {e}",
                at.line(),
                at.column()
            ),
            None => format!("invalid YAML: {e}"),
        },
    })
}
