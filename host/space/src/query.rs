//! The search query language.
//!
//! Terms match case-insensitively as substrings (`log` matches `catalog`);
//! a term with `*` or `?` is a wildcard matched against whole words;
//! `"quoted phrases"` match as written. Terms next to each other must all
//! match (`AND` may be written); `OR` offers alternatives and binds looser;
//! `NOT` negates; parentheses group. An empty query matches everything.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Term(String),
    Wildcard(String),
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
}

/// A parsed query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    root: Option<Node>,
}

/// Why a query could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError(String);

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid query: {}", self.0)
    }
}

impl std::error::Error for QueryError {}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Open,
    Close,
    And,
    Or,
    Not,
    Word(String),
    Phrase(String),
}

fn tokenize(query: &str) -> Result<Vec<Token>, QueryError> {
    let mut tokens = Vec::new();
    let mut chars = query.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '(' => {
                chars.next();
                tokens.push(Token::Open);
            }
            ')' => {
                chars.next();
                tokens.push(Token::Close);
            }
            '"' => {
                chars.next();
                let mut phrase = String::new();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some(c) => phrase.push(c),
                        None => return Err(QueryError("a quoted phrase is never closed".into())),
                    }
                }
                tokens.push(Token::Phrase(phrase.to_lowercase()));
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, '(' | ')' | '"') {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                tokens.push(match word.as_str() {
                    w if w.eq_ignore_ascii_case("and") => Token::And,
                    w if w.eq_ignore_ascii_case("or") => Token::Or,
                    w if w.eq_ignore_ascii_case("not") => Token::Not,
                    _ => Token::Word(word.to_lowercase()),
                });
            }
        }
    }
    Ok(tokens)
}

