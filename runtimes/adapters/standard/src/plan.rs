//! From a chain to a process plan.
//!
//! 1. **Anchor**: the first element with `anchor` decides whether the tool
//!    runs anchored (`mode: always`, or `auto` when one of `markers_any` is
//!    beside the tool), where the anchor is (`root`: `tool_dir`,
//!    `tool_parent` or `project_path`), which `env_paths` it adds to, and
//!    the working directory (`cwd`).
//! 2. **Environment**: the host environment, then the project's `.env`,
//!    then each element's `env_config` from the primitive up to the tool, a
//!    later element overriding an earlier one (so a tool's own
//!    `ENV_CONFIG` wins over its runtime's). An `interpreter` sets its
//!    `var` to a `local_binary` found under `search_roots`/`search_paths`,
//!    a `system_binary` found on the host `PATH`, or the first line printed
//!    by the element's own `resolve_cmd` (run by the host), else to its
//!    `fallback`. `env` values expand `${VAR}` against the environment
//!    built so far. A request or an MCP call uses the environment only
//!    through `${VAR}` in configuration, so for one it is built only when
//!    some element declares `env_config` or configuration names a variable.
//! 3. **Configuration**: each element's `config`, merged key by key from
//!    the primitive up (the tool's wins); `timeout` defaults to 300 s.
//! 4. **Resolved configuration**: the tool's `config_resolve` files from
//!    `.ai/config/` (`deep_merge` system → user → project, or
//!    `first_match` project → user → system) join the parameters as
//!    `resolved_config`.
//! 5. **Templates** (see [`crate::template`]) fill `command`, `args`,
//!    `cwd` and `input_data`; `{params_json}` is the parameters as JSON.
//!    A chain that ends in the HTTP primitive gets a request instead,
//!    planned from the same configuration (see [`crate::http`]); one that
//!    ends in the MCP primitive a tool call (see [`crate::mcp`]).

use std::borrow::Cow;
use std::cell::{Cell, OnceCell};
use std::collections::BTreeMap;
use std::path::Path;

use rye_guest::adapter::{ChainElement, PlanError, PlanInput, Planned, ProcessPlan, Space};
use rye_guest::serde_json::value::RawValue;
use rye_guest::serde_json::{self, Map, Value, json};

use crate::template::{self, Vars, fill_context};

/// Seconds a process may run when no element says.
const DEFAULT_TIMEOUT_SECS: f64 = 300.0;

/// The primitive that sends HTTP requests.
pub const HTTP_PRIMITIVE: &str = "rye/core/primitives/http_client";
/// The primitive that calls tools on MCP servers.
pub const MCP_PRIMITIVE: &str = "rye/core/primitives/mcp_client";

/// A space's name as the host's files and messages spell it.
pub fn space_name(space: Space) -> &'static str {
    match space {
        Space::Project => "project",
        Space::User => "user",
        Space::System => "system",
    }
}

/// What the adapter needs from the world outside its inputs.
pub trait Host {
    fn environment(&self) -> Vec<(String, String)>;
    fn which(&self, binary: &str) -> Option<String>;
    fn run_declared_command(&self, item_id: &str) -> Result<String, String>;
    fn read_config(&self, space: Space, path: &str) -> Result<Option<String>, String>;
    fn is_file(&self, path: &str) -> bool;
    /// A file, or a link to one (which may lie outside what the adapter
    /// sees): what an interpreter search accepts.
    fn is_program(&self, path: &str) -> bool;
    fn read_file(&self, path: &str) -> Option<String>;
}

pub(crate) struct Element<'a> {
    pub id: &'a str,
    path: &'a str,
    /// The members of the metadata, each read into a value the first
    /// time it is asked for: most of an item's metadata (its description,
    /// its schemas) is never needed to plan.
    meta: Members<'a>,
}

/// An element's metadata member by member, in document order: a handful
/// of names, so a scan finds one sooner than a hash would. A name given
/// twice means its last value, as for a JSON reader that builds a map.
struct Members<'a>(Vec<(Cow<'a, str>, Member<'a>)>);

/// One member of an element's metadata: its JSON text, and its value
/// once read.
struct Member<'a> {
    raw: &'a RawValue,
    value: OnceCell<Value>,
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Member<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self {
            raw: serde::Deserialize::deserialize(deserializer)?,
            value: OnceCell::new(),
        })
    }
}

