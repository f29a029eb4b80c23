//! Config items checked against their schema.
//!
//! A config file `.ai/config/<id>.yaml` is checked against the tool item
//! named `<name>.config-schema` (its `.yaml` under `.ai/tools/`, in any
//! space), `<name>` being the config's file stem; when several spaces or
//! folders hold one, the nearest space wins, and within a space the one
//! whose id ends with the config's whole id. The schema is that item's
//! `schema` key (or `config_schema`): JSON Schema, of which the keywords
//! that say what a value may be are enforced (see [`problems`]).

use std::path::PathBuf;

use rye_space::{ItemKind, Space};
use serde_json::{Map, Value};

use crate::parse::ParserLookup;
use crate::session::Session;
use crate::{HostError, Rye};

/// How deep schemas and values are followed.
const MAX_DEPTH: usize = 64;

/// At most this many problems are reported for one file.
const MAX_PROBLEMS: usize = 50;

/// The schema a config item is checked against.
pub(crate) struct ConfigSchema {
    pub(crate) id: String,
    pub(crate) path: PathBuf,
    pub(crate) schema: Value,
}

impl Rye {
    /// The schema for config `id`, if a space holds one. A schema file
    /// that cannot be read, parsed or verified is an error: a config is
    /// never silently left unchecked because its schema was broken.
    pub(crate) fn config_schema(
        &self,
        session: &Session,
        id: &str,
    ) -> Result<Option<ConfigSchema>, HostError> {
        let stem = id.rsplit('/').next().unwrap_or(id);
        let wanted = format!("{stem}.config-schema");
        let whole = format!("{id}.config-schema");
        let spaces = &session.spaces;
        let extractors = session.extractors(self)?;
        let tools = extractors.require(ItemKind::Tool)?;
        for root in spaces.roots() {
            let listed = spaces.list_cached(&self.listings, ItemKind::Tool, root.space, &tools.extensions)?;
            let mut candidates: Vec<_> = listed
                .iter()
                .filter(|item| {
                    item.escape.is_none()
                        && (item.id == wanted || item.id.ends_with(&format!("/{wanted}")))
                })
                .collect();
            if candidates.is_empty() {
                continue;
            }
            // The one whose id ends with the whole config id, else the
            // shortest id, so the choice does not depend on listing order.
            candidates.sort_by_key(|item| {
                (
                    !(item.id == whole || item.id.ends_with(&format!("/{whole}"))),
                    item.id.len(),
                    item.id.clone(),
                )
            });
            let item = candidates[0];
            return self
                .read_schema(session, (&item.id, root.space, &item.path))
                .map(Some);
        }
        Ok(None)
    }

    fn read_schema(
        &self,
        session: &Session,
        (id, space, path): (&str, Space, &std::path::Path),
    ) -> Result<ConfigSchema, HostError> {
        let mut parsers = ParserLookup::default();
        let parsed = self.parse_file(session, &mut parsers, (ItemKind::Tool, id, space, path))?;
        let document = match parsed.outcome.as_ref() {
            Ok(document) => &document.document,
            Err(failure) => {
                return Err(HostError::ParserRefused {
                    path: path.to_owned(),
                    parser: parsed.parser.clone(),
                    failure: failure.to_string(),
                });
            }
        };
        let trust = session.trust(self);
        let extractors = session.extractors(self)?;
        self.verify_item(
            &trust,
            Some(&extractors),
            (ItemKind::Tool, space, path),
            parsed.content_hash,
            Some(parsed.content.as_bytes()),
        )?;
        let schema = ["schema", "config_schema"]
            .iter()
            .find_map(|k| document.get(*k))
            .cloned()
            .ok_or_else(|| HostError::ConfigSchema {
                path: path.to_owned(),
                schema: path.to_owned(),
                problems: vec!["the schema item has no `schema` key".into()],
            })?;
        Ok(ConfigSchema {
            id: id.to_owned(),
            path: path.to_owned(),
            schema,
        })
    }

