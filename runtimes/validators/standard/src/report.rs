//! Findings about one file, placed where what they are about is written:
//! the line of a key, or the line and column of the value a JSON pointer
//! names inside that key's value.

use rye_guest::validator::Diagnostic;

use crate::MAX_FINDINGS;

/// Findings about one file, placed at the line that holds the key they are
/// about when that line can be found.
pub(crate) struct Report<'a> {
    content: &'a str,
    pub(crate) found: Vec<Diagnostic>,
    /// Where each key was found, so many findings about one key read the
    /// file once.
    located: std::collections::BTreeMap<String, Option<(u32, u32)>>,
    /// The byte offset of each line's start, once a finding needs them.
    lines: Vec<usize>,
    /// Bytes the pointer searches may still read, so a huge file with many
    /// findings cannot run the validator past its deadline.
    budget: usize,
}

impl<'a> Report<'a> {
    pub(crate) fn new(content: &'a str) -> Self {
        Self {
            content,
            found: Vec::new(),
            located: std::collections::BTreeMap::new(),
            lines: Vec::new(),
            budget: 16 << 20,
        }
    }

    /// An error about the value at JSON `pointer` inside `key`'s value,
    /// placed where that value is written when it can be found.
    pub(crate) fn error_in(
        &mut self,
        rule: &str,
        message: impl Into<String>,
        key: &str,
        pointer: &str,
    ) {
        let d = Diagnostic::error(rule, message);
        self.push_in(d, key, pointer);
    }

    pub(crate) fn warning_in(
        &mut self,
        rule: &str,
        message: impl Into<String>,
        key: &str,
        pointer: &str,
    ) {
        let d = Diagnostic::warning(rule, message);
        self.push_in(d, key, pointer);
    }

    fn push_in(&mut self, d: Diagnostic, key: &str, pointer: &str) {
        // Only the findings that will be kept are worth the search.
        if self.found.len() >= MAX_FINDINGS {
            return self.push(d, Some(key));
        }
        let Some((line, column)) = self.locate_key(key) else {
            return self.push(d, None);
        };
        if self.lines.is_empty() {
            self.lines = std::iter::once(0)
                .chain(self.content.match_indices('\n').map(|(i, _)| i + 1))
                .collect();
        }
        let start = self.lines[line as usize - 1] + column as usize - 1;
        let offset =
            locate_pointer(self.content, start, pointer, &mut self.budget).unwrap_or(start);
        let line = self.lines.partition_point(|&s| s <= offset);
        let column = offset - self.lines[line - 1] + 1;
        self.found.push(d.at(line as u32, column as u32));
    }

    fn locate_key(&mut self, key: &str) -> Option<(u32, u32)> {
        let content = self.content;
        *self
            .located
            .entry(key.to_owned())
            .or_insert_with(|| locate(content, key))
    }

    pub(crate) fn error(&mut self, rule: &str, message: impl Into<String>, key: Option<&str>) {
        let d = Diagnostic::error(rule, message);
        self.push(d, key);
    }

    pub(crate) fn warning(&mut self, rule: &str, message: impl Into<String>, key: Option<&str>) {
        let d = Diagnostic::warning(rule, message);
        self.push(d, key);
    }

    fn push(&mut self, d: Diagnostic, key: Option<&str>) {
        let d = match key.and_then(|k| self.locate_key(k)) {
            Some((line, column)) => d.at(line, column),
            None => d,
        };
        self.found.push(d);
    }
}

/// Where `key` is written: the first line that assigns it (`key:`,
/// `key =`), or an XML element or attribute of that name.
fn locate(content: &str, key: &str) -> Option<(u32, u32)> {
    for (n, line) in content.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let assigns = trimmed.strip_prefix(key).is_some_and(|rest| {
            let rest = rest.trim_start();
            rest.starts_with(':') || (rest.starts_with('=') && !rest.starts_with("=="))
        });
        let column = if assigns {
            Some(indent)
        } else if let Some(at) = line.find(&format!("<{key}>")) {
            Some(at)
        } else {
            line.find(&format!(" {key}=\"")).map(|at| at + 1)
        };
        if let Some(column) = column {
            return Some((n as u32 + 1, column as u32 + 1));
        }
    }
    None
}

/// Where the value at JSON `pointer` is written, given the byte offset of
/// the key (`from`) whose value holds it: each name in the pointer is
/// looked for among the keys of the mapping before it, written as a block
/// (indented `name:` lines) or in flow (`{name: …}`, a Python dict). Stops
/// at a list index; `None` when not even the first name is found.
///
/// Each byte read is taken from `budget`; the search gives up when it runs
/// out.
fn locate_pointer(content: &str, from: usize, pointer: &str, budget: &mut usize) -> Option<usize> {
    let mut key = from;
    let mut found = None;
    for token in pointer.split('/').skip(1) {
        let name = token.replace("~1", "/").replace("~0", "~");
        if name.is_empty() || name.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        match child_key(content, key, &name, budget) {
            Some(at) => {
                key = at;
                found = Some(at);
            }
            None => break,
        }
    }
    found
}

