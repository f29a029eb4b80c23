//! Outgoing HTTP for command tools. A tool that imports `wasi:http`
//! reaches only the hosts its grants list, and only within its run's
//! deadline: a request to any other host is denied before a socket
//! opens (the tool sees `HTTP-request-denied`, the run's report names the
//! host), and a server that stalls cannot hold the run past its deadline,
//! since host code waiting on the network does not see the engine's
//! epoch.

use std::fmt;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// A host a tool may send requests to: a name or an address, or
/// `*.` and a domain for any name under it; with a port, only that
/// port, else only its scheme's own (80 for `http`, 443 for `https`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    /// Lowercase; `*.` first for a domain's names.
    host: String,
    port: Option<u16>,
}

impl FromStr for HostRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{text:?} is not a host: {why}");
        let (host, port) = match text.rsplit_once(':') {
            // An IPv6 address is bracketed; its colons are not a port's.
            Some((host, port)) if !port.contains(']') => {
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("its port is not a number from 1 to 65535"))?;
                (host, Some(port))
            }
            _ => (text, None),
        };
        let host = host.to_ascii_lowercase();
        let name = host.strip_prefix("*.").unwrap_or(&host);
        let bracketed = name.starts_with('[') && name.ends_with(']') && name.len() > 2;
        let plain = !name.is_empty()
            && name
                .split('.')
                .all(|label| !label.is_empty() && label.len() <= 63)
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if bracketed {
            if host.starts_with("*.") {
                return Err(bad("an address has no names under it"));
            }
            name[1..name.len() - 1]
                .parse::<std::net::Ipv6Addr>()
                .map_err(|_| bad("the bracketed part is not an IPv6 address"))?;
        } else if !plain || name.len() > 253 {
            return Err(bad(
                "a name is dot-separated letters, digits and hyphens (a wildcard only as `*.`)",
            ));
        }
        Ok(Self { host, port })
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

impl HostRule {
    /// Whether a request to `host` (lowercase) on `port` is allowed,
    /// `default_port` being its scheme's.
    fn allows(&self, host: &str, port: u16, default_port: u16) -> bool {
        let host_matches = match self.host.strip_prefix("*.") {
            Some(domain) => host
                .strip_suffix(domain)
                .is_some_and(|under| under.len() > 1 && under.ends_with('.')),
            None => host == self.host,
        };
        host_matches && port == self.port.unwrap_or(default_port)
    }
}

/// How often a wait on the network looks at the run's cancel flag.
const CANCEL_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// The network side of one run: what it may reach, until when, and what
/// it asked for and was denied.
pub(crate) struct NetHooks {
    allowed: Arc<[HostRule]>,
    until: Instant,
    cancel: Option<Arc<AtomicBool>>,
    /// Each request denied, as `scheme://host:port`.
    pub(crate) denied: Vec<String>,
    /// Set when a request or a response body was cut at the deadline.
    pub(crate) past_deadline: Arc<AtomicBool>,
}

impl NetHooks {
    /// Nothing reachable.
    pub(crate) fn none() -> Self {
        Self::new(Arc::from([]), Instant::now(), None)
    }

    pub(crate) fn new(
        allowed: Arc<[HostRule]>,
        until: Instant,
        cancel: Option<Arc<AtomicBool>>,
    ) -> Self {
        Self {
            allowed,
            until,
            cancel,
            denied: Vec::new(),
            past_deadline: Arc::new(AtomicBool::new(false)),
        }
    }
}

type Sent = Box<dyn Future<Output = Result<(http::Response<WasiBody>, Io), Error>> + Send>;
type Io = Box<dyn Future<Output = Result<(), Error>> + Send>;

