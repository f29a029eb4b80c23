use rye_space::ItemKind;

use crate::sign::sha256_hex;
use crate::{
    IntegrityError, Rule, Signature, SignatureFormat, TrustStore, find_signature, hashed_text,
};

/// A signature that checked out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    pub rule: Rule,
    /// The content hash the signature covers.
    pub hash: String,
    /// The signer's key fingerprint and owner (from the trust store).
    pub fingerprint: String,
    pub owner: String,
    pub signed_at: String,
    /// What part of the file the signature does not cover (original rule
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncovered: Option<String>,
}

fn check(
    signature: &Signature,
    actual: String,
    uncovered: Option<String>,
    trust: &TrustStore,
) -> Result<Verified, IntegrityError> {
    if actual != signature.hash {
        return Err(IntegrityError::Modified {
            expected: signature.hash.clone(),
            actual,
        });
    }
    let key = trust
        .get(&signature.fingerprint)
        .ok_or_else(|| IntegrityError::Untrusted {
            fingerprint: signature.fingerprint.clone(),
            trusted: trust.fingerprints(),
        })?;
    if !key.key.verifies(&signature.hash, &signature.signature) {
        return Err(IntegrityError::BadSignature {
            fingerprint: signature.fingerprint.clone(),
        });
    }
    Ok(Verified {
        rule: signature.rule,
        hash: actual,
        fingerprint: signature.fingerprint.clone(),
        owner: key.owner.clone(),
        signed_at: signature.timestamp.clone(),
        uncovered,
    })
}

/// Verifies the signature line of `content` (a file of `kind` written in
/// `format`): present, content unchanged, key trusted, signature valid, in
/// that order, each failure its own error.
pub fn verify_text(
    content: &str,
    kind: ItemKind,
    format: &SignatureFormat,
    trust: &TrustStore,
) -> Result<Verified, IntegrityError> {
    let located = find_signature(content, format)?.ok_or(IntegrityError::Unsigned)?;
    let (text, uncovered) = hashed_text(content, kind, Some(&located), located.signature.rule)?;
    let actual = sha256_hex(text.as_bytes());
    check(&located.signature, actual, uncovered, trust)
}

/// Verifies a detached signature (`signature_file`, the text of the
/// `.sig` file) over content with SHA-256 `content_hash`.
pub fn verify_detached(
    content_hash: &[u8; 32],
    signature_file: &str,
    trust: &TrustStore,
) -> Result<Verified, IntegrityError> {
    let line = signature_file.strip_suffix('\n').unwrap_or(signature_file);
    if line.contains('\n') {
        return Err(IntegrityError::Malformed(
            "a detached signature file holds exactly one line".into(),
        ));
    }
    let signature = Signature::parse(line)?;
    check(&signature, hex::encode(content_hash), None, trust)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use sha2::{Digest, Sha256};

    use super::*;
    use crate::{Keypair, TrustStore, format_for, sign_detached, sign_text, strip_signature};

    fn trusting(key: &Keypair) -> TrustStore {
        TrustStore::builder()
            .anchor(key.public().clone(), "test")
            .build()
    }

    #[test]
    fn every_format_round_trips_and_resigning_replaces_the_line() {
        let key = Keypair::generate().unwrap();
        let trust = trusting(&key);
        let cases = [
            (
                ItemKind::Tool,
                "t.py",
                "#!/usr/bin/env python3\n__version__ = \"1\"\n",
            ),
            (ItemKind::Tool, "t.yaml", "tool_type: x\n"),
            (ItemKind::Tool, "t.js", "export const x = 1;\n"),
            (ItemKind::Tool, "t.sh", "#!/bin/bash\necho hi"),
            (
                ItemKind::Directive,
                "d.md",
                "# D\n<directive name=\"d\"></directive>\nbody\n",
            ),
            (ItemKind::Knowledge, "k.md", "---\nname: k\n---\nbody\n"),
            (ItemKind::Config, "c.toml", "a = 1\n"),
        ];
        for (kind, name, content) in cases {
            let format = format_for(kind, name, &[]).unwrap();
            let signed = sign_text(content, &format, &key, SystemTime::now()).unwrap();
            let verified = verify_text(&signed, kind, &format, &trust)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{signed}"));
            assert_eq!(verified.rule, Rule::Whole);
            assert_eq!(verified.uncovered, None);
            let again = sign_text(&signed, &format, &key, SystemTime::now()).unwrap();
            assert_eq!(again.matches("rye:signed:").count(), 1, "{again}");
            assert_eq!(
                strip_signature(&again, &format).trim_end(),
                content.trim_end()
            );
        }
    }

    #[test]
    fn each_failure_has_its_own_error() {
        let key = Keypair::generate().unwrap();
        let trust = trusting(&key);
        let format = format_for(ItemKind::Directive, "d.md", &[]).unwrap();
        let content = "# D\n<directive name=\"d\"></directive>\nbody\n";
        assert_eq!(
            verify_text(content, ItemKind::Directive, &format, &trust),
            Err(IntegrityError::Unsigned)
        );
        let signed = sign_text(content, &format, &key, SystemTime::now()).unwrap();
        // Whole-file rule: the body after the block is covered.
        let tampered = signed.replace("body", "bodY");
        assert!(matches!(
            verify_text(&tampered, ItemKind::Directive, &format, &trust),
            Err(IntegrityError::Modified { .. })
        ));
        let stranger = Keypair::generate().unwrap();
        let foreign = sign_text(content, &format, &stranger, SystemTime::now()).unwrap();
        assert!(matches!(
            verify_text(&foreign, ItemKind::Directive, &format, &trust),
            Err(IntegrityError::Untrusted { .. })
        ));
        // A valid-looking line whose signature was made by another key.
        let forged = foreign.replace(stranger.fingerprint(), key.fingerprint());
        assert!(matches!(
            verify_text(&forged, ItemKind::Directive, &format, &trust),
            Err(IntegrityError::BadSignature { .. })
        ));
    }

    #[test]
    fn detached_signatures_cover_bytes() {
        let key = Keypair::generate().unwrap();
        let trust = trusting(&key);
        let hash: [u8; 32] = Sha256::digest(b"\0asm component").into();
        let sig = sign_detached(&hash, &key, SystemTime::now());
        assert!(verify_detached(&hash, &sig, &trust).is_ok());
        let other: [u8; 32] = Sha256::digest(b"\0asm other").into();
        assert!(matches!(
            verify_detached(&other, &sig, &trust),
            Err(IntegrityError::Modified { .. })
        ));
        assert!(verify_detached(&hash, &format!("{sig}{sig}"), &trust).is_err());
    }
}
