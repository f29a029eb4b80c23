//! Markdown structure the directive and knowledge formats rely on: the
//! signature comment and fenced blocks.

/// A fenced block: its info string's body lines and where they are.
#[derive(Debug, PartialEq)]
pub struct Fence<'a> {
    /// The text between the fence lines.
    pub inner: &'a str,
    /// Byte offset of the opening fence line.
    pub start: usize,
    /// Byte offset of the first inner line.
    pub inner_start: usize,
    /// Byte offset just past the closing fence line.
    pub end: usize,
    /// 0-based line number of the first inner line.
    pub inner_line: u32,
}

/// Removes a leading `<!-- … -->` comment line (the signature line).
pub fn strip_comment_line(content: &str) -> &str {
    if content.starts_with("<!--")
        && let Some(end) = content.find("-->")
    {
        let rest = &content[end + 3..];
        return rest
            .strip_prefix("\r\n")
            .or_else(|| rest.strip_prefix('\n'))
            .unwrap_or(rest);
    }
    content
}

/// Finds the first block opened by a line that is exactly "```" + `info`
/// and closed by the next line that is exactly "```" (trailing whitespace
/// ignored). Fences inside an outer block of four or more backticks (how
/// Markdown quotes an example of a fence) are skipped.
pub fn find_fence<'a>(content: &'a str, info: &str) -> Option<Fence<'a>> {
    let mut offset = 0;
    let mut outer: Option<usize> = None;
    let mut open: Option<(usize, usize, u32)> = None;
    for (index, raw_line) in content.split_inclusive('\n').enumerate() {
        let line = raw_line.trim_end();
        let line_start = offset;
        offset += raw_line.len();
        if let Some(inner_start) = open.map(|(_, inner_start, _)| inner_start) {
            if line == "```" {
                let (start, _, inner_line) = open.expect("checked");
                return Some(Fence {
                    inner: &content[inner_start..line_start],
                    start,
                    inner_start,
                    end: offset,
                    inner_line,
                });
            }
            continue;
        }
        let ticks = line.chars().take_while(|c| *c == '`').count();
        if let Some(n) = outer {
            if ticks == n && line.len() == n {
                outer = None;
            }
            continue;
        }
        if ticks >= 4 {
            outer = Some(ticks);
        } else if ticks == 3 && line[3..] == *info {
            open = Some((line_start, offset, index as u32 + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_first_fence_outside_quoted_examples() {
        let text = "intro\n````\n```xml\n<no/>\n```\n````\n```xml\n<yes/>\n```\nbody\n";
        let fence = find_fence(text, "xml").unwrap();
        assert_eq!(fence.inner, "<yes/>\n");
        assert_eq!(fence.inner_line, 7);
        assert_eq!(&text[fence.end..], "body\n");
    }

    #[test]
    fn unclosed_fence_is_none() {
        assert_eq!(find_fence("```yaml\na: 1\n", "yaml"), None);
    }

    #[test]
    fn signature_line_is_stripped() {
        assert_eq!(strip_comment_line("<!-- rye:signed:x -->\nrest"), "rest");
        assert_eq!(strip_comment_line("rest"), "rest");
    }
}
