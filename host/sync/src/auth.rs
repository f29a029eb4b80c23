//! Signed requests between a client and a node (spec §8): four headers,
//! and an Ed25519 signature over the SHA-256 (hex) of a string naming the
//! request, its body, its time, a nonce and the node it is for.
//!
//! The string to sign is these lines joined by `\n`: `ryeos-request-v1`,
//! the method in capitals, the path (with `?` and the query's parameters
//! sorted and URL-encoded, when it has a query), the SHA-256 hex of the
//! raw body, the timestamp (Unix seconds), the nonce (32 hex digits), and
//! the audience (`fp:` and the node's fingerprint). A node checks all four
//! headers are there, the timestamp within 300 s of its clock, the key one
//! it authorizes, and the signature; then that the nonce was not seen in
//! the last six minutes, which is the caller's to keep (the [`Verified`]
//! request's `nonce_key` names it), in a store that outlives a restart.

use rye_cas::ContentHash;
use rye_integrity::{Keypair, PublicKey};

pub const KEY_ID: &str = "X-Rye-Key-Id";
pub const TIMESTAMP: &str = "X-Rye-Timestamp";
pub const NONCE: &str = "X-Rye-Nonce";
pub const SIGNATURE: &str = "X-Rye-Signature";

/// How far a request's timestamp may be from the node's clock.
pub const MAX_SKEW_SECS: u64 = 300;
/// How long a nonce is remembered: longer than a timestamp stays valid
/// either side of now, so a replay is refused by one check or the other.
pub const NONCE_WINDOW_SECS: u64 = 360;

const VERSION: &str = "ryeos-request-v1";

/// The parts of a request a signature covers.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// The raw query (after `?`), if any.
    pub query: Option<&'a str>,
    pub body: &'a [u8],
}

/// Why a request's signature was refused (each a 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the request is not signed: {0} is missing")]
    Missing(&'static str),
    #[error("{0}")]
    Malformed(String),
    #[error("the request's timestamp is {0} s from the node's clock, more than 300")]
    Stale(u64),
    #[error("key {0} is not authorized here")]
    UnknownKey(String),
    #[error("the signature does not verify")]
    BadSignature,
}

fn sha256_hex(bytes: &[u8]) -> String {
    ContentHash::of(bytes).hex()
}

/// Whether `c` stays as it is in a URL-encoded query (as Python's
/// `quote_plus` leaves it).
fn plain(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'~')
}

fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if plain(b) {
            out.push(b as char);
        } else if b == b' ' {
            out.push('+');
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode(text: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push(high * 16 + low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The parameters of a URL query, decoded, in their order.
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(pair), String::new()),
        })
        .collect()
}

/// The path as signed: with its query's parameters sorted and encoded
/// one way, so client and node agree however the query was spelled.
pub fn target(path: &str, query: Option<&str>) -> String {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return path.to_owned();
    };
    let mut pairs = query_pairs(query);
    pairs.sort();
    let encoded: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    format!("{path}?{}", encoded.join("&"))
}

/// The string a request's signature covers.
pub fn string_to_sign(
    request: &Request<'_>,
    timestamp: &str,
    nonce: &str,
    audience: &str,
) -> String {
    [
        VERSION,
        &request.method.to_ascii_uppercase(),
        &target(request.path, request.query),
        &sha256_hex(request.body),
        timestamp,
        nonce,
        audience,
    ]
    .join("\n")
}

/// The four headers that sign `request` with `key` for the node whose
/// fingerprint is `node` (without `fp:`), at `now` (Unix seconds), with
/// `nonce` (32 hex digits, random per request).
pub fn sign(
    key: &Keypair,
    request: &Request<'_>,
    node: &str,
    now: u64,
    nonce: &str,
) -> [(&'static str, String); 4] {
    let timestamp = now.to_string();
    let text = string_to_sign(request, &timestamp, nonce, &format!("fp:{node}"));
    let signature = key.sign_hash(&sha256_hex(text.as_bytes()));
    [
        (KEY_ID, format!("fp:{}", key.fingerprint())),
        (TIMESTAMP, timestamp),
        (NONCE, nonce.to_owned()),
        (
            SIGNATURE,
            base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, signature),
        ),
    ]
}

/// A request whose signature holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The signer's fingerprint (without `fp:`).
    pub fingerprint: String,
    pub timestamp: u64,
    /// What names this request's nonce in the replay store.
    pub nonce_key: String,
}

/// Checks the signature of `request`, its headers read by `header`, for
/// the node `node` at `now`; `key_of` gives the public key a fingerprint
/// is authorized with, if it is.
pub fn verify<'h>(
    header: impl Fn(&str) -> Option<&'h str>,
    request: &Request<'_>,
    node: &str,
    now: u64,
    key_of: impl Fn(&str) -> Option<PublicKey>,
) -> Result<Verified, AuthError> {
    let get = |name: &'static str| header(name).ok_or(AuthError::Missing(name));
    let (key_id, timestamp, nonce, signature) =
        (get(KEY_ID)?, get(TIMESTAMP)?, get(NONCE)?, get(SIGNATURE)?);
    let fingerprint = key_id
        .strip_prefix("fp:")
        .filter(|fp| !fp.is_empty() && fp.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| AuthError::Malformed(format!("{KEY_ID} {key_id:?} is not fp:<hex>")))?;
    let at: u64 = timestamp.parse().map_err(|_| {
        AuthError::Malformed(format!("{TIMESTAMP} {timestamp:?} is not Unix seconds"))
    })?;
    let skew = now.abs_diff(at);
    if skew > MAX_SKEW_SECS {
        return Err(AuthError::Stale(skew));
    }
    if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(AuthError::Malformed(format!(
            "{NONCE} is not 32 hex digits"
        )));
    }
    let signature: [u8; 64] = base64::Engine::decode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        signature.trim_end_matches('='),
    )
    .ok()
    .and_then(|bytes| bytes.try_into().ok())
    .ok_or_else(|| {
        AuthError::Malformed(format!("{SIGNATURE} is not a base64url Ed25519 signature"))
    })?;
    let key = key_of(fingerprint).ok_or_else(|| AuthError::UnknownKey(key_id.to_owned()))?;
    let text = string_to_sign(request, timestamp, nonce, &format!("fp:{node}"));
    if !key.verifies(&sha256_hex(text.as_bytes()), &signature) {
        return Err(AuthError::BadSignature);
    }
    Ok(Verified {
        fingerprint: fingerprint.to_owned(),
        timestamp: at,
        nonce_key: format!("{fingerprint}:{}", &sha256_hex(nonce.as_bytes())[..32]),
    })
}

#[cfg(test)]
mod tests;
