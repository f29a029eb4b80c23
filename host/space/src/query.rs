//! The search query language.
//!
//! Terms match case-insensitively as substrings (`log` matches `catalog`);
//! a term with `*` or `?` is a wildcard matched against whole words;
//! `"quoted phrases"` match as written. Terms next to each other must all
//! match (`AND` may be written); `OR` offers alternatives and binds looser;
//! `NOT` negates; parentheses group. An empty query matches everything.
//! `field:term` (or `field:"a phrase"`) matches one field of an item
//! (`name:bash`, `category:rye/core`, `tool_type:runtime`); a field name
//! is lowercase letters, digits and `_`, so quote a term that holds a
//! colon to match it as text (`"a:b"`).
//!
//! Matching can be loosened ([`Matching`]): `fuzzy` lets a term match a
//! word within a few edits, `proximity` asks the terms to stand near each
//! other.

use std::borrow::Cow;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Term(String),
    Wildcard(String),
    /// A term or wildcard matched against one named field.
    Field(String, Box<Node>),
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
    /// `field:word`, or `field:"phrase"` (then `phrase` is true).
    Field(String, String, bool),
}

/// Whether `name` can be a field name in `name:term`.
fn is_field_name(name: &str) -> bool {
    name.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The rest of a quoted phrase (its opening `"` already read), lowercase.
fn phrase(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<String, QueryError> {
    let mut phrase = String::new();
    loop {
        match chars.next() {
            Some('"') => return Ok(phrase.to_lowercase()),
            Some(c) => phrase.push(c),
            None => return Err(QueryError("a quoted phrase is never closed".into())),
        }
    }
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
                tokens.push(Token::Phrase(phrase(&mut chars)?));
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
                if let Some(field) = word.strip_suffix(':')
                    && is_field_name(field)
                    && chars.peek() == Some(&'"')
                {
                    chars.next();
                    let phrase = phrase(&mut chars)?;
                    tokens.push(Token::Field(field.to_owned(), phrase, true));
                    continue;
                }
                if let Some((field, value)) = word.split_once(':')
                    && is_field_name(field)
                    && !value.is_empty()
                {
                    tokens.push(Token::Field(field.to_owned(), value.to_lowercase(), false));
                    continue;
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
                Some(
                    Token::Word(_) | Token::Phrase(_) | Token::Field(..) | Token::Open | Token::Not,
                ) => parts.push(self.not()?),
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
            Some(Token::Field(field, value, phrase)) => {
                let inner = if !phrase && value.contains(['*', '?']) {
                    Node::Wildcard(value)
                } else {
                    Node::Term(value)
                };
                Ok(Node::Field(field, Box::new(inner)))
            }
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

    /// Adds `field` must match `query` (the `fields` of a search request):
    /// both must hold.
    pub fn and_field(self, field: &str, query: Query) -> Result<Self, QueryError> {
        if !is_field_name(field) {
            return Err(QueryError(format!(
                "{field:?} is not a field name (lowercase letters, digits and _)"
            )));
        }
        let Some(inner) = query.root else {
            return Ok(self);
        };
        let field = Node::Field(field.to_owned(), Box::new(inner));
        let root = match self.root {
            None => field,
            Some(Node::And(mut parts)) => {
                parts.push(field);
                Node::And(parts)
            }
            Some(other) => Node::And(vec![other, field]),
        };
        Ok(Self { root: Some(root) })
    }

    /// Whether the query matches `text`, which must be lowercase. Field
    /// terms find no field in plain text.
    pub fn matches(&self, text: &str) -> bool {
        let doc = Plain(text);
        self.root
            .as_ref()
            .is_none_or(|n| n.matches(text, &doc, &Matching::default()))
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
        self.score_document(&Plain(&joined), fields, |_| 1.0, &Matching::default())
    }

    /// Scores one item: `None` when the query does not match it (or, with
    /// `proximity`, its terms stand too far apart). Otherwise the weighted
    /// share of `weighted` fields (`(weight, lowercase text)`) that match
    /// the query's free terms on their own, where each field term the
    /// query must satisfy (`name:bash` at its top level) counts as one
    /// more matching field of weight `field_weight(name)`; rounded to 4
    /// places, 1.0 for the empty query.
    pub fn score_document(
        &self,
        doc: &dyn Document,
        weighted: &[(f64, &str)],
        field_weight: impl Fn(&str) -> f64,
        how: &Matching,
    ) -> Option<f64> {
        let Some(root) = &self.root else {
            return Some(1.0);
        };
        if !root.matches(doc.joined(), doc, how) {
            return None;
        }
        let parts: Vec<&Node> = match root {
            Node::And(parts) => parts.iter().collect(),
            other => vec![other],
        };
        if let Some(distance) = how.proximity
            && !near(&parts, doc.joined(), distance, how)
        {
            return None;
        }
        let (fields, free): (Vec<&Node>, Vec<&Node>) = parts
            .into_iter()
            .partition(|n| matches!(n, Node::Field(..)));
        let field_total: f64 = fields
            .iter()
            .map(|n| match n {
                Node::Field(name, _) => field_weight(name),
                _ => 0.0,
            })
            .sum();
        let (mut hit, mut total) = (field_total, field_total);
        if !free.is_empty() {
            total += weighted.iter().map(|(w, _)| w).sum::<f64>();
            hit += weighted
                .iter()
                .filter(|(_, text)| free.iter().all(|n| n.matches(text, doc, how)))
                .map(|(w, _)| w)
                .sum::<f64>();
        }
        if total <= 0.0 {
            return Some(if free.is_empty() { 1.0 } else { 0.0 });
        }
        Some(((hit / total).min(1.0) * 10_000.0).round() / 10_000.0)
    }
}

/// One item's searchable text, as a query sees it.
pub trait Document {
    /// Every searchable field's lowercase text, joined by spaces: what the
    /// query's free terms must match.
    fn joined(&self) -> &str;
    /// The lowercase text of field `name`, or `None` when the item has no
    /// such field.
    fn field(&self, name: &str) -> Option<Cow<'_, str>>;
}

/// Plain text with no fields.
struct Plain<'a>(&'a str);

impl Document for Plain<'_> {
    fn joined(&self) -> &str {
        self.0
    }
    fn field(&self, _: &str) -> Option<Cow<'_, str>> {
        None
    }
}

