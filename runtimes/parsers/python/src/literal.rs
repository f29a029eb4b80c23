//! Python literal expressions, as `ast.literal_eval` accepts them, and
//! their JSON form.

use std::collections::{BTreeMap, BTreeSet};

use rye_guest::serde_json::{Map, Number, Value};

use crate::lexer::{StrValue, Tok, Token};

/// Why an expression was not extracted.
#[derive(Debug, PartialEq)]
pub enum Rejection {
    /// Not a literal at all (a name, a call, an operator…). Python's own
    /// metadata readers skip these too.
    NotLiteral,
    /// A literal with no JSON form (bytes, complex, too large…).
    NoJsonForm(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Lit {
    Str(String),
    Int {
        negative: bool,
        magnitude: u128,
    },
    Float(f64),
    Bool(bool),
    None,
    List(Vec<Lit>),
    Tuple(Vec<Lit>),
    Set(Vec<Lit>),
    Dict(Vec<(Lit, Lit)>),
    /// Valid Python literal, but with no JSON form; the reason says why.
    Opaque(String),
}

/// How deeply containers may nest. CPython's own parser stops near 200;
/// metadata never comes close, and the bound keeps the component's stack
/// small.
pub const MAX_DEPTH: usize = 100;

/// Parses `tokens` as one literal expression (a bare tuple included) and
/// returns its JSON value.
pub fn evaluate(tokens: &[Token]) -> Result<Value, Rejection> {
    let mut p = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let lit = p.expr_list()?;
    if p.pos != tokens.len() {
        return Err(Rejection::NotLiteral);
    }
    to_json(lit)
}

struct Parser<'t> {
    tokens: &'t [Token],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|t| &t.tok)
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Some(Tok::Op(o)) if *o == op)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        let hit = self.is_op(op);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expect_op(&mut self, op: &str) -> Result<(), Rejection> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(Rejection::NotLiteral)
        }
    }

    /// `expr (',' expr)* [',']`: more than one element, or a trailing
    /// comma, makes a tuple.
    fn expr_list(&mut self) -> Result<Lit, Rejection> {
        let first = self.expr()?;
        if !self.is_op(",") {
            return Ok(first);
        }
        let mut items = vec![first];
        while self.eat_op(",") {
            if self.at_sequence_end() {
                break;
            }
            items.push(self.expr()?);
        }
        Ok(Lit::Tuple(items))
    }

    fn at_sequence_end(&self) -> bool {
        self.peek().is_none() || self.is_op(")") || self.is_op("]") || self.is_op("}")
    }

    /// A signed number, optionally `± imaginary` (a complex literal), or
    /// any other atom.
    fn expr(&mut self) -> Result<Lit, Rejection> {
        let negative = if self.eat_op("-") {
            Some(true)
        } else if self.eat_op("+") {
            Some(false)
        } else {
            None
        };
        // Python accepts a sign only directly on a number: `-(1)` but not
        // `-(-1)` or `-True`.
        if negative.is_some() && !self.number_follows() {
            return Err(Rejection::NotLiteral);
        }
        let atom = self.atom()?;
        let value = match negative {
            Some(neg) => match atom {
                Lit::Int {
                    negative,
                    magnitude,
                } => Lit::Int {
                    negative: negative ^ neg,
                    magnitude,
                },
                Lit::Float(f) => Lit::Float(if neg { -f } else { f }),
                Lit::Opaque(reason) if reason.starts_with("complex") => Lit::Opaque(reason),
                _ => return Err(Rejection::NotLiteral),
            },
            None => atom,
        };
        // `1 + 2j` and `-1 - 2j` are complex literals; any other operator is
        // an expression.
        if (self.is_op("+") || self.is_op("-")) && matches!(value, Lit::Int { .. } | Lit::Float(_))
        {
            self.pos += 1;
            return match self.atom()? {
                Lit::Opaque(reason) if reason.starts_with("complex") => Ok(Lit::Opaque(reason)),
                _ => Err(Rejection::NotLiteral),
            };
        }
        Ok(value)
    }

    fn number_follows(&self) -> bool {
        let parens = self.tokens[self.pos..]
            .iter()
            .take_while(|t| t.tok == Tok::Op("("))
            .count();
        matches!(
            self.tokens.get(self.pos + parens).map(|t| &t.tok),
            Some(Tok::Number(_))
        )
    }

    fn atom(&mut self) -> Result<Lit, Rejection> {
        self.depth += 1;
        let result = self.atom_inner();
        self.depth -= 1;
        result
    }

    fn atom_inner(&mut self) -> Result<Lit, Rejection> {
        if self.depth > MAX_DEPTH {
            return Err(Rejection::NoJsonForm(format!(
                "it nests more than {MAX_DEPTH} levels deep"
            )));
        }
        let tokens = self.tokens;
        let Some(token) = tokens.get(self.pos) else {
            return Err(Rejection::NotLiteral);
        };
        self.pos += 1;
        match &token.tok {
            Tok::Str(first) => self.strings(first),
            Tok::Number(text) => Ok(number(text)),
            Tok::Name(name) => match name.as_str() {
                "True" => Ok(Lit::Bool(true)),
                "False" => Ok(Lit::Bool(false)),
                "None" => Ok(Lit::None),
                "set" if self.is_op("(") => {
                    self.pos += 1;
                    self.expect_op(")")?;
                    Ok(Lit::Set(Vec::new()))
                }
                _ => Err(Rejection::NotLiteral),
            },
            Tok::Op("(") => {
                if self.eat_op(")") {
                    return Ok(Lit::Tuple(Vec::new()));
                }
                let inner = self.expr_list()?;
                self.expect_op(")")?;
                Ok(inner)
            }
            Tok::Op("[") => {
                let items = self.elements("]")?;
                Ok(Lit::List(items))
            }
            Tok::Op("{") => self.brace(),
            Tok::Op(_) => Err(Rejection::NotLiteral),
        }
    }

    /// Adjacent string literals concatenate; mixing text and bytes is an
    /// error in Python, and any f-string makes the whole an expression.
    fn strings(&mut self, first: &StrValue) -> Result<Lit, Rejection> {
        let tokens = self.tokens;
        let start = self.pos - 1;
        while let Some(Tok::Str(_)) = self.peek() {
            self.pos += 1;
        }
        let parts = tokens[start..self.pos].iter().map(|t| match &t.tok {
            Tok::Str(value) => value,
            _ => unreachable!("only strings were taken"),
        });
        if parts.clone().any(|p| *p == StrValue::Formatted) {
            return Err(Rejection::NotLiteral);
        }
        let bytes = parts.clone().filter(|p| **p == StrValue::Bytes).count();
        if bytes == self.pos - start {
            return Ok(Lit::Opaque("bytes have no JSON form".into()));
        }
        if bytes > 0 {
            return Err(Rejection::NotLiteral);
        }
        if self.pos - start == 1
            && let StrValue::Text(s) = first
        {
            return Ok(Lit::Str(s.clone()));
        }
        let mut text = String::new();
        for part in parts {
            match part {
                StrValue::Text(s) => text.push_str(s),
                StrValue::Unsupported(reason) => return Ok(Lit::Opaque(reason.clone())),
                StrValue::Bytes | StrValue::Formatted => unreachable!("handled above"),
            }
        }
        Ok(Lit::Str(text))
    }

    fn elements(&mut self, close: &str) -> Result<Vec<Lit>, Rejection> {
        let mut items = Vec::new();
        loop {
            if self.eat_op(close) {
                return Ok(items);
            }
            items.push(self.expr()?);
            if !self.eat_op(",") {
                self.expect_op(close)?;
                return Ok(items);
            }
        }
    }

    fn brace(&mut self) -> Result<Lit, Rejection> {
        if self.eat_op("}") {
            return Ok(Lit::Dict(Vec::new()));
        }
        let first = self.expr()?;
        if !self.eat_op(":") {
            let mut items = vec![first];
            if self.eat_op(",") {
                items.extend(self.elements("}")?);
            } else {
                self.expect_op("}")?;
            }
            return Ok(Lit::Set(items));
        }
        let mut pairs = vec![(first, self.expr()?)];
        loop {
            if self.eat_op("}") {
                return Ok(Lit::Dict(pairs));
            }
            self.expect_op(",")?;
            if self.eat_op("}") {
                return Ok(Lit::Dict(pairs));
            }
            let key = self.expr()?;
            self.expect_op(":")?;
            pairs.push((key, self.expr()?));
        }
    }
}

