//! A request for the HTTP primitive, from the chain's merged configuration.
//!
//! | key | meaning |
//! |---|---|
//! | `method` | default `GET` |
//! | `url` | required: an absolute `http` or `https` URL |
//! | `headers` | a mapping of name to text |
//! | `body` | a mapping or list goes as JSON (with `Content-Type: application/json` unless a header sets one); text as it is |
//! | `auth` | `{type: bearer, token}` or `{type: api_key, key, header}` (header default `X-API-Key`) |
//! | `timeout` | seconds for the whole exchange, default 30 |
//! | `max_response_bytes`, `max_redirects` | limits the host enforces (and caps) |
//! | `retry` | `{max_attempts, backoff}`: attempts in all, the first wait in seconds (default 1), doubling |
//!
//! Values are templates as for a process ([`crate::template`]): `${VAR}`
//! from the environment built for the chain (so a token can come from
//! `.env`), `{name}` from the context, the caller's parameters and the
//! configuration. A caller's value placed inside the URL is
//! percent-encoded; a URL that is exactly `{name}` takes the value whole.
//! A value that is exactly `{name}` for a parameter the caller did not
//! give leaves its key out: a header, a body entry, the body, the method.
//! Which addresses the request may reach is not the adapter's to say: the
//! host decides from the runtime's signed configuration.

use rye_guest::adapter::{HttpPlan, PlanError, Retry};
use rye_guest::serde_json::{Map, Value};

use crate::plan::{Element, timeout_secs};
use crate::template::{Vars, lone_placeholder};

/// Seconds a request may take when no element says.
const DEFAULT_TIMEOUT_SECS: f64 = 30.0;

/// Plans the request; `root` is the primitive element, named in errors.
pub fn plan(
    root: &Element,
    config: &Map<String, Value>,
    vars: &Vars,
) -> Result<HttpPlan, PlanError> {
    let method = match given(vars, config.get("method"), false) {
        None => "GET".to_owned(),
        Some(Value::String(m)) if is_token(m.trim()) => m.trim().to_ascii_uppercase(),
        Some(other) => {
            return Err(root.config_error(format!("method {other} is not an HTTP method")));
        }
    };
    let url = match given(vars, config.get("url"), true) {
        Some(Value::String(url)) => url,
        Some(other) => return Err(root.config_error(format!("url expands to {other}, not text"))),
        None => match config.get("url") {
            Some(template) => {
                return Err(root.config_error(format!(
                    "url {template} names a parameter the caller did not give"
                )));
            }
            None => return Err(root.config_error("no element of the chain gives config.url")),
        },
    };
    check_url(root, &url)?;

    let mut plan = HttpPlan::new(method, url);
    plan.timeout_ms =
        Some((timeout_secs(root, config, vars, DEFAULT_TIMEOUT_SECS)? * 1000.0).round() as u64);

    match given(vars, config.get("headers"), false) {
        None => {}
        Some(Value::Object(headers)) => {
            for (name, value) in &headers {
                let value = match value {
                    Value::String(s) if lone_placeholder(s).is_some() => continue,
                    Value::String(s) => s.clone(),
                    Value::Null => continue,
                    Value::Number(_) | Value::Bool(_) => value.to_string(),
                    other => {
                        return Err(
                            root.config_error(format!("header {name:?} is {other}, not text"))
                        );
                    }
                };
                plan = header(root, plan, name, value)?;
            }
        }
        Some(other) => {
            return Err(root.config_error(format!("headers must be a mapping, found {other}")));
        }
    }

    match given(vars, config.get("auth"), false) {
        None => {}
        Some(Value::Object(auth)) => plan = authorize(root, plan, &auth)?,
        Some(other) => {
            return Err(root.config_error(format!("auth must be a mapping, found {other}")));
        }
    }

    let body = match given(vars, config.get("body"), false) {
        None => None,
        Some(Value::String(text)) => Some((text.into_bytes(), false)),
        Some(Value::Object(mut fields)) => {
            fields.retain(|_, v| v.as_str().is_none_or(|s| lone_placeholder(s).is_none()));
            Some((Value::Object(fields).to_string().into_bytes(), true))
        }
        Some(json) => Some((json.to_string().into_bytes(), true)),
    };
    if let Some((bytes, json)) = body {
        let typed = plan
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("content-type"));
        if json && !typed {
            plan = plan.header("Content-Type", "application/json");
        }
        plan = plan.body(bytes);
    }

    plan.max_response_bytes = count(root, config, vars, "max_response_bytes")?;
    plan.max_redirects =
        count(root, config, vars, "max_redirects")?.map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    plan.retry = match given(vars, config.get("retry"), false) {
        None => None,
        Some(Value::Object(retry)) => {
            let attempts = retry
                .get("max_attempts")
                .and_then(Value::as_u64)
                .filter(|n| *n >= 1)
                .ok_or_else(|| {
                    root.config_error("retry.max_attempts must be a whole number of at least 1")
                })?;
            let backoff = match retry.get("backoff") {
                None => 1.0,
                Some(b) => b
                    .as_f64()
                    .filter(|b| *b >= 0.0 && b.is_finite())
                    .ok_or_else(|| {
                        root.config_error(format!("retry.backoff {b} is not a number of seconds"))
                    })?,
            };
            Some(Retry {
                max_attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                backoff_ms: (backoff * 1000.0).round() as u64,
            })
        }
        Some(other) => {
            return Err(root.config_error(format!("retry must be a mapping, found {other}")));
        }
    };
    Ok(plan)
}