/// How loosely a query matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Matching {
    /// A one-word term also matches a word within a few edits
    /// (insertions, deletions, substitutions).
    pub fuzzy: Fuzzy,
    /// The query's top-level terms must all occur within this many words
    /// of one another.
    pub proximity: Option<usize>,
}

/// How many edits a fuzzy term may be from a word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fuzzy {
    /// Terms match as written.
    #[default]
    Off,
    /// By the term's length: none up to 2 characters, one up to 5, two
    /// beyond, so short terms do not match everything.
    Auto,
    /// At most this many.
    Edits(usize),
}

impl Fuzzy {
    fn edits(self, term: &str) -> Option<usize> {
        match self {
            Fuzzy::Off => None,
            Fuzzy::Edits(n) => Some(n),
            Fuzzy::Auto => match term.chars().count() {
                0..=2 => None,
                3..=5 => Some(1),
                _ => Some(2),
            },
        }
    }
}

impl Node {
    fn matches(&self, text: &str, doc: &dyn Document, how: &Matching) -> bool {
        match self {
            Node::Term(t) => {
                text.contains(t.as_str())
                    || how.fuzzy.edits(t).is_some_and(|d| {
                        !t.contains(char::is_whitespace) && words(text).any(|w| within(w, t, d))
                    })
            }
            Node::Wildcard(pattern) => words(text).any(|w| glob(pattern.as_bytes(), w.as_bytes())),
            Node::Field(name, inner) => doc
                .field(name)
                .is_some_and(|field| inner.matches(&field, doc, how)),
            Node::And(parts) => parts.iter().all(|p| p.matches(text, doc, how)),
            Node::Or(parts) => parts.iter().any(|p| p.matches(text, doc, how)),
            Node::Not(inner) => !inner.matches(text, doc, how),
        }
    }

