//! What the seed's graphs lack, kept by the host from the graph's own
//! signed YAML: a node's `timeout` and `retry`, and the run's `deadline`.
//!
//! - `timeout: <seconds>` on a node: an action still running then is
//!   stopped (its processes killed) and is the node's error, `timed out`.
//! - `retry: {max_attempts, backoff, max_delay, on}` on a node: a failed
//!   action is taken again, up to `max_attempts` in all (default 3),
//!   waiting `backoff` seconds (default 1) before the second attempt and
//!   twice as long before each next, never more than `max_delay` (default
//!   30); `on` lists the failures retried, `timeout` and `error` (default
//!   both). A denied action is never retried.
//! - `deadline: <seconds>` in the graph's `config`: the run, from when it
//!   first started (resumes included), ends with an error once it passes,
//!   stopping the actions under way.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Map, Value};

/// A node's timeout and retry policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NodePolicy {
    pub timeout: Option<Duration>,
    pub retry: Option<Retry>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Retry {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub backoff: Duration,
    pub max_delay: Duration,
    pub on_timeout: bool,
    pub on_error: bool,
}

/// How an attempt failed, for `retry.on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    Timeout,
    Error,
}

impl Retry {
    /// The wait before attempt `attempt + 1`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let doubled = self.backoff.saturating_mul(
            1u32.checked_shl(attempt.saturating_sub(1))
                .unwrap_or(u32::MAX),
        );
        doubled.min(self.max_delay)
    }

    pub fn retries(&self, failure: Failure) -> bool {
        match failure {
            Failure::Timeout => self.on_timeout,
            Failure::Error => self.on_error,
        }
    }
}

/// Seconds as a duration: a number from 0 to a billion.
fn seconds(value: &Value, what: &str) -> Result<Duration, String> {
    let secs = value
        .as_f64()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 1e9)
        .ok_or_else(|| format!("{what} must be a number of seconds, not {value}"))?;
    Ok(Duration::from_secs_f64(secs))
}

/// Each node's policy, from the graph's `config.nodes` (nodes with none
/// are left out); an error names the node and the rule.
pub(crate) fn node_policies(
    graph: &Map<String, Value>,
) -> Result<HashMap<String, NodePolicy>, String> {
    let mut policies = HashMap::new();
    let Some(Value::Object(nodes)) = graph.get("config").and_then(|c| c.get("nodes")) else {
        return Ok(policies);
    };
    for (name, node) in nodes {
        let timeout = match node.get("timeout") {
            None | Some(Value::Null) => None,
            Some(value) => Some(seconds(value, &format!("node {name:?}: timeout"))?),
        };
        let retry = match node.get("retry") {
            None | Some(Value::Null) => None,
            Some(Value::Object(retry)) => Some(parse_retry(name, retry)?),
            Some(other) => return Err(format!("node {name:?}: retry must be a map, not {other}")),
        };
        if timeout.is_some() || retry.is_some() {
            policies.insert(name.clone(), NodePolicy { timeout, retry });
        }
    }
    Ok(policies)
}

fn parse_retry(name: &str, retry: &Map<String, Value>) -> Result<Retry, String> {
    let max_attempts = match retry.get("max_attempts") {
        None => 3,
        Some(value) => value
            .as_u64()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| {
                format!("node {name:?}: retry.max_attempts must be a whole number from 1 to 100, not {value}")
            })? as u32,
    };
    let duration = |key: &str, default: f64| match retry.get(key) {
        None => Ok(Duration::from_secs_f64(default)),
        Some(value) => seconds(value, &format!("node {name:?}: retry.{key}")),
    };
    let (mut on_timeout, mut on_error) = (true, true);
    if let Some(on) = retry.get("on") {
        let kinds = on
            .as_array()
            .ok_or_else(|| format!("node {name:?}: retry.on must be a list"))?;
        (on_timeout, on_error) = (false, false);
        for kind in kinds {
            match kind.as_str() {
                Some("timeout") => on_timeout = true,
                Some("error") => on_error = true,
                _ => {
                    return Err(format!(
                        "node {name:?}: retry.on names {kind}: the failures are timeout and error"
                    ));
                }
            }
        }
    }
    Ok(Retry {
        max_attempts,
        backoff: duration("backoff", 1.0)?,
        max_delay: duration("max_delay", 30.0)?,
        on_timeout,
        on_error,
    })
}

/// The run's deadline, from the graph's `config.deadline`.
pub(crate) fn deadline(graph: &Map<String, Value>) -> Result<Option<Duration>, String> {
    match graph.get("config").and_then(|c| c.get("deadline")) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => seconds(value, "config.deadline").map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn graph(nodes: Value) -> Map<String, Value> {
        json!({"config": {"nodes": nodes, "deadline": 2.5}})
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn policies_and_their_defaults() {
        let policies = node_policies(&graph(json!({
            "a": {"timeout": 1.5},
            "b": {"retry": {}},
            "c": {"retry": {"max_attempts": 5, "backoff": 0.1, "max_delay": 0.3, "on": ["timeout"]}},
            "d": {"type": "gate"}
        })))
        .unwrap();
        assert_eq!(policies["a"].timeout, Some(Duration::from_millis(1500)));
        let b = policies["b"].retry.as_ref().unwrap();
        assert_eq!((b.max_attempts, b.on_timeout, b.on_error), (3, true, true));
        let c = policies["c"].retry.as_ref().unwrap();
        assert!(c.retries(Failure::Timeout) && !c.retries(Failure::Error));
        assert_eq!(c.delay(1), Duration::from_millis(100));
        assert_eq!(c.delay(2), Duration::from_millis(200));
        assert_eq!(c.delay(3), Duration::from_millis(300), "capped");
        assert_eq!(c.delay(40), Duration::from_millis(300));
        assert!(!policies.contains_key("d"));
        assert_eq!(
            deadline(&graph(json!({}))).unwrap(),
            Some(Duration::from_millis(2500))
        );
    }

    #[test]
    fn bad_policies_name_the_node_and_the_rule() {
        for (nodes, says) in [
            (json!({"a": {"timeout": "soon"}}), "node \"a\": timeout"),
            (json!({"a": {"timeout": -1}}), "node \"a\": timeout"),
            (json!({"a": {"retry": 3}}), "retry must be a map"),
            (json!({"a": {"retry": {"max_attempts": 0}}}), "max_attempts"),
            (json!({"a": {"retry": {"on": ["crash"]}}}), "retry.on names"),
            (json!({"a": {"retry": {"backoff": "x"}}}), "retry.backoff"),
        ] {
            let error = node_policies(&graph(nodes)).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
    }
}