fn number(text: &str) -> Lit {
    let clean: String = text.chars().filter(|c| *c != '_').collect();
    let lower = clean.to_ascii_lowercase();
    if lower.ends_with('j') {
        return Lit::Opaque("complex numbers have no JSON form".into());
    }
    let radix = match lower.get(..2) {
        Some("0x") => Some(16),
        Some("0o") => Some(8),
        Some("0b") => Some(2),
        _ => None,
    };
    if let Some(radix) = radix {
        return int(&lower[2..], radix);
    }
    if lower.contains(['.', 'e']) {
        return match lower.parse::<f64>() {
            Ok(f) if f.is_finite() => Lit::Float(f),
            _ => Lit::Opaque(format!("{text} is not a finite JSON number")),
        };
    }
    int(&lower, 10)
}

fn int(digits: &str, radix: u32) -> Lit {
    match u128::from_str_radix(digits, radix) {
        Ok(magnitude) => Lit::Int {
            negative: false,
            magnitude,
        },
        Err(_) => Lit::Opaque("integer too large for JSON".into()),
    }
}

fn to_json(lit: Lit) -> Result<Value, Rejection> {
    Ok(match lit {
        Lit::Str(s) => Value::String(s),
        Lit::Int {
            negative,
            magnitude,
        } => int_json(negative, magnitude)?,
        Lit::Float(f) => Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| Rejection::NoJsonForm(format!("{f} is not a finite JSON number")))?,
        Lit::Bool(b) => Value::Bool(b),
        Lit::None => Value::Null,
        Lit::List(items) | Lit::Tuple(items) => {
            Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?)
        }
        Lit::Set(items) => {
            // Python keeps the first of equal elements (`{1, True}` is `{1}`).
            let mut seen = BTreeSet::new();
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let canon = canon(&item).ok_or(Rejection::NotLiteral)?;
                if seen.insert(canon) {
                    out.push(to_json(item)?);
                }
            }
            Value::Array(out)
        }
        Lit::Dict(pairs) => {
            // Equal keys (`1` and `True`) are one entry: the first key's
            // spelling with the last value, as in a Python dict.
            let mut keys: BTreeMap<Canon, String> = BTreeMap::new();
            let mut map = Map::with_capacity(pairs.len());
            for (key, value) in pairs {
                let canon = canon(&key).ok_or(Rejection::NotLiteral)?;
                let name = match keys.get(&canon) {
                    Some(name) => name.clone(),
                    None => {
                        let name = key_json(key)?;
                        keys.insert(canon, name.clone());
                        name
                    }
                };
                map.insert(name, to_json(value)?);
            }
            Value::Object(map)
        }
        Lit::Opaque(reason) => return Err(Rejection::NoJsonForm(reason)),
    })
}