impl WasiHttpHooks for NetHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_errors: Io,
    ) -> Sent {
        let uri = request.uri();
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let default_port = if https { 443 } else { 80 };
        let host = uri.host().unwrap_or_default().to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(default_port);
        if !self
            .allowed
            .iter()
            .any(|rule| rule.allows(&host, port, default_port))
        {
            let scheme = if https { "https" } else { "http" };
            self.denied.push(format!("{scheme}://{host}:{port}"));
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let watch = Watch {
            until: self.until,
            cancel: self.cancel.clone(),
            past_deadline: Arc::clone(&self.past_deadline),
        };
        Box::new(async move {
            let send = wasmtime_wasi_http::default_send_request(request, options);
            tokio::pin!(send);
            let mut checks = tokio::time::interval(CANCEL_CHECK);
            let (response, io) = loop {
                tokio::select! {
                    sent = &mut send => break sent?,
                    _ = checks.tick() => {
                        if watch.ended() {
                            return Err(Error::ConnectionReadTimeout);
                        }
                    }
                }
            };
            let response = response.map(|body| {
                Cut {
                    inner: body.boxed_unsync(),
                    checks: tokio::time::interval(CANCEL_CHECK),
                    watch,
                }
                .boxed_unsync()
            });
            Ok((response, Box::new(io) as Io))
        })
    }
}

/// What ends a run's wait on the network: its deadline, or its cancel.
struct Watch {
    until: Instant,
    cancel: Option<Arc<AtomicBool>>,
    past_deadline: Arc<AtomicBool>,
}

impl Watch {
    /// Whether the wait is to end now; a deadline passed is noted, so the
    /// run is reported as stopped by it.
    fn ended(&self) -> bool {
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return true;
        }
        let past = Instant::now() >= self.until;
        if past {
            self.past_deadline.store(true, Ordering::Relaxed);
        }
        past
    }
}

/// A response body that ends in an error at the run's deadline or
/// cancel.
struct Cut {
    inner: WasiBody,
    checks: tokio::time::Interval,
    watch: Watch,
}

impl Body for Cut {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        while self.checks.poll_tick(cx).is_ready() {
            if self.watch.ended() {
                return Poll::Ready(Some(Err(Error::ConnectionReadTimeout)));
            }
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> HostRule {
        text.parse().unwrap()
    }

    #[test]
    fn a_rule_allows_its_host_on_its_port_only() {
        assert!(rule("api.example.com").allows("api.example.com", 443, 443));
        assert!(!rule("api.example.com").allows("api.example.com", 8443, 443));
        assert!(!rule("api.example.com").allows("example.com", 443, 443));
        assert!(!rule("api.example.com").allows("api.example.com.evil.net", 443, 443));
        assert!(rule("127.0.0.1:8080").allows("127.0.0.1", 8080, 80));
        assert!(!rule("127.0.0.1:8080").allows("127.0.0.1", 80, 80));
        assert!(rule("API.Example.com").allows("api.example.com", 80, 80));
        assert!(rule("[::1]:9000").allows("[::1]", 9000, 80));
    }

    #[test]
    fn a_wildcard_allows_names_under_its_domain_and_not_the_domain() {
        let any = rule("*.example.com");
        assert!(any.allows("a.example.com", 443, 443));
        assert!(any.allows("a.b.example.com", 443, 443));
        assert!(!any.allows("example.com", 443, 443));
        assert!(!any.allows("badexample.com", 443, 443));
        assert!(!any.allows(".example.com", 443, 443));
    }

    #[test]
    fn what_is_not_a_host_is_refused_with_the_reason() {
        for bad in [
            "",
            "*",
            "*.",
            "a..b",
            "http://example.com",
            "example.com/path",
            "example.com:0",
            "example.com:99999",
            "ex ample.com",
            "a.*.com",
            "*.[::1]",
            "[nope]",
            "exa_mple.com",
        ] {
            let error = bad.parse::<HostRule>().unwrap_err();
            assert!(error.contains("is not a host"), "{bad}: {error}");
        }
        assert_eq!(rule("Example.COM:8080").to_string(), "example.com:8080");
    }
}
