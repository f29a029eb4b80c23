//! The stdio transport: MCP messages one per line.
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
pub use rye_host::MAX_LINE;
use rye_host::{LineRead, LineReader};
use serde_json::Value;

use crate::jsonrpc::{INVALID_REQUEST, Line, error_body, read_message};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

/// MCP over a byte stream pair, one message per line, answering what
/// cannot be read (see the module docs).
pub struct LineTransport<R, W> {
    read: LineReader<R>,
    write: Arc<Mutex<W>>,
}

impl<R, W> LineTransport<R, W>
where
    R: tokio::io::AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        Self {
            read: LineReader::new(read),
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
            match self.read.read().await {
                Ok(LineRead::Line) => {}
                Ok(LineRead::Oversized) => {
                    self.answer(&error_body(
                        None,
                        INVALID_REQUEST,
                        &format!("Invalid request: a message longer than {MAX_LINE} bytes"),
                    ));
                    continue;
                }
                Ok(LineRead::End) => return None,
                Err(e) => {
                    tracing::error!("reading from the client failed: {e}");
                    return None;
                }
            }
            match read_message(self.read.line()) {
                Line::Message(message) => return Some(*message),
                Line::Answer(answer) => self.answer(&answer),
                Line::Ignore => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.write.lock().await.flush().await
    }
}