/// How deep parentheses and `NOT`s may nest. Parsing, matching and
/// dropping a query all recurse over its tree, so the bound keeps a hostile
/// query from exhausting the stack; real queries nest two or three deep.
pub const MAX_QUERY_DEPTH: usize = 64;

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    /// Enters one level of nesting, refusing past [`MAX_QUERY_DEPTH`].
    fn descend(&mut self) -> Result<(), QueryError> {
        self.depth += 1;
        if self.depth > MAX_QUERY_DEPTH {
            return Err(QueryError(format!(
                "parentheses and NOT nest more than {MAX_QUERY_DEPTH} deep"
            )));
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Node, QueryError> {
        let mut parts = vec![self.and()?];
        while self.peek() == Some(&Token::Or) {
            self.pos += 1;
            parts.push(self.and()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Node::Or(parts)
        })
    }

    fn and(&mut self) -> Result<Node, QueryError> {
        let mut parts = vec![self.not()?];
        loop {
            match self.peek() {
                Some(Token::And) => {
                    self.pos += 1;
                    parts.push(self.not()?);
                }
                Some(Token::Word(_) | Token::Phrase(_) | Token::Open | Token::Not) => {
                    parts.push(self.not()?)
                }
                _ => break,
            }
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Node::And(parts)
        })
    }

    fn not(&mut self) -> Result<Node, QueryError> {
        if self.peek() == Some(&Token::Not) {
            self.pos += 1;
            self.descend()?;
            let inner = self.not()?;
            self.depth -= 1;
            return Ok(Node::Not(Box::new(inner)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Node, QueryError> {
        let token = self.peek().cloned();
        self.pos += 1;
        match token {
            Some(Token::Open) => {
                self.descend()?;
                let inner = self.or()?;
                if self.peek() != Some(&Token::Close) {
                    return Err(QueryError("a '(' is never closed".into()));
                }
                self.pos += 1;
                self.depth -= 1;
                Ok(inner)
            }
            Some(Token::Word(w)) if w.contains(['*', '?']) => Ok(Node::Wildcard(w)),
            Some(Token::Word(w)) | Some(Token::Phrase(w)) => Ok(Node::Term(w)),
            Some(Token::Close) => Err(QueryError("a ')' has no matching '('".into())),
            Some(Token::And | Token::Or | Token::Not) | None => Err(QueryError(
                "an operator (AND, OR, NOT) is missing a term".into(),
            )),
        }
    }
}

impl Query {
    pub fn parse(query: &str) -> Result<Self, QueryError> {
        let tokens = tokenize(query)?;
        if tokens.is_empty() {
            return Ok(Self { root: None });
        }
        let mut parser = Parser {
            tokens,
            pos: 0,
            depth: 0,
        };
        let root = parser.or()?;
        if let Some(extra) = parser.peek() {
            return Err(QueryError(match extra {
                Token::Close => "a ')' has no matching '('".into(),
                _ => "unexpected text after the query".into(),
            }));
        }
        Ok(Self { root: Some(root) })
    }

    /// True for the empty query, which matches everything.
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    /// Whether the query matches `text`, which must be lowercase.
    pub fn matches(&self, text: &str) -> bool {
        self.root.as_ref().is_none_or(|n| n.matches(text))
    }

    /// Scores fields given as `(weight, lowercase text)`: `None` when the
    /// query does not match the fields together; otherwise the weighted
    /// share of fields that match it on their own, rounded to 4 places
    /// (1.0 for the empty query).
    pub fn score(&self, fields: &[(f64, &str)]) -> Option<f64> {
        let joined: String = fields
            .iter()
            .filter(|(_, t)| !t.is_empty())
            .map(|(_, t)| *t)
            .collect::<Vec<_>>()
            .join(" ");
        self.score_joined(&joined, fields)
    }

    /// [`Query::score`] with the text to match already joined, for callers
    /// that keep it.
    pub fn score_joined(&self, joined: &str, fields: &[(f64, &str)]) -> Option<f64> {
        let Some(root) = &self.root else {
            return Some(1.0);
        };
        if !root.matches(joined) {
            return None;
        }
        let total: f64 = fields.iter().map(|(w, _)| w).sum();
        if total <= 0.0 {
            return Some(0.0);
        }
        let hit: f64 = fields
            .iter()
            .filter(|(_, t)| root.matches(t))
            .map(|(w, _)| w)
            .sum();
        Some(((hit / total).min(1.0) * 10_000.0).round() / 10_000.0)
    }
}

impl Node {
    fn matches(&self, text: &str) -> bool {
        match self {
            Node::Term(t) => text.contains(t.as_str()),
            Node::Wildcard(pattern) => words(text).any(|w| glob(pattern.as_bytes(), w.as_bytes())),
            Node::And(parts) => parts.iter().all(|p| p.matches(text)),
            Node::Or(parts) => parts.iter().any(|p| p.matches(text)),
            Node::Not(inner) => !inner.matches(text),
        }
    }
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// `*` matches any run, `?` any one byte.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(q: &str, text: &str) -> bool {
        Query::parse(q).unwrap().matches(text)
    }

    #[test]
    fn boolean_structure() {
        assert!(m("python script", "run a python script"));
        assert!(!m("python script", "run a python tool"));
        assert!(m("node OR python", "python"));
        assert!(m("python AND NOT node", "python"));
        assert!(!m("python AND NOT node", "python node"));
        assert!(m("(a OR b) c", "b c"));
        assert!(m("\"python script\"", "a python script"));
        assert!(!m("\"python script\"", "script python"));
        assert!(m("", "anything"));
    }

    #[test]
    fn wildcards_match_whole_words() {
        assert!(m("pyth*", "the python runtime"));
        assert!(!m("yth*", "the python runtime"));
        assert!(m("r?n", "a run"));
    }

    #[test]
    fn malformed_queries_are_errors() {
        for q in ["(a", "a)", "a OR", "\"open", "NOT"] {
            assert!(Query::parse(q).is_err(), "{q}");
        }
    }

    #[test]
    fn nesting_is_bounded_not_a_stack_overflow() {
        let ok = format!(
            "{}a{}",
            "(".repeat(MAX_QUERY_DEPTH),
            ")".repeat(MAX_QUERY_DEPTH)
        );
        assert!(m(&ok, "a"));
        assert!(m(
            &format!("{}a", "NOT NOT ".repeat(MAX_QUERY_DEPTH / 2)),
            "a"
        ));
        for q in [
            format!(
                "{}a{}",
                "(".repeat(MAX_QUERY_DEPTH + 1),
                ")".repeat(MAX_QUERY_DEPTH + 1)
            ),
            "(".repeat(200_000),
            "NOT ".repeat(200_000),
            format!("{}a", "(NOT ".repeat(100_000)),
        ] {
            let err = Query::parse(&q).unwrap_err().to_string();
            assert!(err.contains("nest more than 64 deep"), "{err}");
        }
    }

    #[test]
    fn score_is_weighted_share() {
        let q = Query::parse("bash").unwrap();
        assert_eq!(q.score(&[(3.0, "bash"), (1.0, "other")]), Some(0.75));
        assert_eq!(q.score(&[(3.0, "x"), (1.0, "y")]), None);
        assert_eq!(Query::parse("").unwrap().score(&[(1.0, "x")]), Some(1.0));
    }
}
