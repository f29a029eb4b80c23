//! The `shell/shell` parser: tool metadata from a shell script's header.
//!
//! The header is the block of `#` comment lines at the top of the script
//! (after the shebang and the signature line). Lines of the form
//! `# NAME = VALUE` are metadata; the value is JSON (`"text"`, `1`,
//! `true`, `null`, `{…}`, `[…]`), or a single-quoted string, or Python's
//! `True`/`False`/`None`. Every other header line is description text,
//! collected as `__docstring__`. For example:
//!
//! ```sh
//! #!/usr/bin/env bash
//! # Greets someone by name.
//! # __version__ = "1.0.0"
//! # __executor_id__ = "rye/core/runtimes/bash/bash"
//! # CONFIG_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}
//! echo "hello"
//! ```

use rye_guest::parser::{Diagnostic, ParseError, ParseInput, Parsed, Parser};
use rye_guest::serde_json::{self, Map, Value};

pub struct Shell;

impl Parser for Shell {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        Ok(parse_header(&input.content))
    }
}

rye_guest::export_parser!(Shell);

/// Reads the header comment block of a shell script.
pub fn parse_header(source: &str) -> Parsed {
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    let mut document = Map::new();
    let mut diagnostics = Vec::new();
    let mut description: Vec<&str> = Vec::new();

    let mut lines = source.lines().enumerate().peekable();
    if lines.peek().is_some_and(|(_, l)| l.starts_with("#!")) {
        lines.next();
    }
    for (index, line) in lines {
        let Some(comment) = line.trim_start().strip_prefix('#') else {
            if line.trim().is_empty() && description.is_empty() && document.is_empty() {
                continue;
            }
            break;
        };
        let text = comment.trim();
        if text.starts_with("rye:signed:") {
            continue;
        }
        let Some((name, value)) = assignment(text) else {
            description.push(text);
            continue;
        };
        match literal(value) {
            Some(json) => {
                document.insert(name.to_owned(), json);
            }
            None => diagnostics.push(
                Diagnostic::warning(
                    "shell/invalid-value",
                    format!("`{name}` has a value that is not JSON, a quoted string, True, False or None; it is left out"),
                )
                .at(index as u32 + 1, 1),
            ),
        }
    }

    let doc = description.join("\n").trim().to_owned();
    if !doc.is_empty() {
        document.shift_insert(0, "__docstring__".into(), Value::String(doc));
    }
    Parsed {
        document,
        diagnostics,
    }
}

/// `NAME = VALUE` with NAME an identifier.
fn assignment(text: &str) -> Option<(&str, &str)> {
    let (name, value) = text.split_once('=')?;
    let name = name.trim();
    let mut chars = name.chars();
    let first = chars.next()?;
    let valid = (first == '_' || first.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    valid.then_some((name, value.trim()))
}

fn literal(value: &str) -> Option<Value> {
    match value {
        "True" => return Some(Value::Bool(true)),
        "False" => return Some(Value::Bool(false)),
        "None" => return Some(Value::Null),
        _ => {}
    }
    if let Some(inner) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\''))
        && !inner.contains('\'')
    {
        return Some(Value::String(inner.to_owned()));
    }
    serde_json::from_str(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    #[test]
    fn header_block() {
        let src = "#!/usr/bin/env bash\n# rye:signed:x\n# Greets someone.\n#\n# __version__ = \"1.0.0\"\n# __category__ = 'demo'\n# CONFIG_SCHEMA = {\"type\": \"object\"}\n# ENABLED = True\necho hi\n# X = 1\n";
        let parsed = parse_header(src);
        assert!(parsed.diagnostics.is_empty());
        assert_eq!(
            Value::Object(parsed.document),
            json!({"__docstring__": "Greets someone.", "__version__": "1.0.0", "__category__": "demo", "CONFIG_SCHEMA": {"type": "object"}, "ENABLED": true})
        );
    }

    #[test]
    fn bad_values_are_warned_about() {
        let parsed = parse_header("# __version__ = 1.0.0\n");
        assert_eq!(parsed.diagnostics.len(), 1);
        assert_eq!(parsed.diagnostics[0].at.as_ref().map(|p| p.line), Some(1));
    }
}
