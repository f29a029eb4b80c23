//! Fetches a URL with `wasi:http` and answers with its status, type and
//! text.
//!
//! A `wasi:cli` command: the parameters come as JSON on stdin
//! (`{"url": "https://api.example.com/items", "max_bytes": 65536}`) and
//! the answer goes out as JSON on stdout. Its item lists the hosts it may
//! reach; a request to any other is denied by the host before a socket
//! opens, and the tool says so.

use std::io::Read as _;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, IncomingResponse, Method, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

/// The body kept when the caller does not say.
const DEFAULT_MAX: u64 = 1 << 20;
/// The most a caller may ask to keep.
const MOST: u64 = 16 << 20;

/// A URL taken apart as `wasi:http` wants it.
struct Target {
    scheme: Scheme,
    authority: String,
    path_with_query: String,
}

fn target(url: &str) -> Result<Target, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{url:?} is not a URL (it has no scheme)"))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => return Err(format!("{other}: only http and https are fetched")),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.is_empty() || authority.contains('@') {
        return Err(format!("{url:?} names no host (or carries credentials)"));
    }
    let tail = tail.split('#').next().unwrap_or_default();
    let path_with_query = match tail {
        "" => "/".to_owned(),
        t if t.starts_with('?') => format!("/{t}"),
        t => t.to_owned(),
    };
    Ok(Target {
        scheme,
        authority: authority.to_owned(),
        path_with_query,
    })
}

/// Why a request failed, in words.
fn explain(error: &ErrorCode) -> String {
    match error {
        ErrorCode::HttpRequestDenied => {
            "the host is not among those this tool's item lets it reach".to_owned()
        }
        ErrorCode::DnsError(_) => "the host's name did not resolve".to_owned(),
        ErrorCode::ConnectionRefused => "the connection was refused".to_owned(),
        ErrorCode::ConnectionTimeout | ErrorCode::ConnectionReadTimeout => {
            "the server did not answer in time".to_owned()
        }
        other => format!("{other:?}"),
    }
}

fn send(target: &Target) -> Result<IncomingResponse, String> {
    let headers = Fields::from_list(&[
        ("user-agent".to_owned(), b"rye-http-fetch".to_vec()),
        ("accept".to_owned(), b"*/*".to_vec()),
    ])
    .map_err(|e| format!("headers: {e:?}"))?;
    let request = OutgoingRequest::new(headers);
    let set = [
        request.set_method(&Method::Get),
        request.set_scheme(Some(&target.scheme)),
        request.set_authority(Some(&target.authority)),
        request.set_path_with_query(Some(&target.path_with_query)),
    ];
    if set.iter().any(Result::is_err) {
        return Err(format!(
            "{}{} is not a valid request target",
            target.authority, target.path_with_query
        ));
    }
    let pending = outgoing_handler::handle(request, None).map_err(|e| explain(&e))?;
    pending.subscribe().block();
    match pending.get() {
        Some(Ok(Ok(response))) => Ok(response),
        Some(Ok(Err(e))) => Err(explain(&e)),
        _ => Err("the response never came".to_owned()),
    }
}

/// Up to `max` bytes of the body; whether there was more.
fn body(response: &IncomingResponse, max: u64) -> Result<(Vec<u8>, bool), String> {
    let body = response
        .consume()
        .map_err(|()| "the body was taken already")?;
    let stream = body.stream().map_err(|()| "the body has no stream")?;
    let mut kept = Vec::new();
    loop {
        let room = (max + 1).saturating_sub(kept.len() as u64).min(64 * 1024);
        match stream.blocking_read(room) {
            Ok(chunk) => {
                kept.extend_from_slice(&chunk);
                if kept.len() as u64 > max {
                    kept.truncate(max as usize);
                    return Ok((kept, true));
                }
            }
            Err(StreamError::Closed) => return Ok((kept, false)),
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(format!("reading the body: {}", e.to_debug_string()));
            }
        }
    }
}

fn fetch(parameters: &serde_json::Value) -> Result<serde_json::Value, String> {
    let url = parameters["url"]
        .as_str()
        .ok_or("url is required: the address to fetch")?;
    let max = match &parameters["max_bytes"] {
        serde_json::Value::Null => DEFAULT_MAX,
        n => n
            .as_u64()
            .filter(|n| (1..=MOST).contains(n))
            .ok_or(format!("max_bytes is a whole number from 1 to {MOST}"))?,
    };
    let target = target(url)?;
    let response = send(&target).map_err(|why| format!("{url}: {why}"))?;
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .first()
        .map(|v| String::from_utf8_lossy(v).into_owned());
    let (bytes, truncated) = body(&response, max).map_err(|why| format!("{url}: {why}"))?;
    let mut answer = serde_json::json!({
        "url": url,
        "status": status,
        "content_type": content_type,
        "length": bytes.len(),
        "truncated": truncated,
    });
    match String::from_utf8(bytes) {
        Ok(text) => answer["text"] = text.into(),
        Err(_) => answer["binary"] = true.into(),
    }
    Ok(answer)
}

fn main() {
    let mut input = String::new();
    let parameters = std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_str(&input).map_err(|e| e.to_string()));
    match parameters.and_then(|p| fetch(&p)) {
        Ok(answer) => println!("{answer}"),
        Err(why) => {
            eprintln!("{why}");
            std::process::exit(1);
        }
    }
}
