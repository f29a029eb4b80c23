//! Does a value satisfy a JSON Schema? The check of a config item's
//! content against its `<name>.config-schema` tool.
//!
//! Enforced: `type`, `enum`, `const`, `required`, `properties`,
//! `additionalProperties`, `items` (one schema), `minItems`, `maxItems`,
//! `uniqueItems`, `minLength`, `maxLength`, `pattern`, `minimum`,
//! `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`,
//! `allOf`, `anyOf`, `oneOf` and `not`. Other keywords (`$ref`, `format`,
//! `if`/`then`, …) are not checked; a pattern the matcher here cannot
//! compile is reported as unchecked rather than guessed at.

use rye_guest::serde_json::Value;

/// How deep schemas and values are followed.
pub(crate) const MAX_DEPTH: usize = 64;

/// At most this many problems are kept for one value.
const MAX_PROBLEMS: usize = 50;

/// At most this many (schema, value) pairs are visited: nested `anyOf`
/// and `oneOf` try every choice, which a hostile schema can multiply.
const MAX_STEPS: usize = 100_000;

/// One place where the value breaks its schema.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The JSON pointer of the place (`""` for the whole value).
    pub(crate) at: String,
    pub(crate) message: String,
    /// Not a breach: something the check could not decide.
    pub(crate) unchecked: bool,
}

/// Where `value` breaks `schema`, in document order.
pub(crate) fn problems(schema: &Value, value: &Value) -> Vec<Problem> {
    let mut found = Vec::new();
    let mut steps = 0;
    check(schema, value, "", 0, &mut steps, &mut found);
    if steps > MAX_STEPS {
        found.push(Problem {
            at: String::new(),
            message: format!(
                "checking needs more than {MAX_STEPS} steps; the rest was not checked"
            ),
            unchecked: true,
        });
    }
    found.truncate(MAX_PROBLEMS);
    found
}

