//! Is a string an ECMA-262 regular expression? JSON Schema writes `pattern`
//! and `patternProperties` names in that dialect and recommends its Unicode
//! mode, which is how JavaScript validators such as Ajv compile them; so a
//! pattern that passes here compiles with `new RegExp(pattern, "u")`.
//!
//! A recursive-descent check of the syntax only: nothing is compiled or
//! matched. `\p{…}` names are checked against ECMA-262's tables of
//! General_Category values and binary properties; a Script value is
//! checked for its form only.

use std::collections::BTreeSet;

/// `Ok` when `pattern` is valid; otherwise why not, with the 1-based
/// character position of the fault.
pub(crate) fn check(pattern: &str) -> Result<(), String> {
    let mut parser = Parser {
        chars: pattern.chars().collect(),
        pos: 0,
        groups: 0,
        names: BTreeSet::new(),
        references: Vec::new(),
        named_references: Vec::new(),
    };
    parser.parse()?;
    if parser.groups > MAX_CAPTURES {
        return Err(format!(
            "{} capturing groups; JavaScript engines accept at most {MAX_CAPTURES}",
            parser.groups
        ));
    }
    for (group, at) in &parser.references {
        if *group > parser.groups {
            return Err(format!(
                "\\{group} at character {at} refers to group {group}, and the pattern has {} capturing group{}",
                parser.groups,
                if parser.groups == 1 { "" } else { "s" }
            ));
        }
    }
    for (name, at) in &parser.named_references {
        if !parser.names.contains(name) {
            return Err(format!(
                "\\k<{name}> at character {at} names no group of the pattern"
            ));
        }
    }
    Ok(())
}

/// The most capturing groups V8 (Node.js, Chromium) compiles.
const MAX_CAPTURES: u32 = 32_767;

struct Parser {
    chars: Vec<char>,
    pos: usize,
    groups: u32,
    names: BTreeSet<String>,
    /// Numbered back references with their positions, checked at the end
    /// (a reference may come before its group).
    references: Vec<(u32, usize)>,
    named_references: Vec<(String, usize)>,
}

const SYNTAX: &str = "^$\\.*+?()[]{}|/";

/// Values of General_Category, long and short, that `\p{…}` accepts alone
/// or after `gc=`.
#[rustfmt::skip]
const GENERAL_CATEGORIES: &[&str] = &[
    "Cased_Letter", "LC", "Close_Punctuation", "Pe", "Connector_Punctuation", "Pc", "Control",
    "Cc", "cntrl", "Currency_Symbol", "Sc", "Dash_Punctuation", "Pd", "Decimal_Number", "Nd",
    "digit", "Enclosing_Mark", "Me", "Final_Punctuation", "Pf", "Format", "Cf",
    "Initial_Punctuation", "Pi", "Letter", "L", "Letter_Number", "Nl", "Line_Separator", "Zl",
    "Lowercase_Letter", "Ll", "Mark", "M", "Combining_Mark", "Math_Symbol", "Sm",
    "Modifier_Letter", "Lm", "Modifier_Symbol", "Sk", "Nonspacing_Mark", "Mn", "Number", "N",
    "Open_Punctuation", "Ps", "Other", "C", "Other_Letter", "Lo", "Other_Number", "No",
    "Other_Punctuation", "Po", "Other_Symbol", "So", "Paragraph_Separator", "Zp", "Private_Use",
    "Co", "Punctuation", "P", "punct", "Separator", "Z", "Space_Separator", "Zs", "Spacing_Mark",
    "Mc", "Surrogate", "Cs", "Symbol", "S", "Titlecase_Letter", "Lt", "Unassigned", "Cn",
    "Uppercase_Letter", "Lu",
];

