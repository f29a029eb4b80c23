//! Sealed secrets for a node's runs (spec §12): a client seals
//! `{NAME: value}` to the node's X25519 box key, and only the node opens
//! it, right before a run, into that run's environment.
//!
//! An envelope is `{version: 1, recipient: "fp:<box fp>", enc: <base64url
//! ephemeral public key>, ciphertext: <base64url>, aad_fields: {kind:
//! "execution-secrets/v1", recipient}}`. The key is HKDF-SHA256 (no salt,
//! info `execution-secrets/v1`, 32 bytes) of the X25519 agreement between
//! the ephemeral key and the box key; the cipher ChaCha20-Poly1305 with a
//! zero nonce (every envelope has a key of its own), the associated data
//! the canonical JSON of `aad_fields`, the plaintext the canonical JSON of
//! the variables. Box keys are kept as the original keeps them: the raw 32
//! bytes as unpadded base64url text in `box_key.pem` (0600) and
//! `box_pub.pem`; a box key's fingerprint is the first 16 hex digits of
//! the SHA-256 of its raw public bytes.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{ChaCha20Poly1305, KeyInit, Nonce};
use hkdf::Hkdf;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use x25519_dalek::{PublicKey, StaticSecret};

/// The envelope's kind, its HKDF info and its associated data's `kind`.
pub const KIND: &str = "execution-secrets/v1";

/// At most this many variables in one envelope...
pub const MAX_VARS: usize = 256;
/// ...each value at most this long...
pub const MAX_VALUE: usize = 64 << 10;
/// ...and names and values together at most this long.
pub const MAX_TOTAL: usize = 1 << 20;

/// Names a run's environment must keep as the node sets them.
const RESERVED: [&str; 24] = [
    "PATH",
    "HOME",
    "USER",
    "SHELL",
    "LANG",
    "TERM",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHON_PATH",
    "TMPDIR",
    "TEMP",
    "TMP",
    "RYE_SIGNING_KEY_DIR",
    "RYE_KERNEL_PYTHON",
    "RYE_REMOTE_NAME",
    "RYE_NODE_CONFIG",
    "USER_SPACE",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "DYLD_LIBRARY_PATH",
    "DYLD_INSERT_LIBRARIES",
    // Not in the spec's list, but a run's own: the host it runs under
    // reads it.
    "RYE_CACHE_DIR",
];

/// Prefixes of names reserved for the platforms a node runs on.
const RESERVED_PREFIXES: [&str; 11] = [
    "SUPABASE_",
    "MODAL_",
    "LD_",
    "SSL_",
    "AWS_",
    "GOOGLE_",
    "AZURE_",
    "GITHUB_",
    "CI_",
    "DOCKER_",
    "RYE_INTERNAL_",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("the envelope is malformed: {0}")]
    Malformed(String),
    #[error("the envelope is sealed for {0}, not for this node ({1})")]
    OtherRecipient(String, String),
    #[error("the envelope does not open with this node's box key")]
    DoesNotOpen,
    #[error("the envelope's secrets break a limit: {0}")]
    Limit(String),
    #[error("the box key in {0}: {1}")]
    Key(String, String),
}

/// Whether `name` may be a variable of a run's environment: an ASCII
/// identifier, neither reserved nor with a reserved prefix (compared as
/// written).
pub fn name_allowed(name: &str) -> Result<(), &'static str> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err("not an identifier (ASCII letters, digits and _, not starting with a digit)");
    }
    if RESERVED.contains(&name) {
        return Err("reserved: the node sets it");
    }
    if RESERVED_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Err("reserved prefix");
    }
    Ok(())
}

/// A node's box key.
pub struct BoxKey {
    secret: StaticSecret,
    public: PublicKey,
}

fn box_fingerprint(public: &[u8; 32]) -> String {
    hex::encode(&Sha256::digest(public)[..8])
}

fn decode_url(text: &str) -> Result<Vec<u8>, ()> {
    let text = text.trim();
    URL_SAFE_NO_PAD
        .decode(text)
        .or_else(|_| URL_SAFE.decode(text))
        .map_err(|_| ())
}

fn key_bytes(text: &str) -> Option<[u8; 32]> {
    decode_url(text).ok()?.try_into().ok()
}

impl BoxKey {
    /// A new random key.
    pub fn generate() -> BoxKey {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the system's random source");
        BoxKey::from_secret(bytes)
    }

