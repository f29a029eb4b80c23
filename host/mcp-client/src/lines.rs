//! MCP over a byte stream pair, one message per line: the bounded line
//! reader both ends of Rye's stdio use, and the client's transport to a
//! stdio server.
//!
//! The transport reads and answers as rmcp's own stream transport does: a
//! line longer than [`MAX_LINE`] is dropped as it arrives (never held
//! whole) and the session goes on; text that is not JSON is ignored; JSON
//! that is no message the client knows is answered with an
//! invalid-request error, except a notification outside MCP, which is
//! ignored. One thing is read differently: the answer to a `tools/call`
//! this client sent is read straight into a tool's result. rmcp reads
//! every answer by trying each kind of result in turn on a buffered copy
//! of it, the tool call's sixteenth, which made reading the answer a
//! larger part of a pooled call than any step of Rye's own. An answer that
//! does not read as a tool's result is read the general way.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolResult, ClientRequest, ErrorData, JsonRpcError, JsonRpcMessage, JsonRpcResponse,
    JsonRpcVersion2_0, RequestId, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde::Deserialize;
use serde::de::IgnoredAny;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// The longest line read as one message.
pub const MAX_LINE: usize = 16 << 20;

/// What [`LineReader::read`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A whole line that is not blank, in [`LineReader::line`].
    Line,
    /// A line longer than [`MAX_LINE`], dropped as it arrived.
    Oversized,
    /// The end of the stream.
    End,
}

/// Reads lines of at most [`MAX_LINE`] bytes from a stream.
pub struct LineReader<R> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// Set while the rest of an oversized line is skipped.
    discarding: bool,
    /// Set once the line in `line` has been handed out.
    whole: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(read: R) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            whole: false,
        }
    }

    /// Reads up to the end of the next line that is not blank (lines of
    /// white space only are read past). Cancel-safe: a partial line stays
    /// buffered for the next call.
    pub async fn read(&mut self) -> std::io::Result<LineRead> {
        if std::mem::take(&mut self.whole) {
            self.line.clear();
        }
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(LineRead::End);
            }
            let (chunk, complete) = match available.iter().position(|&b| b == b'\n') {
                Some(at) => (&available[..=at], true),
                None => (available, false),
            };
            let used = chunk.len();
            if !self.discarding {
                if self.line.len() + used > MAX_LINE {
                    self.discarding = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(chunk);
                }
            }
            self.read.consume(used);
            if complete {
                if std::mem::take(&mut self.discarding) {
                    return Ok(LineRead::Oversized);
                }
                if self.line().iter().all(u8::is_ascii_whitespace) {
                    self.line.clear();
                    continue;
                }
                self.whole = true;
                return Ok(LineRead::Line);
            }
        }
    }

    /// The line last read, without a leading byte order mark or its line
    /// end (`\n` or `\r\n`).
    pub fn line(&self) -> &[u8] {
        let line = self
            .line
            .strip_prefix(b"\xEF\xBB\xBF")
            .unwrap_or(&self.line);
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        line.strip_suffix(b"\r").unwrap_or(line)
    }
}

/// Ids of `tools/call` requests kept at most while their answers are
/// awaited; past them (calls whose answers never came) they are
/// forgotten, and a late answer is read the general way.
const CALLS_AWAITED: usize = 4096;

/// The client's transport to a stdio server (see the module docs).
pub struct StdioLines<R, W> {
    read: LineReader<R>,
    /// `None` once closed, which closes the server's stdin.
    write: Arc<tokio::sync::Mutex<Option<W>>>,
    /// The `tools/call` requests sent and not yet answered. rmcp's
    /// `Transport` takes `&mut self` to send and to receive, and `send`
    /// notes its call before the write's future is made, so no lock.
    calls: HashSet<RequestId>,
}

