//! A JavaScript/TypeScript tokenizer: enough of the language to know which
//! tokens sit at the top level of a module and to read literal values.

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Ident(String),
    /// A string, or a template literal without substitutions.
    Str(String),
    /// A template literal with `${…}` substitutions: never a literal.
    Template,
    Num(String),
    Punct(&'static str),
    Regex,
}

#[derive(Debug, Clone)]
pub struct Token {
    pub tok: Tok,
    pub line: u32,
    pub col: u32,
    /// A line break separates this token from the previous one (which ends
    /// a statement under automatic semicolon insertion).
    pub newline_before: bool,
}

#[derive(Debug)]
pub struct LexError {
    pub message: String,
    pub line: u32,
    pub col: u32,
}

const PUNCTUATORS: &[&str] = &[
    ">>>=", "...", "===", "!==", "**=", "<<=", ">>=", ">>>", "&&=", "||=", "??=", "=>", "==", "!=",
    "<=", ">=", "&&", "||", "??", "?.", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=",
    "**", "<<", ">>", "{", "}", "(", ")", "[", "]", ";", ",", "<", ">", "+", "-", "*", "/", "%",
    "&", "|", "^", "!", "~", "?", ":", "=", ".", "@", "#",
];

/// Keywords after which a `/` starts a regular expression, not a division.
const BEFORE_REGEX: &[&str] = &[
    "return",
    "typeof",
    "case",
    "do",
    "else",
    "in",
    "of",
    "new",
    "delete",
    "void",
    "throw",
    "instanceof",
    "yield",
    "await",
];

