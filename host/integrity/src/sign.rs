//! Making signatures: lines in files and detached signature files, under
//! the whole-file rule.

use std::borrow::Cow;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::line::{line_start, replaceable_line};
use crate::{IntegrityError, Keypair, Rule, Signature, SignatureFormat, utc_timestamp};

pub(crate) fn sha256_hex(text: &[u8]) -> String {
    hex::encode(Sha256::digest(text))
}

/// `content` without its signature line (of any form re-signing
/// replaces).
pub fn strip_signature<'a>(content: &'a str, format: &SignatureFormat) -> Cow<'a, str> {
    match replaceable_line(content, format) {
        Some((0, end)) => Cow::Borrowed(&content[end..]),
        Some((start, end)) => Cow::Owned(format!("{}{}", &content[..start], &content[end..])),
        None => Cow::Borrowed(content),
    }
}

/// A `v2` signature by `key` over the hex digest `hash`.
fn whole_signature(hash: String, key: &Keypair, now: SystemTime) -> Signature {
    Signature {
        rule: Rule::Whole,
        timestamp: utc_timestamp(now),
        signature: key.sign_hash(&hash),
        hash,
        fingerprint: key.fingerprint().to_owned(),
        provenance: None,
    }
}

/// `content` signed by `key` under the whole-file rule: any earlier
/// signature line is replaced, the new one goes first (second after a
/// shebang where the format allows it).
pub fn sign_text(
    content: &str,
    format: &SignatureFormat,
    key: &Keypair,
    now: SystemTime,
) -> Result<String, IntegrityError> {
    let mut body = strip_signature(content, format).into_owned();
    let at = match line_start(&body, format) {
        Some(at) => at,
        None => {
            // A shebang with nothing after it: the line goes on a new line.
            body.push('\n');
            body.len()
        }
    };
    let signature = whole_signature(sha256_hex(body.as_bytes()), key, now);
    body.insert_str(at, &signature.line(format));
    Ok(body)
}

/// The text of a detached signature file for content with SHA-256
/// `content_hash`: one signature line.
pub fn sign_detached(content_hash: &[u8; 32], key: &Keypair, now: SystemTime) -> String {
    let signature = whole_signature(hex::encode(content_hash), key, now);
    format!("{}\n", signature.fields())
}