    /// Whether word `w` is an occurrence of this term or wildcard.
    fn at_word(&self, w: &str, how: &Matching) -> bool {
        match self {
            Node::Term(t) => {
                w.contains(t.as_str()) || how.fuzzy.edits(t).is_some_and(|d| within(w, t, d))
            }
            Node::Wildcard(pattern) => glob(pattern.as_bytes(), w.as_bytes()),
            _ => false,
        }
    }
}

/// Whether the one-word terms among `parts` all occur within `distance`
/// words of one another somewhere in `text` (fewer than two such terms
/// always are).
fn near(parts: &[&Node], text: &str, distance: usize, how: &Matching) -> bool {
    let terms: Vec<&Node> = parts
        .iter()
        .copied()
        .filter(|n| match n {
            Node::Term(t) => !t.contains(char::is_whitespace),
            Node::Wildcard(_) => true,
            _ => false,
        })
        .collect();
    if terms.len() < 2 {
        return true;
    }
    // Every (position, term) occurrence, in text order; then the shortest
    // window holding each term at least once.
    let hits: Vec<(usize, usize)> = words(text)
        .enumerate()
        .flat_map(|(at, w)| {
            terms
                .iter()
                .enumerate()
                .filter(move |(_, t)| t.at_word(w, how))
                .map(move |(i, _)| (at, i))
        })
        .collect();
    let mut counts = vec![0usize; terms.len()];
    let (mut covered, mut start) = (0, 0);
    for end in 0..hits.len() {
        counts[hits[end].1] += 1;
        if counts[hits[end].1] == 1 {
            covered += 1;
        }
        while covered == terms.len() {
            if hits[end].0 - hits[start].0 <= distance {
                return true;
            }
            counts[hits[start].1] -= 1;
            if counts[hits[start].1] == 0 {
                covered -= 1;
            }
            start += 1;
        }
    }
    false
}

