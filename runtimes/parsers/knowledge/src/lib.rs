//! The `markdown/frontmatter` parser: knowledge entries.
//!
//! A knowledge file is Markdown whose metadata comes first (after the
//! optional signature comment line), in either form:
//!
//! - a fenced ```` ```yaml ```` block, the current format;
//! - a `---` front matter block, the legacy format (read here too, although
//!   the original host rejected it).
//!
//! The document is the metadata mapping with `body` (the Markdown after the
//! block, trimmed) added. A `.yaml`/`.yml` knowledge file is one YAML
//! mapping with no body. A Markdown file with no metadata block is all body,
//! with a warning: its name, title and version are missing.

use rye_guest::parser::{Diagnostic, ParseError, ParseInput, Parsed, Parser};
use rye_guest::serde_json::{Map, Value};
use rye_parse_support::{markdown, yaml};

pub struct Knowledge;

impl Parser for Knowledge {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        let yaml_file = input.file_name.ends_with(".yaml") || input.file_name.ends_with(".yml");
        parse_knowledge(&input.content, yaml_file)
    }
}

rye_guest::export_parser!(Knowledge);

/// Parses a knowledge file; `yaml_file` for `.yaml`/`.yml` entries.
pub fn parse_knowledge(content: &str, yaml_file: bool) -> Result<Parsed, ParseError> {
    let content = content.strip_prefix('\u{feff}').unwrap_or(content);
    let rest = markdown::strip_comment_line(content);
    let rest_offset = content.len() - rest.len();
    let line_of = |byte: usize| content[..byte].matches('\n').count() as u32;

    if yaml_file {
        return Ok(Parsed::new(yaml::mapping(rest, line_of(rest_offset))?));
    }

    let lead = rest.len() - rest.trim_start().len();
    let first = rest[lead..].lines().next().unwrap_or("").trim_end();
    let mut diagnostics = Vec::new();
    let (mut document, body) = if first == "```yaml" {
        let fence = markdown::find_fence(&rest[lead..], "yaml").ok_or_else(|| {
            ParseError::syntax_at(
                "the ```yaml metadata block is never closed by a ``` line",
                line_of(rest_offset + lead) + 1,
                1,
            )
        })?;
        let map = yaml::mapping(fence.inner, line_of(rest_offset + lead + fence.inner_start))?;
        (map, &rest[lead + fence.end..])
    } else if first == "---" {
        let after_open = lead + rest[lead..].find('\n').map_or(rest.len() - lead, |i| i + 1);
        let close = find_line(&rest[after_open..], &["---", "..."]).ok_or_else(|| {
            ParseError::syntax_at(
                "the --- front matter is never closed by a --- line",
                line_of(rest_offset + lead) + 1,
                1,
            )
        })?;
        let inner = &rest[after_open..after_open + close.0];
        let map = yaml::mapping(inner, line_of(rest_offset + after_open))?;
        (map, &rest[after_open + close.1..])
    } else {
        diagnostics.push(Diagnostic::warning(
            "knowledge/no-metadata",
            "no ```yaml metadata block at the top of the file, so the entry has no name, title or version",
        ));
        (Map::new(), rest)
    };

    if document.contains_key("body") {
        diagnostics.push(Diagnostic::warning(
            "knowledge/reserved-key",
            "the metadata key `body` is replaced by the entry's Markdown body",
        ));
    }
    document.insert("body".into(), Value::String(body.trim().to_owned()));
    Ok(Parsed {
        document,
        diagnostics,
    })
}

/// Byte range (start of the line, end past its newline) of the first line
/// of `text` equal to one of `markers`.
fn find_line(text: &str, markers: &[&str]) -> Option<(usize, usize)> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        if markers.contains(&line.trim_end()) {
            return Some((start, offset));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    fn doc(content: &str) -> Value {
        Value::Object(parse_knowledge(content, false).unwrap().document)
    }

    #[test]
    fn fenced_metadata() {
        let text = "<!-- rye:signed:x -->\n```yaml\nname: retry\ntags: [a, b]\n```\n\nRetry at most 3 times.\n";
        assert_eq!(
            doc(text),
            json!({"name": "retry", "tags": ["a", "b"], "body": "Retry at most 3 times."})
        );
    }

    #[test]
    fn legacy_front_matter() {
        let text = "---\nid: x\ntitle: T\n---\n# Heading\n";
        assert_eq!(
            doc(text),
            json!({"id": "x", "title": "T", "body": "# Heading"})
        );
    }

    #[test]
    fn yaml_errors_point_into_the_file() {
        let Err(ParseError::Syntax(e)) =
            parse_knowledge("<!-- s -->\n```yaml\nname: [\n```\n", false)
        else {
            panic!()
        };
        assert!(e.at.unwrap().line >= 3, "{e:?}");
    }

    #[test]
    fn no_metadata_is_all_body_with_a_warning() {
        let parsed = parse_knowledge("# Just notes\n", false).unwrap();
        assert_eq!(parsed.diagnostics.len(), 1);
        assert_eq!(
            Value::Object(parsed.document),
            json!({"body": "# Just notes"})
        );
    }

    #[test]
    fn yaml_entry() {
        let parsed = parse_knowledge("<!-- s -->\nname: x\ntitle: y\n", true).unwrap();
        assert_eq!(
            Value::Object(parsed.document),
            json!({"name": "x", "title": "y"})
        );
    }
}
