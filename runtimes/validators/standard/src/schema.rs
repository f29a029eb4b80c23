//! Is a value a JSON Schema? The rules of the dialect's meta-schema
//! (draft 2020-12, or draft-07 when `$schema` names it), keyword by
//! keyword, with the `regex` format of `pattern` and of
//! `patternProperties` names checked as ECMA-262 syntax. Keywords the
//! meta-schema does not list are allowed, as the specification allows them.
//!
//! One check goes beyond the meta-schema: a mapping that requires a
//! property it forbids can never be satisfied.

use rye_guest::serde_json::{Map, Value};

use crate::regex;

/// The JSON Schema dialects whose meta-schemas are known here.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dialect {
    Draft7,
    Draft2020,
}

/// One thing wrong with a schema.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    pub(crate) kind: Kind,
    /// The JSON pointer of the place (`""` for the whole schema).
    pub(crate) at: String,
    /// What is wrong, starting with the place.
    pub(crate) message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The schema breaks its dialect's meta-schema.
    Invalid,
    /// Valid, but no value can pass it.
    Unsatisfiable,
    /// `$schema` names a dialect not checked here; nothing else was checked.
    UnknownDialect,
    /// Subschemas nest deeper than [`MAX_DEPTH`]; those below were not
    /// checked.
    TooDeep,
}

impl Problem {
    fn new(kind: Kind, at: &str, message: impl std::fmt::Display) -> Self {
        let shown = if at.is_empty() {
            "/".into()
        } else {
            crate::short(at)
        };
        Self {
            kind,
            at: at.to_owned(),
            message: format!("at {shown}: {message}"),
        }
    }
}

/// How deeply subschemas are followed. Real config schemas nest a handful
/// of levels; the bound keeps a hostile one from exhausting the stack.
pub(crate) const MAX_DEPTH: usize = 48;

/// Every way `schema` breaks the meta-schema of the dialect its `$schema`
/// names (2020-12 when it names none), each with the JSON pointer of the
/// place.
pub(crate) fn check(schema: &Value) -> Vec<Problem> {
    let mut checker = Checker {
        dialect: Dialect::Draft2020,
        problems: Vec::new(),
        depth: 0,
        too_deep: false,
    };
    match schema.get("$schema").map(|s| s.as_str().map(dialect_of)) {
        None | Some(None) => {}
        Some(Some(Ok(dialect))) => checker.dialect = dialect,
        Some(Some(Err(uri))) => {
            return vec![Problem::new(
                Kind::UnknownDialect,
                "/$schema",
                format!(
                    "{:?} is a dialect this validator does not check; it knows draft 2020-12 ({}) and draft-07 ({})",
                    crate::short(uri),
                    "https://json-schema.org/draft/2020-12/schema",
                    "http://json-schema.org/draft-07/schema#",
                ),
            )];
        }
    }
    checker.schema(schema, "");
    checker.problems
}

/// The dialect a `$schema` URI names.
fn dialect_of(uri: &str) -> Result<Dialect, &str> {
    let bare = uri.trim_end_matches('#');
    let bare = bare
        .strip_prefix("https://")
        .or_else(|| bare.strip_prefix("http://"))
        .unwrap_or(bare);
    match bare {
        "json-schema.org/draft-07/schema" => Ok(Dialect::Draft7),
        "json-schema.org/draft/2020-12/schema" => Ok(Dialect::Draft2020),
        _ => Err(uri),
    }
}

const TYPES: [&str; 7] = [
    "array", "boolean", "integer", "null", "number", "object", "string",
];

/// What a keyword's value must be.
#[derive(Clone, Copy)]
enum Rule {
    /// A schema.
    Schema,
    /// A non-empty list of schemas.
    SchemaList,
    /// A mapping of schemas.
    SchemaMap,
    /// A schema, or (draft-07 `items`) a non-empty list of schemas.
    SchemaOrList,
    /// A mapping whose values are schemas or lists of distinct names.
    Dependencies,
    /// A mapping whose values are lists of distinct names.
    NameListMap,
    /// A list of distinct names.
    NameList,
    /// A type name or a non-empty list of distinct ones.
    Type,
    Number,
    PositiveNumber,
    Count,
    Boolean,
    String,
    List,
    /// A regular expression.
    Pattern,
    /// An anchor name: `^[A-Za-z_][-A-Za-z0-9._]*$`.
    Anchor,
    /// A URI without a non-empty fragment (2020-12 `$id`).
    Id,
    /// A mapping of booleans.
    BooleanMap,
}

