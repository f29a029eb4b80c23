//! Is a value a JSON Schema? The keywords of draft 2020-12 (and draft 7's
//! `definitions` and array `items`) that config schemas use, each checked
//! for the shape the specification gives it. Unknown keywords are allowed,
//! as the specification allows them.

use rye_guest::serde_json::Value;

const TYPES: [&str; 7] = [
    "null", "boolean", "object", "array", "number", "string", "integer",
];

/// Appends to `problems` each way `schema` (at JSON pointer `at`) is not a
/// schema.
pub(crate) fn check(schema: &Value, at: &str, problems: &mut Vec<String>) {
    let here = |problems: &mut Vec<String>, message: String| {
        let at = if at.is_empty() { "/" } else { at };
        problems.push(format!("at {at}: {message}"));
    };
    let object = match schema {
        Value::Bool(_) => return,
        Value::Object(object) => object,
        other => {
            here(
                problems,
                format!(
                    "a schema is a mapping or a boolean, not {}",
                    crate::kind_of(other)
                ),
            );
            return;
        }
    };
    for (keyword, value) in object {
        let path = format!("{at}/{keyword}");
        let bad = |problems: &mut Vec<String>, message: String| {
            problems.push(format!("at {path}: {message}"))
        };
        match keyword.as_str() {
            "type" => match value {
                Value::String(t) if TYPES.contains(&t.as_str()) => {}
                Value::Array(list)
                    if !list.is_empty()
                        && list
                            .iter()
                            .all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t))) => {}
                other => bad(
                    problems,
                    format!(
                        "type is {other}; it must be one of {} or a list of them",
                        TYPES.join(", ")
                    ),
                ),
            },
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                match value {
                    Value::Object(map) => {
                        for (name, sub) in map {
                            check(sub, &format!("{path}/{name}"), problems);
                        }
                    }
                    other => bad(
                        problems,
                        format!("{keyword} is {}, not a mapping", crate::kind_of(other)),
                    ),
                }
            }
            "additionalProperties"
            | "unevaluatedProperties"
            | "propertyNames"
            | "contains"
            | "not"
            | "if"
            | "then"
            | "else"
            | "additionalItems"
            | "unevaluatedItems" => check(value, &path, problems),
            "items" => match value {
                Value::Array(list) => {
                    for (i, sub) in list.iter().enumerate() {
                        check(sub, &format!("{path}/{i}"), problems);
                    }
                }
                other => check(other, &path, problems),
            },
            "prefixItems" | "allOf" | "anyOf" | "oneOf" => match value {
                Value::Array(list) if !list.is_empty() => {
                    for (i, sub) in list.iter().enumerate() {
                        check(sub, &format!("{path}/{i}"), problems);
                    }
                }
                _ => bad(
                    problems,
                    format!("{keyword} must be a non-empty list of schemas"),
                ),
            },
            "required" => match value {
                Value::Array(list) if list.iter().all(Value::is_string) => {
                    let mut names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
                    names.sort_unstable();
                    if names.windows(2).any(|w| w[0] == w[1]) {
                        bad(problems, "required names a property twice".into());
                    }
                }
                _ => bad(problems, "required must be a list of property names".into()),
            },
            "enum" if !value.is_array() => bad(problems, "enum must be a list".into()),
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum"
                if !value.is_number() =>
            {
                bad(problems, format!("{keyword} must be a number"))
            }
            "multipleOf" if !value.as_f64().is_some_and(|n| n > 0.0) => {
                bad(problems, "multipleOf must be a number above 0".into())
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties"
            | "maxProperties" | "minContains" | "maxContains"
                if !value.is_u64() =>
            {
                bad(
                    problems,
                    format!("{keyword} must be a whole number of at least 0"),
                )
            }
            "uniqueItems" if !value.is_boolean() => {
                bad(problems, "uniqueItems must be true or false".into())
            }
            "pattern" | "format" | "title" | "description" | "$ref" | "$id" | "$schema"
            | "$comment" | "$anchor"
                if !value.is_string() =>
            {
                bad(problems, format!("{keyword} must be a string"))
            }
            _ => {}
        }
    }
    if let (
        Some(Value::Array(required)),
        Some(Value::Bool(false)),
        Some(Value::Object(properties)),
    ) = (
        object.get("required"),
        object.get("additionalProperties"),
        object.get("properties"),
    ) {
        for name in required.iter().filter_map(Value::as_str) {
            if !properties.contains_key(name) {
                here(
                    problems,
                    format!(
                        "{name:?} is required, but additionalProperties is false and properties does not list it; no value can pass"
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    fn problems(schema: Value) -> Vec<String> {
        let mut found = Vec::new();
        check(&schema, "", &mut found);
        found
    }

    #[test]
    fn accepts_ordinary_schemas() {
        assert!(problems(json!({"type": "object", "properties": {"n": {"type": ["integer", "null"], "minimum": 0}}, "required": ["n"]})).is_empty());
        assert!(problems(json!(true)).is_empty());
        assert!(problems(json!({"items": [{"type": "string"}], "x-custom": 1})).is_empty());
    }

    #[test]
    fn names_the_place_of_each_problem() {
        let found = problems(
            json!({"properties": {"a": {"type": "text"}, "b": {"minLength": -1}}, "required": "a"}),
        );
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found.iter().any(|p| p.starts_with("at /properties/a/type")));
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("at /properties/b/minLength"))
        );
        assert!(found.iter().any(|p| p.starts_with("at /required")));
    }

    #[test]
    fn an_unsatisfiable_required_is_reported() {
        let found =
            problems(json!({"properties": {}, "additionalProperties": false, "required": ["x"]}));
        assert_eq!(found.len(), 1);
    }
}