/// Whether `a` and `b` are at most `limit` edits apart, an edit being an
/// insertion, a deletion, a substitution or the swap of two neighbours
/// (optimal string alignment distance).
fn within(a: &str, b: &str, limit: usize) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().abs_diff(b.len()) > limit {
        return false;
    }
    let width = b.len() + 1;
    let mut before: Vec<usize> = Vec::new();
    let mut previous: Vec<usize> = (0..width).collect();
    for i in 0..a.len() {
        let mut row = vec![i + 1; width];
        for j in 0..b.len() {
            let mut best = (previous[j] + usize::from(a[i] != b[j]))
                .min(previous[j + 1] + 1)
                .min(row[j] + 1);
            if i > 0 && j > 0 && a[i] == b[j - 1] && a[i - 1] == b[j] {
                best = best.min(before[j - 1] + 1);
            }
            row[j + 1] = best;
        }
        if row.iter().min().is_some_and(|&m| m > limit) {
            return false;
        }
        before = std::mem::replace(&mut previous, row);
    }
    previous[b.len()] <= limit
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

    struct Item {
        joined: String,
        fields: Vec<(&'static str, &'static str)>,
    }

    impl Document for Item {
        fn joined(&self) -> &str {
            &self.joined
        }
        fn field(&self, name: &str) -> Option<Cow<'_, str>> {
            self.fields
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, t)| Cow::Borrowed(*t))
        }
    }

    fn item(fields: &[(&'static str, &'static str)]) -> Item {
        Item {
            joined: fields.iter().map(|(_, t)| *t).collect::<Vec<_>>().join(" "),
            fields: fields.to_vec(),
        }
    }

    fn scored(q: &Query, doc: &Item, how: Matching) -> Option<f64> {
        let weighted: Vec<(f64, &str)> = doc.fields.iter().map(|(_, t)| (1.0, *t)).collect();
        q.score_document(doc, &weighted, |_| 2.0, &how)
    }

    #[test]
    fn field_terms_match_their_field_only() {
        let bash = item(&[("name", "bash"), ("description", "runs a shell command")]);
        let shell = item(&[("name", "shell"), ("description", "like bash")]);
        let q = Query::parse("name:bash").unwrap();
        assert_eq!(scored(&q, &bash, Matching::default()), Some(1.0));
        assert_eq!(scored(&q, &shell, Matching::default()), None);
        let q = Query::parse("command name:ba*").unwrap();
        // Free term in one field of two (weight 1 each), field term weight 2.
        assert_eq!(scored(&q, &bash, Matching::default()), Some(0.75));
        let q = Query::parse(r#"description:"shell command" OR name:shell"#).unwrap();
        assert!(scored(&q, &bash, Matching::default()).is_some());
        assert!(scored(&q, &shell, Matching::default()).is_some());
        // No such field: no match; a quoted colon is text.
        assert_eq!(
            scored(
                &Query::parse("version:1").unwrap(),
                &bash,
                Matching::default()
            ),
            None
        );
        assert!(m("\"a:b\"", "x a:b y"));
        assert!(!m("a:b", "x a:b y"));
        let fields = Query::parse("shell")
            .unwrap()
            .and_field("name", Query::parse("bash").unwrap());
        assert_eq!(
            scored(&fields.unwrap(), &bash, Matching::default()),
            Some(0.75)
        );
        assert!(
            Query::parse("")
                .unwrap()
                .and_field("Bad-Name", Query::parse("x").unwrap())
                .is_err()
        );
    }

    #[test]
    fn fuzzy_terms_allow_a_few_edits() {
        let doc = item(&[("name", "python runtime")]);
        let q = Query::parse("pyhton").unwrap();
        assert_eq!(scored(&q, &doc, Matching::default()), None);
        let fuzzy = Matching {
            fuzzy: Fuzzy::Edits(2),
            ..Matching::default()
        };
        assert!(scored(&q, &doc, fuzzy).is_some());
        let one = Matching {
            fuzzy: Fuzzy::Edits(1),
            ..Matching::default()
        };
        assert!(scored(&Query::parse("runtme").unwrap(), &doc, one).is_some());
        assert!(scored(&Query::parse("xyzzy").unwrap(), &doc, fuzzy).is_none());
        let auto = Matching {
            fuzzy: Fuzzy::Auto,
            ..Matching::default()
        };
        assert!(scored(&q, &doc, auto).is_some(), "six letters: two edits");
        assert!(scored(&Query::parse("pyt").unwrap(), &doc, auto).is_some());
        assert!(scored(&Query::parse("xy").unwrap(), &item(&[("name", "xz")]), auto).is_none());
        assert!(within("kitten", "sitting", 3));
        assert!(!within("kitten", "sitting", 2));
        assert!(within("alpah", "alpha", 1), "a swap is one edit");
        assert!(!within("alpah", "alpha", 0));
    }

    #[test]
    fn proximity_asks_terms_to_stand_near() {
        let doc = item(&[(
            "preview",
            "alpha one two three four five six seven beta gamma",
        )]);
        let q = Query::parse("alpha beta").unwrap();
        assert!(scored(&q, &doc, Matching::default()).is_some());
        let near5 = Matching {
            proximity: Some(5),
            ..Matching::default()
        };
        assert!(scored(&q, &doc, near5).is_none());
        let near8 = Matching {
            proximity: Some(8),
            ..Matching::default()
        };
        assert!(scored(&q, &doc, near8).is_some());
        assert!(scored(&Query::parse("beta gamma").unwrap(), &doc, near5).is_some());
        assert!(scored(&Query::parse("alpha").unwrap(), &doc, near5).is_some());
    }

    #[test]
    fn score_is_weighted_share() {
        let q = Query::parse("bash").unwrap();
        assert_eq!(q.score(&[(3.0, "bash"), (1.0, "other")]), Some(0.75));
        assert_eq!(q.score(&[(3.0, "x"), (1.0, "y")]), None);
        assert_eq!(Query::parse("").unwrap().score(&[(1.0, "x")]), Some(1.0));
    }
}