    fn from_secret(bytes: [u8; 32]) -> BoxKey {
        let secret = StaticSecret::from(bytes);
        let public = PublicKey::from(&secret);
        BoxKey { secret, public }
    }

    /// The key kept in `dir` (`box_key.pem`, `box_pub.pem`), made there
    /// on first use; an existing file is never overwritten.
    pub fn load_or_create(dir: &Path) -> Result<BoxKey, SealError> {
        let fail = |e: String| SealError::Key(dir.display().to_string(), e);
        let private = dir.join("box_key.pem");
        match std::fs::read_to_string(&private) {
            Ok(text) => {
                let bytes = key_bytes(&text)
                    .ok_or_else(|| fail("box_key.pem is not 32 bytes of base64url".into()))?;
                let key = BoxKey::from_secret(bytes);
                if let Ok(public) = std::fs::read_to_string(dir.join("box_pub.pem"))
                    && key_bytes(&public) != Some(key.public_bytes())
                {
                    return Err(fail("box_pub.pem is not box_key.pem's public key".into()));
                }
                Ok(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                use std::io::Write as _;
                // Replicas starting at once on one key folder: the first
                // writes the key, the others read it.
                let made = |name: &str| dir.join(name).exists();
                use std::os::unix::fs::OpenOptionsExt as _;
                std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
                let key = BoxKey::generate();
                let write = |name: &str, text: String, mode: u32| {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(mode)
                        .open(dir.join(name))
                        .and_then(|mut f| f.write_all(text.as_bytes()))
                        .map_err(|e| fail(format!("{name}: {e}")))
                };
                if let Err(e) = write(
                    "box_key.pem",
                    URL_SAFE_NO_PAD.encode(key.secret.to_bytes()),
                    0o600,
                ) {
                    if made("box_key.pem") {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                        return BoxKey::load_or_create(dir);
                    }
                    return Err(e);
                }
                write(
                    "box_pub.pem",
                    URL_SAFE_NO_PAD.encode(key.public_bytes()),
                    0o644,
                )?;
                Ok(key)
            }
            Err(e) => Err(fail(e.to_string())),
        }
    }

    pub fn public_bytes(&self) -> [u8; 32] {
        self.public.to_bytes()
    }

    /// The key's fingerprint (16 hex digits).
    pub fn fingerprint(&self) -> String {
        box_fingerprint(&self.public_bytes())
    }

    /// The key as a node's identity shows it: `x25519:` and the standard
    /// base64 of the `box_pub.pem` text.
    pub fn wire(&self) -> String {
        format!(
            "x25519:{}",
            STANDARD.encode(URL_SAFE_NO_PAD.encode(self.public_bytes()))
        )
    }

    /// Opens `envelope`: the variables whose names a run may take, and the
    /// names skipped.
    pub fn open(&self, envelope: &Value) -> Result<Opened, SealError> {
        let malformed = |m: &str| SealError::Malformed(m.to_owned());
        let object = envelope.as_object().ok_or(malformed("not a JSON object"))?;
        if object.get("version") != Some(&json!(1)) {
            return Err(malformed("version is not 1"));
        }
        let text = |field: &str| {
            object
                .get(field)
                .and_then(Value::as_str)
                .ok_or_else(|| SealError::Malformed(format!("no {field} (text)")))
        };
        let recipient = text("recipient")?;
        let mine = format!("fp:{}", self.fingerprint());
        if recipient != mine {
            return Err(SealError::OtherRecipient(recipient.to_owned(), mine));
        }
        let aad = object
            .get("aad_fields")
            .and_then(Value::as_object)
            .ok_or(malformed("no aad_fields (an object)"))?;
        if aad.get("kind") != Some(&json!(KIND)) || aad.get("recipient") != Some(&json!(mine)) {
            return Err(malformed(
                "aad_fields name another kind or recipient than the envelope",
            ));
        }
        let enc = key_bytes(text("enc")?).ok_or(malformed("enc is not 32 bytes of base64url"))?;
        let ciphertext = decode_url(text("ciphertext")?)
            .map_err(|()| malformed("ciphertext is not base64url"))?;
        if ciphertext.len() > 2 * MAX_TOTAL {
            return Err(SealError::Limit("the ciphertext is too long".into()));
        }
        let cipher = cipher(&self.secret.diffie_hellman(&PublicKey::from(enc)).to_bytes());
        let plain = cipher
            .decrypt(
                &Nonce::default(),
                Payload {
                    msg: &ciphertext,
                    aad: &rye_cas::canonical::to_vec(&Value::Object(aad.clone())),
                },
            )
            .map_err(|_| SealError::DoesNotOpen)?;
        let vars: Map<String, Value> = serde_json::from_slice(&plain)
            .map_err(|_| malformed("the sealed text is not a JSON object"))?;
        check_limits(vars.iter().map(|(k, v)| (k.as_str(), v)))?;
        let mut opened = Opened::default();
        for (name, value) in vars {
            let value = value.as_str().expect("checked to be text").to_owned();
            match name_allowed(&name) {
                Ok(()) => {
                    opened.vars.insert(name, value);
                }
                Err(_) => opened.skipped.push(name),
            }
        }
        Ok(opened)
    }
}

/// What an envelope held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Opened {
    pub vars: BTreeMap<String, String>,
    /// Names a run may not take (reserved, or no identifier): reported,
    /// never set.
    pub skipped: Vec<String>,
}

