//! The HTTP primitive: sends one planned request and returns the answer,
//! under limits the caller cannot talk it out of.
//!
//! - **Addresses.** Unless the request allows private addresses (all, or
//!   the ones it lists), every address a host name resolves to, and every
//!   address written in a URL, must be public: loopback, private, link-local (cloud metadata),
//!   shared, multicast and reserved ranges are refused, IPv4 carried in
//!   IPv6 included ([`non_public`]). A name that resolves to both a public
//!   and a private address is refused (one answer of a rebinding name is
//!   enough). No proxy is used: a proxy would resolve names where they
//!   cannot be checked.
//! - **Redirects** are followed here, hop by hop, each hop's URL checked
//!   like the first; `http` and `https` only. A 303 (and a 301 or 302 after
//!   a POST) continues as a GET without the body. A hop to another origin
//!   keeps only the headers that carry no credentials ([`CROSS_ORIGIN`]).
//! - **Retries** follow a failed connection or an answer of 429, 502, 503
//!   or 504, waiting the backoff (doubled each time, or the answer's
//!   `Retry-After` when longer); a refusal is never retried.
//! - **Limits.** One deadline covers the whole exchange: redirects,
//!   retries and the body. A body over the size limit fails the request
//!   before more of it is read. Each limit has a ceiling the request cannot
//!   raise.

mod address;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Method, StatusCode, Url};

pub use address::non_public;

/// The deadline when the request sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The body size limit when the request sets none.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 10 * 1024 * 1024;
/// Redirects followed when the request sets no limit.
pub const DEFAULT_MAX_REDIRECTS: u32 = 5;
/// Ceilings on what a request may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
pub const MAX_RESPONSE_BYTES: u64 = 256 * 1024 * 1024;
pub const MAX_REDIRECTS: u32 = 20;
pub const MAX_ATTEMPTS: u32 = 10;
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Headers kept when a redirect leads to another origin.
pub const CROSS_ORIGIN: &[&str] = &[
    "accept",
    "accept-language",
    "cache-control",
    "content-language",
    "content-type",
    "user-agent",
];

/// One request, as planned.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
    pub max_response_bytes: Option<u64>,
    /// `Some(0)`: a redirect is the answer, not followed.
    pub max_redirects: Option<u32>,
    /// Attempts in all, and the first wait.
    pub retry: Option<(u32, Duration)>,
    /// Which loopback, private and link-local addresses it may reach.
    pub private: Private,
}

/// Which non-public addresses a request may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Private {
    /// None: public addresses only.
    #[default]
    Refused,
    /// Any address.
    Allowed,
    /// These addresses, and public ones.
    Only(Vec<IpAddr>),
}

impl Private {
    /// Why `ip` may not be reached, or `None` when it may.
    fn refuses(&self, ip: IpAddr) -> Option<&'static str> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match self {
            Private::Allowed => None,
            Private::Only(listed) if listed.contains(&ip) => None,
            _ => non_public(ip),
        }
    }
}

/// The answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Its standard reason phrase, if the status has one.
    pub reason: Option<&'static str>,
    /// In the order received; a repeated header appears once per value.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The URL that answered, after any redirects.
    pub url: String,
    pub remote: Option<SocketAddr>,
    pub attempts: u32,
    pub redirects: u32,
    pub duration: Duration,
}

impl Response {
    /// The value of header `name` (case-insensitive), the first if repeated.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why no answer came back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("the request cannot be sent: {0}")]
    Invalid(String),
    #[error(
        "refused to connect to {host} ({address}): it is {reason}; a runtime allows such addresses with allow_private_addresses (true, or a list of addresses) in its signed config"
    )]
    Refused {
        host: String,
        address: String,
        reason: &'static str,
    },
    #[error("no answer within {} s (the deadline covers redirects, retries and the body)", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("the response body is larger than the limit of {limit} bytes{}", .announced.map(|n| format!(" (it announced {n})")).unwrap_or_default())]
    TooLarge { limit: u64, announced: Option<u64> },
    #[error("more than {limit} redirects (the last to {to})")]
    TooManyRedirects { limit: u32, to: String },
    #[error("a redirect from {from} leads nowhere a request may go: {reason}")]
    BadRedirect { from: String, reason: String },
    #[error("{url}: {message}")]
    Transport { url: String, message: String },
}

