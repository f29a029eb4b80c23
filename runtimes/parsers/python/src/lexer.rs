//! A Python tokenizer that knows just enough of the language to find
//! logical lines, their indentation, and the tokens of literal values.
//!
//! It follows the reference tokenizer on everything that decides where a
//! statement starts or ends: bracket nesting, backslash continuations,
//! comments, every string form (prefixes, triple quotes, raw strings and
//! f-strings with nested quotes and replacement fields).

/// What a string literal turned out to be.
#[derive(Debug, Clone, PartialEq)]
pub enum StrValue {
    /// A plain (or raw) text string, escapes decoded.
    Text(String),
    /// A text string whose escapes cannot be represented here.
    Unsupported(String),
    /// A bytes literal; its value is not needed.
    Bytes,
    /// An f-string or t-string: never a literal.
    Formatted,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Name(String),
    Number(String),
    Str(StrValue),
    Op(&'static str),
}

#[derive(Debug, Clone)]
pub struct Token {
    pub tok: Tok,
    pub line: u32,
    pub col: u32,
}

/// One logical line: the tokens of a statement line, continuation lines
/// included.
#[derive(Debug)]
pub struct LogicalLine {
    /// True when the line starts in column 1, i.e. at module level.
    pub top_level: bool,
    pub tokens: Vec<Token>,
}

#[derive(Debug)]
pub struct LexError {
    pub message: String,
    pub line: u32,
    pub col: u32,
}

const OPERATORS: &[&str] = &[
    "**=", "//=", ">>=", "<<=", "...", "->", ":=", "==", "!=", "<=", ">=", "**", "//", "<<", ">>",
    "+=", "-=", "*=", "/=", "%=", "@=", "&=", "|=", "^=", "(", ")", "[", "]", "{", "}", ",", ":",
    ";", ".", "=", "+", "-", "*", "/", "%", "@", "&", "|", "^", "~", "<", ">", "!",
];

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    line: u32,
    col: u32,
}

