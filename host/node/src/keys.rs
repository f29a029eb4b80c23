//! Who a node is and whom it lets in.
//!
//! The node's identity is an Ed25519 keypair kept in its base folder,
//! made on first start. Its public half is served as a document signed by
//! itself (`/public-key`), which a client pins on first use.
//!
//! A key the node authorizes is a TOML document (spec §8) whose first
//! line is a signature by the node's own key: a document changed or
//! written by anyone else is refused when used, wherever it is stored.
//!
//! ```toml
//! # rye:signed:2026-11-25T10:00:00Z:<sha256>:<sig>:<node fp>
//! fingerprint = "0123456789abcdef"
//! public_key = "ed25519:<standard base64 of the PEM>"
//! label = "bootstrap"
//! scopes = ["*"]
//! publish_namespaces = ["acme"]             # optional
//! created_via = "bootstrap"
//! created_at = "2026-11-25T10:00:00Z"
//! created_by = "fp:<node fp>"
//! expires_at = "2027-11-25T10:00:00Z"   # optional
//! ```

use std::path::Path;
use std::time::SystemTime;

use base64::Engine as _;
use rye_integrity::{Keypair, PublicKey, SignatureFormat, TrustStore, utc_timestamp};
use rye_space::ItemKind;
use serde_json::{Map, Value, json};

/// Every scope.
pub const ALL_SCOPES: &str = "*";
/// Pushing objects, projects and user spaces.
pub const SCOPE_PUSH: &str = "node.push";
/// Running items.
pub const SCOPE_EXECUTE: &str = "node.execute";
/// Reading objects, history and runs.
pub const SCOPE_READ: &str = "node.read";
/// Authorizing and revoking keys.
pub const SCOPE_MANAGE: &str = "node.auth.manage";

/// The node's own keypair: read from `dir`, or made there on first start.
pub fn identity(dir: &Path) -> Result<Keypair, String> {
    match Keypair::load(dir) {
        Ok(key) => Ok(key),
        Err(rye_integrity::IntegrityError::NoKeys { .. }) => {
            let key = Keypair::generate().map_err(|e| e.to_string())?;
            key.save(dir).map_err(|e| e.to_string())?;
            Ok(key)
        }
        Err(e) => Err(format!("the node's key in {}: {e}", dir.display())),
    }
}

/// `ed25519:` and the standard base64 of `key`'s PEM, as keys are written
/// on the wire.
pub fn wire_key(key: &PublicKey) -> String {
    format!(
        "ed25519:{}",
        base64::engine::general_purpose::STANDARD.encode(key.pem())
    )
}

/// The key written as [`wire_key`] writes it.
pub fn read_wire_key(text: &str) -> Result<PublicKey, String> {
    let encoded = text
        .strip_prefix("ed25519:")
        .ok_or_else(|| format!("{text:?} is not ed25519:<base64 PEM>"))?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|e| format!("the key is not base64: {e}"))?;
    let pem = String::from_utf8(pem).map_err(|_| "the key's PEM is not UTF-8".to_owned())?;
    PublicKey::from_pem(&pem).map_err(|e| e.to_string())
}

/// The node's `/public-key` document: its identity, signed by itself over
/// the canonical JSON of the other fields.
pub fn public_key_document(node: &Keypair, box_key: &str, created_at: &str) -> Value {
    let mut fields = Map::new();
    fields.insert("kind".into(), json!("identity/v1"));
    fields.insert(
        "principal_id".into(),
        json!(format!("fp:{}", node.fingerprint())),
    );
    fields.insert("signing_key".into(), json!(wire_key(node.public())));
    fields.insert("box_key".into(), json!(box_key));
    fields.insert("created_at".into(), json!(created_at));
    let body = Value::Object(fields.clone());
    let hash = rye_cas::ContentHash::of(&rye_cas::canonical::to_vec(&body)).hex();
    let sig = node.sign_hash(&hash);
    fields.insert(
        "_signature".into(),
        json!({
            "signer": format!("fp:{}", node.fingerprint()),
            "sig": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig),
            "signed_at": created_at,
        }),
    );
    Value::Object(fields)
}

