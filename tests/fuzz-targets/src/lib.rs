//! The bodies of Rye's fuzz targets: every parser of untrusted text the
//! host or its components run. `fuzz/` drives them with libFuzzer (nightly,
//! `cargo fuzz run <target>`); `tests/bounded.rs` drives the same bodies
//! with a bounded run of mutated inputs on stable, so they cannot rot.
//!
//! Each body takes arbitrary bytes and must return without panicking,
//! hanging or overflowing the stack; where the code under test promises
//! more (a parsed query matches without recursing unboundedly, a signature
//! line renders back to itself, a parser's answer is JSON the host can
//! read), the body checks that too.

use rye_integrity::{SignatureFormat, find_signature};

#[path = "../../../host/mcp/src/jsonrpc.rs"]
#[allow(
    dead_code,
    reason = "the host's module, included whole; not every item is fuzzed"
)]
mod jsonrpc;

/// A target's body: arbitrary bytes in, a panic on a broken promise.
pub type Target = fn(&[u8]);

/// Every target, by name, as `cargo fuzz` names them.
pub const TARGETS: &[(&str, Target)] = &[
    ("query", query),
    ("signature_line", signature_line),
    ("jsonrpc_line", jsonrpc_line),
    ("parser_yaml", parser_yaml),
    ("parser_knowledge", parser_knowledge),
    ("parser_directive", parser_directive),
    ("parser_python", parser_python),
    ("parser_javascript", parser_javascript),
    ("parser_shell", parser_shell),
];

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// The search query language: parse, match, score.
pub fn query(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(query) = rye_space::query::Query::parse(text) {
        let sample = "rye bash tool python script run a command";
        let _ = query.matches(sample);
        let _ = query.score(&[(3.0, "bash"), (1.0, sample), (2.0, "")]);
    }
}

/// Signature lines: found in files of every comment style, parsed, and
/// rendered back to the same fields.
pub fn signature_line(data: &[u8]) {
    let Some(text) = text(data) else { return };
    for format in [
        SignatureFormat::new("#", "", true),
        SignatureFormat::new("<!--", " -->", false),
        SignatureFormat::new("//", "", false),
    ] {
        if let Ok(Some(found)) = find_signature(text, &format) {
            assert!(found.start <= found.end && found.end <= text.len());
            let again = rye_integrity::Signature::parse(&found.signature.fields())
                .expect("a parsed line renders to a line that parses");
            assert_eq!(again, found.signature);
        }
    }
    let _ = rye_integrity::Signature::parse(text);
}

/// One line of JSON-RPC from an MCP client over stdio or HTTP.
pub fn jsonrpc_line(data: &[u8]) {
    match jsonrpc::read_message(data) {
        jsonrpc::Line::Answer(answer) => {
            let code = answer["error"]["code"].as_i64();
            assert!(
                matches!(code, Some(jsonrpc::PARSE_ERROR | jsonrpc::INVALID_REQUEST)),
                "{answer}"
            );
            assert!(answer["id"].is_null() || answer["id"].is_string() || answer["id"].is_number());
        }
        jsonrpc::Line::Message(_) | jsonrpc::Line::Ignore => {}
    }
    let _ = jsonrpc::recover_id(data);
}

/// What a parser answers must be a document the host can read back as
/// JSON (whose reader stops at 128 levels).
fn host_readable(parsed: &rye_guest::parser::Parsed) {
    let json = serde_json::to_string(&parsed.document).expect("a document serializes");
    serde_json::from_str::<serde_json::Value>(&json)
        .expect("a parser's document is JSON the host can read");
}

fn outcome(result: Result<rye_guest::parser::Parsed, rye_guest::parser::ParseError>) {
    if let Ok(parsed) = result {
        host_readable(&parsed);
    }
}

/// `yaml/yaml`: tool and runtime YAML.
pub fn parser_yaml(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(map) = rye_parse_support::yaml::mapping(text, 0) {
        host_readable(&rye_guest::parser::Parsed::new(map));
    }
}

/// `markdown/frontmatter`: knowledge, as Markdown and as YAML.
pub fn parser_knowledge(data: &[u8]) {
    let Some(text) = text(data) else { return };
    outcome(rye_parser_knowledge::parse_knowledge(text, false));
    outcome(rye_parser_knowledge::parse_knowledge(text, true));
}

/// `markdown/xml`: directives.
pub fn parser_directive(data: &[u8]) {
    let Some(text) = text(data) else { return };
    outcome(rye_parser_directive::parse_directive(text));
}

/// `python/ast`: Python tool headers.
pub fn parser_python(data: &[u8]) {
    let Some(text) = text(data) else { return };
    outcome(rye_parser_python::parse_source(text));
}

/// `javascript/javascript`: JavaScript and TypeScript tool headers.
pub fn parser_javascript(data: &[u8]) {
    let Some(text) = text(data) else { return };
    outcome(rye_parser_javascript::parse_source(text));
}

/// `shell/shell`: shell tool headers.
pub fn parser_shell(data: &[u8]) {
    let Some(text) = text(data) else { return };
    host_readable(&rye_parser_shell::parse_header(text));
}