fn check_limits<'v>(
    vars: impl ExactSizeIterator<Item = (&'v str, &'v Value)>,
) -> Result<(), SealError> {
    if vars.len() > MAX_VARS {
        return Err(SealError::Limit(format!("more than {MAX_VARS} variables")));
    }
    let mut total = 0;
    for (name, value) in vars {
        let Some(value) = value.as_str() else {
            return Err(SealError::Limit(format!("{name} is not text")));
        };
        if value.len() > MAX_VALUE {
            return Err(SealError::Limit(format!(
                "{name} is longer than {MAX_VALUE} bytes"
            )));
        }
        if name.contains('\0') || value.contains('\0') {
            return Err(SealError::Limit(format!("{name} holds a NUL")));
        }
        total += name.len() + value.len();
    }
    if total > MAX_TOTAL {
        return Err(SealError::Limit(format!(
            "names and values come to more than {MAX_TOTAL} bytes"
        )));
    }
    Ok(())
}

fn cipher(shared: &[u8; 32]) -> ChaCha20Poly1305 {
    let mut key = [0u8; 32];
    Hkdf::<Sha256>::new(None, shared)
        .expand(KIND.as_bytes(), &mut key)
        .expect("32 bytes is a valid HKDF-SHA256 length");
    ChaCha20Poly1305::new(&key.into())
}

/// The node's box key from its identity's `box_key` (`x25519:…`).
pub fn read_wire(text: &str) -> Result<[u8; 32], SealError> {
    let malformed = || SealError::Malformed(format!("{text:?} is not x25519:<base64>"));
    let encoded = text.strip_prefix("x25519:").ok_or_else(malformed)?;
    let inner = STANDARD.decode(encoded.trim()).map_err(|_| malformed())?;
    let inner = String::from_utf8(inner).map_err(|_| malformed())?;
    key_bytes(&inner).ok_or_else(malformed)
}

/// Seals `vars` to the box key `recipient`: what a client sends.
pub fn seal(recipient: &[u8; 32], vars: &BTreeMap<String, String>) -> Result<Value, SealError> {
    let values: Map<String, Value> = vars
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    check_limits(values.iter().map(|(k, v)| (k.as_str(), v)))?;
    let ephemeral = BoxKey::generate();
    let to = format!("fp:{}", box_fingerprint(recipient));
    let aad = json!({"kind": KIND, "recipient": to});
    let cipher = cipher(
        &ephemeral
            .secret
            .diffie_hellman(&PublicKey::from(*recipient))
            .to_bytes(),
    );
    let ciphertext = cipher
        .encrypt(
            &Nonce::default(),
            Payload {
                msg: &rye_cas::canonical::to_vec(&Value::Object(values)),
                aad: &rye_cas::canonical::to_vec(&aad),
            },
        )
        .map_err(|_| SealError::Limit("too long to seal".into()))?;
    Ok(json!({
        "version": 1,
        "recipient": to,
        "enc": URL_SAFE_NO_PAD.encode(ephemeral.public_bytes()),
        "ciphertext": URL_SAFE_NO_PAD.encode(ciphertext),
        "aad_fields": aad,
    }))
}

#[cfg(test)]
mod tests;