pub fn logical_lines(src: &str) -> Result<Vec<LogicalLine>, LexError> {
    let mut lx = Lexer {
        src,
        pos: 0,
        line: 1,
        col: 1,
    };
    lx.run()
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.src[self.pos..].chars().nth(n)
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn error<T>(&self, message: impl Into<String>, line: u32, col: u32) -> Result<T, LexError> {
        Err(LexError {
            message: message.into(),
            line,
            col,
        })
    }

    /// Consumes a line break (`\n`, `\r\n` or `\r`) if one is next.
    fn eat_newline(&mut self) -> bool {
        match self.peek() {
            Some('\n') => {
                self.bump();
                true
            }
            Some('\r') => {
                self.pos += 1;
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
                self.line += 1;
                self.col = 1;
                true
            }
            _ => false,
        }
    }

    fn skip_comment(&mut self) {
        while let Some(c) = self.peek() {
            if c == '\n' || c == '\r' {
                break;
            }
            self.bump();
        }
    }

    fn run(&mut self) -> Result<Vec<LogicalLine>, LexError> {
        let mut lines = Vec::new();
        let mut current: Vec<Token> = Vec::new();
        let mut top_level = true;
        let mut at_line_start = true;
        let mut brackets: Vec<(char, u32, u32)> = Vec::new();

        loop {
            if at_line_start && brackets.is_empty() {
                let indented = matches!(self.peek(), Some(' ' | '\t' | '\x0c'));
                while matches!(self.peek(), Some(' ' | '\t' | '\x0c')) {
                    self.bump();
                }
                match self.peek() {
                    None => break,
                    Some('#') => {
                        self.skip_comment();
                        self.eat_newline();
                        continue;
                    }
                    Some('\n' | '\r') => {
                        self.eat_newline();
                        continue;
                    }
                    _ => {}
                }
                top_level = !indented;
                at_line_start = false;
            }

            let Some(c) = self.peek() else { break };
            let (line, col) = (self.line, self.col);
            match c {
                ' ' | '\t' | '\x0c' => {
                    self.bump();
                }
                '#' => self.skip_comment(),
                '\\' => {
                    self.bump();
                    if !self.eat_newline() {
                        return self.error("unexpected character after line continuation", line, col);
                    }
                }
                '\n' | '\r' => {
                    self.eat_newline();
                    if brackets.is_empty() {
                        if !current.is_empty() {
                            lines.push(LogicalLine {
                                top_level,
                                tokens: std::mem::take(&mut current),
                            });
                        }
                        at_line_start = true;
                    }
                }
                '"' | '\'' => {
                    let value = self.string("")?;
                    current.push(Token {
                        tok: Tok::Str(value),
                        line,
                        col,
                    });
                }
                c if c.is_ascii_digit() || (c == '.' && self.peek_at(1).is_some_and(|d| d.is_ascii_digit())) => {
                    let text = self.number();
                    current.push(Token {
                        tok: Tok::Number(text),
                        line,
                        col,
                    });
                }
                c if is_name_start(c) => {
                    let start = self.pos;
                    while self.peek().is_some_and(is_name_continue) {
                        self.bump();
                    }
                    let word = &self.src[start..self.pos];
                    if matches!(self.peek(), Some('"' | '\'')) && is_string_prefix(word) {
                        let value = self.string(word)?;
                        current.push(Token {
                            tok: Tok::Str(value),
                            line,
                            col,
                        });
                    } else {
                        current.push(Token {
                            tok: Tok::Name(word.to_owned()),
                            line,
                            col,
                        });
                    }
                }
                _ => {
                    let Some(op) = OPERATORS.iter().find(|op| self.rest().starts_with(**op)) else {
                        return self.error(format!("invalid character {c:?}"), line, col);
                    };
                    for _ in 0..op.len() {
                        self.bump();
                    }
                    match *op {
                        "(" | "[" | "{" => brackets.push((c, line, col)),
                        ")" | "]" | "}" => {
                            let open = match *op {
                                ")" => '(',
                                "]" => '[',
                                _ => '{',
                            };
                            match brackets.pop() {
                                Some((o, _, _)) if o == open => {}
                                Some((o, l, cl)) => {
                                    return self.error(
                                        format!("closing '{op}' does not match '{o}' opened at line {l}, column {cl}"),
                                        line,
                                        col,
                                    );
                                }
                                None => return self.error(format!("unmatched '{op}'"), line, col),
                            }
                        }
                        _ => {}
                    }
                    current.push(Token {
                        tok: Tok::Op(op),
                        line,
                        col,
                    });
                }
            }
        }

        if let Some((open, line, col)) = brackets.pop() {
            return self.error(format!("'{open}' was never closed"), line, col);
        }
        if !current.is_empty() {
            lines.push(LogicalLine {
                top_level,
                tokens: current,
            });
        }
        Ok(lines)
    }

    fn number(&mut self) -> String {
        let start = self.pos;
        let radix_prefix = self.peek() == Some('0')
            && matches!(self.peek_at(1), Some('x' | 'X' | 'o' | 'O' | 'b' | 'B'));
        if radix_prefix {
            self.bump();
            self.bump();
            while self.peek().is_some_and(|c| c.is_ascii_hexdigit() || c == '_') {
                self.bump();
            }
        } else {
            while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '_') {
                self.bump();
            }
            if self.peek() == Some('.') {
                self.bump();
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '_') {
                    self.bump();
                }
            }
            if matches!(self.peek(), Some('e' | 'E')) {
                let sign = matches!(self.peek_at(1), Some('+' | '-'));
                let digit_at = if sign { 2 } else { 1 };
                if self.peek_at(digit_at).is_some_and(|c| c.is_ascii_digit()) {
                    for _ in 0..digit_at {
                        self.bump();
                    }
                    while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '_') {
                        self.bump();
                    }
                }
            }
            if matches!(self.peek(), Some('j' | 'J')) {
                self.bump();
            }
        }
        self.src[start..self.pos].to_owned()
    }

    /// Reads a string literal whose prefix (possibly empty) was already
    /// consumed; the next character is the opening quote.
    fn string(&mut self, prefix: &str) -> Result<StrValue, LexError> {
        let prefix = prefix.to_ascii_lowercase();
        let raw = prefix.contains('r');
        let bytes = prefix.contains('b');
        let formatted = prefix.contains('f') || prefix.contains('t');
        let (line, col) = (self.line, self.col);
        let quote = self.bump().expect("caller saw a quote");
        let triple = self.peek() == Some(quote) && self.peek_at(1) == Some(quote);
        if triple {
            self.bump();
            self.bump();
        }
        let body_start = self.pos;
        loop {
            let Some(c) = self.peek() else {
                return self.error("unterminated string literal", line, col);
            };
            match c {
                '\\' => {
                    self.bump();
                    if formatted && !raw && self.rest().starts_with("N{") {
                        // `\N{NAME}`: the braces belong to the escape.
                        while self.peek().is_some_and(|c| c != '}') {
                            self.bump();
                        }
                        self.bump();
                    } else if formatted && matches!(self.peek(), Some('{' | '}')) {
                        // A backslash does not escape a brace in an f-string.
                    } else if !self.eat_newline() {
                        self.bump();
                    }
                }
                '\n' | '\r' if !triple => {
                    return self.error("unterminated string literal", line, col);
                }
                '{' if formatted => {
                    self.bump();
                    if self.peek() == Some('{') {
                        self.bump();
                    } else {
                        self.replacement_field(line, col)?;
                    }
                }
                c if c == quote => {
                    if !triple {
                        let body = &self.src[body_start..self.pos];
                        self.bump();
                        return Ok(finish_string(body, raw, bytes, formatted));
                    }
                    if self.peek_at(1) == Some(quote) && self.peek_at(2) == Some(quote) {
                        let body = &self.src[body_start..self.pos];
                        self.bump();
                        self.bump();
                        self.bump();
                        return Ok(finish_string(body, raw, bytes, formatted));
                    }
                    self.bump();
                }
                _ => {
                    self.bump();
                }
            }
        }
    }

    /// Skips an f-string replacement field after its `{`, through the
    /// matching `}`: an expression (which may hold strings, brackets and
    /// nested fields), an optional `!x` conversion and `:spec`.
    fn replacement_field(&mut self, line: u32, col: u32) -> Result<(), LexError> {
        let mut depth = 0usize;
        loop {
            let Some(c) = self.peek() else {
                return self.error("unterminated f-string replacement field", line, col);
            };
            match c {
                '"' | '\'' => {
                    self.string("")?;
                }
                c if is_name_start(c) => {
                    let start = self.pos;
                    while self.peek().is_some_and(is_name_continue) {
                        self.bump();
                    }
                    let word = &self.src[start..self.pos];
                    if matches!(self.peek(), Some('"' | '\'')) && is_string_prefix(word) {
                        self.string(word)?;
                    }
                }
                '(' | '[' | '{' => {
                    depth += 1;
                    self.bump();
                }
                ')' | ']' => {
                    depth = depth.saturating_sub(1);
                    self.bump();
                }
                '}' if depth > 0 => {
                    depth -= 1;
                    self.bump();
                }
                '}' => {
                    self.bump();
                    return Ok(());
                }
                '!' if depth == 0 && self.peek_at(1) != Some('=') => {
                    self.bump();
                }
                ':' if depth == 0 => {
                    self.bump();
                    return self.format_spec(line, col);
                }
                '\\' => {
                    self.bump();
                    self.bump();
                }
                _ => {
                    self.bump();
                }
            }
        }
    }

    /// Skips a format spec through the `}` that closes its field; the spec
    /// may hold nested replacement fields.
    fn format_spec(&mut self, line: u32, col: u32) -> Result<(), LexError> {
        loop {
            match self.peek() {
                None => return self.error("unterminated f-string format spec", line, col),
                Some('{') => {
                    self.bump();
                    self.replacement_field(line, col)?;
                }
                Some('}') => {
                    self.bump();
                    return Ok(());
                }
                Some(_) => {
                    self.bump();
                }
            }
        }
    }
}