/// Checks a `/public-key` document: its key is the one it names and it
/// signs the document. The node's key.
pub fn check_public_key_document(document: &Value) -> Result<PublicKey, String> {
    let text = |field: &str| {
        document
            .get(field)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("the node's identity has no {field}"))
    };
    let key = read_wire_key(text("signing_key")?)?;
    if text("principal_id")? != format!("fp:{}", key.fingerprint()) {
        return Err("the node's identity names another key than it carries".into());
    }
    let signature = document
        .get("_signature")
        .and_then(|s| s.get("sig"))
        .and_then(Value::as_str)
        .ok_or("the node's identity is not signed")?;
    let signature: [u8; 64] = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(signature.trim_end_matches('='))
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("the node's identity signature is not base64url Ed25519")?;
    let mut body = document.as_object().cloned().unwrap_or_default();
    body.remove("_signature");
    let hash = rye_cas::ContentHash::of(&rye_cas::canonical::to_vec(&Value::Object(body))).hex();
    if !key.verifies(&hash, &signature) {
        return Err("the node's identity signature does not verify".into());
    }
    Ok(key)
}

/// A key the node lets in.
#[derive(Debug, Clone)]
pub struct Authorized {
    pub fingerprint: String,
    pub key: PublicKey,
    pub label: String,
    pub scopes: Vec<String>,
    /// The item namespaces it may publish under.
    pub publish_namespaces: Vec<String>,
    /// `YYYY-MM-DDTHH:MM:SSZ`, if it expires.
    pub expires_at: Option<String>,
}

impl Authorized {
    /// Whether it may do what `scope` names at `now`.
    pub fn allows(&self, scope: &str, now: SystemTime) -> bool {
        let live = self
            .expires_at
            .as_deref()
            .is_none_or(|at| utc_timestamp(now).as_str() < at);
        live && self.scopes.iter().any(|s| s == ALL_SCOPES || s == scope)
    }
}

fn format() -> SignatureFormat {
    SignatureFormat::new("#", "", false)
}

/// What an authorization grants a key.
#[derive(Debug, Clone, Copy)]
pub struct Grant<'a> {
    pub label: &'a str,
    pub scopes: &'a [String],
    /// The item namespaces the key may publish under (`acme`,
    /// `acme/tools`), for a node that serves a registry.
    pub publish_namespaces: &'a [String],
    /// `YYYY-MM-DDTHH:MM:SSZ`, if it expires.
    pub expires_at: Option<&'a str>,
    /// How it came to be (`bootstrap`, `admin`, `admin:fp:…`).
    pub created_via: &'a str,
}

impl<'a> Grant<'a> {
    /// `scopes` for `label`, made `created_via`, nothing else.
    pub fn of(label: &'a str, scopes: &'a [String], created_via: &'a str) -> Self {
        Grant {
            label,
            scopes,
            publish_namespaces: &[],
            expires_at: None,
            created_via,
        }
    }
}

/// Whether `namespace` is one an item id can start with: plain names
/// (letters, digits, `_`, `-`, `.`) joined by `/`.
pub fn is_namespace(namespace: &str) -> bool {
    !namespace.is_empty()
        && namespace.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        })
}

/// The document authorizing `key` as `grant` says, signed by `node`.
pub fn authorization(
    node: &Keypair,
    key: &PublicKey,
    grant: &Grant<'_>,
    now: SystemTime,
) -> Result<String, String> {
    if let Some(at) = grant
        .expires_at
        .filter(|at| !rye_integrity::is_utc_timestamp(at))
    {
        return Err(format!("expires_at {at:?} is not YYYY-MM-DDTHH:MM:SSZ"));
    }
    if let Some(bad) = grant.publish_namespaces.iter().find(|n| !is_namespace(n)) {
        return Err(format!(
            "publish namespace {bad:?} is not plain names joined by /"
        ));
    }
    let list =
        |items: &[String]| toml::Value::Array(items.iter().map(|s| s.as_str().into()).collect());
    let mut table = toml::Table::new();
    table.insert("fingerprint".into(), key.fingerprint().into());
    table.insert("public_key".into(), wire_key(key).into());
    table.insert("label".into(), grant.label.into());
    table.insert("scopes".into(), list(grant.scopes));
    if !grant.publish_namespaces.is_empty() {
        table.insert("publish_namespaces".into(), list(grant.publish_namespaces));
    }
    table.insert("created_via".into(), grant.created_via.into());
    table.insert("created_at".into(), utc_timestamp(now).into());
    table.insert(
        "created_by".into(),
        format!("fp:{}", node.fingerprint()).into(),
    );
    if let Some(at) = grant.expires_at {
        table.insert("expires_at".into(), at.into());
    }
    let text = toml::to_string(&table).map_err(|e| e.to_string())?;
    rye_integrity::sign_text(&text, &format(), node, now).map_err(|e| e.to_string())
}