/// Sends `request`, following redirects and retrying as it says.
pub async fn send(request: &Request) -> Result<Response, HttpError> {
    let timeout = request.timeout.unwrap_or(DEFAULT_TIMEOUT).min(MAX_TIMEOUT);
    match tokio::time::timeout(timeout, exchange(request)).await {
        Ok(result) => result,
        Err(_) => Err(HttpError::Timeout(timeout)),
    }
}

async fn exchange(request: &Request) -> Result<Response, HttpError> {
    let started = Instant::now();
    let invalid = |what: String| HttpError::Invalid(what);
    let mut method = Method::from_bytes(request.method.as_bytes())
        .map_err(|_| invalid(format!("{:?} is not an HTTP method", request.method)))?;
    let mut url = Url::parse(&request.url)
        .map_err(|e| invalid(format!("{:?} is not a URL: {e}", request.url)))?;
    check_scheme(&url).map_err(invalid)?;
    let mut headers = HeaderMap::new();
    for (name, value) in &request.headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid(format!("{name:?} is not a header name")))?;
        let value = HeaderValue::from_str(value).map_err(|_| {
            invalid(format!(
                "header {name:?} holds a character a header may not"
            ))
        })?;
        headers.append(header, value);
    }
    if !headers.contains_key(reqwest::header::USER_AGENT) {
        headers.insert(
            reqwest::header::USER_AGENT,
            HeaderValue::from_static(concat!("rye/", env!("CARGO_PKG_VERSION"))),
        );
    }
    let mut body = request.body.clone();
    let limit = request
        .max_response_bytes
        .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES)
        .min(MAX_RESPONSE_BYTES);
    let max_redirects = request
        .max_redirects
        .unwrap_or(DEFAULT_MAX_REDIRECTS)
        .min(MAX_REDIRECTS);
    let client = client(&request.private)?;

    let mut attempts = 0;
    let mut redirects = 0;
    loop {
        check_literal(&url, &request.private)?;
        let (response, tries) =
            attempt(&client, request, &method, &url, &headers, body.as_deref()).await?;
        attempts += tries;
        let status = response.status();
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_owned);
        if let (true, Some(location)) = (status.is_redirection(), location)
            && max_redirects > 0
            && status != StatusCode::NOT_MODIFIED
        {
            let next = url.join(&location).map_err(|e| HttpError::BadRedirect {
                from: url.to_string(),
                reason: format!("Location {location:?} is not a URL: {e}"),
            })?;
            check_scheme(&next).map_err(|reason| HttpError::BadRedirect {
                from: url.to_string(),
                reason,
            })?;
            if redirects == max_redirects {
                return Err(HttpError::TooManyRedirects {
                    limit: max_redirects,
                    to: next.to_string(),
                });
            }
            redirects += 1;
            let to_get = status == StatusCode::SEE_OTHER
                || (matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND)
                    && method == Method::POST);
            if to_get {
                if method != Method::HEAD {
                    method = Method::GET;
                }
                body = None;
                headers.remove(reqwest::header::CONTENT_TYPE);
                headers.remove(reqwest::header::CONTENT_LENGTH);
            }
            if next.origin() != url.origin() {
                let kept: Vec<HeaderName> = headers
                    .keys()
                    .filter(|name| CROSS_ORIGIN.contains(&name.as_str()))
                    .cloned()
                    .collect();
                let mut filtered = HeaderMap::new();
                for name in kept {
                    for value in headers.get_all(&name) {
                        filtered.append(name.clone(), value.clone());
                    }
                }
                headers = filtered;
            }
            url = next;
            continue;
        }
        let remote = response.remote_addr();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = read_body(response, limit, &url).await?;
        return Ok(Response {
            status: status.as_u16(),
            reason: status.canonical_reason(),
            headers,
            body,
            url: url.to_string(),
            remote,
            attempts,
            redirects,
            duration: started.elapsed(),
        });
    }
}