/// The rule for `keyword` in `dialect`, or `None` when its meta-schema
/// does not list the keyword.
fn rule(dialect: Dialect, keyword: &str) -> Option<Rule> {
    use Rule::*;
    let common = match keyword {
        "additionalProperties" | "contains" | "propertyNames" | "if" | "then" | "else" | "not" => {
            Schema
        }
        "allOf" | "anyOf" | "oneOf" => SchemaList,
        "properties" | "patternProperties" | "definitions" => SchemaMap,
        "dependencies" => Dependencies,
        "required" => NameList,
        "type" => Type,
        "maximum" | "exclusiveMaximum" | "minimum" | "exclusiveMinimum" => Number,
        "multipleOf" => PositiveNumber,
        "maxLength" | "minLength" | "maxItems" | "minItems" | "maxProperties" | "minProperties" => {
            Count
        }
        "uniqueItems" | "readOnly" => Boolean,
        "title" | "description" | "$comment" | "format" | "contentMediaType"
        | "contentEncoding" | "$schema" | "$ref" => String,
        "enum" | "examples" => List,
        "pattern" => Pattern,
        _ => {
            return match (dialect, keyword) {
                (Dialect::Draft7, "items") => Some(SchemaOrList),
                (Dialect::Draft7, "additionalItems") => Some(Schema),
                (Dialect::Draft7, "$id") => Some(String),
                (Dialect::Draft2020, keyword) => match keyword {
                    "items" | "unevaluatedItems" | "unevaluatedProperties" | "contentSchema" => {
                        Some(Schema)
                    }
                    "prefixItems" => Some(SchemaList),
                    "$defs" | "dependentSchemas" => Some(SchemaMap),
                    "dependentRequired" => Some(NameListMap),
                    "maxContains" | "minContains" => Some(Count),
                    "writeOnly" | "deprecated" => Some(Boolean),
                    "$dynamicRef" | "$recursiveRef" => Some(String),
                    "$anchor" | "$dynamicAnchor" | "$recursiveAnchor" => Some(Anchor),
                    "$id" => Some(Id),
                    "$vocabulary" => Some(BooleanMap),
                    _ => None,
                },
                _ => None,
            };
        }
    };
    Some(common)
}

struct Checker {
    dialect: Dialect,
    problems: Vec<Problem>,
    /// How many subschemas enclose the one being checked.
    depth: usize,
    too_deep: bool,
}

impl Checker {
    fn invalid(&mut self, at: &str, message: String) {
        self.problems.push(Problem::new(Kind::Invalid, at, message));
    }

    fn schema(&mut self, schema: &Value, at: &str) {
        if self.depth >= MAX_DEPTH {
            if !self.too_deep {
                self.too_deep = true;
                self.problems.push(Problem::new(
                    Kind::TooDeep,
                    at,
                    format!(
                        "subschemas nest more than {MAX_DEPTH} levels deep; the ones below were not checked"
                    ),
                ));
            }
            return;
        }
        self.depth += 1;
        self.subschema(schema, at);
        self.depth -= 1;
    }

    fn subschema(&mut self, schema: &Value, at: &str) {
        let object = match schema {
            Value::Bool(_) => return,
            Value::Object(object) => object,
            other => {
                self.invalid(
                    at,
                    format!(
                        "a schema is a mapping or a boolean, not {}",
                        crate::kind_of(other)
                    ),
                );
                return;
            }
        };
        for (keyword, value) in object {
            if let Some(rule) = rule(self.dialect, keyword) {
                let path = format!("{at}/{}", escape(keyword));
                self.keyword(keyword, rule, value, &path);
            }
        }
        self.satisfiable(object, at);
    }