pub fn tokenize(src: &str) -> Result<Vec<Token>, LexError> {
    let mut lx = Lexer {
        src,
        pos: 0,
        line: 1,
        col: 1,
    };
    if src.starts_with("#!") {
        lx.skip_line();
    }
    let mut tokens = Vec::new();
    lx.tokens(&mut tokens, false)?;
    Ok(tokens)
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    line: u32,
    col: u32,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.src[self.pos..].chars().nth(n)
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

    fn skip_line(&mut self) {
        while self.peek().is_some_and(|c| c != '\n') {
            self.bump();
        }
    }

    /// Reads tokens until the end of input or, inside a template
    /// substitution (`nested`), until its closing `}`.
    fn tokens(&mut self, out: &mut Vec<Token>, nested: bool) -> Result<(), LexError> {
        let mut newline = false;
        let mut depth = 0usize;
        loop {
            let Some(c) = self.peek() else {
                if nested {
                    return self.error("unterminated template substitution", self.line, self.col);
                }
                return Ok(());
            };
            let (line, col) = (self.line, self.col);
            let tok = match c {
                '\n' | '\u{2028}' | '\u{2029}' => {
                    newline = true;
                    self.bump();
                    continue;
                }
                c if c.is_whitespace() => {
                    self.bump();
                    continue;
                }
                '/' if self.peek_at(1) == Some('/') => {
                    self.skip_line();
                    continue;
                }
                '/' if self.peek_at(1) == Some('*') => {
                    self.bump();
                    self.bump();
                    loop {
                        match self.bump() {
                            None => return self.error("unterminated comment", line, col),
                            Some('*') if self.peek() == Some('/') => {
                                self.bump();
                                break;
                            }
                            Some('\n') => newline = true,
                            Some(_) => {}
                        }
                    }
                    continue;
                }
                '"' | '\'' => Tok::Str(self.string()?),
                '`' => self.template()?,
                c if c.is_ascii_digit()
                    || (c == '.' && self.peek_at(1).is_some_and(|d| d.is_ascii_digit())) =>
                {
                    Tok::Num(self.number())
                }
                c if is_ident_start(c) => {
                    let start = self.pos;
                    while self.peek().is_some_and(is_ident_continue) {
                        self.bump();
                    }
                    Tok::Ident(self.src[start..self.pos].to_owned())
                }
                '/' if regex_allowed(out.last().map(|t| &t.tok)) => {
                    self.regex()?;
                    Tok::Regex
                }
                '}' if nested && depth == 0 => {
                    self.bump();
                    return Ok(());
                }
                _ => {
                    let rest = &self.src[self.pos..];
                    let Some(p) = PUNCTUATORS.iter().find(|p| rest.starts_with(**p)) else {
                        return self.error(format!("invalid character {c:?}"), line, col);
                    };
                    for _ in 0..p.len() {
                        self.bump();
                    }
                    match *p {
                        "{" => depth += 1,
                        "}" => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                    Tok::Punct(p)
                }
            };
            out.push(Token {
                tok,
                line,
                col,
                newline_before: std::mem::take(&mut newline),
            });
        }
    }

    fn string(&mut self) -> Result<String, LexError> {
        let (line, col) = (self.line, self.col);
        let quote = self.bump().expect("caller saw a quote");
        let mut out = String::new();
        loop {
            match self.bump() {
                None | Some('\n') => return self.error("unterminated string literal", line, col),
                Some(c) if c == quote => return Ok(out),
                Some('\\') => self.escape(&mut out, line, col)?,
                Some(c) => out.push(c),
            }
        }
    }

    fn escape(&mut self, out: &mut String, line: u32, col: u32) -> Result<(), LexError> {
        let Some(e) = self.bump() else {
            return self.error("unterminated string literal", line, col);
        };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '0' if !self.peek().is_some_and(|c| c.is_ascii_digit()) => out.push('\0'),
            '\r' => {
                if self.peek() == Some('\n') {
                    self.bump();
                }
            }
            '\n' | '\u{2028}' | '\u{2029}' => {}
            'x' => {
                let value = self.hex_digits(2, line, col)?;
                out.push(char::from_u32(value).expect("two hex digits are a char"));
            }
            'u' => {
                let value = if self.peek() == Some('{') {
                    self.bump();
                    let mut value = 0u32;
                    while let Some(d) = self.peek().and_then(|c| c.to_digit(16)) {
                        value = value.saturating_mul(16).saturating_add(d);
                        self.bump();
                    }
                    if self.bump() != Some('}') {
                        return self.error("malformed \\u{…} escape", line, col);
                    }
                    value
                } else {
                    let high = self.hex_digits(4, line, col)?;
                    if (0xD800..0xDC00).contains(&high) && self.src[self.pos..].starts_with("\\u") {
                        self.bump();
                        self.bump();
                        let low = self.hex_digits(4, line, col)?;
                        0x10000 + ((high - 0xD800) << 10) + (low.wrapping_sub(0xDC00) & 0x3FF)
                    } else {
                        high
                    }
                };
                match char::from_u32(value) {
                    Some(c) => out.push(c),
                    None => return self.error("escape is not a Unicode scalar value", line, col),
                }
            }
            other => out.push(other),
        }
        Ok(())
    }

    fn hex_digits(&mut self, n: usize, line: u32, col: u32) -> Result<u32, LexError> {
        let mut value = 0;
        for _ in 0..n {
            match self.bump().and_then(|c| c.to_digit(16)) {
                Some(d) => value = value * 16 + d,
                None => return self.error("malformed hexadecimal escape", line, col),
            }
        }
        Ok(value)
    }

    fn template(&mut self) -> Result<Tok, LexError> {
        let (line, col) = (self.line, self.col);
        self.bump();
        let mut text = String::new();
        let mut substituted = false;
        loop {
            match self.bump() {
                None => return self.error("unterminated template literal", line, col),
                Some('`') => {
                    return Ok(if substituted {
                        Tok::Template
                    } else {
                        Tok::Str(text)
                    });
                }
                Some('\\') => self.escape(&mut text, line, col)?,
                Some('$') if self.peek() == Some('{') => {
                    self.bump();
                    substituted = true;
                    let mut inner = Vec::new();
                    self.tokens(&mut inner, true)?;
                }
                Some('\r') => {
                    if self.peek() == Some('\n') {
                        self.bump();
                    }
                    text.push('\n');
                }
                Some(c) => text.push(c),
            }
        }
    }

    fn number(&mut self) -> String {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            let c = self.bump().expect("peeked");
            if matches!(c, 'e' | 'E')
                && !self.src[start..self.pos].starts_with("0x")
                && !self.src[start..self.pos].starts_with("0X")
                && matches!(self.peek(), Some('+' | '-'))
            {
                self.bump();
            }
        }
        self.src[start..self.pos].to_owned()
    }

    fn regex(&mut self) -> Result<(), LexError> {
        let (line, col) = (self.line, self.col);
        self.bump();
        let mut class = false;
        loop {
            match self.bump() {
                None | Some('\n') => {
                    return self.error("unterminated regular expression", line, col);
                }
                Some('\\') => {
                    self.bump();
                }
                Some('[') => class = true,
                Some(']') => class = false,
                Some('/') if !class => break,
                Some(_) => {}
            }
        }
        while self.peek().is_some_and(is_ident_continue) {
            self.bump();
        }
        Ok(())
    }
}

fn regex_allowed(previous: Option<&Tok>) -> bool {
    match previous {
        None => true,
        Some(Tok::Punct(p)) => !matches!(*p, ")" | "]" | "}" | "++" | "--"),
        Some(Tok::Ident(word)) => BEFORE_REGEX.contains(&word.as_str()),
        Some(_) => false,
    }
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c == '$' || c.is_ascii_alphabetic() || (!c.is_ascii() && c.is_alphabetic())
}

fn is_ident_continue(c: char) -> bool {
    is_ident_start(c) || c.is_ascii_digit() || (!c.is_ascii() && c.is_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        tokenize(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn regex_versus_division() {
        assert!(toks("x = a / b / c").iter().all(|t| *t != Tok::Regex));
        assert_eq!(toks("x = /a{1}/g;")[2], Tok::Regex);
    }

    #[test]
    fn templates_nest() {
        let t = toks("const A = `x ${ {a: `y ${b}`}.a } z`; const B = `plain`;");
        assert_eq!(t[3], Tok::Template);
        assert_eq!(t[8], Tok::Str("plain".into()));
    }

    #[test]
    fn escapes() {
        assert_eq!(
            toks(r"'\u{1F600}\x41\ud83d\ude00'")[0],
            Tok::Str("😀A😀".into())
        );
    }
}