/// A member's name: borrowed from the metadata's text unless it had
/// escapes to undo.
struct Name<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Name<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, name: &'de str) -> Result<Self::Value, E> {
                Ok(Name(Cow::Borrowed(name)))
            }
            fn visit_str<E>(self, name: &str) -> Result<Self::Value, E> {
                Ok(Name(Cow::Owned(name.to_owned())))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((Name(name), member)) = map.next_entry::<Name, Member>()? {
                    members.push((name, member));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

impl<'a> Element<'a> {
    fn get(&self, key: &str) -> Option<&Value> {
        let (_, member) = self.meta.0.iter().rev().find(|(name, _)| name == key)?;
        // The text was read whole as JSON already, so it reads again.
        let value = member
            .value
            .get_or_init(|| serde_json::from_str(member.raw.get()).unwrap_or(Value::Null));
        Some(value).filter(|v| !v.is_null())
    }

    pub fn config_error(&self, message: impl Into<String>) -> PlanError {
        PlanError::config(self.id, message)
    }
}

/// Plans one execution: the process, or the request when the chain ends
/// in the HTTP primitive, or the tool call when it ends in the MCP one. A
/// tool call is marked reusable (see [`crate::mcp`]) only when the plan
/// asked `host` nothing: no environment, file or command went into it.
pub fn plan(input: &PlanInput, host: &dyn Host) -> Result<Planned, PlanError> {
    let watched = Watched {
        host,
        asked: Cell::new(false),
    };
    let mut planned = plan_with(input, &watched)?;
    if let Planned::Mcp(call) = &mut planned {
        call.reusable &= !watched.asked.get();
    }
    Ok(planned)
}

/// A host that notes whether it was asked anything.
struct Watched<'h> {
    host: &'h dyn Host,
    asked: Cell<bool>,
}

impl Host for Watched<'_> {
    fn environment(&self) -> Vec<(String, String)> {
        self.asked.set(true);
        self.host.environment()
    }
    fn which(&self, binary: &str) -> Option<String> {
        self.asked.set(true);
        self.host.which(binary)
    }
    fn run_declared_command(&self, item_id: &str) -> Result<String, String> {
        self.asked.set(true);
        self.host.run_declared_command(item_id)
    }
    fn read_config(&self, space: Space, path: &str) -> Result<Option<String>, String> {
        self.asked.set(true);
        self.host.read_config(space, path)
    }
    fn is_file(&self, path: &str) -> bool {
        self.asked.set(true);
        self.host.is_file(path)
    }
    fn is_program(&self, path: &str) -> bool {
        self.asked.set(true);
        self.host.is_program(path)
    }
    fn read_file(&self, path: &str) -> Option<String> {
        self.asked.set(true);
        self.host.read_file(path)
    }
}