/// The offset of key `name` in the mapping that is the value of the key
/// written at offset `key`.
fn child_key(content: &str, key: usize, name: &str, budget: &mut usize) -> Option<usize> {
    // The value starts after the key's `:` (or a Python `=`).
    let separator = content[key..].find([':', '='])? + key + 1;
    let rest = &content[separator..];
    let first = rest.trim_start_matches([' ', '\t']);
    if first.starts_with('{') {
        let open = separator + (rest.len() - first.len());
        flow_key(content, open, name, budget)
    } else if first.is_empty() || first.starts_with(['\n', '\r', '#']) {
        let line_start = content[..key].rfind('\n').map_or(0, |i| i + 1);
        *budget = budget.checked_sub(key - line_start)?;
        block_key(content, separator, key - line_start, name, budget)
    } else {
        None
    }
}

/// `name` among the keys at the top level of the flow mapping opened at
/// offset `open` (quotes respected, nested brackets skipped).
fn flow_key(content: &str, open: usize, name: &str, budget: &mut usize) -> Option<usize> {
    let text = &content[open..];
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    // Whether the next token begins a key (after `{` or `,` at depth 1).
    let mut key_next = false;
    for (i, c) in text.char_indices() {
        *budget = budget.checked_sub(c.len_utf8())?;
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        if key_next && depth == 1 && !c.is_whitespace() {
            key_next = false;
            if key_matches(&text[i..], name) {
                return Some(open + i);
            }
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '{' | '[' => {
                depth += 1;
                key_next = depth == 1;
            }
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return None;
                }
            }
            ',' if depth == 1 => key_next = true,
            _ => {}
        }
    }
    None
}

/// `name` among the keys of the block mapping that follows offset `after`,
/// indented deeper than `indent`.
fn block_key(
    content: &str,
    after: usize,
    indent: usize,
    name: &str,
    budget: &mut usize,
) -> Option<usize> {
    let mut offset = content[after..].find('\n')? + after + 1;
    let mut child: Option<usize> = None;
    for line in content[offset..].split_inclusive('\n') {
        *budget = budget.checked_sub(line.len())?;
        let text = line.trim_start_matches([' ', '\t']);
        let depth = line.len() - text.len();
        let blank = text.trim().is_empty() || text.starts_with('#');
        if !blank {
            if depth <= indent || text.starts_with('-') {
                return None;
            }
            let level = *child.get_or_insert(depth);
            if depth < level {
                return None;
            }
            if depth == level && key_matches(text, name) {
                return Some(offset + depth);
            }
        }
        offset += line.len();
    }
    None
}

/// Whether `text` starts with `name` written as a mapping key.
fn key_matches(text: &str, name: &str) -> bool {
    let (quote, body) = match text.chars().next() {
        Some(q @ ('"' | '\'')) => (Some(q), &text[1..]),
        _ => (None, text),
    };
    let Some(rest) = body.strip_prefix(name) else {
        return false;
    };
    let rest = match quote {
        Some(q) => match rest.strip_prefix(q) {
            Some(rest) => rest,
            None => return false,
        },
        None => rest,
    };
    rest.trim_start_matches([' ', '\t']).starts_with(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_assignments_elements_and_attributes() {
        let text =
            "a = 1\n__version__ = '1'\nversion: 2\n<directive name=\"x\">\n  <author>me</author>\n";
        assert_eq!(locate(text, "__version__"), Some((2, 1)));
        assert_eq!(locate(text, "version"), Some((3, 1)));
        assert_eq!(locate(text, "name"), Some((4, 12)));
        assert_eq!(locate(text, "author"), Some((5, 3)));
        assert_eq!(locate(text, "missing"), None);
    }

    #[test]
    fn locates_the_value_a_pointer_names() {
        let yaml = "config_schema:\n  type: object\n  properties:\n    name:\n      type: text\n    type:\n      type: 5\n";
        let mut report = Report::new(yaml);
        report.error_in("r", "m", "config_schema", "/properties/name/type");
        report.error_in("r", "m", "config_schema", "/properties/type/type");
        report.error_in("r", "m", "config_schema", "/properties/missing/type");
        report.error_in("r", "m", "config_schema", "/allOf/1/type");
        let at: Vec<(u32, u32)> = report
            .found
            .iter()
            .map(|d| d.at.map(|p| (p.line, p.column)).unwrap())
            .collect();
        assert_eq!(at, [(5, 7), (7, 7), (3, 3), (1, 1)]);

        let python = "X = 1\nCONFIG_SCHEMA = {'properties': {'a': {'type': 'text'}, \"b\": {\"type\": 5}}}\n";
        let mut report = Report::new(python);
        report.error_in("r", "m", "CONFIG_SCHEMA", "/properties/b/type");
        let d = &report.found[0];
        assert_eq!(d.at.map(|p| (p.line, p.column)), Some((2, 62)));
    }
}