/// A literal under Python's equality, for hashable values: `True == 1`,
/// `1.0 == 1`. `None` for unhashable values (lists, dicts, sets), which
/// Python refuses as set elements and dict keys.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Canon {
    Int(bool, u128),
    Float(u64),
    Str(String),
    None,
    Tuple(Vec<Canon>),
    Opaque,
}

fn canon(lit: &Lit) -> Option<Canon> {
    Some(match lit {
        Lit::Int { magnitude: 0, .. } => Canon::Int(false, 0),
        Lit::Int {
            negative,
            magnitude,
        } => Canon::Int(*negative, *magnitude),
        Lit::Bool(b) => Canon::Int(false, u128::from(*b)),
        Lit::Float(f) if f.fract() == 0.0 && f.abs() < 1e38 => {
            Canon::Int(*f < 0.0, f.abs() as u128)
        }
        Lit::Float(f) => Canon::Float(f.to_bits()),
        Lit::Str(s) => Canon::Str(s.clone()),
        Lit::None => Canon::None,
        Lit::Tuple(items) => Canon::Tuple(items.iter().map(canon).collect::<Option<_>>()?),
        Lit::Opaque(_) => Canon::Opaque,
        Lit::List(_) | Lit::Set(_) | Lit::Dict(_) => return None,
    })
}

fn int_json(negative: bool, magnitude: u128) -> Result<Value, Rejection> {
    let too_large = || Rejection::NoJsonForm("integer too large for JSON".into());
    if negative {
        if magnitude == 0 {
            return Ok(Value::from(0));
        }
        let signed = i64::try_from(magnitude).map(|m| -m).or_else(|_| {
            if magnitude == 1u128 << 63 {
                Ok(i64::MIN)
            } else {
                Err(too_large())
            }
        })?;
        Ok(Value::from(signed))
    } else {
        u64::try_from(magnitude)
            .map(Value::from)
            .map_err(|_| too_large())
    }
}