fn plan_with(input: &PlanInput, host: &dyn Host) -> Result<Planned, PlanError> {
    let elements = input
        .chain
        .iter()
        .map(|e: &ChainElement| match serde_json::from_str(&e.metadata) {
            Ok(meta) => Ok(Element {
                id: &e.item_id,
                path: &e.path,
                meta,
            }),
            Err(_) => Err(PlanError::config(
                &e.item_id,
                "its metadata is not a JSON object",
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tool = elements
        .first()
        .ok_or_else(|| PlanError::Unsupported("the chain is empty".into()))?;
    let parameters = match serde_json::from_str(&input.parameters) {
        Ok(Value::Object(map)) => map,
        _ => {
            return Err(PlanError::config(
                tool.id,
                "the parameters are not a JSON object",
            ));
        }
    };
    let mut notes: Vec<(String, Value)> = Vec::new();

    // 1. Anchor context.
    let tool_dir = parent(tool.path);
    let mut context: BTreeMap<&'static str, String> = BTreeMap::from([
        ("tool_path", tool.path.to_owned()),
        ("tool_dir", tool_dir.clone()),
        ("tool_parent", parent(&tool_dir)),
        ("anchor_path", tool_dir.clone()),
        ("runtime_lib", String::new()),
        ("project_path", input.project_path.clone()),
        ("user_space", input.user_space.clone()),
        ("system_space", input.system_space.clone()),
    ]);
    if let Some((element, lib)) = elements.iter().find_map(|e| {
        let lib = e.get("anchor")?.get("lib")?.as_str()?;
        Some((e, lib))
    }) {
        context.insert("runtime_lib", join(&parent(element.path), lib));
    }
    let anchor = elements
        .iter()
        .find_map(|e| e.get("anchor").map(|a| (e, a)));
    let anchored = match anchor {
        Some((element, config)) => decide_anchor(element, config, &mut context, host, &mut notes)?,
        None => None,
    };

    // 2. Environment, primitive first. A request or a tool call reads
    // it only through `${VAR}` in configuration, so for one it is built
    // only when an element declares `env_config` or configuration names a
    // variable: the host's environment and `.env` are otherwise not read.
    let root = elements.last().unwrap_or(tool);
    let needs_env = !matches!(root.id, HTTP_PRIMITIVE | MCP_PRIMITIVE)
        || elements
            .iter()
            .any(|e| e.get("env_config").is_some() || e.get("config").is_some_and(names_env));
    let env = if needs_env {
        environment(
            &elements,
            &context,
            anchored.as_ref(),
            input,
            host,
            &mut notes,
        )?
    } else {
        BTreeMap::new()
    };

    // 3. Configuration, primitive first, the tool's winning.
    let mut config: Map<String, Value> = Map::new();
    for element in elements.iter().rev() {
        match element.get("config") {
            Some(Value::Object(own)) => {
                config.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())))
            }
            Some(_) => return Err(element.config_error("config must be a mapping")),
            None => {}
        }
    }

    // 4. Resolved configuration, for the tool.
    let mut data = parameters.clone();
    if let Some(spec) = tool.get("config_resolve") {
        let resolved = resolve_config(tool, spec, host, &mut notes)?;
        data.insert("resolved_config".into(), resolved);
    }
    context.insert("params_json", Value::Object(data).to_string());

    // 5. Templates.
    let vars = Vars {
        context: &context,
        parameters: &parameters,
        config: &config,
        env: &env,
    };
    if root.id == HTTP_PRIMITIVE {
        let mut request = crate::http::plan(root, &config, &vars)?;
        for (step, detail) in notes {
            request = request.note(step, detail);
        }
        return Ok(request.into());
    }
    if root.id == MCP_PRIMITIVE {
        let mut call = crate::mcp::plan(root, &config, &vars, &parameters)?;
        for (step, detail) in notes {
            call.notes
                .push(rye_guest::adapter::TraceNote::new(step, detail));
        }
        return Ok(call.into());
    }
    let text = |key: &str, value: &Value| -> Result<String, PlanError> {
        match vars.expand(value) {
            Value::String(s) => Ok(s),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            other => Err(PlanError::Template(rye_guest::adapter::ElementError {
                item_id: root.id.to_owned(),
                message: format!("{key} expands to {other}, not text"),
            })),
        }
    };
    let command = match config.get("command") {
        Some(value) => text("command", value)?,
        None => {
            return Err(PlanError::config(
                root.id,
                "no element of the chain gives config.command",
            ));
        }
    };
    if command.trim().is_empty() {
        return Err(PlanError::config(
            root.id,
            "config.command is empty once its templates are filled",
        ));
    }
    let args = match config.get("args") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|a| text("args", a))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(PlanError::config(root.id, "config.args must be a list")),
    };
    let cwd = match (&anchored, config.get("cwd")) {
        (Some((_, Some(cwd))), _) => Some(cwd.clone()),
        (_, Some(cwd)) => Some(text("cwd", cwd)?),
        _ => Some(input.project_path.clone()),
    };
    let stdin = match config.get("input_data") {
        Some(value) => Some(text("input_data", value)?.into_bytes()),
        None => None,
    };
    let timeout_secs = timeout_secs(root, &config, &vars, DEFAULT_TIMEOUT_SECS)?;

    let mut plan = ProcessPlan::new(command).timeout_ms((timeout_secs * 1000.0).round() as u64);
    plan.args = args;
    plan.cwd = cwd;
    plan.stdin = stdin;
    for (name, value) in env {
        plan = plan.env(name, value);
    }
    for (step, detail) in notes {
        plan = plan.note(step, detail);
    }
    Ok(plan.into())
}

