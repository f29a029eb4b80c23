use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::{IntegrityError, SignatureFormat};

const TAG: &str = "rye:signed:";
const WHOLE_MARKER: &str = "v2:";

/// Base64url that writes no padding and reads either form.
pub(crate) const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Which bytes of a file a signature covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Marker `v2`: everything but the signature line.
    Whole,
    /// No marker: the original system's rule per kind.
    Original,
}

/// The fields of a signature line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub rule: Rule,
    /// `YYYY-MM-DDTHH:MM:SSZ`.
    pub timestamp: String,
    /// Lowercase hex SHA-256 of the hashed text.
    pub hash: String,
    pub signature: [u8; 64],
    /// Fingerprint of the signer's public key.
    pub fingerprint: String,
    /// Registry provenance (`|provider@username`), if any.
    pub provenance: Option<(String, String)>,
}

/// A signature line found in a file: its fields and its byte range
/// (newline included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub signature: Signature,
    pub start: usize,
    pub end: usize,
}

impl Signature {
    /// The fields as they follow the comment prefix.
    pub fn fields(&self) -> String {
        let mut out = String::from(TAG);
        if self.rule == Rule::Whole {
            out.push_str(WHOLE_MARKER);
        }
        out.push_str(&self.timestamp);
        out.push(':');
        out.push_str(&self.hash);
        out.push(':');
        out.push_str(&BASE64URL.encode(self.signature));
        out.push(':');
        out.push_str(&self.fingerprint);
        if let Some((provider, user)) = &self.provenance {
            out.push('|');
            out.push_str(provider);
            out.push('@');
            out.push_str(user);
        }
        out
    }

    /// The whole line in `format`, newline included.
    pub fn line(&self, format: &SignatureFormat) -> String {
        format!("{} {}{}\n", format.prefix, self.fields(), format.suffix)
    }

    /// Parses the fields (from `rye:signed:` on).
    pub fn parse(fields: &str) -> Result<Self, IntegrityError> {
        let bad = |why: &str| {
            IntegrityError::Malformed(format!("{why} in {:?}", rye_space::shorten(fields, 300)))
        };
        let rest = fields
            .strip_prefix(TAG)
            .ok_or_else(|| bad("no rye:signed: tag"))?;
        let (rule, rest) = match rest.strip_prefix(WHOLE_MARKER) {
            Some(rest) => (Rule::Whole, rest),
            None => (Rule::Original, rest),
        };
        // A format marker this host does not know (a later version's):
        // say so, rather than misreading it as a bad timestamp.
        if let Some(version) = rest.split_once(':').map(|(marker, _)| marker).filter(|m| {
            m.len() > 1 && m.starts_with('v') && m[1..].bytes().all(|b| b.is_ascii_digit())
        }) {
            return Err(bad(&format!(
                "unknown signature format {version} (this rye reads {} and the original system's)",
                WHOLE_MARKER.trim_end_matches(':')
            )));
        }
        let timestamp = rest.get(..20).ok_or_else(|| bad("no timestamp"))?;
        if !crate::time::is_utc_timestamp(timestamp) {
            return Err(bad("timestamp is not YYYY-MM-DDTHH:MM:SSZ"));
        }
        let rest = rest[20..]
            .strip_prefix(':')
            .ok_or_else(|| bad("no ':' after the timestamp"))?;
        let mut parts = rest.splitn(3, ':');
        let hash = parts.next().unwrap_or_default();
        if hash.len() != 64 || !is_lower_hex(hash) {
            return Err(bad("content hash is not 64 lowercase hex digits"));
        }
        let sig = parts.next().ok_or_else(|| bad("no signature"))?;
        let unpadded = sig.trim_end_matches('=');
        if sig.len() - unpadded.len() > 2
            || unpadded.is_empty()
            || !unpadded
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad("signature is not base64url"));
        }
        let bytes = BASE64URL
            .decode(sig)
            .map_err(|e| bad(&format!("signature is not base64url ({e})")))?;
        let signature: [u8; 64] = bytes
            .try_into()
            .map_err(|_| bad("signature is not 64 bytes"))?;
        let tail = parts.next().ok_or_else(|| bad("no key fingerprint"))?;
        let (fingerprint, provenance) = match tail.split_once('|') {
            Some((fp, provenance)) => {
                let (provider, user) = provenance
                    .split_once('@')
                    .filter(|(p, u)| is_name(p) && is_name(u))
                    .ok_or_else(|| bad("provenance is not |provider@username"))?;
                (fp, Some((provider.to_owned(), user.to_owned())))
            }
            None => (tail, None),
        };
        if fingerprint.len() != 16 || !is_lower_hex(fingerprint) {
            return Err(bad("key fingerprint is not 16 lowercase hex digits"));
        }
        Ok(Self {
            rule,
            timestamp: timestamp.to_owned(),
            hash: hash.to_owned(),
            signature,
            fingerprint: fingerprint.to_owned(),
            provenance,
        })
    }
}