/// `value` expanded, or `None` when it is absent, null, or exactly one
/// `{name}` that nothing fills.
fn given(vars: &Vars, value: Option<&Value>, url: bool) -> Option<Value> {
    let value = value?;
    let expanded = if url {
        vars.expand_url(value)
    } else {
        vars.expand(value)
    };
    match &expanded {
        Value::Null => None,
        Value::String(s) if lone_placeholder(s).is_some() => None,
        _ => Some(expanded),
    }
}

/// An HTTP token (RFC 9110): what a method or a header name may be.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn header(
    root: &Element,
    plan: HttpPlan,
    name: &str,
    value: String,
) -> Result<HttpPlan, PlanError> {
    if !is_token(name) {
        return Err(root.config_error(format!("{name:?} is not a header name")));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(root.config_error(format!(
            "header {name:?} holds a line break or NUL, which would split the request"
        )));
    }
    Ok(plan.header(name, value))
}

fn authorize(
    root: &Element,
    plan: HttpPlan,
    auth: &Map<String, Value>,
) -> Result<HttpPlan, PlanError> {
    let field = |key: &str| -> Result<String, PlanError> {
        match auth.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() && lone_placeholder(s).is_none() => {
                Ok(s.trim().to_owned())
            }
            _ => Err(root.config_error(format!(
                "auth.{key} is empty or missing (is the variable it names set?)"
            ))),
        }
    };
    match auth.get("type").and_then(Value::as_str) {
        Some("bearer") => {
            let token = field("token")?;
            header(root, plan, "Authorization", format!("Bearer {token}"))
        }
        Some("api_key") => {
            let key = field("key")?;
            let name = auth
                .get("header")
                .and_then(Value::as_str)
                .unwrap_or("X-API-Key");
            header(root, plan, name, key)
        }
        other => Err(root.config_error(format!(
            "auth.type {} is not bearer or api_key",
            other.map_or("(none)".to_owned(), |t| format!("{t:?}"))
        ))),
    }
}

fn check_url(root: &Element, url: &str) -> Result<(), PlanError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| {
            root.config_error(format!("url {url:?} is not an absolute http or https URL"))
        })?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(root.config_error(format!("url {url:?} names no host")));
    }
    if let Some(open) = url.find('{')
        && let Some(close) = url[open..].find('}')
    {
        return Err(root.config_error(format!(
            "url {url:?} still holds {}, which nothing fills",
            &url[open..open + close + 1]
        )));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(root.config_error(format!(
            "url {url:?} holds whitespace or control characters"
        )));
    }
    Ok(())
}

/// A non-negative whole number under `key`, if the configuration has one.
fn count(
    root: &Element,
    config: &Map<String, Value>,
    vars: &Vars,
    key: &str,
) -> Result<Option<u64>, PlanError> {
    match given(vars, config.get(key), false) {
        None => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
        Some(Value::String(s)) if s.trim().parse::<u64>().is_ok() => Ok(s.trim().parse().ok()),
        Some(other) => Err(root.config_error(format!("{key} {other} is not a whole number"))),
    }
}