/// Binary Unicode properties, long and short, that `\p{…}` accepts alone.
#[rustfmt::skip]
const BINARY: &[&str] = &[
    "ASCII", "ASCII_Hex_Digit", "AHex", "Alphabetic", "Alpha", "Any", "Assigned",
    "Bidi_Control", "Bidi_C", "Bidi_Mirrored", "Bidi_M", "Case_Ignorable", "CI", "Cased",
    "Changes_When_Casefolded", "CWCF", "Changes_When_Casemapped", "CWCM",
    "Changes_When_Lowercased", "CWL", "Changes_When_NFKC_Casefolded", "CWKCF",
    "Changes_When_Titlecased", "CWT", "Changes_When_Uppercased", "CWU", "Dash",
    "Default_Ignorable_Code_Point", "DI", "Deprecated", "Dep", "Diacritic", "Dia", "Emoji",
    "Emoji_Component", "EComp", "Emoji_Modifier", "EMod", "Emoji_Modifier_Base", "EBase",
    "Emoji_Presentation", "EPres", "Extended_Pictographic", "ExtPict", "Extender", "Ext",
    "Grapheme_Base", "Gr_Base", "Grapheme_Extend", "Gr_Ext", "Hex_Digit", "Hex",
    "IDS_Binary_Operator", "IDSB", "IDS_Trinary_Operator", "IDST", "ID_Continue", "IDC",
    "ID_Start", "IDS", "Ideographic", "Ideo", "Join_Control", "Join_C",
    "Logical_Order_Exception", "LOE", "Lowercase", "Lower", "Math", "Noncharacter_Code_Point",
    "NChar", "Pattern_Syntax", "Pat_Syn", "Pattern_White_Space", "Pat_WS", "Quotation_Mark",
    "QMark", "Radical", "Regional_Indicator", "RI", "Sentence_Terminal", "STerm",
    "Soft_Dotted", "SD", "Terminal_Punctuation", "Term", "Unified_Ideograph", "UIdeo",
    "Uppercase", "Upper", "Variation_Selector", "VS", "White_Space", "space", "XID_Continue",
    "XIDC", "XID_Start", "XIDS",
];

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    /// 1-based position of the character at `pos`, for messages.
    fn here(&self) -> usize {
        self.pos + 1
    }

    /// Reads the whole pattern. Groups are kept on a stack of their own,
    /// not the call stack, so nesting is bounded by nothing but memory (as
    /// in JavaScript engines).
    fn parse(&mut self) -> Result<(), String> {
        // Each open group: where it opened, and whether it may take a
        // quantifier once closed.
        let mut open: Vec<(usize, bool)> = Vec::new();
        // Whether the term just read may take a quantifier.
        let mut quantifiable = false;
        while let Some(c) = self.peek() {
            match c {
                '|' => {
                    self.pos += 1;
                    quantifiable = false;
                }
                '(' => {
                    open.push((self.here(), self.open_group()?));
                    quantifiable = false;
                }
                ')' => {
                    let Some((_, after)) = open.pop() else {
                        return Err(format!("unmatched ')' at character {}", self.here()));
                    };
                    self.pos += 1;
                    quantifiable = after;
                }
                '^' | '$' => {
                    self.pos += 1;
                    quantifiable = false;
                }
                '*' | '+' | '?' => {
                    self.quantifier(quantifiable, 1)?;
                    quantifiable = false;
                }
                '{' => match self.braces()? {
                    Some(length) => {
                        self.quantifier(quantifiable, length)?;
                        quantifiable = false;
                    }
                    None => {
                        return Err(format!(
                            "'{{' at character {} starts no quantifier like {{2,3}}; write \\{{ for the character",
                            self.here()
                        ));
                    }
                },
                '}' | ']' => {
                    return Err(format!(
                        "a lone '{c}' at character {}; write \\{c} for the character",
                        self.here()
                    ));
                }
                '[' => {
                    self.class()?;
                    quantifiable = true;
                }
                '\\' => quantifiable = self.escape()?,
                _ => {
                    self.pos += 1;
                    quantifiable = true;
                }
            }
        }
        match open.last() {
            Some((opened, _)) => Err(format!(
                "the group opened at character {opened} is not closed"
            )),
            None => Ok(()),
        }
    }

    /// A quantifier `length` characters long at `pos`, and its lazy `?`.
    fn quantifier(&mut self, quantifiable: bool, length: usize) -> Result<(), String> {
        if !quantifiable {
            let text: String = self.chars[self.pos..self.pos + length].iter().collect();
            return Err(format!(
                "nothing to repeat before {text} at character {}",
                self.here()
            ));
        }
        self.pos += length;
        if self.peek() == Some('?') {
            self.pos += 1;
        }
        Ok(())
    }

    /// At `{`: the length of a `{n}`, `{n,}` or `{n,m}` quantifier, or
    /// `None` when the brace starts none.
    fn braces(&self) -> Result<Option<usize>, String> {
        let digits = |from: usize| {
            self.chars[from.min(self.chars.len())..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count()
        };
        let number = |from: usize, count: usize| -> u64 {
            self.chars[from..from + count].iter().fold(0u64, |n, d| {
                n.saturating_mul(10)
                    .saturating_add(d.to_digit(10).unwrap().into())
            })
        };
        let start = self.pos + 1;
        let low = digits(start);
        if low == 0 {
            return Ok(None);
        }
        let mut end = start + low;
        let mut high = None;
        if self.chars.get(end) == Some(&',') {
            let count = digits(end + 1);
            if count > 0 {
                high = Some(number(end + 1, count));
            }
            end += 1 + count;
        }
        if self.chars.get(end) != Some(&'}') {
            return Ok(None);
        }
        if let Some(high) = high
            && high < number(start, low)
        {
            return Err(format!(
                "the quantifier at character {} repeats at least {} and at most {high} times",
                self.here(),
                number(start, low)
            ));
        }
        Ok(Some(end + 1 - self.pos))
    }

    /// At `(`: reads the group's opening; returns whether the group may
    /// take a quantifier once closed.
    fn open_group(&mut self) -> Result<bool, String> {
        let opened = self.here();
        self.pos += 1;
        let mut quantifiable = true;
        if self.peek() == Some('?') {
            match (self.peek_at(1), self.peek_at(2)) {
                (Some(':'), _) => self.pos += 2,
                (Some('=' | '!'), _) => {
                    self.pos += 2;
                    quantifiable = false;
                }
                (Some('<'), Some('=' | '!')) => {
                    self.pos += 3;
                    quantifiable = false;
                }
                (Some('<'), _) => {
                    self.pos += 2;
                    let name = self.group_name('>')?;
                    if !self.names.insert(name.clone()) {
                        return Err(format!(
                            "the group name {name:?} at character {opened} is used twice"
                        ));
                    }
                    self.groups += 1;
                }
                (Some('P'), Some('<' | '=' | '>')) => {
                    return Err(format!(
                        "(?P at character {opened} is Python's syntax; ECMA-262 names a group (?<name>…) and refers to it with \\k<name>"
                    ));
                }
                _ => {
                    return Err(format!(
                        "(? at character {opened} must be followed by ':', '=', '!', '<=', '<!' or '<name>'"
                    ));
                }
            }
        } else {
            self.groups += 1;
        }
        Ok(quantifiable)
    }

    /// A group name up to `close`, which is consumed.
    fn group_name(&mut self, close: char) -> Result<String, String> {
        let start = self.here();
        let mut name = String::new();
        while let Some(c) = self.peek() {
            self.pos += 1;
            if c == close {
                let mut chars = name.chars();
                let valid = chars
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '$' || c == '_')
                    && chars.all(|c| c.is_alphanumeric() || c == '$' || c == '_');
                if !valid {
                    return Err(format!(
                        "{name:?} at character {start} is not a group name (a letter, '$' or '_', then letters, digits, '$' or '_')"
                    ));
                }
                return Ok(name);
            }
            name.push(c);
        }
        Err(format!(
            "the group name at character {start} is not closed with '{close}'"
        ))
    }

    /// At `[`: reads the class up to its `]`.
    fn class(&mut self) -> Result<(), String> {
        let opened = self.here();
        self.pos += 1;
        if self.peek() == Some('^') {
            self.pos += 1;
        }
        loop {
            match self.peek() {
                None => {
                    return Err(format!(
                        "the character class opened at character {opened} is not closed"
                    ));
                }
                Some(']') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(_) => {
                    let at = self.here();
                    let low = self.class_atom()?;
                    if self.peek() == Some('-') && !matches!(self.peek_at(1), Some(']') | None) {
                        self.pos += 1;
                        let high = self.class_atom()?;
                        match (low, high) {
                            (Some(low), Some(high)) if low > high => {
                                return Err(format!(
                                    "the range {low}-{high} at character {at} is out of order"
                                ));
                            }
                            (Some(_), Some(_)) => {}
                            _ => {
                                return Err(format!(
                                    "the range at character {at} starts or ends at a class like \\d; write - as \\- to mean the character"
                                ));
                            }
                        }
                    }
                }
            }
        }
    }

    /// One member of a class: the character it stands for, or `None` for a
    /// class escape (`\d`, `\p{…}`).
    fn class_atom(&mut self) -> Result<Option<char>, String> {
        let c = self.peek().expect("the caller saw a character");
        self.pos += 1;
        if c != '\\' {
            return Ok(Some(c));
        }
        let at = self.pos;
        let Some(e) = self.peek() else {
            return Err("the pattern ends with a lone backslash".into());
        };
        self.pos += 1;
        match e {
            'd' | 'D' | 'w' | 'W' | 's' | 'S' => Ok(None),
            'p' | 'P' => self.property(at).map(|()| None),
            'b' => Ok(Some('\u{8}')),
            '-' => Ok(Some('-')),
            _ => self.character_escape(e, at).map(Some),
        }
    }

    /// At `\` outside a class: reads the escape; returns whether it may
    /// take a quantifier.
    fn escape(&mut self) -> Result<bool, String> {
        let at = self.here();
        self.pos += 1;
        let Some(e) = self.peek() else {
            return Err("the pattern ends with a lone backslash".into());
        };
        self.pos += 1;
        match e {
            'b' | 'B' => Ok(false),
            'd' | 'D' | 'w' | 'W' | 's' | 'S' => Ok(true),
            'p' | 'P' => self.property(at).map(|()| true),
            '1'..='9' => {
                let mut group = e.to_digit(10).unwrap();
                while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
                    group = group.saturating_mul(10).saturating_add(d);
                    self.pos += 1;
                }
                self.references.push((group, at));
                Ok(true)
            }
            'k' => {
                if self.peek() != Some('<') {
                    return Err(format!(
                        "\\k at character {at} must name a group: \\k<name>"
                    ));
                }
                self.pos += 1;
                let name = self.group_name('>')?;
                self.named_references.push((name, at));
                Ok(true)
            }
            _ => self.character_escape(e, at).map(|_| true),
        }
    }

    /// The character a character escape `\e` (already read) stands for.
    fn character_escape(&mut self, e: char, at: usize) -> Result<char, String> {
        let simple = match e {
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'f' => Some('\u{c}'),
            'v' => Some('\u{b}'),
            c if SYNTAX.contains(c) => Some(c),
            _ => None,
        };
        if let Some(c) = simple {
            return Ok(c);
        }
        match e {
            '0' => {
                if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    return Err(format!(
                        "\\0 at character {at} is followed by a digit; octal escapes are not ECMA-262 (write \\x.. or \\u....)"
                    ));
                }
                Ok('\0')
            }
            'c' => match self.peek() {
                Some(letter) if letter.is_ascii_alphabetic() => {
                    self.pos += 1;
                    Ok(char::from(letter as u8 % 32))
                }
                _ => Err(format!(
                    "\\c at character {at} must be followed by a letter"
                )),
            },
            'x' => self.hex(2, at).map(|n| char::from_u32(n).unwrap()),
            'u' => {
                if self.peek() == Some('{') {
                    self.pos += 1;
                    let digits = self.chars[self.pos..]
                        .iter()
                        .take_while(|c| c.is_ascii_hexdigit())
                        .count();
                    let code = (digits > 0 && digits <= 8)
                        .then(|| {
                            let text: String =
                                self.chars[self.pos..self.pos + digits].iter().collect();
                            u32::from_str_radix(&text, 16).ok()
                        })
                        .flatten();
                    self.pos += digits;
                    match (code, self.peek()) {
                        (Some(code), Some('}')) if code <= 0x10FFFF => {
                            self.pos += 1;
                            Ok(char::from_u32(code).unwrap_or('\u{FFFD}'))
                        }
                        _ => Err(format!(
                            "\\u{{…}} at character {at} must hold a code point of at most 10FFFF in hex"
                        )),
                    }
                } else {
                    self.hex(4, at)
                        .map(|n| char::from_u32(n).unwrap_or('\u{FFFD}'))
                }
            }
            'A' | 'Z' | 'z' => Err(format!(
                "\\{e} at character {at} is not an ECMA-262 escape; anchor with {}",
                if e == 'A' { "^" } else { "$" }
            )),
            _ => Err(format!(
                "\\{e} at character {at} is not an ECMA-262 escape; only ^$\\.*+?()[]{{}}|/ may be escaped to stand for themselves"
            )),
        }
    }

    /// Exactly `count` hex digits.
    fn hex(&mut self, count: usize, at: usize) -> Result<u32, String> {
        let digits: String = self.chars[self.pos..].iter().take(count).collect();
        if digits.len() != count || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!(
                "the escape at character {at} needs {count} hex digits"
            ));
        }
        self.pos += count;
        Ok(u32::from_str_radix(&digits, 16).unwrap())
    }

    /// `{Name}` or `{Name=Value}` after `\p` / `\P`.
    fn property(&mut self, at: usize) -> Result<(), String> {
        if self.peek() != Some('{') {
            return Err(format!(
                "\\p at character {at} must name a property: \\p{{Letter}}"
            ));
        }
        let body: String = self.chars[self.pos + 1..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == '_' || **c == '=')
            .collect();
        if self.chars.get(self.pos + 1 + body.len()) != Some(&'}') {
            return Err(format!("\\p{{ at character {at} is not closed with '}}'"));
        }
        let known = match body.split_once('=') {
            None => GENERAL_CATEGORIES.contains(&body.as_str()) || BINARY.contains(&body.as_str()),
            Some(("General_Category" | "gc", value)) => GENERAL_CATEGORIES.contains(&value),
            Some(("Script" | "sc" | "Script_Extensions" | "scx", value)) => {
                value.starts_with(|c: char| c.is_ascii_alphabetic()) && !value.contains('=')
            }
            Some(_) => false,
        };
        if !known {
            return Err(format!(
                "\\p{{{body}}} at character {at} names no Unicode property ECMA-262 knows"
            ));
        }
        self.pos += body.len() + 2;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn accepts_what_javascript_compiles() {
        for pattern in [
            "",
            "^[a-z][a-z0-9_]*$",
            "^(?:[a-z]+/)*[a-z]+$",
            "\\d{1,3}(\\.\\d{1,3}){3}",
            "a{2}b{3,}c{0,1}?",
            "(?<year>\\d{4})-\\k<year>",
            "(a)|\\1",
            "(?=x)y(?!z)(?<=y)(?<!q)",
            "[\\w.-]+@[^\\s@]+",
            "[\\]\\-]",
            "\\u00e9\\u{1F600}\\x41\\cJ\\0",
            "\\p{L}+\\P{Script=Greek}",
            "[]",
            "é+",
            "a|",
            "\\/",
        ] {
            assert_eq!(check(pattern), Ok(()), "{pattern:?}");
        }
    }

    #[test]
    fn nesting_is_bounded_by_memory_not_the_stack() {
        let deep = |open: &str, n: usize| format!("{}a{}", open.repeat(n), ")".repeat(n));
        assert_eq!(check(&deep("(?:", 100_000)), Ok(()));
        assert_eq!(check(&deep("(", 32_767)), Ok(()));
        let captures = check(&deep("(", 32_768)).unwrap_err();
        assert!(captures.contains("at most 32767"), "{captures}");
        let unclosed = check(&"(".repeat(100_000)).unwrap_err();
        assert!(
            unclosed.contains("character 100000 is not closed"),
            "{unclosed}"
        );
    }

    #[test]
    fn refuses_what_javascript_refuses_and_says_where() {
        for (pattern, expected) in [
            ("(a", "not closed"),
            ("a)", "unmatched ')' at character 2"),
            ("[a-", "not closed"),
            ("*a", "nothing to repeat before * at character 1"),
            ("a**", "nothing to repeat"),
            ("a{3,2}", "at least 3 and at most 2"),
            ("[z-a]", "out of order"),
            ("[\\d-z]", "class like \\d"),
            ("\\", "lone backslash"),
            ("a]", "lone ']'"),
            ("a{", "starts no quantifier"),
            ("(?P<n>a)", "Python's syntax"),
            ("(?i)a", "must be followed by"),
            ("(a)\\2", "has 1 capturing group"),
            ("\\k<x>", "names no group"),
            ("(?<n>a)(?<n>b)", "used twice"),
            ("\\q", "not an ECMA-262 escape"),
            ("\\Aabc\\Z", "anchor with ^"),
            ("\\01", "octal"),
            ("\\x4", "2 hex digits"),
            ("\\p", "must name a property"),
            ("(?=a)*", "nothing to repeat"),
            ("^*", "nothing to repeat"),
        ] {
            let error = check(pattern).expect_err(pattern);
            assert!(error.contains(expected), "{pattern:?}: {error}");
        }
    }
}

