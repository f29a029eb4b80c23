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

/// Where an execution runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Local,
    /// On a node of the project's remotes: the one named, or the default.
    Remote(Option<String>),
}

impl ExecuteArgs {
    /// Where the call runs, or why it cannot run as asked: `local`,
    /// `remote` or `remote:<name>`; a tool runs locally or remotely, a
    /// directive or knowledge entry locally, always inline; a remote run
    /// is never a dry run.
    pub(crate) fn target(&self) -> Result<Target, String> {
        let target = match self.target.as_str() {
            "local" => Target::Local,
            "remote" => Target::Remote(None),
            other => match other.strip_prefix("remote:") {
                Some("") => return Err("remote name cannot be empty".into()),
                Some(name) => Target::Remote(Some(name.to_owned())),
                None => {
                    return Err(format!(
                        "Unknown target {other:?}: local, remote or remote:<name>"
                    ));
                }
            },
        };
        if self.thread != "inline" {
            return Err(format!(
                "thread {:?} is not available: this host runs items inline only",
                self.thread
            ));
        }
        if target != Target::Local {
            match self.item_type {
                ItemKind::Tool => {}
                ItemKind::Directive => {
                    return Err(
                        "a directive runs remotely only in a thread of its own (thread \"fork\"), which this host does not have".into(),
                    );
                }
                _ => {
                    return Err(format!(
                        "a {} is read where it is asked for: target must be local",
                        self.item_type
                    ));
                }
            }
            if self.dry_run {
                return Err("a dry run checks the chain here: target must be local".into());
            }
        }
        Ok(target)
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
    /// `{field: query}`: each field must match its query.
    #[serde(default)]
    pub fields: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub filters: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub sort_by: Option<String>,
    /// `true`, or `{"enabled": bool, "max_distance": n}`.
    #[serde(default)]
    pub fuzzy: Option<Value>,
    /// `true`, or `{"enabled": bool, "max_distance": n}` (default 5).
    #[serde(default)]
    pub proximity: Option<Value>,
}

impl SearchArgs {
    /// The request these arguments ask for, or why they cannot.
    pub(crate) fn request(self) -> Result<rye_host::SearchRequest, String> {
        let source = rye_host::SourceFilter::parse(&self.source).map_err(|e| e.to_string())?;
        let mut fields = Vec::new();
        for (name, query) in self.fields.unwrap_or_default() {
            let Value::String(query) = query else {
                return Err(format!("fields.{name} must be a query string, not {query}"));
            };
            fields.push((name, query));
        }
        let sort_by = match self.sort_by.as_deref() {
            None => rye_host::SortBy::default(),
            Some(s) => s.parse().map_err(|e: rye_host::HostError| e.to_string())?,
        };
        let fuzzy = match loosening("fuzzy", self.fuzzy)? {
            None => rye_host::Fuzzy::Off,
            Some(None) => rye_host::Fuzzy::Auto,
            Some(Some(n)) => rye_host::Fuzzy::Edits(n),
        };
        let proximity = loosening("proximity", self.proximity)?.map(|n| n.unwrap_or(5));
        Ok(rye_host::SearchRequest {
            source,
            limit: self.limit,
            offset: self.offset,
            project: Some(std::path::PathBuf::from(self.project_path)),
            fields,
            filters: rye_host::Filters::from_object(&self.filters.unwrap_or_default()),
            sort_by,
            matching: rye_host::Matching { fuzzy, proximity },
            ..rye_host::SearchRequest::new(self.scope, self.query)
        })
    }
}

/// `fuzzy` or `proximity`: off (`None`), on with the default distance
/// (`Some(None)`), or on with a distance.
fn loosening(name: &str, value: Option<Value>) -> Result<Option<Option<usize>>, String> {
    let distance = |v: &Value| -> Result<Option<usize>, String> {
        match v {
            Value::Null => Ok(None),
            v => v
                .as_u64()
                .filter(|n| *n <= 16)
                .map(|n| Some(n as usize))
                .ok_or_else(|| {
                    format!("{name}.max_distance must be a number from 0 to 16, not {v}")
                }),
        }
    };
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
        Some(Value::Bool(true)) => Ok(Some(None)),
        Some(Value::Object(options)) => {
            for key in options.keys() {
                if key != "enabled" && key != "max_distance" {
                    return Err(format!(
                        "{name}.{key} is not an option (enabled, max_distance)"
                    ));
                }
            }
            if options.get("enabled").and_then(Value::as_bool) == Some(false) {
                return Ok(None);
            }
            Ok(Some(distance(
                options.get("max_distance").unwrap_or(&Value::Null),
            )?))
        }
        Some(other) => Err(format!(
            "{name} must be true, false or {{\"enabled\", \"max_distance\"}}, not {other}"
        )),
    }
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
