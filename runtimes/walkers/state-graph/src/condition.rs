//! The condition language of edges (`when`) and hooks (`condition`).
//!
//! `{}` is true; `{any: [...]}`, `{all: [...]}` and `{not: {...}}` combine;
//! a leaf `{path, op, value}` compares the value at `path` in the document
//! with `value`. Operators: `eq` (the default), `ne` (also `neq`), `gt`,
//! `gte`, `lt`, `lte` (false when either side is no number or string of
//! the same kind, or the path has no value), `in` (`value` is a list
//! holding the actual value), `contains` (`value` is text inside the
//! actual value as text), `regex` (the pattern matches somewhere in the
//! actual value as text) and `exists` (the path has a value, `null`
//! counting as none). An unknown operator, or a `regex` that does not
//! compile, is false.

use std::cmp::Ordering;

use rye_guest::serde_json::Value;

use crate::template::{as_text, lookup};

/// Whether `condition` holds for `document`.
pub fn holds(condition: &Value, document: &Value) -> bool {
    let Value::Object(map) = condition else {
        // A bare `true`/`false` reads as itself; anything else is no
        // condition the language has.
        return condition.as_bool().unwrap_or(false);
    };
    if map.is_empty() {
        return true;
    }
    if let Some(any) = map.get("any") {
        return any
            .as_array()
            .is_some_and(|c| c.iter().any(|c| holds(c, document)));
    }
    if let Some(all) = map.get("all") {
        return all
            .as_array()
            .is_some_and(|c| c.iter().all(|c| holds(c, document)));
    }
    if let Some(not) = map.get("not") {
        return !holds(not, document);
    }
    let Some(path) = map.get("path").and_then(Value::as_str) else {
        return false;
    };
    let actual = lookup(path, document).filter(|v| !v.is_null());
    let expected = map.get("value").unwrap_or(&Value::Null);
    let op = map.get("op").and_then(Value::as_str).unwrap_or("eq");
    compare(op, actual, expected)
}

/// `op` applied to the actual value (`None`: the path has none).
pub fn compare(op: &str, actual: Option<&Value>, expected: &Value) -> bool {
    match op {
        "eq" => equal(actual.unwrap_or(&Value::Null), expected),
        "ne" | "neq" => !equal(actual.unwrap_or(&Value::Null), expected),
        "gt" => order(actual, expected) == Some(Ordering::Greater),
        "gte" => matches!(
            order(actual, expected),
            Some(Ordering::Greater | Ordering::Equal)
        ),
        "lt" => order(actual, expected) == Some(Ordering::Less),
        "lte" => matches!(
            order(actual, expected),
            Some(Ordering::Less | Ordering::Equal)
        ),
        "in" => expected.as_array().is_some_and(|list| {
            list.iter()
                .any(|v| equal(actual.unwrap_or(&Value::Null), v))
        }),
        "contains" => match actual {
            Some(Value::Array(items)) => items.iter().any(|v| equal(v, expected)),
            Some(value) => as_text(Some(value)).contains(&as_text(Some(expected))),
            None => false,
        },
        "regex" => {
            let (Some(value), Some(pattern)) = (actual, expected.as_str()) else {
                return false;
            };
            regex_lite::Regex::new(pattern).is_ok_and(|re| re.is_match(&as_text(Some(value))))
        }
        "exists" => actual.is_some(),
        _ => false,
    }
}

/// Equality as JSON values, numbers by value (`1` equals `1.0`).
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn order(actual: Option<&Value>, expected: &Value) -> Option<Ordering> {
    match (actual?, expected) {
        (Value::Number(a), Value::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    fn doc() -> Value {
        json!({"state": {"n": 5, "name": "ada", "tags": ["x", "y"], "none": null, "lines": "120\n"},
               "result": {"status": "ok"}})
    }

    fn leaf(path: &str, op: &str, value: Value) -> bool {
        holds(&json!({"path": path, "op": op, "value": value}), &doc())
    }

    #[test]
    fn every_operator() {
        assert!(leaf("state.n", "eq", json!(5)));
        assert!(leaf("state.n", "eq", json!(5.0)));
        assert!(holds(
            &json!({"path": "state.name", "value": "ada"}),
            &doc()
        ));
        assert!(leaf("state.n", "ne", json!(4)));
        assert!(leaf("state.n", "neq", json!(4)));
        assert!(!leaf("state.n", "neq", json!(5)));
        assert!(leaf("state.n", "gt", json!(4)) && !leaf("state.n", "gt", json!(5)));
        assert!(leaf("state.n", "gte", json!(5)) && !leaf("state.n", "gte", json!(6)));
        assert!(leaf("state.n", "lt", json!(6)) && !leaf("state.n", "lt", json!(5)));
        assert!(leaf("state.n", "lte", json!(5)) && !leaf("state.n", "lte", json!(4)));
        assert!(leaf("state.name", "gt", json!("abc")));
        assert!(!leaf("state.none", "lt", json!(1)), "nothing orders");
        assert!(
            !leaf("state.name", "gt", json!(1)),
            "text and numbers do not order"
        );
        assert!(leaf("state.name", "in", json!(["bob", "ada"])));
        assert!(!leaf("state.name", "in", json!("ada")), "in needs a list");
        assert!(leaf("state.name", "contains", json!("d")));
        assert!(leaf("state.tags", "contains", json!("y")));
        assert!(leaf("state.lines", "regex", json!("^[0-9]{3,}")));
        assert!(
            !leaf("state.lines", "regex", json!("(")),
            "a bad pattern is false"
        );
        assert!(leaf("state.n", "exists", Value::Null));
        assert!(!leaf("state.none", "exists", Value::Null));
        assert!(!leaf("state.missing", "exists", Value::Null));
        assert!(!leaf("state.n", "approximately", json!(5)));
    }

    #[test]
    fn combinations() {
        assert!(holds(&json!({}), &doc()));
        let yes = json!({"path": "state.n", "value": 5});
        let no = json!({"path": "state.n", "value": 6});
        assert!(holds(&json!({"any": [no, yes]}), &doc()));
        assert!(!holds(&json!({"all": [yes, no]}), &doc()));
        assert!(holds(&json!({"not": no}), &doc()));
        assert!(!holds(&json!({"any": []}), &doc()));
        assert!(holds(&json!({"all": []}), &doc()));
        assert!(!holds(&json!({"any": "nope"}), &doc()));
        assert!(!holds(&json!({"op": "eq"}), &doc()), "a leaf needs a path");
    }
}