/// Differential test: patterns assembled at random from fragments that
/// exercise every rule, each checked here and compiled by Node.js with
/// `new RegExp(pattern, "u")`; the verdicts must agree.
#[cfg(test)]
mod against_javascript {
    use super::check;
    use std::io::Write;
    use std::process::{Command, Stdio};

    #[rustfmt::skip]
    const FRAGMENTS: &[&str] = &[
        "a", "b", "é", "0", "1", "9", ".", "^", "$", "|", "(", ")", "(?:", "(?=", "(?!", "(?<=",
        "(?<!", "(?<n>", "(?<m>", "(?P<n>", "(?i)", "[", "]", "[^", "-", "a-z", "z-a", "\\d",
        "\\w", "\\s", "\\b", "\\B", "\\1", "\\2", "\\k<n>", "\\k", "\\n", "\\t", "\\0", "\\x41",
        "\\x4", "\\u00e9", "\\u{1F600}", "\\u{110000}", "\\cJ", "\\c1", "\\p{L}",
        "\\p{Script=Greek}", "\\p{sc=Latn}", "\\P{Lu}", "\\p{gc=Nd}", "\\p{ASCII}", "\\p{Foo}",
        "\\p{Lu=x}", "\\p{White_Space}", "\\p{General_Category=Letter}", "\\p", "\\-", "\\/", "\\.", "\\q", "\\A", "\\Z", "\\", "*", "+",
        "?", "*?", "{2}", "{2,}", "{2,3}", "{3,2}", "{", "}", "{,3}", "\\]", "\\[", "\\{", "\\}",
        ",", "_", "$",
    ];