    /// What is wrong with config `id` (parsed as `document`) by its
    /// schema: the schema's path and the problems, or `None` when no
    /// schema applies.
    pub(crate) fn config_problems(
        &self,
        session: &Session,
        id: &str,
        document: &Map<String, Value>,
    ) -> Result<Option<(ConfigSchema, Vec<String>)>, HostError> {
        let Some(schema) = self.config_schema(session, id)? else {
            return Ok(None);
        };
        let found = problems(&schema.schema, &Value::Object(document.clone()));
        Ok(Some((schema, found)))
    }
}

/// Where `value` breaks `schema`: one line per problem, each naming the
/// place (`/a/0/b`) and the keyword. Enforced: `type`, `enum`, `const`,
/// `properties`, `required`, `additionalProperties`, `patternProperties`
/// names aside, `items` (one schema), `minItems`, `maxItems`,
/// `uniqueItems`, `minLength`, `maxLength`, `pattern`, `minimum`,
/// `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`,
/// `allOf`, `anyOf`, `oneOf`, `not`. Other keywords are not checked.
pub(crate) fn problems(schema: &Value, value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    check(schema, value, "", 0, &mut found);
    found.truncate(MAX_PROBLEMS);
    found
}

fn check(schema: &Value, value: &Value, at: &str, depth: usize, found: &mut Vec<String>) {
    if found.len() >= MAX_PROBLEMS {
        return;
    }
    let place = if at.is_empty() { "/" } else { at };
    let schema = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => {
            found.push(format!("{place}: no value is allowed here"));
            return;
        }
        Value::Object(schema) => schema,
        _ => return,
    };
    if depth > MAX_DEPTH {
        found.push(format!("{place}: nested deeper than {MAX_DEPTH} levels; not checked further"));
        return;
    }
    let mut say = |message: String| found.push(format!("{place}: {message}"));
    if let Some(wanted) = schema.get("type") {
        let names: Vec<&str> = match wanted {
            Value::String(name) => vec![name.as_str()],
            Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !names.is_empty() && !names.iter().any(|n| is_type(value, n)) {
            say(format!("is {}, not {}", type_name(value), names.join(" or ")));
            return;
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.contains(value)
    {
        say(format!("{} is not one of {}", short(value), short(&Value::Array(options.clone()))));
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        say(format!("must be {}", short(constant)));
    }
    match value {
        Value::Object(object) => {
            if let Some(Value::Array(required)) = schema.get("required") {
                for name in required.iter().filter_map(Value::as_str) {
                    if !object.contains_key(name) {
                        say(format!("{name:?} is required"));
                    }
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            for (name, item) in object {
                let inner = format!("{at}/{}", pointer_escape(name));
                match properties.and_then(|p| p.get(name)) {
                    Some(sub) => check(sub, item, &inner, depth + 1, found),
                    None => match schema.get("additionalProperties") {
                        Some(Value::Bool(false)) => {
                            found.push(format!("{inner}: is not a known property"));
                        }
                        Some(sub @ Value::Object(_)) => check(sub, item, &inner, depth + 1, found),
                        _ => {}
                    },
                }
            }
        }
        Value::Array(items) => {
            let count = items.len() as u64;
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && count < min
            {
                say(format!("has {count} items, fewer than {min}"));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && count > max
            {
                say(format!("has {count} items, more than {max}"));
            }
            if schema.get("uniqueItems") == Some(&Value::Bool(true))
                && items.iter().enumerate().any(|(i, a)| items[..i].contains(a))
            {
                say("has repeated items".into());
            }
            if let Some(sub @ (Value::Object(_) | Value::Bool(_))) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(sub, item, &format!("{at}/{i}"), depth + 1, found);
                }
            }
        }
        Value::String(text) => {
            let length = text.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && length < min
            {
                say(format!("is {length} characters, fewer than {min}"));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && length > max
            {
                say(format!("is {length} characters, more than {max}"));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(pattern) {
                    Ok(re) if !re.is_match(text) => {
                        say(format!("{} does not match {pattern:?}", short(value)));
                    }
                    Ok(_) => {}
                    Err(_) => say(format!("the schema's pattern {pattern:?} is not a regular expression")),
                }
            }
        }
        Value::Number(number) => {
            let n = number.as_f64().unwrap_or(f64::NAN);
            let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
            if let Some(min) = bound("minimum")
                && n < min
            {
                say(format!("{n} is less than {min}"));
            }
            if let Some(max) = bound("maximum")
                && n > max
            {
                say(format!("{n} is more than {max}"));
            }
            if let Some(min) = bound("exclusiveMinimum")
                && n <= min
            {
                say(format!("{n} is not more than {min}"));
            }
            if let Some(max) = bound("exclusiveMaximum")
                && n >= max
            {
                say(format!("{n} is not less than {max}"));
            }
            if let Some(step) = bound("multipleOf")
                && step > 0.0
                && ((n / step).round() - n / step).abs() > 1e-9
            {
                say(format!("{n} is not a multiple of {step}"));
            }
        }
        _ => {}
    }
    let subs = |key: &str| -> Vec<&Value> {
        schema
            .get(key)
            .and_then(Value::as_array)
            .map(|list| list.iter().collect())
            .unwrap_or_default()
    };
    for sub in subs("allOf") {
        check(sub, value, at, depth + 1, found);
    }
    let passing = |list: Vec<&Value>| {
        list.iter()
            .filter(|sub| {
                let mut inner = Vec::new();
                check(sub, value, at, depth + 1, &mut inner);
                inner.is_empty()
            })
            .count()
    };
    let any = subs("anyOf");
    if !any.is_empty() && passing(any) == 0 {
        found.push(format!("{place}: matches none of anyOf"));
    }
    let one = subs("oneOf");
    if !one.is_empty() {
        let n = passing(one);
        if n != 1 {
            found.push(format!("{place}: matches {n} of oneOf, not exactly one"));
        }
    }
    if let Some(not) = schema.get("not") {
        let mut inner = Vec::new();
        check(not, value, at, depth + 1, &mut inner);
        if inner.is_empty() {
            found.push(format!("{place}: matches what `not` forbids"));
        }
    }
}

fn is_type(value: &Value, name: &str) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64()
                || value.is_u64()
                || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// A value as a message shows it: at most 60 characters.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 60 {
        return text;
    }
    let cut: String = text.chars().take(57).collect();
    format!("{cut}...")
}

fn pointer_escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_checked_by_the_schema_keywords() {
        let schema = json!({
            "type": "object",
            "required": ["url", "retries"],
            "additionalProperties": false,
            "properties": {
                "url": {"type": "string", "pattern": "^https://"},
                "retries": {"type": "integer", "minimum": 0, "maximum": 5},
                "mode": {"enum": ["fast", "safe"]},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "version": {"type": "string"},
                "name": {"type": "string"},
                "category": {"type": "string"}
            }
        });
        assert!(problems(&schema, &json!({"url": "https://x", "retries": 3, "mode": "safe"})).is_empty());
        let found = problems(
            &schema,
            &json!({"url": "http://x", "retries": 9, "mode": "slow", "tags": ["a", 1, "a"], "colour": "red"}),
        );
        let text = found.join("\n");
        for needle in [
            "/url: \"http://x\" does not match",
            "/retries: 9 is more than 5",
            "/mode: \"slow\" is not one of",
            "/tags: has repeated items",
            "/tags/1: is a number, not string",
            "/colour: is not a known property",
        ] {
            assert!(text.contains(needle), "{needle} not in\n{text}");
        }
        assert_eq!(problems(&schema, &json!({}))[..2], ["/: \"url\" is required", "/: \"retries\" is required"]);
        assert_eq!(problems(&json!({"type": "integer"}), &json!(2.0)), Vec::<String>::new());
        assert_eq!(problems(&json!({"oneOf": [{"type": "string"}, {"minLength": 1}]}), &json!("x")).len(), 1);
        assert!(problems(&json!({"not": {"type": "null"}}), &json!(null))[0].contains("not"));
    }

    #[test]
    fn deep_schemas_and_values_are_bounded() {
        let mut schema = json!({"type": "object"});
        let mut value = json!(1);
        for _ in 0..200 {
            schema = json!({"properties": {"a": schema}});
            value = json!({"a": value});
        }
        let found = problems(&schema, &value);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("nested deeper than 64"), "{found:?}");
    }
}