/// One hop, with its retries. Returns the answer and the attempts made.
async fn attempt(
    client: &Client,
    request: &Request,
    method: &Method,
    url: &Url,
    headers: &HeaderMap,
    body: Option<&[u8]>,
) -> Result<(reqwest::Response, u32), HttpError> {
    let (max_attempts, mut wait) = request.retry.map_or((1, Duration::ZERO), |(n, wait)| {
        (n.clamp(1, MAX_ATTEMPTS), wait)
    });
    let mut tries = 0;
    loop {
        tries += 1;
        let mut builder = client
            .request(method.clone(), url.clone())
            .headers(headers.clone());
        if let Some(body) = body {
            builder = builder.body(body.to_vec());
        }
        let last = tries >= max_attempts;
        let pause = match builder.send().await {
            Ok(response) => {
                let retryable = matches!(response.status().as_u16(), 429 | 502 | 503 | 504);
                if !retryable || last {
                    return Ok((response, tries));
                }
                let asked = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                asked.map_or(wait, |asked| asked.max(wait))
            }
            Err(error) => {
                let error = transport_error(url, &error);
                let retryable = matches!(&error, HttpError::Transport { .. });
                if !retryable || last {
                    return Err(error);
                }
                wait
            }
        };
        tokio::time::sleep(pause.min(MAX_BACKOFF)).await;
        wait = wait.saturating_mul(2);
    }
}

async fn read_body(
    mut response: reqwest::Response,
    limit: u64,
    url: &Url,
) -> Result<Vec<u8>, HttpError> {
    let announced = response.content_length();
    if announced.is_some_and(|n| n > limit) {
        return Err(HttpError::TooLarge { limit, announced });
    }
    let mut body = Vec::with_capacity(announced.unwrap_or(0).min(1 << 20) as usize);
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() as u64 + chunk.len() as u64 > limit {
                    return Err(HttpError::TooLarge { limit, announced });
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(error) => return Err(transport_error(url, &error)),
        }
    }
}

fn check_scheme(url: &Url) -> Result<(), String> {
    match url.scheme() {
        "http" | "https" if url.host().is_some() => Ok(()),
        "http" | "https" => Err(format!("{url} names no host")),
        other => Err(format!("{url}: the scheme {other:?} is not http or https")),
    }
}

/// A URL that names its host by address is checked here; names are checked
/// by the resolver as they are resolved.
fn check_literal(url: &Url, private: &Private) -> Result<(), HttpError> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
        _ => return Ok(()),
    };
    match private.refuses(ip) {
        Some(reason) => Err(HttpError::Refused {
            host: url.host_str().unwrap_or_default().to_owned(),
            address: ip.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// What a failed send says, with a refusal by the resolver told as such.
fn transport_error(url: &Url, error: &reqwest::Error) -> HttpError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut messages = Vec::new();
    while let Some(current) = source {
        if let Some(refused) = current.downcast_ref::<RefusedName>() {
            return refused.0.clone();
        }
        let text = current.to_string();
        // The client's outer layer repeats the URL, said once below.
        let repeats_url = text.contains("for url (");
        if !repeats_url && !messages.iter().any(|m: &String| m.contains(&text)) {
            messages.push(text);
        }
        source = current.source();
    }
    let url = {
        let mut shown = url.clone();
        shown.set_query(None);
        shown.to_string()
    };
    HttpError::Transport {
        url,
        message: messages.join(": "),
    }
}

/// The resolver's refusal, carried through the client's error.
#[derive(Debug)]
struct RefusedName(HttpError);

impl std::fmt::Display for RefusedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for RefusedName {}

/// Resolves names with the system resolver and refuses any answer that
/// holds an address the policy does not let the request reach.
struct GuardedResolver {
    private: Private,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let private = self.private.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some((address, reason)) = found
                .iter()
                .find_map(|a| private.refuses(a.ip()).map(|r| (a.ip(), r)))
            {
                return Err(Box::new(RefusedName(HttpError::Refused {
                    host,
                    address: address.to_string(),
                    reason,
                }))
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(found.into_iter()) as Addrs)
        })
    }
}

/// A client per address policy, each built once: they keep their
/// connections and TLS sessions between requests.
fn client(private: &Private) -> Result<Client, HttpError> {
    static CLIENTS: OnceLock<Mutex<HashMap<Private, Client>>> = OnceLock::new();
    let clients = CLIENTS.get_or_init(|| {
        // The process's TLS provider, unless one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Mutex::new(HashMap::new())
    });
    let mut clients = clients.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(client) = clients.get(private) {
        return Ok(client.clone());
    }
    let client = Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(GuardedResolver {
            private: private.clone(),
        }))
        .build()
        .map_err(|e| HttpError::Invalid(format!("the HTTP client cannot be built: {e}")))?;
    // Few policies exist in one process; a bound keeps a pathological
    // caller from growing the map without end.
    if clients.len() >= 64 {
        clients.clear();
    }
    clients.insert(private.clone(), client.clone());
    Ok(client)
}
