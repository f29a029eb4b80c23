//! Canonical JSON, byte for byte as Python's `json.dumps(value,
//! sort_keys=True, separators=(",", ":"), ensure_ascii=True)` writes it,
//! so an object hashes the same here and in the original.
//!
//! - Object keys sorted by code point (Rust's string order is UTF-8 byte
//!   order, which is the same), no whitespace.
//! - Strings: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`; every other
//!   character outside printable ASCII (space to `~`) as `\uXXXX` in lower
//!   case hex, a character above U+FFFF as its surrogate pair. `/` is not
//!   escaped.
//! - Integers as written; floats as Python's `repr`: the shortest digits
//!   that read back to the same value, positional when the decimal point
//!   falls within 16 digits (`100.0`, `0.0001`), else scientific with a
//!   signed exponent of at least two digits (`1e+16`, `1.5e-05`).
//!
//! Two values do not survive the trip and should not be hashed: integers
//! outside 64 bits (`serde_json` reads them as floats) and strings with a
//! lone surrogate (`serde_json` refuses them).

use serde_json::Value;

/// `value` as canonical JSON bytes.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = String::with_capacity(128);
    write(value, &mut out);
    out.into_bytes()
}

/// `value` as a canonical JSON string.
pub fn to_string(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write(value, &mut out);
    out
}

/// Appends `value` as canonical JSON to `out`.
pub(crate) fn write_value(value: &Value, out: &mut String) {
    write(value, out);
}

/// Appends `s` as a canonical JSON string to `out`.
pub(crate) fn write_str(s: &str, out: &mut String) {
    string(s, out);
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else {
                float(n.as_f64().unwrap_or(f64::NAN), out);
            }
        }
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(key, out);
                out.push(':');
                write(item, out);
            }
            out.push('}');
        }
    }
}

fn string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let unit = |u: u16, out: &mut String| {
        out.push_str("\\u");
        for shift in [12, 8, 4, 0] {
            out.push(HEX[usize::from((u >> shift) & 0xf)] as char);
        }
    };
    // Printable ASCII other than a quote or a backslash is written as it
    // is, a run at a time: paths and hashes are nothing else.
    let escaped = |b: &u8| !matches!(b, b' '..=b'~') || *b == b'"' || *b == b'\\';
    out.push('"');
    let mut rest = s;
    while let Some(at) = rest.as_bytes().iter().position(escaped) {
        out.push_str(&rest[..at]);
        // Every byte before `at` is ASCII, so `at` starts a character.
        let c = rest[at..]
            .chars()
            .next()
            .expect("a character at a boundary");
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    unit(*u, out);
                }
            }
        }
        rest = &rest[at + c.len_utf8()..];
    }
    out.push_str(rest);
    out.push('"');
}

/// A finite float as Python's `repr` writes it. (JSON has no NaN or
/// infinity, so `serde_json` never holds one.)
fn float(f: f64, out: &mut String) {
    if !f.is_finite() {
        out.push_str(if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        });
        return;
    }
    // Rust's `{:e}` gives the shortest digits that round-trip, as Python's
    // repr does: "d.ddde±x".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    // The value is 0.DIGITS × 10^point.
    let point = exponent + 1;
    if f.is_sign_negative() {
        out.push('-');
    }
    if -4 < point && point <= 16 {
        if point <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
            out.push_str(&digits);
        } else {
            let point = point as usize;
            if digits.len() <= point {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', point - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..point]);
                out.push('.');
                out.push_str(&digits[point..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = point - 1;
        out.push_str(if e < 0 { "e-" } else { "e+" });
        out.push_str(&format!("{:02}", e.unsigned_abs()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_read_as_python_writes_them() {
        for (value, python) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (100.0, "100.0"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-5, "1.5e-05"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (1e100, "1e+100"),
            (-2.5e-300, "-2.5e-300"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
        ] {
            let mut out = String::new();
            float(value, &mut out);
            assert_eq!(out, python, "{value:e}");
        }
    }

    /// Every string, escaped a run at a time, is what escaping each
    /// character on its own gives (as Python's `ensure_ascii` does).
    #[test]
    fn runs_of_plain_characters_escape_as_single_characters_do() {
        fn one_by_one(s: &str) -> String {
            let mut out = String::from('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '\u{8}' => out.push_str("\\b"),
                    '\u{c}' => out.push_str("\\f"),
                    ' '..='~' => out.push(c),
                    _ => {
                        for u in c.encode_utf16(&mut [0u16; 2]) {
                            out.push_str(&format!("\\u{u:04x}"));
                        }
                    }
                }
            }
            out.push('"');
            out
        }
        let pool: Vec<char> =
            "ab/.-_~ 09\"\\\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}\u{80}é\u{2028}\u{ffff}\u{1F600}"
                .chars()
                .collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 12) as usize;
            let s: String = (0..len)
                .map(|i| pool[((seed >> (i * 5)) % pool.len() as u64) as usize])
                .collect();
            let mut out = String::new();
            string(&s, &mut out);
            assert_eq!(out, one_by_one(&s), "{s:?}");
        }
    }

    #[test]
    fn strings_escape_as_ensure_ascii_does() {
        let value = json!({"b": "é\u{1F600}\u{7f}\u{1}\n/\"\\", "a": [1, -2, true, null]});
        assert_eq!(
            to_string(&value),
            r#"{"a":[1,-2,true,null],"b":"\u00e9\ud83d\ude00\u007f\u0001\n/\"\\"}"#
        );
    }
}
