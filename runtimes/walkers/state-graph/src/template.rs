//! Templates in a graph's own strings.
//!
//! - `${expr}` takes a value from the context. A string that is exactly
//!   one `${expr}` takes the value with its type; inside longer text a
//!   string goes in as it is, nothing (`null`, or no value) as the empty
//!   string, and any other value as JSON.
//! - `expr` is `alternative [|| alternative …] [| pipe …]`: the first
//!   alternative with a value wins, then the pipes apply in order (none of
//!   them to nothing). An alternative is a path (`state.items[0].name`,
//!   `inputs.path`, `result.stdout`, `_now`) or a literal: a quoted string
//!   (`'none'`, `"none"`), a number, `true`, `false` or `null`.
//! - Pipes: `json`, `from_json`, `length` (nothing counts 0), `keys`,
//!   `upper`, `lower`. An unknown pipe leaves the value as it is.
//! - `{input:name}` takes the run's input `name`; `{input:name?}` is empty
//!   when it is missing, `{input:name:default}` and `{input:name|default}`
//!   fall back to the text after the mark. A missing input with no
//!   fallback leaves the reference as written.
//!
//! The text is read once, left to right: what a template puts in (a
//! caller's input, a tool's output) is data and never read as a template.

use rye_guest::serde_json::{self, Map, Value};