    const NODE: &str = r#"
        const patterns = JSON.parse(require("fs").readFileSync(0, "utf8"));
        const verdicts = patterns.map((p) => { try { new RegExp(p, "u"); return true; } catch { return false; } });
        process.stdout.write(JSON.stringify(verdicts));
    "#;

    #[test]
    fn twenty_thousand_random_patterns() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        let patterns: Vec<String> = (0..20_000)
            .map(|_| {
                (0..1 + next(6))
                    .map(|_| FRAGMENTS[next(FRAGMENTS.len())])
                    .collect()
            })
            .collect();
        let mut node = Command::new("node")
            .args(["-e", NODE])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node (Node.js) runs this test; it is on the machine image");
        let input = rye_guest::serde_json::to_vec(&patterns).unwrap();
        node.stdin.take().unwrap().write_all(&input).unwrap();
        let output = node.wait_with_output().unwrap();
        assert!(output.status.success());
        let verdicts: Vec<bool> = rye_guest::serde_json::from_slice(&output.stdout).unwrap();
        let disagreements: Vec<String> = patterns
            .iter()
            .zip(&verdicts)
            .filter(|(pattern, javascript)| check(pattern).is_ok() != **javascript)
            .map(|(pattern, javascript)| {
                format!(
                    "{pattern:?}: JavaScript {javascript}, here {:?}",
                    check(pattern)
                )
            })
            .collect();
        let valid = verdicts.iter().filter(|v| **v).count();
        assert!(
            valid > 2_000,
            "the corpus has too few valid patterns: {valid}"
        );
        assert!(
            disagreements.is_empty(),
            "{} disagreements:\n{}",
            disagreements.len(),
            disagreements[..disagreements.len().min(40)].join("\n")
        );
    }
}