/// The process environment: the host's, then the project's `.env`, then
/// each element's `env_config` from the primitive up, then an active
/// anchor's `env_paths`.
fn environment(
    elements: &[Element],
    context: &BTreeMap<&'static str, String>,
    anchored: Option<&(Value, Option<String>)>,
    input: &PlanInput,
    host: &dyn Host,
    notes: &mut Vec<(String, Value)>,
) -> Result<BTreeMap<String, String>, PlanError> {
    let mut env: BTreeMap<String, String> = host.environment().into_iter().collect();
    load_dotenv(&input.project_path, host, &mut env, notes);
    for element in elements.iter().rev() {
        let Some(env_config) = element.get("env_config") else {
            continue;
        };
        let Value::Object(env_config) = env_config else {
            return Err(element.config_error("env_config must be a mapping"));
        };
        let mut keys = Vec::new();
        if let Some(interpreter) = env_config.get("interpreter") {
            let var = resolve_interpreter(
                element,
                interpreter,
                context,
                &input.project_path,
                host,
                &mut env,
                notes,
            )?;
            keys.push(var);
        }
        if let Some(vars) = env_config.get("env") {
            let Value::Object(vars) = vars else {
                return Err(element.config_error("env_config.env must be a mapping"));
            };
            for (name, value) in vars {
                let value = match value {
                    Value::String(text) => template::expand_env(text, &env),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                env.insert(name.clone(), value);
                keys.push(name.clone());
            }
        }
        notes.push((
            "resolve_env".into(),
            json!({"contributed_by": element.id, "keys": keys}),
        ));
    }
    if let Some((config, _)) = anchored {
        apply_env_paths(config, context, &mut env, notes);
    }
    Ok(env)
}

/// Whether a configuration value names an environment variable anywhere.
fn names_env(value: &Value) -> bool {
    any_text(value, &|text| text.contains("${"))
}

/// Whether any text in `value`, however deep, passes `test`.
pub(crate) fn any_text(value: &Value, test: &dyn Fn(&str) -> bool) -> bool {
    match value {
        Value::String(text) => test(text),
        Value::Array(items) => items.iter().any(|v| any_text(v, test)),
        Value::Object(map) => map.values().any(|v| any_text(v, test)),
        _ => false,
    }
}

/// The configuration's `timeout`, in seconds: a positive number, or text
/// that reads as one.
pub(crate) fn timeout_secs(
    root: &Element,
    config: &Map<String, Value>,
    vars: &Vars,
    default: f64,
) -> Result<f64, PlanError> {
    let secs = match config.get("timeout").map(|t| vars.expand(t)) {
        None => default,
        Some(Value::Number(n)) => n.as_f64().unwrap_or(default),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map_err(|_| root.config_error(format!("timeout {s:?} is not a number of seconds")))?,
        Some(other) => {
            return Err(root.config_error(format!("timeout {other} is not a number of seconds")));
        }
    };
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(root.config_error(format!(
            "timeout {secs} must be a positive number of seconds"
        )));
    }
    Ok(secs)
}

