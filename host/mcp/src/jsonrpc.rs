//! Reading JSON-RPC messages from untrusted bytes, and the error answers
//! for what cannot be read. Pure (no I/O), so the fuzz targets build it
//! alone.

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequest, ClientRequest, JsonRpcMessage, JsonRpcRequest, JsonRpcVersion2_0, RequestId,
};
use rmcp::service::RxJsonRpcMessage;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

/// JSON-RPC's code for text that is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's code for JSON that is not a valid request.
pub const INVALID_REQUEST: i64 = -32600;
/// The code for a request refused because the server is at a limit.
pub const SERVER_BUSY: i64 = -32000;

/// A JSON-RPC error response.
pub fn error_body(id: Option<Value>, code: i64, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    })
}

/// The answer to `text`, which failed to parse as JSON with `error`.
pub fn parse_error(text: &[u8], error: &serde_json::Error) -> Value {
    let why = match error.classify() {
        serde_json::error::Category::Eof => "the JSON ends early".to_owned(),
        _ if error.to_string().contains("recursion limit") => {
            "the JSON nests deeper than 128 levels".to_owned()
        }
        _ => format!("not JSON: {error}"),
    };
    error_body(
        recover_id(text),
        PARSE_ERROR,
        &format!("Parse error: {why}"),
    )
}

/// The value of the first `"id"` member in text that is not valid JSON,
/// when it is a number or a plain string.
pub fn recover_id(text: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(text.get(..text.len().min(64 << 10))?).ok()?;
    let after = &text[text.find("\"id\"")? + 4..];
    let value = after.trim_start().strip_prefix(':')?.trim_start();
    if let Some(rest) = value.strip_prefix('"') {
        let end = rest.find(['"', '\\'])?;
        return (rest.as_bytes()[end] == b'"').then(|| Value::String(rest[..end].to_owned()));
    }
    let end = value
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(value.len());
    value[..end].parse::<i64>().ok().map(Value::from)
}

/// What to do with one line read from a client.
pub enum Line {
    /// A message for the server.
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// The error to answer with.
    Answer(Value),
    /// Nothing: a notification this server does not know.
    Ignore,
}

/// Reads one line from a client, as [`rye_host::LineReader::line`]
/// gives it (not blank, no byte order mark, no line end).
pub fn read_message(line: &[u8]) -> Line {
    // A well-formed message is read straight into its type; only one that
    // is not is read as plain JSON, to find what to answer.
    if let Some(message) = tool_call(line) {
        return Line::Message(Box::new(message));
    }
    if let Ok(message) = serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        return Line::Message(Box::new(message));
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => return Line::Answer(parse_error(line, &e)),
    };
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned();
    let notification = id.is_none() && value.get("method").is_some_and(Value::is_string);
    match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value) {
        Ok(message) => Line::Message(Box::new(message)),
        // A notification this server does not know: ignored, not answered.
        Err(_) if notification => Line::Ignore,
        Err(e) => Line::Answer(error_body(
            id,
            INVALID_REQUEST,
            &format!("Invalid request: {e}"),
        )),
    }
}

/// The members of a message that say what it is.
#[derive(Deserialize)]
struct Head<'a> {
    /// Checked to be "2.0"; not otherwise needed.
    #[serde(rename = "jsonrpc")]
    _version: JsonRpcVersion2_0,
    id: Option<RequestId>,
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    result: Option<IgnoredAny>,
    error: Option<IgnoredAny>,
}

/// A `tools/call` request, read in two direct passes: its head, then the
/// call itself. The general reading tries each kind of message, and each
/// kind of request, on a buffered copy of the whole message, which is
/// most of the cost of reading a call. Anything else, or a call that does
/// not read this way, is `None` and read the general way, which decides
/// what it is and what to answer.
fn tool_call(line: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
    let head: Head = serde_json::from_slice(line).ok()?;
    let id = head.id?;
    if head.method.as_deref() != Some("tools/call") || head.result.is_some() || head.error.is_some()
    {
        return None;
    }
    let request: CallToolRequest = serde_json::from_slice(line).ok()?;
    Some(JsonRpcMessage::Request(JsonRpcRequest::new(
        id,
        ClientRequest::CallToolRequest(request),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_recovered_from_broken_json_when_plain() {
        assert_eq!(
            recover_id(br#"{"jsonrpc":"2.0","id":7,"method":"#),
            Some(json!(7))
        );
        assert_eq!(recover_id(br#"{"id" : "abc", "#), Some(json!("abc")));
        assert_eq!(recover_id(br#"{"id":-3}x"#), Some(json!(-3)));
        assert_eq!(recover_id(br#"{"id":"a\"b"#), None);
        assert_eq!(recover_id(b"{garbage"), None);
        assert_eq!(recover_id(br#"{"id":{"#), None);
    }

    /// The message as the general reading makes it, and as `read_message`
    /// does, both written back as JSON (the types compare no other way).
    fn both_ways(line: &str) -> (Option<Value>, Option<Value>) {
        let general = serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(line)
            .ok()
            .map(|m| serde_json::to_value(m).unwrap());
        let read = match read_message(line.as_bytes()) {
            Line::Message(m) => Some(serde_json::to_value(*m).unwrap()),
            _ => None,
        };
        (general, read)
    }

    #[test]
    fn tool_calls_read_directly_are_the_messages_the_general_reading_makes() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute","arguments":{"item_id":"a/b","n":18446744073709551615,"f":1.5e300,"neg":-7,"deep":{"x":[1,{"y":null}]}}}}"#,
            r#"{"jsonrpc":"2.0","id":"s-1","method":"tools/call","params":{"name":"search","_meta":{"progressToken":"t9"},"arguments":{}}}"#,
            r#"{"params":{"arguments":{"q":"\u00e9\n"},"name":"load"},"method":"tools\/call","id":-3,"jsonrpc":"2.0","extra":true}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute"}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute","arguments":null}}"#,
        ];
        for line in lines {
            assert!(
                tool_call(line.as_bytes()).is_some(),
                "read directly: {line}"
            );
            let (general, read) = both_ways(line);
            assert!(general.is_some(), "{line}");
            assert_eq!(general, read, "{line}");
        }
        // Not calls, or not calls that read directly: each is left to the
        // general way, which reads it, or decides what to answer.
        let others = [
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"ping","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","result":{},"params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"x"}}"#,
        ];
        for line in others {
            assert!(tool_call(line.as_bytes()).is_none(), "not direct: {line}");
        }
    }

    #[test]
    fn lines_that_are_no_message_get_the_right_answer() {
        let code = |line: &[u8]| match read_message(line) {
            Line::Answer(v) => Some((v["error"]["code"].as_i64().unwrap(), v["id"].clone())),
            Line::Message(_) => None,
            Line::Ignore => Some((0, Value::Null)),
        };
        assert_eq!(code(b"{garbage"), Some((PARSE_ERROR, Value::Null)));
        let deep = format!("{{\"id\":5,\"x\":{}", "[".repeat(100_000));
        assert_eq!(code(deep.as_bytes()), Some((PARSE_ERROR, json!(5))));
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1}"#),
            Some((INVALID_REQUEST, json!(1)))
        );
        assert_eq!(code(b"[1,2]"), Some((INVALID_REQUEST, Value::Null)));
        // A notification is never answered (rmcp may pass an unknown one
        // on as a custom notification, which the server ignores).
        assert!(!matches!(
            read_message(br#"{"jsonrpc":"2.0","method":"lsp/x"}"#),
            Line::Answer(_)
        ));
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), None);
    }
}