fn finish_string(body: &str, raw: bool, bytes: bool, formatted: bool) -> StrValue {
    if formatted {
        StrValue::Formatted
    } else if bytes {
        StrValue::Bytes
    } else if raw {
        StrValue::Text(normalize_newlines(body))
    } else {
        match unescape(body) {
            Ok(text) => StrValue::Text(text),
            Err(reason) => StrValue::Unsupported(reason),
        }
    }
}

/// Python reads source with universal newlines: `\r\n` and `\r` inside a
/// string are `\n`.
fn normalize_newlines(s: &str) -> String {
    if s.contains('\r') {
        s.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        s.to_owned()
    }
}

fn unescape(body: &str) -> Result<String, String> {
    let body = normalize_newlines(body);
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        match e {
            '\n' => {}
            '\\' => out.push('\\'),
            '\'' => out.push('\''),
            '"' => out.push('"'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\x0b'),
            '0'..='7' => {
                let mut value = e.to_digit(8).expect("octal digit");
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(code_point(value)?);
            }
            'x' | 'u' | 'U' => {
                let len = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut value = 0u32;
                for _ in 0..len {
                    let digit = chars
                        .next()
                        .and_then(|d| d.to_digit(16))
                        .ok_or_else(|| format!("truncated \\{e} escape"))?;
                    value = value * 16 + digit;
                }
                out.push(code_point(value)?);
            }
            'N' => return Err("\\N{...} named escapes are not supported".into()),
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    Ok(out)
}

fn code_point(value: u32) -> Result<char, String> {
    char::from_u32(value).ok_or_else(|| format!("escape \\u{value:x} is not a Unicode scalar value (a lone surrogate?)"))
}

/// Identifiers: ASCII letters, digits and `_`, and any non-ASCII
/// character that is not whitespace. Python limits the latter to Unicode
/// identifier characters; the difference only matters for files Python
/// would reject anyway.
fn is_name_start(c: char) -> bool {
    c == '_' || c.is_ascii_alphabetic() || (!c.is_ascii() && !c.is_whitespace())
}

fn is_name_continue(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

fn is_string_prefix(word: &str) -> bool {
    matches!(
        word.to_ascii_lowercase().as_str(),
        "r" | "u" | "b" | "br" | "rb" | "f" | "fr" | "rf" | "t" | "tr" | "rt"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(src: &str) -> Vec<(bool, Vec<Tok>)> {
        logical_lines(src)
            .unwrap()
            .into_iter()
            .map(|l| (l.top_level, l.tokens.into_iter().map(|t| t.tok).collect()))
            .collect()
    }

    #[test]
    fn brackets_and_continuations_join_lines() {
        let lines = names("A = [1,\n  2]\nB = 1 + \\\n  2\n");
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|(top, _)| *top));
    }

    #[test]
    fn indented_lines_are_not_top_level() {
        let lines = names("def f():\n    X = 1\nY = 2\n");
        assert_eq!(lines.iter().filter(|(top, _)| *top).count(), 2);
        assert!(!lines[1].0);
    }

    #[test]
    fn fstring_with_nested_quotes_is_one_token() {
        let lines = names("X = f\"{d[\"k\"]:>{w}} }}\"\nY = 1\n");
        assert_eq!(lines[0].1.len(), 3);
        assert_eq!(lines[0].1[2], Tok::Str(StrValue::Formatted));
    }

    #[test]
    fn escapes_decode() {
        let lines = names(r#"X = "a\tb\x41\u00e9\101\
c""#);
        assert_eq!(lines[0].1[2], Tok::Str(StrValue::Text("a\tbAéAc".into())));
    }

    #[test]
    fn unterminated_string_reports_its_start() {
        let err = logical_lines("X = 1\nY = 'abc\n").unwrap_err();
        assert_eq!((err.line, err.col), (2, 5));
    }

    #[test]
    fn unmatched_bracket_is_reported() {
        let err = logical_lines("X = (1,\n").unwrap_err();
        assert!(err.message.contains("never closed"), "{}", err.message);
    }
}
