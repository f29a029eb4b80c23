//! Per-principal rate limits: a token bucket per key, on each replica
//! (so replicas behind a balancer allow their sum). A request over the
//! limit is answered 429 with how long to wait, before it costs the
//! database anything.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct RateLimit {
    per_second: f64,
    burst: f64,
    /// Tokens left and when they were counted, by principal.
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimit {
    /// `per_minute` requests a minute on average, `burst` at once; none
    /// when `per_minute` is 0.
    pub fn new(per_minute: u32, burst: u32) -> Option<RateLimit> {
        (per_minute > 0).then(|| RateLimit {
            per_second: f64::from(per_minute) / 60.0,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// Takes one request of `principal`'s at `now`; how long to wait
    /// when there is none to take.
    pub fn take(&self, principal: &str, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().expect("rate limit lock");
        let (tokens, at) = buckets
            .entry(principal.to_owned())
            .or_insert((self.burst, now));
        let refilled = now.saturating_duration_since(*at).as_secs_f64() * self.per_second;
        *tokens = (*tokens + refilled).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.per_second))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_let_through_then_the_rate_holds_per_principal() {
        let limit = RateLimit::new(600, 3).unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limit.take("alice", t0).is_ok());
        }
        let wait = limit.take("alice", t0).unwrap_err();
        assert!(wait > Duration::from_millis(90) && wait <= Duration::from_millis(100));
        assert!(limit.take("bob", t0).is_ok(), "bob has his own bucket");
        // A tenth of a second later one more is let in, not two.
        let t1 = t0 + Duration::from_millis(100);
        assert!(limit.take("alice", t1).is_ok());
        assert!(limit.take("alice", t1).is_err());
        // Idle for long, the bucket refills only to its burst.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(limit.take("alice", t2).is_ok());
        }
        assert!(limit.take("alice", t2).is_err());
        assert!(RateLimit::new(0, 10).is_none());
    }
}
