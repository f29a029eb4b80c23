use std::borrow::Cow;

use rye_space::ItemKind;

use crate::{IntegrityError, Located, Rule};

/// The text whose SHA-256 a signature of `rule` covers, and what part of
/// the file it leaves uncovered (for the original rule; `None` when
/// everything is covered).
///
/// `located` is the file's signature line, if it has one; only a line that
/// ends in a newline is taken out (as the original system does).
pub fn hashed_text<'a>(
    content: &'a str,
    kind: ItemKind,
    located: Option<&Located>,
    rule: Rule,
) -> Result<(Cow<'a, str>, Option<String>), IntegrityError> {
    let without_line: Cow<'a, str> = match located {
        Some(l) if content[..l.end].ends_with('\n') => {
            if l.start == 0 {
                Cow::Borrowed(&content[l.end..])
            } else {
                Cow::Owned(format!("{}{}", &content[..l.start], &content[l.end..]))
            }
        }
        _ => Cow::Borrowed(content),
    };
    if rule == Rule::Whole {
        return Ok((without_line, None));
    }
    let cut = |text: &str| -> Result<(String, Option<String>), IntegrityError> {
        match kind {
            ItemKind::Tool | ItemKind::Config => match shebang_len(text) {
                Some(n) => Ok((
                    text[n..].to_owned(),
                    Some(
                        "the shebang line is not covered by this signature (original rule)".into(),
                    ),
                )),
                None => Ok((text.to_owned(), None)),
            },
            ItemKind::Directive => {
                let start = text
                    .find("<directive")
                    .ok_or(IntegrityError::NoDirectiveBlock)?;
                let open_end = text[start..]
                    .find('>')
                    .ok_or(IntegrityError::NoDirectiveBlock)?;
                let close = "</directive>";
                let end = text
                    .rfind(close)
                    .map(|i| i + close.len())
                    .filter(|end| *end > start + open_end)
                    .ok_or(IntegrityError::NoDirectiveBlock)?;
                let block = py_strip(&text[start..end]);
                let before = text[..start].trim().len();
                let after = text[end..].trim().len();
                let uncovered = (before + after > 0).then(|| {
                    format!(
                        "only the <directive> block is covered by this signature (original rule); \
                         {before} bytes before it and {after} bytes after it are not"
                    )
                });
                Ok((block.to_owned(), uncovered))
            }
            ItemKind::Knowledge => {
                if text.starts_with("---")
                    && let Some(close) = text[3..].find("---").map(|i| i + 3)
                {
                    Ok((
                        py_strip(&text[close + 3..]).to_owned(),
                        Some(
                            "the front matter is not covered by this signature (original rule)"
                                .into(),
                        ),
                    ))
                } else {
                    Ok((text.to_owned(), None))
                }
            }
        }
    };
    let (text, uncovered) = cut(&without_line)?;
    Ok((Cow::Owned(text), uncovered))
}

/// Length of a leading `#!/` shebang line, newline included.
fn shebang_len(text: &str) -> Option<usize> {
    if text.starts_with("#!/") {
        text.find('\n').map(|n| n + 1)
    } else {
        None
    }
}

/// Python's `str.strip()`: Unicode whitespace plus the four separator
/// controls Python also counts.
fn py_strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Signature, find_signature, format_for};

    fn located(content: &str, kind: ItemKind, name: &str) -> Option<Located> {
        find_signature(content, &format_for(kind, name, &[]).unwrap()).unwrap()
    }

    fn line(rule: Rule, html: bool) -> String {
        let sig = Signature {
            rule,
            timestamp: "2026-01-02T03:04:05Z".into(),
            hash: "00".repeat(32),
            signature: [1; 64],
            fingerprint: "0123456789abcdef".into(),
            provenance: None,
        };
        if html {
            format!("<!-- {} -->\n", sig.fields())
        } else {
            format!("# {}\n", sig.fields())
        }
    }

    #[test]
    fn whole_rule_keeps_everything_but_the_line() {
        let content = format!(
            "#!/usr/bin/env python3\n{}x = 1\n",
            line(Rule::Whole, false)
        );
        let l = located(&content, ItemKind::Tool, "t.py");
        let (text, uncovered) =
            hashed_text(&content, ItemKind::Tool, l.as_ref(), Rule::Whole).unwrap();
        assert_eq!(text, "#!/usr/bin/env python3\nx = 1\n");
        assert_eq!(uncovered, None);
    }

    #[test]
    fn original_rule_drops_the_shebang_of_tools() {
        let content = format!(
            "#!/usr/bin/env python3\n{}x = 1\n",
            line(Rule::Original, false)
        );
        let l = located(&content, ItemKind::Tool, "t.py");
        let (text, uncovered) =
            hashed_text(&content, ItemKind::Tool, l.as_ref(), Rule::Original).unwrap();
        assert_eq!(text, "x = 1\n");
        assert!(uncovered.unwrap().contains("shebang"));
    }

    #[test]
    fn original_rule_covers_only_the_directive_block() {
        let content = format!(
            "{}# Title\n\n```xml\n<directive name=\"d\">\n  <x/>\n</directive>\n```\n\nbody\n",
            line(Rule::Original, true)
        );
        let l = located(&content, ItemKind::Directive, "d.md");
        let (text, uncovered) =
            hashed_text(&content, ItemKind::Directive, l.as_ref(), Rule::Original).unwrap();
        assert_eq!(text, "<directive name=\"d\">\n  <x/>\n</directive>");
        assert!(uncovered.unwrap().contains("bytes after it"));
        assert_eq!(
            hashed_text("no block", ItemKind::Directive, None, Rule::Original).unwrap_err(),
            IntegrityError::NoDirectiveBlock
        );
    }

    #[test]
    fn original_rule_skips_knowledge_front_matter() {
        let content = format!(
            "{}---\nname: k\n---\n\n  Body text \n",
            line(Rule::Original, true)
        );
        let l = located(&content, ItemKind::Knowledge, "k.md");
        let (text, uncovered) =
            hashed_text(&content, ItemKind::Knowledge, l.as_ref(), Rule::Original).unwrap();
        assert_eq!(text, "Body text");
        assert!(uncovered.is_some());
        let fenced = "```yaml\nname: k\n```\nBody\n";
        let (text, uncovered) =
            hashed_text(fenced, ItemKind::Knowledge, None, Rule::Original).unwrap();
        assert_eq!((text.as_ref(), uncovered), (fenced, None));
    }
}