    fn keyword(&mut self, keyword: &str, rule: Rule, value: &Value, at: &str) {
        match rule {
            Rule::Schema if keyword == "items" && value.is_array() => self.invalid(
                at,
                "in draft 2020-12 items is one schema; a list of schemas is prefixItems (or name draft-07 in $schema)".into(),
            ),
            Rule::Schema => self.schema(value, at),
            Rule::SchemaList => self.schema_list(keyword, value, at),
            Rule::SchemaOrList => match value {
                Value::Array(_) => self.schema_list(keyword, value, at),
                other => self.schema(other, at),
            },
            Rule::SchemaMap => {
                let Some(map) = self.mapping(keyword, value, at) else {
                    return;
                };
                for (name, sub) in map {
                    if keyword == "patternProperties"
                        && let Err(why) = regex::check(name)
                    {
                        self.invalid(
                            at,
                            format!(
                                "property pattern {:?} is not an ECMA-262 regular expression: {why}",
                                crate::short(name)
                            ),
                        );
                    }
                    self.schema(sub, &format!("{at}/{}", escape(name)));
                }
            }
            Rule::Dependencies => {
                let Some(map) = self.mapping(keyword, value, at) else {
                    return;
                };
                for (name, sub) in map {
                    let at = format!("{at}/{}", escape(name));
                    match sub {
                        Value::Array(_) => self.names(sub, &at),
                        _ => self.schema(sub, &at),
                    }
                }
            }
            Rule::NameListMap => {
                let Some(map) = self.mapping(keyword, value, at) else {
                    return;
                };
                for (name, names) in map {
                    self.names(names, &format!("{at}/{}", escape(name)));
                }
            }
            Rule::NameList => self.names(value, at),
            Rule::Type => {
                let valid = match value {
                    Value::String(t) => TYPES.contains(&t.as_str()),
                    Value::Array(list) => {
                        !list.is_empty()
                            && list
                                .iter()
                                .all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t)))
                            && distinct(list)
                    }
                    _ => false,
                };
                if !valid {
                    self.invalid(
                        at,
                        format!(
                            "type is {value}; it must be one of {} or a list of distinct ones",
                            TYPES.join(", ")
                        ),
                    );
                }
            }
            Rule::Number => {
                if !value.is_number() {
                    self.invalid(at, format!("{keyword} must be a number, not {value}"));
                }
            }
            Rule::PositiveNumber => {
                if !value.as_f64().is_some_and(|n| n > 0.0) {
                    self.invalid(
                        at,
                        format!("{keyword} must be a number above 0, not {value}"),
                    );
                }
            }
            Rule::Count => {
                let whole = value.is_u64()
                    || value
                        .as_f64()
                        .is_some_and(|n| n >= 0.0 && n.fract() == 0.0);
                if !whole {
                    self.invalid(
                        at,
                        format!("{keyword} must be a whole number of at least 0, not {value}"),
                    );
                }
            }
            Rule::Boolean => {
                if !value.is_boolean() {
                    self.invalid(
                        at,
                        format!("{keyword} must be true or false, not {value}"),
                    );
                }
            }
            Rule::String => {
                if !value.is_string() {
                    self.invalid(at, format!("{keyword} must be a string, not {value}"));
                }
            }
            Rule::List => {
                if !value.is_array() {
                    self.invalid(at, format!("{keyword} must be a list, not {value}"));
                }
            }
            Rule::Pattern => match value.as_str() {
                None => self.invalid(at, format!("pattern must be a string, not {value}")),
                Some(pattern) => {
                    if let Err(why) = regex::check(pattern) {
                        self.invalid(
                            at,
                            format!(
                                "pattern {:?} is not an ECMA-262 regular expression: {why}",
                                crate::short(pattern)
                            ),
                        );
                    }
                }
            },
            Rule::Anchor => {
                let valid = value.as_str().is_some_and(|name| {
                    let mut chars = name.chars();
                    chars
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                        && chars.all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
                });
                if !valid {
                    self.invalid(
                        at,
                        format!(
                            "{keyword} must be a name of letters, digits, '-', '.' and '_' starting with a letter or '_', not {value}"
                        ),
                    );
                }
            }
            Rule::Id => match value.as_str() {
                None => self.invalid(at, format!("$id must be a string, not {value}")),
                Some(id) => {
                    if id.find('#').is_some_and(|hash| hash + 1 < id.len()) {
                        self.invalid(
                            at,
                            format!("$id {id:?} has a fragment; name an anchor with $anchor instead"),
                        );
                    }
                }
            },
            Rule::BooleanMap => {
                let Some(map) = self.mapping(keyword, value, at) else {
                    return;
                };
                for (name, flag) in map {
                    if !flag.is_boolean() {
                        self.invalid(
                            &format!("{at}/{}", escape(name)),
                            format!("{keyword} values must be true or false, not {flag}"),
                        );
                    }
                }
            }
        }
    }

    fn mapping<'v>(
        &mut self,
        keyword: &str,
        value: &'v Value,
        at: &str,
    ) -> Option<&'v Map<String, Value>> {
        let map = value.as_object();
        if map.is_none() {
            self.invalid(
                at,
                format!("{keyword} is {}, not a mapping", crate::kind_of(value)),
            );
        }
        map
    }

    fn schema_list(&mut self, keyword: &str, value: &Value, at: &str) {
        match value {
            Value::Array(list) if !list.is_empty() => {
                for (i, sub) in list.iter().enumerate() {
                    self.schema(sub, &format!("{at}/{i}"));
                }
            }
            _ => self.invalid(at, format!("{keyword} must be a non-empty list of schemas")),
        }
    }

    /// A list of distinct property names.
    fn names(&mut self, value: &Value, at: &str) {
        match value {
            Value::Array(list) if list.iter().all(Value::is_string) => {
                if !distinct(list) {
                    self.invalid(at, "names a property twice".into());
                }
            }
            _ => self.invalid(at, format!("must be a list of property names, not {value}")),
        }
    }

    /// A mapping that requires a property its `additionalProperties: false`
    /// forbids can never be satisfied.
    fn satisfiable(&mut self, object: &Map<String, Value>, at: &str) {
        let (Some(Value::Array(required)), Some(Value::Bool(false))) =
            (object.get("required"), object.get("additionalProperties"))
        else {
            return;
        };
        let listed = |name: &str| {
            object
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|p| p.contains_key(name))
                || object
                    .get("patternProperties")
                    .and_then(Value::as_object)
                    .is_some_and(|p| !p.is_empty())
        };
        for name in required.iter().filter_map(Value::as_str) {
            if !listed(name) {
                self.problems.push(Problem::new(
                    Kind::Unsatisfiable,
                    at,
                    format!(
                        "{name:?} is required, but additionalProperties is false and properties does not list it; no value can pass"
                    ),
                ));
            }
        }
    }
}

