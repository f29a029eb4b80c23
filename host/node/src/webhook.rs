//! Webhook deliveries (spec §10): a binding fixes an item and a project,
//! and a caller holding the binding's secret runs it by an HMAC over the
//! request instead of a signed request.
//!
//! Two forms are taken. The spec's: `X-Webhook-Timestamp`,
//! `X-Webhook-Signature: sha256=<hex>` over `<timestamp>.<body>` and
//! `X-Webhook-Delivery-Id`. Its signature does not cover the delivery id,
//! so a captured delivery sent again under a new id would pass; the node
//! therefore also refuses a signature it has seen. And the Standard
//! Webhooks form: `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64>` (several, space-separated, during a
//! rotation) over `<id>.<timestamp>.<body>`, keyed by the base64 decoding
//! of the secret after `whsec_`, as the Standard Webhooks libraries key
//! it. Every comparison of a signature is in constant time.

use axum::http::HeaderMap;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A delivery may be stamped at most this far in the future...
pub const FUTURE_SECS: i64 = 30;
/// ...and at most this far in the past.
pub const PAST_SECS: i64 = 300;
/// How long a delivery is remembered: past every timestamp still taken.
pub const REMEMBER_SECS: i64 = 600;

/// The longest delivery id taken.
const MAX_ID: usize = 256;

/// What a delivery's headers claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub form: Form,
    pub timestamp: i64,
    pub delivery_id: String,
    /// The signatures offered: the spec's one, or Standard Webhooks' list.
    signatures: Vec<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Spec,
    Standard,
}

/// Why a delivery is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Anything about who may call: answered with one generic 401, so
    /// that a caller learns nothing of which bindings exist.
    Unauthorized(&'static str),
    /// A malformed request from a caller who may be genuine: 400.
    BadRequest(String),
}

/// Whether `headers` carry a webhook delivery (of either form).
pub fn present(headers: &HeaderMap) -> bool {
    ["x-webhook-signature", "webhook-signature"]
        .iter()
        .any(|name| headers.contains_key(*name))
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, Refusal> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(Some)
            .map_err(|_| Refusal::BadRequest(format!("the {name} header is not text"))),
    }
}

/// The delivery `headers` describe.
pub fn read(headers: &HeaderMap) -> Result<Delivery, Refusal> {
    let spec = header(headers, "x-webhook-signature")?;
    let standard = header(headers, "webhook-signature")?;
    let (form, signatures, timestamp, id) = match (spec, standard) {
        (Some(_), Some(_)) => {
            return Err(Refusal::BadRequest(
                "a delivery signed both ways; send one form".into(),
            ));
        }
        (Some(signature), None) => {
            let hex_part = signature
                .strip_prefix("sha256=")
                .ok_or(Refusal::Unauthorized("the signature is not sha256=<hex>"))?;
            let bytes = hex::decode(hex_part)
                .map_err(|_| Refusal::Unauthorized("the signature is not hex"))?;
            (
                Form::Spec,
                vec![bytes],
                header(headers, "x-webhook-timestamp")?,
                header(headers, "x-webhook-delivery-id")?,
            )
        }
        (None, Some(list)) => {
            let signatures: Vec<Vec<u8>> = list
                .split(' ')
                .filter_map(|s| s.strip_prefix("v1,"))
                .filter_map(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
                .collect();
            if signatures.is_empty() {
                return Err(Refusal::Unauthorized("no v1 signature"));
            }
            (
                Form::Standard,
                signatures,
                header(headers, "webhook-timestamp")?,
                header(headers, "webhook-id")?,
            )
        }
        (None, None) => return Err(Refusal::Unauthorized("no webhook signature")),
    };
    let timestamp = timestamp
        .ok_or(Refusal::Unauthorized("no timestamp"))?
        .trim()
        .parse::<i64>()
        .map_err(|_| Refusal::Unauthorized("the timestamp is not a number"))?;
    let delivery_id = id
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| Refusal::BadRequest("a delivery needs a delivery id".into()))?;
    if delivery_id.len() > MAX_ID || delivery_id.chars().any(char::is_control) {
        return Err(Refusal::BadRequest(format!(
            "a delivery id is at most {MAX_ID} bytes, no control character"
        )));
    }
    Ok(Delivery {
        form,
        timestamp,
        delivery_id: delivery_id.to_owned(),
        signatures,
    })
}

impl Delivery {
    /// Checks the delivery's time against `now` and its signature over
    /// `body` against the binding's `secret`; the signature that matched,
    /// as remembered against replays.
    pub fn verify(&self, secret: &str, body: &[u8], now: i64) -> Result<String, Refusal> {
        if self.timestamp > now + FUTURE_SECS || self.timestamp < now - PAST_SECS {
            return Err(Refusal::Unauthorized("the timestamp is outside the window"));
        }
        let (key, signed): (Vec<u8>, Vec<u8>) = match self.form {
            Form::Spec => (
                secret.as_bytes().to_vec(),
                [format!("{}.", self.timestamp).as_bytes(), body].concat(),
            ),
            Form::Standard => {
                let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
                let key = base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|_| Refusal::Unauthorized("the secret is not base64"))?;
                (
                    key,
                    [
                        format!("{}.{}.", self.delivery_id, self.timestamp).as_bytes(),
                        body,
                    ]
                    .concat(),
                )
            }
        };
        for signature in &self.signatures {
            let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key");
            mac.update(&signed);
            if mac.verify_slice(signature).is_ok() {
                return Ok(hex::encode(signature));
            }
        }
        Err(Refusal::Unauthorized("no signature matches"))
    }
}

/// A new binding's id (`wh_<32 hex>`) and secret (`whsec_<64 hex>`).
pub fn new_binding() -> (String, String) {
    let mut bytes = [0u8; 48];
    getrandom::fill(&mut bytes).expect("the system's random source");
    (
        format!("wh_{}", hex::encode(&bytes[..16])),
        format!("whsec_{}", hex::encode(&bytes[16..])),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn spec_signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{timestamp}.").as_bytes());
        mac.update(body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn the_spec_form_holds_only_for_its_secret_body_and_window() {
        let (_, secret) = new_binding();
        let body = br#"{"hook_id":"wh_x"}"#;
        let now = 1_000_000;
        let delivery = |timestamp: i64, signature: String| {
            read(&headers(&[
                ("x-webhook-timestamp", timestamp.to_string()),
                ("x-webhook-signature", signature),
                ("x-webhook-delivery-id", "d1".into()),
            ]))
            .unwrap()
        };
        let good = delivery(now, spec_signature(&secret, now, body));
        assert!(good.verify(&secret, body, now).is_ok());
        assert!(good.verify(&secret, br#"{"hook_id":"wh_y"}"#, now).is_err());
        assert!(good.verify("whsec_other", body, now).is_err());
        assert!(good.verify(&secret, body, now + PAST_SECS + 1).is_err());
        assert!(good.verify(&secret, body, now - FUTURE_SECS - 1).is_err());
        let stale = delivery(now - 301, spec_signature(&secret, now - 301, body));
        assert!(stale.verify(&secret, body, now).is_err());
        let odd = read(&headers(&[
            ("x-webhook-timestamp", now.to_string()),
            ("x-webhook-signature", "sha256=zz".into()),
            ("x-webhook-delivery-id", "d1".into()),
        ]));
        assert!(matches!(odd, Err(Refusal::Unauthorized(_))));
        let no_id = read(&headers(&[
            ("x-webhook-timestamp", now.to_string()),
            ("x-webhook-signature", spec_signature(&secret, now, body)),
        ]));
        assert!(matches!(no_id, Err(Refusal::BadRequest(_))));
    }
}