/// `value` with every template in its strings filled from `context`.
pub fn fill(value: &Value, context: &Value) -> Value {
    match value {
        Value::String(text) => fill_text(text, context),
        Value::Array(items) => Value::Array(items.iter().map(|v| fill(v, context)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill(v, context)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// One string filled: a lone `${expr}` or `{input:…}` keeps its value's
/// type; anything else is text.
pub fn fill_text(text: &str, context: &Value) -> Value {
    if !text.contains("${") && !text.contains("{input:") {
        return Value::String(text.to_owned());
    }
    if let Some(expr) = lone(text, "${", "}") {
        return evaluate(expr, context).unwrap_or(Value::Null);
    }
    if let Some(reference) = lone(text, "{input:", "}")
        && let Some(value) = input(reference, context)
    {
        return value;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let dollar = rest.find("${");
        let input_ref = rest.find("{input:");
        let (at, is_expr) = match (dollar, input_ref) {
            (Some(d), Some(i)) if i < d => (i, false),
            (Some(d), _) => (d, true),
            (None, Some(i)) => (i, false),
            (None, None) => break,
        };
        out.push_str(&rest[..at]);
        let open = if is_expr { 2 } else { "{input:".len() };
        let after = &rest[at + open..];
        let Some(end) = closing(after) else {
            out.push_str(&rest[at..]);
            return Value::String(out);
        };
        let inner = &after[..end];
        if is_expr {
            out.push_str(&as_text(evaluate(inner, context).as_ref()));
        } else {
            match input(inner, context) {
                Some(value) => out.push_str(&as_text(Some(&value))),
                None => out.push_str(&rest[at..at + open + end + 1]),
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Value::String(out)
}

/// The inside of `text` when it is exactly one `open … }`.
fn lone<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let inner = text.strip_prefix(open)?;
    let end = closing(inner)?;
    (end + close.len() == inner.len()).then(|| &inner[..end])
}

/// Where the template that starts `text` ends: its `}`, skipping quoted
/// literals so `${state.x || '}'}` reads whole.
fn closing(text: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in text.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '}' => return Some(i),
            None => {}
        }
    }
    None
}

/// A value as text inside a longer string.
pub fn as_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// An `{input:…}` reference's value, or `None` to leave it as written.
fn input(reference: &str, context: &Value) -> Option<Value> {
    let inputs = context.get("inputs");
    let (name, fallback) = if let Some(name) = reference.strip_suffix('?') {
        (name, Some(""))
    } else if let Some(cut) = reference.find([':', '|']) {
        (&reference[..cut], Some(&reference[cut + 1..]))
    } else {
        (reference, None)
    };
    match inputs.and_then(|i| i.get(name.trim())) {
        Some(value) if !value.is_null() => Some(value.clone()),
        _ => fallback.map(|f| Value::String(f.to_owned())),
    }
}

/// The value of `expr` in `context`, or `None`.
pub fn evaluate(expr: &str, context: &Value) -> Option<Value> {
    let mut parts = split_pipes(expr).into_iter();
    let alternatives = parts.next().unwrap_or_default();
    let mut value = alternatives
        .split("||")
        .find_map(|alternative| alternative_value(alternative.trim(), context))?;
    for pipe in parts {
        value = apply_pipe(pipe.trim(), value);
    }
    Some(value)
}

/// `expr` cut at each single `|` (not `||`, not inside quotes).
fn split_pipes(expr: &str) -> Vec<&str> {
    let bytes = expr.as_bytes();
    let mut parts = Vec::new();
    let (mut start, mut i) = (0, 0);
    let mut quote: Option<u8> = None;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None if b == b'|' => {
                if bytes.get(i + 1) == Some(&b'|') {
                    i += 2;
                    continue;
                }
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            None => {}
        }
        i += 1;
    }
    parts.push(&expr[start..]);
    parts
}

/// A literal's value, or a path's (`None` when it has none).
fn alternative_value(text: &str, context: &Value) -> Option<Value> {
    if text.len() >= 2
        && ((text.starts_with('\'') && text.ends_with('\''))
            || (text.starts_with('"') && text.ends_with('"')))
    {
        return Some(Value::String(text[1..text.len() - 1].to_owned()));
    }
    match text {
        "true" => return Some(Value::Bool(true)),
        "false" => return Some(Value::Bool(false)),
        "null" => return None,
        _ => {}
    }
    if text.starts_with(|c: char| c.is_ascii_digit() || c == '-')
        && let Ok(number) = serde_json::from_str::<serde_json::Number>(text)
    {
        return Some(Value::Number(number));
    }
    lookup(text, context).filter(|v| !v.is_null()).cloned()
}

/// The value at `path` (`a.b[0].c`) in `context`; the empty path is the
/// whole context.
pub fn lookup<'a>(path: &str, context: &'a Value) -> Option<&'a Value> {
    let mut current = context;
    let path = path.trim();
    if path.is_empty() {
        return Some(current);
    }
    for segment in path.split(['.', '[']) {
        let segment = segment.trim_end_matches(']');
        if segment.is_empty() {
            continue;
        }
        current = match current {
            Value::Object(map) => map.get(segment)?,
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(current)
}

fn apply_pipe(pipe: &str, value: Value) -> Value {
    match pipe {
        "json" => Value::String(value.to_string()),
        "from_json" => match &value {
            Value::String(text) => serde_json::from_str(text).unwrap_or(value),
            _ => value,
        },
        "length" => Value::from(match &value {
            Value::String(s) => s.chars().count(),
            Value::Array(items) => items.len(),
            Value::Object(map) => map.len(),
            Value::Null => 0,
            _ => 0,
        }),
        "keys" => match &value {
            Value::Object(map) => Value::Array(map.keys().cloned().map(Value::String).collect()),
            _ => Value::Array(Vec::new()),
        },
        "upper" => match &value {
            Value::String(s) => Value::String(s.to_uppercase()),
            _ => value,
        },
        "lower" => match &value {
            Value::String(s) => Value::String(s.to_lowercase()),
            _ => value,
        },
        _ => value,
    }
}

/// Removes `null` members of objects, at every depth: a tool's own
/// default applies to what a template left empty. Lists keep their
/// places.
pub fn drop_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, drop_nulls(v)))
                .collect::<Map<_, _>>(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(drop_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    fn context() -> Value {
        json!({
            "state": {"n": 3, "name": "ada", "items": [{"id": "a"}, {"id": "b"}], "none": null,
                      "doc": "{\"k\": 1}"},
            "inputs": {"path": "README.md", "count": 2},
        })
    }

    #[test]
    fn a_lone_template_keeps_the_type() {
        let c = context();
        assert_eq!(fill_text("${state.n}", &c), json!(3));
        assert_eq!(
            fill_text("${state.items}", &c),
            json!([{"id": "a"}, {"id": "b"}])
        );
        assert_eq!(fill_text("${state.items[1].id}", &c), json!("b"));
        assert_eq!(fill_text("${state.missing}", &c), Value::Null);
        assert_eq!(fill_text("{input:count}", &c), json!(2));
    }

    #[test]
    fn text_takes_strings_as_they_are_and_the_rest_as_json() {
        let c = context();
        assert_eq!(
            fill_text("n=${state.n}, who=${state.name}", &c),
            json!("n=3, who=ada")
        );
        assert_eq!(fill_text("[${state.none}]", &c), json!("[]"));
        assert_eq!(
            fill_text("x ${state.items[0]}", &c),
            json!("x {\"id\":\"a\"}")
        );
        assert_eq!(
            fill_text("wc -l < {input:path}", &c),
            json!("wc -l < README.md")
        );
    }

    #[test]
    fn fallbacks_then_pipes() {
        let c = context();
        assert_eq!(
            fill_text("${state.none || state.name | upper}", &c),
            json!("ADA")
        );
        assert_eq!(fill_text("${state.missing || 'none'}", &c), json!("none"));
        assert_eq!(fill_text("${state.missing || 7}", &c), json!(7));
        assert_eq!(fill_text("${state.items | length}", &c), json!(2));
        assert_eq!(fill_text("${state.missing | length}", &c), Value::Null);
        assert_eq!(fill_text("${state.doc | from_json}", &c), json!({"k": 1}));
        assert_eq!(
            fill_text("${state.items[0] | json}", &c),
            json!("{\"id\":\"a\"}")
        );
        assert_eq!(fill_text("${state.items[0] | keys}", &c), json!(["id"]));
        assert_eq!(fill_text("${state.name | nonsense}", &c), json!("ada"));
        assert_eq!(fill_text("${state.missing || '}'}", &c), json!("}"));
    }

    #[test]
    fn input_references_and_their_fallbacks() {
        let c = context();
        assert_eq!(fill_text("a{input:nope?}b", &c), json!("ab"));
        assert_eq!(fill_text("{input:nope:x}", &c), json!("x"));
        assert_eq!(fill_text("{input:nope|y}", &c), json!("y"));
        assert_eq!(
            fill_text("keep {input:nope}", &c),
            json!("keep {input:nope}")
        );
    }

    #[test]
    fn what_a_template_puts_in_is_never_read_again() {
        let c = json!({"inputs": {"evil": "${state.secret} {input:other}", "other": "no"},
                       "state": {"secret": "s3cret"}});
        assert_eq!(
            fill_text("say ${inputs.evil}", &c),
            json!("say ${state.secret} {input:other}")
        );
        assert_eq!(
            fill_text("say {input:evil}", &c),
            json!("say ${state.secret} {input:other}")
        );
    }

    #[test]
    fn unclosed_templates_stay_text() {
        let c = context();
        assert_eq!(fill_text("cost ${state.n", &c), json!("cost ${state.n"));
        assert_eq!(fill_text("{ \"a\": 1 }", &c), json!("{ \"a\": 1 }"));
    }

    #[test]
    fn nulls_are_dropped_at_every_depth() {
        assert_eq!(
            drop_nulls(json!({"a": null, "b": {"c": null, "d": 1}, "e": [null, 2]})),
            json!({"b": {"d": 1}, "e": [null, 2]})
        );
    }
}