fn check(
    schema: &Value,
    value: &Value,
    at: &str,
    depth: usize,
    steps: &mut usize,
    found: &mut Vec<Problem>,
) {
    *steps += 1;
    if found.len() >= MAX_PROBLEMS || *steps > MAX_STEPS {
        return;
    }
    let schema = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => {
            found.push(breach(at, "no value is allowed here".into()));
            return;
        }
        Value::Object(schema) => schema,
        _ => return,
    };
    if depth > MAX_DEPTH {
        found.push(Problem {
            at: at.to_owned(),
            message: format!("nested deeper than {MAX_DEPTH} levels; not checked further"),
            unchecked: true,
        });
        return;
    }
    if let Some(wanted) = schema.get("type") {
        let names: Vec<&str> = match wanted {
            Value::String(name) => vec![name.as_str()],
            Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !names.is_empty() && !names.iter().any(|n| is_type(value, n)) {
            let message = format!("is {}, not {}", crate::kind_of(value), names.join(" or "));
            found.push(breach(at, message));
            return;
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.contains(value)
    {
        let message = format!("{} is not one of {}", shown(value), shown(&schema["enum"]));
        found.push(breach(at, message));
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        found.push(breach(at, format!("must be {}", shown(constant))));
    }
    match value {
        Value::Object(object) => {
            if let Some(Value::Array(required)) = schema.get("required") {
                for name in required.iter().filter_map(Value::as_str) {
                    if !object.contains_key(name) {
                        found.push(breach(at, format!("{name:?} is required")));
                    }
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            for (name, item) in object {
                let inner = format!("{at}/{}", pointer_escape(name));
                match properties.and_then(|p| p.get(name)) {
                    Some(sub) => check(sub, item, &inner, depth + 1, steps, found),
                    None => match schema.get("additionalProperties") {
                        Some(Value::Bool(false)) => {
                            found.push(breach(&inner, "is not a known property".into()));
                        }
                        Some(sub @ Value::Object(_)) => {
                            check(sub, item, &inner, depth + 1, steps, found)
                        }
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
                found.push(breach(at, format!("has {count} items, fewer than {min}")));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && count > max
            {
                found.push(breach(at, format!("has {count} items, more than {max}")));
            }
            if schema.get("uniqueItems") == Some(&Value::Bool(true))
                && items
                    .iter()
                    .enumerate()
                    .any(|(i, a)| items[..i].contains(a))
            {
                found.push(breach(at, "has repeated items".into()));
            }
            if let Some(sub @ (Value::Object(_) | Value::Bool(_))) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(sub, item, &format!("{at}/{i}"), depth + 1, steps, found);
                }
            }
        }
        Value::String(text) => {
            let length = text.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && length < min
            {
                found.push(breach(
                    at,
                    format!("is {length} characters, fewer than {min}"),
                ));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && length > max
            {
                found.push(breach(
                    at,
                    format!("is {length} characters, more than {max}"),
                ));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match regex_lite::Regex::new(pattern) {
                    Ok(re) if !re.is_match(text) => {
                        let message = format!(
                            "{} does not match the pattern {:?}",
                            shown(value),
                            crate::short(pattern)
                        );
                        found.push(breach(at, message));
                    }
                    Ok(_) => {}
                    Err(_) => found.push(Problem {
                        at: at.to_owned(),
                        message: format!(
                            "the pattern {:?} uses syntax this check cannot match; not checked",
                            crate::short(pattern)
                        ),
                        unchecked: true,
                    }),
                }
            }
        }
        Value::Number(number) => {
            let n = number.as_f64().unwrap_or(f64::NAN);
            let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
            let mut say = |broken: bool, message: String| {
                if broken {
                    found.push(breach(at, message));
                }
            };
            if let Some(min) = bound("minimum") {
                say(n < min, format!("{number} is less than {min}"));
            }
            if let Some(max) = bound("maximum") {
                say(n > max, format!("{number} is more than {max}"));
            }
            if let Some(min) = bound("exclusiveMinimum") {
                say(n <= min, format!("{number} is not more than {min}"));
            }
            if let Some(max) = bound("exclusiveMaximum") {
                say(n >= max, format!("{number} is not less than {max}"));
            }
            if let Some(step) = bound("multipleOf").filter(|s| *s > 0.0) {
                let ratio = n / step;
                say(
                    (ratio.round() - ratio).abs() > 1e-9,
                    format!("{number} is not a multiple of {step}"),
                );
            }
        }
        _ => {}
    }
    let list = |key: &str| -> &[Value] {
        schema
            .get(key)
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    };
    for sub in list("allOf") {
        check(sub, value, at, depth + 1, steps, found);
    }
    let passes = |sub: &Value, steps: &mut usize| {
        let mut inner = Vec::new();
        check(sub, value, at, depth + 1, steps, &mut inner);
        inner.iter().all(|p| p.unchecked)
    };
    let any = list("anyOf");
    if !any.is_empty() && !any.iter().any(|sub| passes(sub, steps)) {
        found.push(breach(at, "matches none of the choices of anyOf".into()));
    }
    let one = list("oneOf");
    if !one.is_empty() {
        let n = one.iter().filter(|sub| passes(sub, steps)).count();
        if n != 1 {
            found.push(breach(
                at,
                format!("matches {n} of the choices of oneOf, not exactly one"),
            ));
        }
    }
    if let Some(not) = schema.get("not")
        && passes(not, steps)
    {
        found.push(breach(at, "matches the schema under `not`".into()));
    }
}

fn breach(at: &str, message: String) -> Problem {
    Problem {
        at: at.to_owned(),
        message,
        unchecked: false,
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
        "integer" => value.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => true,
    }
}

/// A value as a message shows it.
fn shown(value: &Value) -> String {
    crate::short(&value.to_string())
}

fn pointer_escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    fn messages(schema: Value, value: Value) -> Vec<String> {
        problems(&schema, &value)
            .into_iter()
            .map(|p| format!("{}: {}", p.at, p.message))
            .collect()
    }

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
            }
        });
        assert!(messages(schema.clone(), json!({"url": "https://x", "retries": 3})).is_empty());
        let found = messages(
            schema.clone(),
            json!({"url": "http://x", "retries": 9, "mode": "slow", "tags": ["a", 1, "a"], "colour": "red"}),
        );
        assert_eq!(
            found,
            [
                "/url: \"http://x\" does not match the pattern \"^https://\"",
                "/retries: 9 is more than 5",
                "/mode: \"slow\" is not one of [\"fast\",\"safe\"]",
                "/tags: has repeated items",
                "/tags/1: is a number, not string",
                "/colour: is not a known property",
            ]
        );
        assert_eq!(
            messages(schema, json!({})),
            [": \"url\" is required", ": \"retries\" is required"]
        );
    }

    #[test]
    fn combinators_and_edge_values() {
        assert!(messages(json!({"type": "integer"}), json!(2.0)).is_empty());
        assert_eq!(
            messages(json!({"type": "integer"}), json!(2.5)),
            [": is a number, not integer"]
        );
        assert_eq!(
            messages(
                json!({"oneOf": [{"type": "string"}, {"minLength": 1}]}),
                json!("x")
            ),
            [": matches 2 of the choices of oneOf, not exactly one"]
        );
        assert!(
            messages(
                json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
                json!(null)
            )
            .is_empty()
        );
        assert_eq!(
            messages(json!({"not": {"type": "null"}}), json!(null)),
            [": matches the schema under `not`"]
        );
        assert_eq!(
            messages(json!(false), json!(1)),
            [": no value is allowed here"]
        );
        assert_eq!(
            messages(json!({"multipleOf": 0.5}), json!(1.25)),
            [": 1.25 is not a multiple of 0.5"]
        );
        assert_eq!(
            messages(json!({"type": ["string", "null"]}), json!(1)),
            [": is a number, not string or null"]
        );
    }

    #[test]
    fn an_unmatchable_pattern_is_reported_as_unchecked() {
        let found = problems(&json!({"pattern": "(?<=a)b"}), &json!("ab"));
        assert_eq!(found.len(), 1);
        assert!(found[0].unchecked, "{found:?}");
        // Unchecked is not a failure inside anyOf.
        assert!(
            problems(&json!({"anyOf": [{"pattern": "(?<=a)b"}]}), &json!("x"))
                .iter()
                .all(|p| p.unchecked)
        );
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
        assert!(
            found[0].message.contains("nested deeper than 64"),
            "{found:?}"
        );
    }

    #[test]
    fn nested_choices_are_bounded() {
        // 2^18 ways through, past the step bound.
        let mut schema = json!({"type": "string"});
        for _ in 0..18 {
            schema = json!({"anyOf": [schema.clone(), schema]});
        }
        let found = problems(&schema, &json!(1));
        assert!(
            found
                .iter()
                .any(|p| p.unchecked && p.message.contains("steps")),
            "{found:?}"
        );
    }

    #[test]
    fn floods_are_cut() {
        let value = Value::Array((0..1000).map(|_| json!(1)).collect());
        assert_eq!(
            problems(&json!({"items": {"type": "string"}}), &value).len(),
            MAX_PROBLEMS
        );
    }
}
