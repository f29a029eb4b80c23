//! API keys, the older spec's bearer tokens: `Authorization: Bearer
//! rye_sk_<64 hex>` in place of a signed request, for callers that cannot
//! sign (a CI system's secret store, `curl`). A key that may sign
//! requests mints them for itself with scopes within its own
//! (`node:push`, `node:execute`, `node:read`, `node:*`; none: all three),
//! and an optional expiry. The token is shown once; the database keeps
//! its SHA-256. An API key acts for its key only while that key may do
//! the same, never manages keys, and never mints or revokes API keys.
//! A bearer token carries no nonce: it is for TLS connections.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Answer, Node, Read, Reply, Signed, error, internal, json_body, now_secs, ok};
use crate::db::api_keys::ApiKey;
use crate::keys::{self, SCOPE_EXECUTE, SCOPE_MANAGE, SCOPE_PUSH, SCOPE_READ};

/// What every token starts with.
const PREFIX: &str = "rye_sk_";

/// The scopes an API key may be given, and the node's scope each is.
const SCOPES: [(&str, &str); 3] = [
    ("node:push", SCOPE_PUSH),
    ("node:execute", SCOPE_EXECUTE),
    ("node:read", SCOPE_READ),
];

/// The most API keys one key may have that are not revoked.
const MOST: usize = 100;

fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Whether an API key's `scopes` grant the node's `scope`.
fn grants(scopes: &[String], scope: &str) -> bool {
    scopes.is_empty()
        || scopes.iter().any(|s| {
            s == "node:*"
                || SCOPES
                    .iter()
                    .any(|(name, node_scope)| s == name && *node_scope == scope)
        })
}

/// The principal an `Authorization: Bearer` header acts for, checked for
/// `scope`, and the API key's id.
pub(super) async fn bearer(
    node: &Node,
    headers: &HeaderMap,
    scope: &str,
) -> Result<(String, String), Reply> {
    let unauthorized = |message: &str| error(StatusCode::UNAUTHORIZED, message);
    let token = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| unauthorized("Authorization is not Bearer rye_sk_…"))?;
    let well_formed = token.strip_prefix(PREFIX).is_some_and(|rest| {
        rest.len() == 64
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if !well_formed {
        return Err(unauthorized("not an API key (rye_sk_ and 64 hex digits)"));
    }
    let key = node
        .db
        .api_key(&token_hash(token))
        .await
        .map_err(internal)?
        .ok_or_else(|| unauthorized("no such API key"))?;
    let now = now_secs() as i64;
    if key.revoked_at.is_some() {
        return Err(unauthorized(&format!("API key {} was revoked", key.key_id)));
    }
    if key.expires_at.is_some_and(|at| at <= now) {
        return Err(unauthorized(&format!("API key {} expired", key.key_id)));
    }
    if scope == SCOPE_MANAGE {
        return Err(error(
            StatusCode::FORBIDDEN,
            "an API key may not manage keys: sign the request",
        ));
    }
    if !grants(&key.scopes, scope) {
        return Err(error(
            StatusCode::FORBIDDEN,
            format!("API key {} may not {scope}", key.key_id),
        ));
    }
    let owner_allows = match node
        .db
        .authorized_key(&key.principal)
        .await
        .map_err(internal)?
    {
        Some(document) => keys::read_authorization(&document, node.key.public())
            .is_ok_and(|a| a.allows(scope, SystemTime::now())),
        None => false,
    };
    if !owner_allows {
        return Err(error(
            StatusCode::FORBIDDEN,
            format!(
                "API key {} acts for fp:{}, which may not {scope} (any longer)",
                key.key_id, key.principal
            ),
        ));
    }
    node.over_limit(&key.principal)?;
    Ok((key.principal, key.key_id))
}

/// A refusal of what only a signed request may do.
fn signed_only(call: &Signed<Read>, what: &str) -> Result<(), Reply> {
    match &call.api_key {
        Some(id) => Err(error(
            StatusCode::FORBIDDEN,
            format!("{what} takes a signed request, not an API key ({id})"),
        )),
        None => Ok(()),
    }
}

fn described(key: &ApiKey) -> Value {
    let at = |secs: i64| {
        rye_integrity::utc_timestamp(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0) as u64),
        )
    };
    json!({
        "key_id": key.key_id,
        "label": key.label,
        "scopes": key.scopes,
        "created_at": at(key.created_at),
        "expires_at": key.expires_at.map(at),
        "revoked_at": key.revoked_at.map(at),
    })
}