impl<R, W> StdioLines<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        Self {
            read: LineReader::new(read),
            write: Arc::new(tokio::sync::Mutex::new(Some(write))),
            calls: HashSet::new(),
        }
    }

    /// Writes `message` as one line.
    fn write(
        &self,
        message: &TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = std::io::Result<()>> + Send + 'static + use<R, W> {
        let bytes = serde_json::to_vec(message).map(|mut bytes| {
            bytes.push(b'\n');
            bytes
        });
        let write = self.write.clone();
        async move {
            let bytes = bytes.map_err(std::io::Error::other)?;
            let mut write = write.lock().await;
            let write = write
                .as_mut()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
            write.write_all(&bytes).await?;
            write.flush().await
        }
    }
}

/// What to do with `line`, given the calls awaited.
fn message(calls: &mut HashSet<RequestId>, line: &[u8]) -> Read {
    if let Some(answer) = tool_result(calls, line) {
        return Read::Message(answer);
    }
    match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line) {
        Ok(message) => {
            // A call answered otherwise (with an error, most often) is
            // no longer awaited either.
            let id = match &message {
                JsonRpcMessage::Response(response) => Some(&response.id),
                JsonRpcMessage::Error(error) => error.id.as_ref(),
                _ => None,
            };
            if let Some(id) = id {
                calls.remove(id);
            }
            Read::Message(message)
        }
        Err(e) if e.is_syntax() || e.is_eof() => Read::Ignore,
        Err(_) if unknown_notification(line) => Read::Ignore,
        Err(e) => Read::Answer(JsonRpcMessage::Error(JsonRpcError {
            jsonrpc: JsonRpcVersion2_0,
            id: None,
            error: ErrorData::invalid_request(format!("Invalid request: {e}"), None),
        })),
    }
}

/// The answer to a `tools/call` awaited in `calls`, read as a tool's
/// result (and no longer awaited); `None` for anything else.
fn tool_result(
    calls: &mut HashSet<RequestId>,
    line: &[u8],
) -> Option<RxJsonRpcMessage<RoleClient>> {
    let answer: ToolAnswer = serde_json::from_slice(line).ok()?;
    if answer.method.is_some() || answer.error.is_some() {
        return None;
    }
    if !calls.remove(&answer.id) {
        return None;
    }
    Some(JsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc: JsonRpcVersion2_0,
        id: answer.id,
        result: ServerResult::CallToolResult(answer.result),
    }))
}

/// What to do with a line read.
enum Read {
    /// Hand the message on.
    Message(RxJsonRpcMessage<RoleClient>),
    /// Answer with this error.
    Answer(TxJsonRpcMessage<RoleClient>),
    /// Nothing: text that is not JSON, or a notification to ignore.
    Ignore,
}

/// An answer whose result reads as a tool's.
#[derive(Deserialize)]
struct ToolAnswer {
    #[serde(rename = "jsonrpc")]
    _version: JsonRpcVersion2_0,
    id: RequestId,
    result: CallToolResult,
    method: Option<IgnoredAny>,
    error: Option<IgnoredAny>,
}

/// Whether `line` is a notification this client is to ignore: a method
/// outside MCP, or one under `notifications/` that MCP does not define.
fn unknown_notification(line: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Head {
        id: Option<IgnoredAny>,
        method: Option<String>,
    }
    let Ok(Head {
        id,
        method: Some(method),
    }) = serde_json::from_slice::<Head>(line)
    else {
        return false;
    };
    const NOTIFICATIONS: &[&str] = &[
        "notifications/cancelled",
        "notifications/initialized",
        "notifications/message",
        "notifications/progress",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
        "notifications/roots/list_changed",
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
    ];
    const REQUESTS: &[&str] = &[
        "initialize",
        "ping",
        "server/discover",
        "prompts/get",
        "prompts/list",
        "resources/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "resources/templates/list",
        "subscriptions/listen",
        "tools/call",
        "tools/list",
        "completion/complete",
        "elicitation/create",
        "logging/setLevel",
        "roots/list",
        "sampling/createMessage",
    ];
    let method = method.as_str();
    let notification = NOTIFICATIONS.contains(&method);
    (id.is_none() && !notification && !REQUESTS.contains(&method))
        || (method.starts_with("notifications/") && !notification)
}

