//! The two kinds of template in runtime and tool configuration.
//!
//! 1. `${VAR}` and `${VAR:-default}` (upper-case names) take values from
//!    the environment being built. An unset variable takes its default, or
//!    nothing; one set to the empty string stays empty.
//! 2. `{name}` takes a value from the [`Vars`]: the execution context
//!    (`tool_path`, `project_path`, …), then the caller's parameters, then
//!    the merged configuration's own keys. A string that is exactly
//!    `{name}` takes the value with its type (a number stays a number);
//!    inside longer text, strings go in as they are and other values as
//!    JSON. Unknown names are left as written, so JSON or code braces pass
//!    through.
//!
//! Caller parameters are data: their values are inserted as they are and
//! never expanded again, and `${VAR}` is never applied to them. Values of
//! configuration keys are templates themselves and are expanded in turn, to
//! a depth of three.

use std::collections::BTreeMap;

use rye_guest::serde_json::{Map, Value};

/// How deeply configuration values may refer to one another.
const MAX_DEPTH: usize = 3;

/// Expands `${VAR}` / `${VAR:-default}` in `text` from `env`.
pub fn expand_env(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        if is_env_name(name) {
            match env.get(name) {
                Some(value) => out.push_str(value),
                None => out.push_str(default.unwrap_or("")),
            }
        } else {
            out.push_str(&rest[start..start + 3 + end]);
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// Where `{name}` values come from, in order of precedence.
pub struct Vars<'a> {
    /// The execution context; callers cannot override it.
    pub context: &'a BTreeMap<&'static str, String>,
    /// The caller's parameters: data, inserted as they are.
    pub parameters: &'a Map<String, Value>,
    /// The merged configuration: templates of their own.
    pub config: &'a Map<String, Value>,
    /// For `${VAR}` inside configuration values.
    pub env: &'a BTreeMap<String, String>,
}

/// A `{name}` lookup's result: data (inserted as is) or a template to
/// expand further.
enum Found<'v> {
    Data(Value),
    Template(&'v Value),
}

impl Vars<'_> {
    fn find(&self, name: &str) -> Option<Found<'_>> {
        if let Some(value) = self.context.get(name) {
            return Some(Found::Data(Value::String(value.clone())));
        }
        if let Some(value) = self.parameters.get(name) {
            return Some(Found::Data(value.clone()));
        }
        self.config.get(name).map(Found::Template)
    }

    /// Expands a configuration value: `${VAR}` in its strings, then
    /// `{name}`.
    pub fn expand(&self, value: &Value) -> Value {
        self.expand_at(value, 0, Insert::AsIs)
    }

    /// Expands a URL template: as [`Vars::expand`], except that data (a
    /// caller's parameter, a context value) placed inside longer text is
    /// percent-encoded, so it cannot change the URL's structure. A URL
    /// that is exactly one `{name}` takes the value whole.
    pub fn expand_url(&self, value: &Value) -> Value {
        self.expand_at(value, 0, Insert::Encoded)
    }

    fn expand_at(&self, value: &Value, depth: usize, insert: Insert) -> Value {
        match value {
            Value::String(text) => self.expand_text(&expand_env(text, self.env), depth, insert),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|v| self.expand_at(v, depth, insert))
                    .collect(),
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.expand_at(v, depth, insert)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// The value of `name`, and whether it is data (not a template).
    fn resolve(&self, name: &str, depth: usize, insert: Insert) -> Option<(Value, bool)> {
        match self.find(name)? {
            Found::Data(value) => Some((value, true)),
            Found::Template(_) if depth >= MAX_DEPTH => None,
            Found::Template(value) => Some((self.expand_at(value, depth + 1, insert), false)),
        }
    }

    fn expand_text(&self, text: &str, depth: usize, insert: Insert) -> Value {
        if let Some(name) = lone_placeholder(text)
            && let Some((value, _)) = self.resolve(name, depth, insert)
        {
            return value;
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let close = after.find('}');
            let name = close.map(|c| &after[..c]).filter(|n| is_var_name(n));
            match (name, close) {
                (Some(name), Some(close)) => {
                    match self.resolve(name, depth, insert) {
                        Some((value, data)) => {
                            let text = match value {
                                Value::String(s) => s,
                                other => other.to_string(),
                            };
                            if data && insert == Insert::Encoded {
                                percent_encode(&text, &mut out);
                            } else {
                                out.push_str(&text);
                            }
                        }
                        None => out.push_str(&rest[open..open + close + 2]),
                    }
                    rest = &after[close + 1..];
                }
                _ => {
                    out.push('{');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        Value::String(out)
    }
}

/// How data goes into longer text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Insert {
    AsIs,
    /// Percent-encoded, all but the unreserved characters of RFC 3986.
    Encoded,
}

fn percent_encode(text: &str, out: &mut String) {
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

fn is_var_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// The name in a string that is only `{name}` (surrounding spaces allowed).
pub fn lone_placeholder(text: &str) -> Option<&str> {
    let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
    is_var_name(inner).then_some(inner)
}

/// Fills `{name}` placeholders in `text` with `context` values only, for
/// paths in anchor and interpreter settings; unknown names stay.
pub fn fill_context(text: &str, context: &BTreeMap<&'static str, String>) -> String {
    let empty = Map::new();
    let env = BTreeMap::new();
    let vars = Vars {
        context,
        parameters: &empty,
        config: &empty,
        env: &env,
    };
    match vars.expand_text(text, MAX_DEPTH, Insert::AsIs) {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    fn env() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("HOME".to_owned(), "/home/me".to_owned()),
            ("EMPTY".to_owned(), String::new()),
        ])
    }

    #[test]
    fn env_expansion() {
        let env = env();
        assert_eq!(expand_env("${HOME}/x", &env), "/home/me/x");
        assert_eq!(expand_env("${MISSING:-fallback}", &env), "fallback");
        assert_eq!(expand_env("${EMPTY:-fallback}", &env), "");
        assert_eq!(expand_env("${MISSING}", &env), "");
        assert_eq!(
            expand_env("${state.x} and ${lower}", &env),
            "${state.x} and ${lower}"
        );
        assert_eq!(
            expand_env("unterminated ${HOME", &env),
            "unterminated ${HOME"
        );
    }

    #[test]
    fn caller_values_are_data() {
        let env = env();
        let context = BTreeMap::from([("tool_path", "/t/tool.py".to_owned())]);
        let parameters =
            json!({"command": "echo ${HOME} {tool_path}", "n": 3, "tool_path": "/evil"});
        let config = json!({"command": "/bin/bash", "timeout": "{n}", "greeting": "hi {who}", "who": "{n} people"});
        let vars = Vars {
            context: &context,
            parameters: parameters.as_object().unwrap(),
            config: config.as_object().unwrap(),
            env: &env,
        };
        // The caller's command, exactly as sent.
        assert_eq!(
            vars.expand(&json!("{command}")),
            json!("echo ${HOME} {tool_path}")
        );
        // The context cannot be overridden by a parameter.
        assert_eq!(vars.expand(&json!("{tool_path}")), json!("/t/tool.py"));
        // A lone placeholder keeps its type; configuration refers to itself.
        assert_eq!(vars.expand(&json!("{timeout}")), json!(3));
        assert_eq!(vars.expand(&json!("{greeting}!")), json!("hi 3 people!"));
        // Code and JSON braces pass through.
        assert_eq!(
            vars.expand(&json!("print({} if x else {'a': 1})")),
            json!("print({} if x else {'a': 1})")
        );
        assert_eq!(
            vars.expand(&json!("${HOME}/{unknown}")),
            json!("/home/me/{unknown}")
        );
    }

    #[test]
    fn data_in_a_url_is_encoded() {
        let env = env();
        let context = BTreeMap::from([("tool_path", "/t/my tool.py".to_owned())]);
        let parameters = json!({"owner": "a/b?c=d#e", "n": 3, "whole": "https://x.test/p?q=1"});
        let config = json!({"base": "https://api.test/${HOME}", "path": "/repos/{owner}"});
        let vars = Vars {
            context: &context,
            parameters: parameters.as_object().unwrap(),
            config: config.as_object().unwrap(),
            env: &env,
        };
        assert_eq!(
            vars.expand_url(&json!("{base}{path}/{n}?t={tool_path}")),
            json!("https://api.test//home/me/repos/a%2Fb%3Fc%3Dd%23e/3?t=%2Ft%2Fmy%20tool.py")
        );
        // A whole URL from the caller is taken as it is.
        assert_eq!(
            vars.expand_url(&json!("{whole}")),
            json!("https://x.test/p?q=1")
        );
        // Outside URLs, data goes in as it is.
        assert_eq!(vars.expand(&json!("x {owner}")), json!("x a/b?c=d#e"));
        assert_eq!(
            vars.expand_url(&json!("https://h.test/{ü}")),
            json!("https://h.test/{ü}")
        );
    }

    #[test]
    fn self_reference_stops() {
        let env = env();
        let context = BTreeMap::new();
        let parameters = Map::new();
        let config = json!({"a": "{b}", "b": "{a}"});
        let vars = Vars {
            context: &context,
            parameters: &parameters,
            config: config.as_object().unwrap(),
            env: &env,
        };
        let expanded = vars.expand(&json!("{a}"));
        assert!(expanded.as_str().unwrap().contains('{'), "{expanded}");
    }
}