/// `POST /api-keys {label, scopes?, expires_at?}`: a new API key for the
/// signing key; its token, this once.
pub(super) async fn create(State(node): State<Arc<Node>>, call: Signed<Read>) -> Answer {
    signed_only(&call, "minting an API key")?;
    let body = json_body(&call.body)?;
    let bad = |m: String| error(StatusCode::BAD_REQUEST, m);
    let label = body
        .get("label")
        .and_then(Value::as_str)
        .filter(|l| !l.trim().is_empty() && l.chars().count() <= 200)
        .ok_or_else(|| bad("label is text of 1 to 200 characters".into()))?
        .to_owned();
    let scopes: Vec<String> = match body.get("scopes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) if list.len() <= 8 => list
            .iter()
            .map(|s| {
                s.as_str()
                    .filter(|s| *s == "node:*" || SCOPES.iter().any(|(name, _)| name == s))
                    .map(str::to_owned)
            })
            .collect::<Option<_>>()
            .ok_or_else(|| {
                bad("scopes is a list of node:push, node:execute, node:read or node:*".into())
            })?,
        Some(_) => return Err(bad("scopes is a list of at most 8".into())),
    };
    let now = now_secs() as i64;
    let expires_at = match body.get("expires_at") {
        None | Some(Value::Null) => None,
        Some(Value::String(at)) => {
            let secs = rye_integrity::parse_utc_timestamp(at)
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs() as i64)
                .ok_or_else(|| bad(format!("expires_at {at:?} is not YYYY-MM-DDTHH:MM:SSZ")))?;
            if secs <= now {
                return Err(bad(format!("expires_at {at} is past")));
            }
            Some(secs)
        }
        Some(_) => return Err(bad("expires_at is YYYY-MM-DDTHH:MM:SSZ".into())),
    };
    // What it is given, its key must hold now.
    let minter = node
        .db
        .authorized_key(&call.principal)
        .await
        .map_err(internal)?
        .and_then(|d| keys::read_authorization(&d, node.key.public()).ok())
        .ok_or_else(|| error(StatusCode::UNAUTHORIZED, "the key is no longer authorized"))?;
    for (name, scope) in SCOPES {
        if grants(&scopes, scope) && !minter.allows(scope, SystemTime::now()) {
            return Err(error(
                StatusCode::FORBIDDEN,
                format!(
                    "fp:{} may not {scope}, so its API keys may not have {name}",
                    call.principal
                ),
            ));
        }
    }
    let live = node
        .db
        .api_keys(&call.principal)
        .await
        .map_err(internal)?
        .iter()
        .filter(|k| k.revoked_at.is_none() && k.expires_at.is_none_or(|at| at > now))
        .count();
    if live >= MOST {
        return Err(error(
            StatusCode::CONFLICT,
            format!("this key has {MOST} API keys in use; revoke one first"),
        ));
    }
    let mut bytes = [0u8; 40];
    getrandom::fill(&mut bytes).map_err(internal)?;
    let token = format!("{PREFIX}{}", hex::encode(&bytes[..32]));
    let key = ApiKey {
        key_id: format!("ak_{}", hex::encode(&bytes[32..])),
        principal: call.principal.clone(),
        label,
        scopes,
        created_at: now,
        expires_at,
        revoked_at: None,
    };
    node.db
        .create_api_key(&key, &token_hash(&token))
        .await
        .map_err(internal)?;
    let mut answer = described(&key);
    answer["token"] = json!(token);
    answer["message"] = json!("the token is shown this once; the node keeps only its hash");
    ok(answer)
}

/// `GET /api-keys`: the caller's API keys, never their tokens.
pub(super) async fn list(State(node): State<Arc<Node>>, call: Signed<Read>) -> Answer {
    let keys = node.db.api_keys(&call.principal).await.map_err(internal)?;
    ok(json!({"api_keys": keys.iter().map(described).collect::<Vec<_>>()}))
}

/// `DELETE /api-keys/{key_id}`.
pub(super) async fn revoke(
    State(node): State<Arc<Node>>,
    UrlPath(key_id): UrlPath<String>,
    call: Signed<Read>,
) -> Answer {
    signed_only(&call, "revoking an API key")?;
    if node
        .db
        .revoke_api_key(&call.principal, &key_id, now_secs() as i64)
        .await
        .map_err(internal)?
    {
        ok(json!({"revoked": key_id}))
    } else {
        Err(error(
            StatusCode::NOT_FOUND,
            format!("no API key {key_id} of this key's in use"),
        ))
    }
}
