//! JSON-RPC framing: the stdio transport, and the error answers both
//! transports give to messages that cannot be taken as MCP.
//!
//! Over stdio each message is one line. A line that is not JSON (`{garbage`,
//! an array nested 100,000 deep) is answered with a parse error (-32700),
//! carrying the request's id when one can be read from the text; JSON that
//! is no JSON-RPC message is answered with an invalid-request error
//! (-32600). A line longer than [`MAX_LINE`] is dropped as it arrives,
//! never held whole in memory, and answered with an invalid-request error.
//! Notifications this server does not know are ignored, as JSON-RPC asks.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// JSON-RPC's code for text that is not JSON.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's code for JSON that is not a valid request.
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// The code for a request refused because the server is at a limit.
pub(crate) const SERVER_BUSY: i64 = -32000;

/// The longest line read as one message over stdio.
pub const MAX_LINE: usize = 16 << 20;

/// A JSON-RPC error response.
pub(crate) fn error_body(id: Option<Value>, code: i64, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    })
}

/// The answer to `text`, which failed to parse as JSON with `error`.
pub(crate) fn parse_error(text: &[u8], error: &serde_json::Error) -> Value {
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
pub(crate) fn recover_id(text: &[u8]) -> Option<Value> {
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

/// What to do with one line read from the client.
enum Line {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    Answer(Value),
    Ignore,
}

fn read_message(line: &[u8]) -> Line {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Line::Ignore;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => return Line::Answer(parse_error(line, &e)),
    };
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned();
    let method = value.get("method").and_then(Value::as_str);
    match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value.clone()) {
        Ok(message) => Line::Message(Box::new(message)),
        // A notification this server does not know: ignored, not answered.
        Err(_) if id.is_none() && method.is_some() => Line::Ignore,
        Err(e) => Line::Answer(error_body(
            id,
            INVALID_REQUEST,
            &format!("Invalid request: {e}"),
        )),
    }
}

/// MCP over a byte stream pair, one message per line, answering what
/// cannot be read (see the module docs).
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// Set while the rest of an oversized line is skipped.
    discarding: bool,
    write: Arc<Mutex<W>>,
}

impl<R, W> LineTransport<R, W>
where
    R: tokio::io::AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            write: Arc::new(Mutex::new(write)),
        }
    }

    /// Writes one line, from a task of its own so that a cancelled
    /// `receive` never leaves half a message on the stream.
    fn answer(&self, value: &Value) {
        let mut bytes = serde_json::to_vec(value).unwrap_or_default();
        bytes.push(b'\n');
        let write = self.write.clone();
        tokio::spawn(async move {
            let mut write = write.lock().await;
            let _ = write.write_all(&bytes).await;
            let _ = write.flush().await;
        });
    }

    /// Reads up to the end of a line into `self.line`, keeping at most
    /// [`MAX_LINE`] bytes. `Ok(true)` for a whole line, `Ok(false)` at the
    /// end of the stream. Cancel-safe: a partial line stays buffered.
    async fn read_line(&mut self) -> std::io::Result<bool> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(false);
            }
            let (chunk, complete) = match memchr(available) {
                Some(at) => (&available[..=at], true),
                None => (available, false),
            };
            let used = chunk.len();
            if !self.discarding {
                if self.line.len() + used > MAX_LINE {
                    self.discarding = true;
                    self.line.clear();
                } else {
                    self.line.extend_from_slice(chunk);
                }
            }
            self.read.consume(used);
            if complete {
                if std::mem::take(&mut self.discarding) {
                    self.answer(&error_body(
                        None,
                        INVALID_REQUEST,
                        &format!("Invalid request: a message longer than {MAX_LINE} bytes"),
                    ));
                    continue;
                }
                return Ok(true);
            }
        }
    }
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: tokio::io::AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        async move {
            let mut bytes = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            let mut write = write.lock().await;
            write.write_all(&bytes).await?;
            write.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    tracing::error!("reading from the client failed: {e}");
                    return None;
                }
            }
            let line = std::mem::take(&mut self.line);
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            match read_message(text) {
                Line::Message(message) => {
                    self.line = line;
                    self.line.clear();
                    return Some(*message);
                }
                Line::Answer(answer) => self.answer(&answer),
                Line::Ignore => {}
            }
            self.line = line;
            self.line.clear();
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.write.lock().await.flush().await
    }
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
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","method":"lsp/x"}"#),
            Some((0, Value::Null))
        );
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), None);
    }
}
