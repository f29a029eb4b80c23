//! The tools' arguments. Anything that does not fit (a missing required
//! argument, a wrong type, an unknown name) is an invalid-params error
//! naming the tool and the argument.

use rmcp::ErrorData as McpError;
use rye_host::{ItemKind, Space};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub(crate) fn parse<T: DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, McpError> {
    serde_json::from_value(arguments)
        .map_err(|e| McpError::invalid_params(format!("{tool}: {e}"), None))
}

fn local() -> String {
    "local".into()
}

fn inline() -> String {
    "inline".into()
}

fn all() -> String {
    "all".into()
}

fn ten() -> usize {
    10
}

fn project() -> Space {
    Space::Project
}

/// `parameters` must be an object when given (`null` counts as absent).
fn object<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(v)),
        Some(other) => Err(serde::de::Error::custom(format!(
            "parameters must be an object, not {other}"
        ))),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecuteArgs {
    pub item_type: ItemKind,
    pub item_id: String,
    pub project_path: String,
    #[serde(default, deserialize_with = "object")]
    pub parameters: Option<Value>,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default = "local")]
    pub target: String,
    #[serde(default = "inline")]
    pub thread: String,
    #[serde(default, rename = "async")]
    pub run_async: bool,
}

impl ExecuteArgs {
    /// Why this host cannot run the call as asked, for modes it does not
    /// have yet.
    pub(crate) fn unsupported_mode(&self) -> Option<String> {
        if self.target != "local" {
            return Some(format!(
                "target {:?} is not available: this host runs items locally only",
                self.target
            ));
        }
        if self.thread != "inline" {
            return Some(format!(
                "thread {:?} is not available: this host runs items inline only",
                self.thread
            ));
        }
        if self.run_async {
            return Some("async execution is not available on this host".into());
        }
        None
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    pub scope: String,
    #[serde(default)]
    pub query: String,
    pub project_path: String,
    #[serde(default = "all")]
    pub source: String,
    #[serde(default = "ten")]
    pub limit: usize,
    #[serde(default)]
    pub offset: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadArgs {
    pub item_type: ItemKind,
    pub item_id: String,
    pub project_path: String,
    #[serde(default)]
    pub source: Option<Space>,
    #[serde(default)]
    pub destination: Option<Space>,
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignArgs {
    pub item_type: String,
    pub item_id: String,
    pub project_path: String,
    #[serde(default = "project")]
    pub source: Space,
}
