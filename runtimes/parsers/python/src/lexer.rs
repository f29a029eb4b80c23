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

/// The operator at the start of `rest`, longest first.
fn operator(b: &[u8]) -> Option<&'static str> {
    let at = |i: usize| b.get(i).copied().unwrap_or(0);
    let (c0, c1, c2) = (at(0), at(1), at(2));
    Some(match (c0, c1, c2) {
        (b'*', b'*', b'=') => "**=",
        (b'/', b'/', b'=') => "//=",
        (b'>', b'>', b'=') => ">>=",
        (b'<', b'<', b'=') => "<<=",
        (b'.', b'.', b'.') => "...",
        (b'-', b'>', _) => "->",
        (b':', b'=', _) => ":=",
        (b'=', b'=', _) => "==",
        (b'!', b'=', _) => "!=",
        (b'<', b'=', _) => "<=",
        (b'>', b'=', _) => ">=",
        (b'*', b'*', _) => "**",
        (b'/', b'/', _) => "//",
        (b'<', b'<', _) => "<<",
        (b'>', b'>', _) => ">>",
        (b'+', b'=', _) => "+=",
        (b'-', b'=', _) => "-=",
        (b'*', b'=', _) => "*=",
        (b'/', b'=', _) => "/=",
        (b'%', b'=', _) => "%=",
        (b'@', b'=', _) => "@=",
        (b'&', b'=', _) => "&=",
        (b'|', b'=', _) => "|=",
        (b'^', b'=', _) => "^=",
        (b'(', _, _) => "(",
        (b')', _, _) => ")",
        (b'[', _, _) => "[",
        (b']', _, _) => "]",
        (b'{', _, _) => "{",
        (b'}', _, _) => "}",
        (b',', _, _) => ",",
        (b':', _, _) => ":",
        (b';', _, _) => ";",
        (b'.', _, _) => ".",
        (b'=', _, _) => "=",
        (b'+', _, _) => "+",
        (b'-', _, _) => "-",
        (b'*', _, _) => "*",
        (b'/', _, _) => "/",
        (b'%', _, _) => "%",
        (b'@', _, _) => "@",
        (b'&', _, _) => "&",
        (b'|', _, _) => "|",
        (b'^', _, _) => "^",
        (b'~', _, _) => "~",
        (b'<', _, _) => "<",
        (b'>', _, _) => ">",
        (b'!', _, _) => "!",
        _ => return None,
    })
}

struct Lexer<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
    line: u32,
    col: u32,
}

/// Calls `each` with every logical line in order, so memory stays bounded
/// by the longest line rather than the file.
pub fn logical_lines(src: &str, each: impl FnMut(LogicalLine)) -> Result<(), LexError> {
    let mut lx = Lexer {
        src,
        bytes: src.as_bytes(),
        pos: 0,
        line: 1,
        col: 1,
    };
    lx.run(each)
}