/// Where a signature line may start: after a `#!/` shebang line when the
/// format allows it, else at the start.
pub(crate) fn line_start(content: &str, format: &SignatureFormat) -> Option<usize> {
    if format.after_shebang && content.starts_with("#!/") {
        content.find('\n').map(|n| n + 1)
    } else {
        Some(0)
    }
}

/// The signature line of `content` in `format`, if it has one. A line that
/// starts like a signature but does not parse is an error, not "unsigned".
pub fn find_signature(
    content: &str,
    format: &SignatureFormat,
) -> Result<Option<Located>, IntegrityError> {
    let Some(start) = line_start(content, format) else {
        return Ok(None);
    };
    let rest = &content[start..];
    let opening = format!("{} {TAG}", format.prefix);
    if !rest.starts_with(&opening) {
        return Ok(None);
    }
    let (line, end) = match rest.find('\n') {
        Some(n) => (&rest[..n], start + n + 1),
        None => (rest, content.len()),
    };
    let fields = line[format.prefix.len() + 1..]
        .strip_suffix(format.suffix.as_str())
        .ok_or_else(|| {
            IntegrityError::Malformed(format!("line does not end with {:?}", format.suffix))
        })?;
    let signature = Signature::parse(fields)?;
    Ok(Some(Located {
        signature,
        start,
        end,
    }))
}

/// A signature line of this or an older form (`rye:validated:`,
/// `kiwi-mcp:`) that re-signing replaces: its byte range.
pub(crate) fn replaceable_line(content: &str, format: &SignatureFormat) -> Option<(usize, usize)> {
    let start = line_start(content, format)?;
    let rest = &content[start..];
    let after_prefix = rest
        .strip_prefix(format.prefix.as_str())?
        .strip_prefix(' ')?;
    let known = [
        "rye:signed:",
        "rye:validated:",
        "kiwi-mcp:signed:",
        "kiwi-mcp:validated:",
    ];
    if !known.iter().any(|tag| after_prefix.starts_with(tag)) {
        return None;
    }
    let n = rest.find('\n')?;
    if !rest[..n].ends_with(format.suffix.as_str()) {
        return None;
    }
    Some((start, start + n + 1))
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_format() -> SignatureFormat {
        SignatureFormat::new("#", "", true)
    }

    fn sample(rule: Rule) -> Signature {
        Signature {
            rule,
            timestamp: "2026-01-02T03:04:05Z".into(),
            hash: "ab".repeat(32),
            signature: [7; 64],
            fingerprint: "0123456789abcdef".into(),
            provenance: None,
        }
    }

    #[test]
    fn lines_round_trip_in_both_rules() {
        for rule in [Rule::Whole, Rule::Original] {
            let line = sample(rule).line(&hash_format());
            let found = find_signature(&format!("#!/bin/sh\n{line}echo\n"), &hash_format())
                .unwrap()
                .unwrap();
            assert_eq!(found.signature, sample(rule));
            assert_eq!(found.start, 10);
            assert_eq!(found.end, 10 + line.len());
        }
    }

    #[test]
    fn padded_signatures_and_provenance_parse() {
        let sig = BASE64URL.encode([7u8; 64]);
        let fields = format!(
            "rye:signed:2026-01-02T03:04:05Z:{}:{sig}==:0123456789abcdef|github@some-one",
            "ab".repeat(32)
        );
        let parsed = Signature::parse(&fields).unwrap();
        assert_eq!(parsed.signature, [7; 64]);
        assert_eq!(
            parsed.provenance,
            Some(("github".into(), "some-one".into()))
        );
        assert_eq!(parsed.rule, Rule::Original);
    }

    #[test]
    fn broken_lines_are_errors_and_other_comments_are_unsigned() {
        let format = hash_format();
        assert_eq!(find_signature("# just a comment\n", &format), Ok(None));
        assert_eq!(
            find_signature("#!python\n# rye:signed:x\n", &format),
            Ok(None)
        );
        for broken in [
            "# rye:signed:2026-01-02T03:04:05Z:abc:sig:0123456789abcdef\n",
            "# rye:signed:yesterday\n",
        ] {
            assert!(matches!(
                find_signature(broken, &format),
                Err(IntegrityError::Malformed(_))
            ));
        }
        let html = SignatureFormat::new("<!--", " -->", false);
        let line = sample(Rule::Whole).line(&html);
        let unterminated = line.replace(" -->", "");
        assert!(find_signature(&unterminated, &html).is_err());
    }

    #[test]
    fn a_later_format_marker_is_named_not_called_a_bad_timestamp() {
        let line = sample(Rule::Whole).fields().replace("v2:", "v9:");
        let err = Signature::parse(&line).unwrap_err().to_string();
        assert!(err.contains("unknown signature format v9"), "{err}");
        assert!(!err.contains("timestamp"), "{err}");
        let huge = format!("rye:signed:{}", "x".repeat(100_000));
        assert!(Signature::parse(&huge).unwrap_err().to_string().len() < 500);
    }
}