/// Dict keys become strings the way Python's `json.dumps` writes them.
fn key_json(key: Lit) -> Result<String, Rejection> {
    match key {
        Lit::Str(s) => Ok(s),
        Lit::Int { .. } => Ok(to_json(key)?.to_string()),
        Lit::Bool(b) => Ok(b.to_string()),
        Lit::None => Ok("null".into()),
        Lit::Float(_) => Err(Rejection::NoJsonForm(
            "float dict keys have no exact JSON form".into(),
        )),
        Lit::Opaque(reason) => Err(Rejection::NoJsonForm(reason)),
        Lit::Tuple(_) => Err(Rejection::NoJsonForm(
            "tuple dict keys have no JSON form".into(),
        )),
        Lit::List(_) | Lit::Set(_) | Lit::Dict(_) => Err(Rejection::NotLiteral),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexer::logical_lines;
    use rye_guest::serde_json::json;

    fn eval(src: &str) -> Result<Value, Rejection> {
        let mut first = None;
        logical_lines(src, |l| {
            first.get_or_insert(l);
        })
        .unwrap();
        evaluate(&first.unwrap().tokens)
    }

    #[test]
    fn containers_nest() {
        assert_eq!(
            eval("{'a': [1, (2, 3)], \"b\": {None: True}, 1: -2.5,}").unwrap(),
            json!({"a": [1, [2, 3]], "b": {"null": true}, "1": -2.5})
        );
    }

    #[test]
    fn bare_tuple_and_parens() {
        assert_eq!(eval("1, 'x',").unwrap(), json!([1, "x"]));
        assert_eq!(eval("(1)").unwrap(), json!(1));
        assert_eq!(eval("()").unwrap(), json!([]));
    }

    #[test]
    fn implicit_concatenation() {
        assert_eq!(eval("'a' \"b\" '''c'''").unwrap(), json!("abc"));
    }

    #[test]
    fn expressions_are_not_literals() {
        for src in [
            "VERSION", "1 + 2", "f'x'", "-(-1)", "[*a]", "{**a}", "'a' b'b'", "call()",
        ] {
            assert_eq!(eval(src), Err(Rejection::NotLiteral), "{src}");
        }
    }

    #[test]
    fn literals_without_json_form_say_why() {
        for src in [
            "b'x'",
            "1j",
            "1 + 2j",
            "10**0",
            "1e999",
            "99999999999999999999999",
        ] {
            let result = eval(src);
            if src == "10**0" {
                assert_eq!(result, Err(Rejection::NotLiteral));
            } else {
                assert!(
                    matches!(result, Err(Rejection::NoJsonForm(_))),
                    "{src}: {result:?}"
                );
            }
        }
    }

    #[test]
    fn python_equality_merges_keys_and_set_elements() {
        assert_eq!(
            eval("{1: 'a', True: 'b', None: 0}").unwrap(),
            json!({"1": "b", "null": 0})
        );
        assert_eq!(eval("{1, True, 1.0, 2}").unwrap(), json!([1, 2]));
        assert_eq!(eval("{[1]: 2}"), Err(Rejection::NotLiteral));
        assert_eq!(eval("{(1,)}").unwrap(), json!([[1]]));
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!(
            "{}1{}",
            "[".repeat(MAX_DEPTH + 1),
            "]".repeat(MAX_DEPTH + 1)
        );
        assert!(matches!(eval(&deep), Err(Rejection::NoJsonForm(m)) if m.contains("levels deep")));
        let fine = format!(
            "{}1{}",
            "[".repeat(MAX_DEPTH - 1),
            "]".repeat(MAX_DEPTH - 1)
        );
        assert!(eval(&fine).is_ok());
    }

    #[test]
    fn integer_bounds() {
        assert_eq!(eval("-9223372036854775808").unwrap(), json!(i64::MIN));
        assert_eq!(eval("18446744073709551615").unwrap(), json!(u64::MAX));
        assert!(eval("-9223372036854775809").is_err());
        assert_eq!(eval("0x_ff").unwrap(), json!(255));
    }
}