/// Reads an authorization document, which must be signed by `node` and
/// name the key it carries.
pub fn read_authorization(document: &str, node: &PublicKey) -> Result<Authorized, String> {
    let trust = TrustStore::builder().anchor(node.clone(), "node").build();
    rye_integrity::verify_text(document, ItemKind::Config, &format(), &trust)
        .map_err(|e| format!("the key's authorization is not the node's: {e}"))?;
    let body = rye_integrity::strip_signature(document, &format());
    let table: toml::Table = toml::from_str(&body).map_err(|e| e.to_string())?;
    let text = |field: &str| {
        table
            .get(field)
            .and_then(toml::Value::as_str)
            .ok_or_else(|| format!("the authorization has no {field}"))
    };
    let key = read_wire_key(text("public_key")?)?;
    let fingerprint = text("fingerprint")?.to_owned();
    if key.fingerprint() != fingerprint {
        return Err(format!(
            "the authorization names {fingerprint} but carries key {}",
            key.fingerprint()
        ));
    }
    let list = |field: &str| -> Result<Option<Vec<String>>, String> {
        match table.get(field) {
            None => Ok(None),
            Some(list) => list
                .as_array()
                .and_then(|items| {
                    items
                        .iter()
                        .map(|s| s.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                })
                .map(Some)
                .ok_or_else(|| format!("the authorization's {field} are not a list of text")),
        }
    };
    let scopes = list("scopes")?.unwrap_or_else(|| vec![ALL_SCOPES.to_owned()]);
    let publish_namespaces = list("publish_namespaces")?.unwrap_or_default();
    let expires_at = match table.get("expires_at") {
        None => None,
        Some(at) => Some(
            at.as_str()
                .filter(|at| rye_integrity::is_utc_timestamp(at))
                .ok_or("the authorization's expires_at is not YYYY-MM-DDTHH:MM:SSZ")?
                .to_owned(),
        ),
    };
    Ok(Authorized {
        fingerprint,
        key,
        label: text("label").unwrap_or("").to_owned(),
        scopes,
        publish_namespaces,
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_authorization_holds_only_as_the_node_signed_it() {
        let node = Keypair::generate().unwrap();
        let user = Keypair::generate().unwrap();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let namespaces = ["acme".to_owned(), "acme/tools".to_owned()];
        let doc = authorization(
            &node,
            user.public(),
            &Grant {
                publish_namespaces: &namespaces,
                expires_at: Some("2030-01-01T00:00:00Z"),
                ..Grant::of("alice", &[SCOPE_PUSH.to_owned()], "test")
            },
            now,
        )
        .unwrap();
        assert!(doc.starts_with("# rye:signed:"), "{doc}");
        let read = read_authorization(&doc, node.public()).unwrap();
        assert_eq!(read.fingerprint, user.fingerprint());
        assert!(read.allows(SCOPE_PUSH, now));
        assert_eq!(read.publish_namespaces, namespaces);
        assert!(!read.allows(SCOPE_EXECUTE, now), "a scope not granted");
        let later = SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        assert!(!read.allows(SCOPE_PUSH, later), "expired");

        // Widened scopes, written by hand: the signature no longer holds.
        let widened = doc.replace("\"node.push\"", "\"*\"");
        assert!(read_authorization(&widened, node.public()).is_err());
        // Signed by another key than the node's.
        let other = Keypair::generate().unwrap();
        let forged = authorization(
            &other,
            user.public(),
            &Grant::of("alice", &["*".into()], "x"),
            now,
        )
        .unwrap();
        let err = read_authorization(&forged, node.public()).unwrap_err();
        assert!(err.contains("not the node's"), "{err}");
        let bad = |grant: Grant<'_>| authorization(&node, user.public(), &grant, now).is_err();
        assert!(bad(Grant {
            expires_at: Some("tomorrow"),
            ..Grant::of("a", &[], "x")
        }));
        for namespace in ["", "a//b", "../x", "a/./b", "a b", "/abs"] {
            assert!(
                bad(Grant {
                    publish_namespaces: &[namespace.to_owned()],
                    ..Grant::of("a", &[], "x")
                }),
                "{namespace:?}"
            );
        }
    }

    #[test]
    fn the_identity_document_checks_and_a_changed_one_does_not() {
        let node = Keypair::generate().unwrap();
        let boxed = rye_seal::BoxKey::generate().wire();
        let doc = public_key_document(&node, &boxed, "2026-11-25T00:00:00Z");
        let key = check_public_key_document(&doc).unwrap();
        assert_eq!(key.fingerprint(), node.fingerprint());
        let mut swapped = doc.clone();
        let other = Keypair::generate().unwrap();
        swapped["signing_key"] = json!(wire_key(other.public()));
        assert!(check_public_key_document(&swapped).is_err());
        let mut renamed = doc;
        renamed["created_at"] = json!("2030-01-01T00:00:00Z");
        assert!(check_public_key_document(&renamed).is_err());
    }
}