/// Scanning works on bytes: every delimiter is ASCII, and a UTF-8
/// continuation byte never looks like one. Columns count characters.
impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn peek_at(&self, n: usize) -> Option<u8> {
        self.bytes.get(self.pos + n).copied()
    }

    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.pos..]
    }

    fn bump(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        if b == b'\n' {
            self.line += 1;
            self.col = 1;
        } else if b & 0xC0 != 0x80 {
            self.col += 1;
        }
        Some(b)
    }

    /// Consumes one whole character: all of its UTF-8 bytes, so the
    /// position stays on a character boundary.
    fn bump_char(&mut self) {
        if self.bump().is_some() {
            while self.peek().is_some_and(|b| b & 0xC0 == 0x80) {
                self.bump();
            }
        }
    }

    fn char_here(&self) -> char {
        // Every advance past non-ASCII text is by whole characters; should
        // one ever stop inside a character, it reads as a replacement
        // character rather than ending the parse.
        self.src
            .get(self.pos..)
            .and_then(|rest| rest.chars().next())
            .unwrap_or(if self.pos < self.src.len() {
                '\u{fffd}'
            } else {
                '\0'
            })
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
            Some(b'\n') => {
                self.bump();
                true
            }
            Some(b'\r') => {
                self.pos += 1;
                if self.peek() == Some(b'\n') {
                    self.pos += 1;
                }
                self.line += 1;
                self.col = 1;
                true
            }
            _ => false,
        }
    }

    /// Skips to the end of the line (the line break itself stays).
    fn skip_comment(&mut self) {
        let rest = self.rest();
        let len = rest
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
            .unwrap_or(rest.len());
        // Columns past a comment are never reported: the line ends here.
        self.pos += len;
    }

    /// Identifiers: ASCII letters, digits and `_`, and any non-ASCII
    /// character that is not whitespace. Python limits the latter to
    /// Unicode identifier characters; the difference only matters for
    /// files Python would reject anyway.
    fn is_name_start_here(&self) -> bool {
        match self.peek() {
            Some(b) if b < 0x80 => b == b'_' || b.is_ascii_alphabetic(),
            Some(_) => !self.char_here().is_whitespace(),
            None => false,
        }
    }

    fn name(&mut self) -> &'a str {
        let start = self.pos;
        loop {
            match self.peek() {
                Some(b) if b < 0x80 => {
                    if b == b'_' || b.is_ascii_alphanumeric() {
                        self.bump();
                    } else {
                        break;
                    }
                }
                Some(_) => {
                    let c = self.char_here();
                    if c.is_whitespace() {
                        break;
                    }
                    self.pos += c.len_utf8();
                    self.col += 1;
                }
                None => break,
            }
        }
        &self.src[start..self.pos]
    }

    fn run(&mut self, mut each: impl FnMut(LogicalLine)) -> Result<(), LexError> {
        let mut current: Vec<Token> = Vec::new();
        let mut top_level = true;
        let mut at_line_start = true;
        let mut brackets: Vec<(u8, u32, u32)> = Vec::new();

        loop {
            if at_line_start && brackets.is_empty() {
                let indented = matches!(self.peek(), Some(b' ' | b'\t' | b'\x0c'));
                while matches!(self.peek(), Some(b' ' | b'\t' | b'\x0c')) {
                    self.bump();
                }
                match self.peek() {
                    None => break,
                    Some(b'#') => {
                        self.skip_comment();
                        self.eat_newline();
                        continue;
                    }
                    Some(b'\n' | b'\r') => {
                        self.eat_newline();
                        continue;
                    }
                    _ => {}
                }
                top_level = !indented;
                at_line_start = false;
            }
            // Only module-level lines can hold metadata: indented lines are
            // scanned (for their strings and brackets) but not kept.
            let keep = top_level;

            let Some(c) = self.peek() else { break };
            let (line, col) = (self.line, self.col);
            match c {
                b' ' | b'\t' | b'\x0c' => {
                    self.bump();
                }
                b'#' => self.skip_comment(),
                b'\\' => {
                    self.bump();
                    if !self.eat_newline() {
                        return self.error(
                            "unexpected character after line continuation",
                            line,
                            col,
                        );
                    }
                }
                b'\n' | b'\r' => {
                    self.eat_newline();
                    if brackets.is_empty() {
                        if !current.is_empty() {
                            each(LogicalLine {
                                top_level,
                                tokens: std::mem::take(&mut current),
                            });
                        }
                        at_line_start = true;
                    }
                }
                b'"' | b'\'' => {
                    let value = self.string("", keep)?;
                    if keep {
                        current.push(Token {
                            tok: Tok::Str(value),
                            line,
                            col,
                        });
                    }
                }
                c if c.is_ascii_digit()
                    || (c == b'.' && self.peek_at(1).is_some_and(|d| d.is_ascii_digit())) =>
                {
                    let text = self.number();
                    if keep {
                        current.push(Token {
                            tok: Tok::Number(text.to_owned()),
                            line,
                            col,
                        });
                    }
                }
                _ if self.is_name_start_here() => {
                    let word = self.name();
                    let tok = if matches!(self.peek(), Some(b'"' | b'\'')) && is_string_prefix(word)
                    {
                        Tok::Str(self.string(word, keep)?)
                    } else if keep {
                        Tok::Name(word.to_owned())
                    } else {
                        continue;
                    };
                    if keep {
                        current.push(Token { tok, line, col });
                    }
                }
                _ => {
                    let Some(op) = operator(self.rest()) else {
                        return self.error(
                            format!("invalid character {:?}", self.char_here()),
                            line,
                            col,
                        );
                    };
                    for _ in 0..op.len() {
                        self.bump();
                    }
                    match op {
                        "(" | "[" | "{" => brackets.push((c, line, col)),
                        ")" | "]" | "}" => {
                            let open = match op {
                                ")" => b'(',
                                "]" => b'[',
                                _ => b'{',
                            };
                            match brackets.pop() {
                                Some((o, _, _)) if o == open => {}
                                Some((o, l, cl)) => {
                                    return self.error(
                                        format!(
                                            "closing '{op}' does not match '{}' opened at line {l}, column {cl}",
                                            o as char
                                        ),
                                        line,
                                        col,
                                    );
                                }
                                None => return self.error(format!("unmatched '{op}'"), line, col),
                            }
                        }
                        _ => {}
                    }
                    if keep {
                        current.push(Token {
                            tok: Tok::Op(op),
                            line,
                            col,
                        });
                    }
                }
            }
        }

        if let Some((open, line, col)) = brackets.pop() {
            return self.error(format!("'{}' was never closed", open as char), line, col);
        }
        if !current.is_empty() {
            each(LogicalLine {
                top_level,
                tokens: current,
            });
        }
        Ok(())
    }

    fn number(&mut self) -> &'a str {
        let start = self.pos;
        let digits = |b: u8| b.is_ascii_digit() || b == b'_';
        let radix_prefix = self.peek() == Some(b'0')
            && matches!(
                self.peek_at(1),
                Some(b'x' | b'X' | b'o' | b'O' | b'b' | b'B')
            );
        if radix_prefix {
            self.bump();
            self.bump();
            while self
                .peek()
                .is_some_and(|c| c.is_ascii_hexdigit() || c == b'_')
            {
                self.bump();
            }
        } else {
            while self.peek().is_some_and(digits) {
                self.bump();
            }
            if self.peek() == Some(b'.') {
                self.bump();
                while self.peek().is_some_and(digits) {
                    self.bump();
                }
            }
            if matches!(self.peek(), Some(b'e' | b'E')) {
                let sign = matches!(self.peek_at(1), Some(b'+' | b'-'));
                let digit_at = if sign { 2 } else { 1 };
                if self.peek_at(digit_at).is_some_and(|c| c.is_ascii_digit()) {
                    for _ in 0..digit_at {
                        self.bump();
                    }
                    while self.peek().is_some_and(digits) {
                        self.bump();
                    }
                }
            }
            if matches!(self.peek(), Some(b'j' | b'J')) {
                self.bump();
            }
        }
        &self.src[start..self.pos]
    }

    /// Reads a string literal whose prefix (possibly empty) was already
    /// consumed; the next byte is the opening quote. Its value is decoded
    /// only if `keep`.
    fn string(&mut self, prefix: &str, keep: bool) -> Result<StrValue, LexError> {
        let has = |c: u8| prefix.bytes().any(|p| p.eq_ignore_ascii_case(&c));
        let (raw, bytes, formatted) = (has(b'r'), has(b'b'), has(b'f') || has(b't'));
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
                b'\\' => {
                    self.bump();
                    if formatted && !raw && self.rest().starts_with(b"N{") {
                        // `\N{NAME}`: the braces belong to the escape.
                        while self.peek().is_some_and(|c| c != b'}') {
                            self.bump();
                        }
                        self.bump();
                    } else if formatted && matches!(self.peek(), Some(b'{' | b'}')) {
                        // A backslash does not escape a brace in an f-string.
                    } else if !self.eat_newline() {
                        self.bump();
                    }
                }
                b'\n' | b'\r' if !triple => {
                    return self.error("unterminated string literal", line, col);
                }
                b'{' if formatted => {
                    self.bump();
                    if self.peek() == Some(b'{') {
                        self.bump();
                    } else {
                        self.replacement_field(line, col)?;
                    }
                }
                c if c == quote => {
                    let closes = !triple
                        || (self.peek_at(1) == Some(quote) && self.peek_at(2) == Some(quote));
                    if closes {
                        let body = &self.src[body_start..self.pos];
                        let len = if triple { 3 } else { 1 };
                        for _ in 0..len {
                            self.bump();
                        }
                        return Ok(finish_string(body, raw, bytes, formatted, keep));
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
                b'"' | b'\'' => {
                    self.string("", false)?;
                }
                _ if self.is_name_start_here() => {
                    let word = self.name();
                    if matches!(self.peek(), Some(b'"' | b'\'')) && is_string_prefix(word) {
                        self.string(word, false)?;
                    }
                }
                b'(' | b'[' | b'{' => {
                    depth += 1;
                    self.bump();
                }
                b')' | b']' => {
                    depth = depth.saturating_sub(1);
                    self.bump();
                }
                b'}' if depth > 0 => {
                    depth -= 1;
                    self.bump();
                }
                b'}' => {
                    self.bump();
                    return Ok(());
                }
                b'!' if depth == 0 && self.peek_at(1) != Some(b'=') => {
                    self.bump();
                }
                b':' if depth == 0 => {
                    self.bump();
                    return self.format_spec(line, col);
                }
                b'\\' => {
                    self.bump();
                    self.bump_char();
                }
                _ => {
                    self.bump_char();
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
                Some(b'{') => {
                    self.bump();
                    self.replacement_field(line, col)?;
                }
                Some(b'}') => {
                    self.bump();
                    return Ok(());
                }
                Some(_) => {
                    self.bump_char();
                }
            }
        }
    }
}