/// Whether the values of `list` differ from each other.
fn distinct(list: &[Value]) -> bool {
    let mut seen = std::collections::BTreeSet::new();
    list.iter().all(|v| seen.insert(v.to_string()))
}

/// A name as a JSON pointer token.
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    fn invalid(schema: Value) -> Vec<String> {
        check(&schema)
            .into_iter()
            .filter_map(|p| match p {
                Problem {
                    kind: Kind::Invalid,
                    message,
                    ..
                } => Some(message),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn accepts_ordinary_schemas() {
        assert!(invalid(json!({"type": "object", "properties": {"n": {"type": ["integer", "null"], "minimum": 0, "maxLength": 2.0}}, "required": ["n"]})).is_empty());
        assert!(invalid(json!(true)).is_empty());
        assert!(invalid(json!({"prefixItems": [{"type": "string"}], "x-custom": 1})).is_empty());
        assert!(
            invalid(json!({"properties": {"id": {"pattern": "^(?:[a-z]+-)*\\d{2,4}$"}}}))
                .is_empty()
        );
    }

    #[test]
    fn names_the_place_of_each_problem() {
        let found = invalid(json!({
            "properties": {"a": {"type": "text"}, "b/c": {"minLength": -1}, "d": {"pattern": "(x"}},
            "required": "a",
        }));
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found.iter().any(|p| p.starts_with("at /properties/a/type")));
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("at /properties/b~1c/minLength"))
        );
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("at /properties/d/pattern"))
        );
        assert!(found.iter().any(|p| p.starts_with("at /required")));
    }

    #[test]
    fn the_dialect_decides_what_items_may_be() {
        let list = json!({"items": [{"type": "string"}]});
        assert_eq!(invalid(list.clone()).len(), 1);
        let mut draft7 = list;
        draft7["$schema"] = json!("http://json-schema.org/draft-07/schema#");
        assert!(invalid(draft7).is_empty());
        // Draft-07 does not know $defs, so does not check inside it.
        assert!(invalid(json!({"$schema": "http://json-schema.org/draft-07/schema", "$defs": {"a": {"type": 1}}})).is_empty());
        assert_eq!(invalid(json!({"$defs": {"a": {"type": 1}}})).len(), 1);
    }

    #[test]
    fn nesting_past_the_bound_is_said_once_and_not_followed() {
        let mut schema = json!({"type": 5});
        for _ in 0..MAX_DEPTH + 10 {
            schema = json!({ "not": schema });
        }
        let found = check(&schema);
        assert!(
            matches!(
                found.as_slice(),
                [Problem {
                    kind: Kind::TooDeep,
                    ..
                }]
            ),
            "{found:?}"
        );
    }

    #[test]
    fn an_unknown_dialect_is_said_and_not_checked() {
        let found =
            check(&json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": 5}));
        assert!(
            matches!(
                found.as_slice(),
                [Problem {
                    kind: Kind::UnknownDialect,
                    ..
                }]
            ),
            "{found:?}"
        );
    }

    #[test]
    fn an_unsatisfiable_required_is_reported() {
        let found =
            check(&json!({"properties": {}, "additionalProperties": false, "required": ["x"]}));
        assert!(
            matches!(
                found.as_slice(),
                [Problem {
                    kind: Kind::Unsatisfiable,
                    ..
                }]
            ),
            "{found:?}"
        );
    }
}