impl<R, W> rmcp::transport::Transport<RoleClient> for StdioLines<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(request) = &item
            && matches!(request.request, ClientRequest::CallToolRequest(_))
        {
            if self.calls.len() >= CALLS_AWAITED {
                self.calls.clear();
            }
            self.calls.insert(request.id.clone());
        }
        self.write(&item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.read.read().await {
                Ok(LineRead::Line) => {}
                Ok(LineRead::Oversized) => {
                    tracing::error!("the server sent a line longer than {MAX_LINE} bytes; dropped");
                    continue;
                }
                Ok(LineRead::End) => return None,
                Err(e) => {
                    tracing::error!("reading from the server failed: {e}");
                    return None;
                }
            }
            match message(&mut self.calls, self.read.line()) {
                Read::Message(message) => return Some(message),
                // Written from a task of its own, so that a cancelled
                // `receive` never leaves half a message on the stream.
                Read::Answer(answer) => drop(tokio::spawn(self.write(&answer))),
                Read::Ignore => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let write = self.write.lock().await.take();
        match write {
            Some(mut write) => write.shutdown().await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage};
    use rmcp::transport::Transport;
    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, DuplexStream};

    /// A transport reading what the test writes as the server, and
    /// writing where the test reads.
    fn pair() -> (
        StdioLines<DuplexStream, DuplexStream>,
        DuplexStream,
        DuplexStream,
    ) {
        let (client_in, server_out) = tokio::io::duplex(1 << 16);
        let (client_out, server_in) = tokio::io::duplex(1 << 16);
        (
            StdioLines::new(client_in, client_out),
            server_out,
            server_in,
        )
    }

    fn call(id: i64) -> TxJsonRpcMessage<RoleClient> {
        ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                "echo",
            ))),
            RequestId::Number(id),
        )
    }

    async fn line(stream: &mut DuplexStream) -> Value {
        let mut bytes = Vec::new();
        loop {
            let byte = stream.read_u8().await.unwrap();
            if byte == b'\n' {
                return serde_json::from_slice(&bytes).unwrap();
            }
            bytes.push(byte);
        }
    }

    fn tool_result(message: RxJsonRpcMessage<RoleClient>) -> (RequestId, CallToolResult) {
        match message {
            JsonRpcMessage::Response(JsonRpcResponse {
                id,
                result: ServerResult::CallToolResult(result),
                ..
            }) => (id, result),
            other => panic!("not a tool's result: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_call_is_written_as_one_line_and_its_answer_read_as_a_tool_result() {
        let (mut transport, mut server_out, mut server_in) = pair();
        transport.send(call(7)).await.unwrap();
        let sent = line(&mut server_in).await;
        assert_eq!(sent["method"], "tools/call");
        assert_eq!(sent["id"], 7);
        // A byte order mark, a carriage return and blank lines are read
        // past; the answer comes back whatever its members' order.
        server_out
            .write_all(
                b"\n  \n\xEF\xBB\xBF{\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\
                  \"structuredContent\":{\"n\":1},\"isError\":true},\"id\":7,\"jsonrpc\":\"2.0\"}\r\n",
            )
            .await
            .unwrap();
        let (id, result) = tool_result(transport.receive().await.unwrap());
        assert_eq!(id, RequestId::Number(7));
        assert_eq!(result.is_error, Some(true));
        assert_eq!(result.structured_content, Some(json!({"n": 1})));
        assert_eq!(result.content.len(), 1);
        // The call is answered: a second answer with its id is read the
        // general way, as any other answer.
        assert!(transport.calls.is_empty());
    }

    #[tokio::test]
    async fn answers_to_other_requests_are_read_the_general_way() {
        let (mut transport, mut server_out, _server_in) = pair();
        // An id no call was sent with, with a result a tool's reading
        // would take: rmcp's own reading decides what it is.
        server_out
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"tools\":[]}}\n")
            .await
            .unwrap();
        match transport.receive().await.unwrap() {
            JsonRpcMessage::Response(JsonRpcResponse {
                result: ServerResult::ListToolsResult(listed),
                ..
            }) => assert!(listed.tools.is_empty()),
            other => panic!("{other:?}"),
        }
        // A call's answer that is an error is an error.
        transport.send(call(4)).await.unwrap();
        server_out
            .write_all(
                b"{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32602,\"message\":\"no such tool\"}}\n",
            )
            .await
            .unwrap();
        match transport.receive().await.unwrap() {
            JsonRpcMessage::Error(error) => assert_eq!(error.error.message, "no such tool"),
            other => panic!("{other:?}"),
        }
        assert!(transport.calls.is_empty());
    }

    #[tokio::test]
    async fn hostile_lines_are_dropped_or_answered_and_the_session_goes_on() {
        let (mut transport, mut server_out, mut server_in) = pair();
        transport.send(call(1)).await.unwrap();
        let _ = line(&mut server_in).await;
        let writer = tokio::spawn(async move {
            // A line past the bound, written in pieces: dropped as it
            // arrives.
            let chunk = vec![b'x'; 1 << 20];
            for _ in 0..(MAX_LINE >> 20) + 2 {
                server_out.write_all(&chunk).await.unwrap();
            }
            server_out.write_all(b"\n").await.unwrap();
            // Not JSON: ignored, not answered.
            server_out.write_all(b"{garbage\n").await.unwrap();
            // Nested past serde's depth: not JSON either.
            server_out
                .write_all(&[&[b'['; 100_000][..], b"\n"].concat())
                .await
                .unwrap();
            // Notifications outside MCP, and under notifications/ ones
            // MCP does not define, that do not read as messages: ignored.
            server_out
                .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"window/logMessage\",\"params\":5}\n")
                .await
                .unwrap();
            server_out
                .write_all(
                    b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/ours\",\"params\":[]}\n",
                )
                .await
                .unwrap();
            // One that reads is handed on, as rmcp's own reading does.
            server_out
                .write_all(
                    b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/ours\",\"params\":{}}\n",
                )
                .await
                .unwrap();
            // JSON that is no message: answered as an invalid request.
            server_out
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":{}}\n")
                .await
                .unwrap();
            // The call's answer still arrives.
            server_out
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n")
                .await
                .unwrap();
            server_out
        });
        match transport.receive().await.unwrap() {
            JsonRpcMessage::Notification(notification) => {
                let text = serde_json::to_string(&notification).unwrap();
                assert!(text.contains("notifications/ours"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        let (id, result) = tool_result(transport.receive().await.unwrap());
        assert_eq!(id, RequestId::Number(1));
        assert!(result.content.is_empty());
        let answered = line(&mut server_in).await;
        assert_eq!(answered["error"]["code"], -32600, "{answered}");
        assert!(answered.get("id").is_none(), "{answered}");
        // Nothing else was answered; the end of the stream ends the session.
        drop(writer.await.unwrap());
        assert!(transport.receive().await.is_none());
        transport.close().await.unwrap();
        let mut rest = Vec::new();
        server_in.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    }

    #[tokio::test]
    async fn a_cut_line_is_read_whole_across_cancelled_reads() {
        let (mut transport, mut server_out, _server_in) = pair();
        transport.send(call(2)).await.unwrap();
        server_out
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,")
            .await
            .unwrap();
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(20), transport.receive()).await;
        assert!(waited.is_err(), "half a line is no message");
        server_out
            .write_all(b"\"result\":{\"content\":[]}}\n")
            .await
            .unwrap();
        let (id, _) = tool_result(transport.receive().await.unwrap());
        assert_eq!(id, RequestId::Number(2));
    }

    #[tokio::test]
    async fn a_byte_order_mark_and_line_ends_are_not_part_of_a_line() {
        let (mut server_out, client_in) = tokio::io::duplex(1 << 10);
        let mut read = LineReader::new(client_in);
        server_out
            .write_all(b"\xEF\xBB\xBF{}\r\n\xEF\xBB\xBF\n{\"a\":1}\n\xEF\xBB")
            .await
            .unwrap();
        drop(server_out);
        let mut lines = Vec::new();
        while read.read().await.unwrap() == LineRead::Line {
            lines.push(read.line().to_vec());
        }
        // A line with only a mark is blank, and read past; a mark cut
        // short by the stream's end is no line.
        assert_eq!(lines, [&b"{}"[..], b"{\"a\":1}"]);
    }
}