fn parent(path: &str) -> String {
    Path::new(path)
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn join(base: &str, relative: &str) -> String {
    Path::new(base).join(relative).display().to_string()
}

/// The anchor's decision; when active, returns its config and templated
/// working directory, and updates `anchor_path` in the context.
fn decide_anchor(
    element: &Element,
    config: &Value,
    context: &mut BTreeMap<&'static str, String>,
    host: &dyn Host,
    notes: &mut Vec<(String, Value)>,
) -> Result<Option<(Value, Option<String>)>, PlanError> {
    let enabled = config
        .get("enabled")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mode = config.get("mode").and_then(Value::as_str).unwrap_or("auto");
    if !matches!(mode, "auto" | "always" | "never") {
        return Err(
            element.config_error(format!("anchor.mode {mode:?} is not auto, always or never"))
        );
    }
    let tool_dir = context["tool_dir"].clone();
    let markers: Vec<&str> = config
        .get("markers_any")
        .and_then(Value::as_array)
        .map(|m| m.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let found: Vec<&str> = markers
        .iter()
        .copied()
        .filter(|m| host.is_file(&join(&tool_dir, m)))
        .collect();
    let active = enabled && mode != "never" && (mode == "always" || !found.is_empty());
    if active {
        let root = config
            .get("root")
            .and_then(Value::as_str)
            .unwrap_or("tool_dir");
        let anchor_path = match root {
            "tool_dir" => tool_dir,
            "tool_parent" => context["tool_parent"].clone(),
            "project_path" => context["project_path"].clone(),
            other => {
                return Err(element.config_error(format!(
                    "anchor.root {other:?} is not tool_dir, tool_parent or project_path"
                )));
            }
        };
        context.insert("anchor_path", anchor_path);
    }
    notes.push((
        "anchor".into(),
        json!({"from": element.id, "active": active, "mode": mode, "markers_found": found, "anchor_path": context["anchor_path"]}),
    ));
    if !active {
        return Ok(None);
    }
    let cwd = config
        .get("cwd")
        .and_then(Value::as_str)
        .map(|c| fill_context(c, context));
    Ok(Some((config.clone(), cwd)))
}

/// `.env` in the project folder: `NAME=value` lines (an `export ` prefix
/// and matching quotes around the value are removed; `#` lines skipped).
fn load_dotenv(
    project: &str,
    host: &dyn Host,
    env: &mut BTreeMap<String, String>,
    notes: &mut Vec<(String, Value)>,
) {
    let path = join(project, ".env");
    let Some(text) = host.read_file(&path) else {
        return;
    };
    let mut keys = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        let value = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
            .unwrap_or(value);
        env.insert(name.to_owned(), value.to_owned());
        keys.push(name.to_owned());
    }
    notes.push(("dotenv".into(), json!({"path": path, "keys": keys})));
}

fn resolve_interpreter(
    element: &Element,
    interpreter: &Value,
    context: &BTreeMap<&'static str, String>,
    project: &str,
    host: &dyn Host,
    env: &mut BTreeMap<String, String>,
    notes: &mut Vec<(String, Value)>,
) -> Result<String, PlanError> {
    let field = |key: &str| interpreter.get(key).and_then(Value::as_str);
    let list = |key: &str| -> Vec<String> {
        interpreter
            .get(key)
            .and_then(Value::as_array)
            .map(|v| {
                v.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let var = field("var")
        .ok_or_else(|| element.config_error("env_config.interpreter needs var"))?
        .to_owned();
    let kind = field("type").unwrap_or("system_binary");
    let mut note = json!({"element": element.id, "var": var, "type": kind});

    // Set to a program outside this adapter's folders, the host is asked.
    if let Some(current) = env.get(&var)
        && (host.is_file(current)
            || (current.starts_with('/') && host.which(current).as_deref() == Some(current)))
    {
        note["value"] = json!(current);
        note["source"] = json!("already set");
        notes.push(("interpreter".into(), note));
        return Ok(var);
    }

    let mut looked = Vec::new();
    let found = match kind {
        "local_binary" => {
            let binary = field("binary")
                .ok_or_else(|| element.config_error("a local_binary interpreter needs binary"))?;
            let mut names = vec![binary.to_owned()];
            names.extend(list("candidates"));
            let mut roots: Vec<String> = list("search_roots")
                .iter()
                .map(|r| fill_context(r, context))
                .collect();
            roots.push(project.to_owned());
            let mut search_paths = list("search_paths");
            if search_paths.is_empty() {
                search_paths.push(String::new());
            }
            let mut found = None;
            'search: for root in &roots {
                for sub in &search_paths {
                    for name in &names {
                        let candidate = join(&join(root, sub), name);
                        if host.is_program(&candidate) {
                            found = Some(candidate);
                            break 'search;
                        }
                        looked.push(candidate);
                    }
                }
            }
            found
        }
        "system_binary" => {
            let binary = field("binary")
                .ok_or_else(|| element.config_error("a system_binary interpreter needs binary"))?;
            looked.push(format!("{binary} on PATH"));
            host.which(binary)
        }
        "command" => match host.run_declared_command(element.id) {
            Ok(line) if !line.trim().is_empty() => Some(line.trim().to_owned()),
            Ok(_) => {
                looked.push("its resolve_cmd printed nothing".into());
                None
            }
            Err(e) => {
                looked.push(format!("its resolve_cmd failed: {e}"));
                None
            }
        },
        other => {
            return Err(element.config_error(format!(
                "interpreter type {other:?} is not local_binary, system_binary or command"
            )));
        }
    };
    let (value, source) = match (found, field("fallback")) {
        (Some(path), _) => (path, "found"),
        (None, Some(fallback)) => (fallback.to_owned(), "fallback"),
        (None, None) => {
            return Err(PlanError::InterpreterNotFound(
                rye_guest::adapter::ElementError {
                    item_id: element.id.to_owned(),
                    message: format!("no {var} ({kind}); looked at: {}", looked.join(", ")),
                },
            ));
        }
    };
    note["value"] = json!(value);
    note["source"] = json!(source);
    notes.push(("interpreter".into(), note));
    env.insert(var.clone(), value);
    Ok(var)
}

/// The anchor's `env_paths`: each variable gets `prepend` entries before
/// and `append` entries after its current value, without duplicates.
fn apply_env_paths(
    config: &Value,
    context: &BTreeMap<&'static str, String>,
    env: &mut BTreeMap<String, String>,
    notes: &mut Vec<(String, Value)>,
) {
    let Some(Value::Object(paths)) = config.get("env_paths") else {
        return;
    };
    let separator = ':';
    for (var, spec) in paths {
        let entries = |key: &str| -> Vec<String> {
            spec.get(key)
                .and_then(Value::as_array)
                .map(|v| {
                    v.iter()
                        .filter_map(Value::as_str)
                        .map(|p| fill_context(p, context))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut parts: Vec<String> = env
            .get(var)
            .map(|v| {
                v.split(separator)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let before: Vec<String> = entries("prepend")
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        let after: Vec<String> = entries("append")
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        parts.retain(|p| !before.contains(p));
        let mut joined: Vec<String> = Vec::new();
        for p in before.into_iter().chain(parts).chain(after) {
            if !joined.contains(&p) {
                joined.push(p);
            }
        }
        env.insert(var.clone(), joined.join(&separator.to_string()));
        notes.push(("env_paths".into(), json!({"var": var, "value": env[var]})));
    }
}

/// The tool's `config_resolve`: one spec, or a list (then a mapping of
/// path to result).
fn resolve_config(
    tool: &Element,
    spec: &Value,
    host: &dyn Host,
    notes: &mut Vec<(String, Value)>,
) -> Result<Value, PlanError> {
    match spec {
        Value::Array(specs) => {
            let mut out = Map::new();
            for spec in specs {
                let (path, value) = resolve_one(tool, spec, host, notes)?;
                out.insert(path, value);
            }
            Ok(Value::Object(out))
        }
        spec => Ok(resolve_one(tool, spec, host, notes)?.1),
    }
}

fn resolve_one(
    tool: &Element,
    spec: &Value,
    host: &dyn Host,
    notes: &mut Vec<(String, Value)>,
) -> Result<(String, Value), PlanError> {
    let path = spec
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| tool.config_error("config_resolve needs a path"))?;
    let mode = spec
        .get("mode")
        .and_then(Value::as_str)
        .unwrap_or("deep_merge");
    let order: &[Space] = match mode {
        "deep_merge" => &[Space::System, Space::User, Space::Project],
        "first_match" => &[Space::Project, Space::User, Space::System],
        other => {
            return Err(tool.config_error(format!(
                "config_resolve mode {other:?} is not deep_merge or first_match"
            )));
        }
    };
    let mut result = Value::Object(Map::new());
    let mut read = Vec::new();
    for space in order {
        let Some(text) = host
            .read_config(*space, path)
            .map_err(|e| tool.config_error(format!("config_resolve {path}: {e}")))?
        else {
            continue;
        };
        let value: Value = serde_yaml_ng::from_str(&text).map_err(|e| {
            tool.config_error(format!(
                "config_resolve {path} in the {} space: invalid YAML: {e}",
                space_name(*space)
            ))
        })?;
        read.push(space_name(*space));
        if mode == "first_match" {
            result = value;
            break;
        }
        deep_merge(&mut result, value);
    }
    if let Value::Object(map) = &mut result {
        map.remove("extends");
    }
    notes.push((
        "config_resolve".into(),
        json!({"path": path, "mode": mode, "spaces": read}),
    ));
    Ok((path.to_owned(), result))
}

/// Mappings merge key by key, recursively; anything else replaces.
fn deep_merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(existing) => deep_merge(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, Value::Null) => {
            let _ = base;
        }
        (base, over) => *base = over,
    }
}