fn finish_string(body: &str, raw: bool, bytes: bool, formatted: bool, keep: bool) -> StrValue {
    if formatted || !keep {
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
    if !body.contains(['\\', '\r']) {
        return Ok(body.to_owned());
    }
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
    char::from_u32(value).ok_or_else(|| {
        format!("escape \\u{value:x} is not a Unicode scalar value (a lone surrogate?)")
    })
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
        collect(src).unwrap()
    }

    fn collect(src: &str) -> Result<Vec<(bool, Vec<Tok>)>, LexError> {
        let mut lines = Vec::new();
        logical_lines(src, |l| {
            lines.push((l.top_level, l.tokens.into_iter().map(|t| t.tok).collect()))
        })?;
        Ok(lines)
    }

    #[test]
    fn brackets_and_continuations_join_lines() {
        let lines = names("A = [1,\n  2]\nB = 1 + \\\n  2\n");
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|(top, _)| *top));
    }

    #[test]
    fn indented_lines_are_not_kept() {
        let lines = names("def f():\n    X = 'a\\'b'\nY = 2\n");
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|(top, _)| *top));
        assert_eq!(lines[1].1[0], Tok::Name("Y".into()));
    }

    #[test]
    fn fstring_with_nested_quotes_is_one_token() {
        let lines = names("X = f\"{d[\"k\"]:>{w}} }}\"\nY = 1\n");
        assert_eq!(lines[0].1.len(), 3);
        assert_eq!(lines[0].1[2], Tok::Str(StrValue::Formatted));
    }

    #[test]
    fn escapes_decode() {
        let lines = names(
            r#"X = "a\tb\x41\u00e9\101\
c""#,
        );
        assert_eq!(lines[0].1[2], Tok::Str(StrValue::Text("a\tbAéAc".into())));
    }

    #[test]
    fn non_ascii_after_a_backslash_in_an_fstring_field_is_read_whole() {
        // Found by fuzzing: a backslash and a byte-order mark inside a
        // replacement field left the lexer inside a character, and the
        // next look at it panicked.
        for src in [
            "f{ff{f\"f{\x0c\\\n\\\u{feff}\"\"\"\0\r\r\"\"\"\n",
            "x = f\"{a\\\u{feff}b}\"\n",
            "x = f\"{a\u{3000}é}\"\n",
            "x = f\"{a:\u{3000}é}\"\n",
        ] {
            let _ = collect(src);
        }
    }

    #[test]
    fn unterminated_string_reports_its_start() {
        let err = collect("X = 1\nY = 'abc\n").unwrap_err();
        assert_eq!((err.line, err.col), (2, 5));
    }

    #[test]
    fn unmatched_bracket_is_reported() {
        let err = collect("X = (1,\n").unwrap_err();
        assert!(err.message.contains("never closed"), "{}", err.message);
    }
}
