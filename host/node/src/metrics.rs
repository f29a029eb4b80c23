//! What a node has done, in Prometheus' text format (`GET /metrics`):
//! requests by route and status, their latency as a histogram, runs by
//! how they ended and those under way, and the bytes its principals hold.
//! Counts are this replica's since it started; bytes stored are the
//! database's, the same on every replica.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency histogram's buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

#[derive(Default)]
struct Latency {
    /// Counts per bucket (not cumulative), and one past the last bound.
    buckets: [u64; BUCKETS.len() + 1],
    sum: f64,
    count: u64,
}

#[derive(Default)]
pub struct Metrics {
    /// (route, status) to count.
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Latency>>,
    /// How runs ended, by status.
    runs: Mutex<BTreeMap<String, u64>>,
    gc: Mutex<Collected>,
}

/// What garbage collection on this replica did.
#[derive(Default, Clone, Copy)]
pub struct Collected {
    /// Collections of a principal's rows that ran to the end.
    pub runs: u64,
    /// Rows let go, and the bytes they counted.
    pub rows: u64,
    pub row_bytes: u64,
    /// Blobs and objects deleted from the object store.
    pub deleted: u64,
}

impl Metrics {
    /// Counts a request to `route` answered `status` after `took`.
    pub fn request(&self, route: &str, status: u16, took: Duration) {
        *self
            .requests
            .lock()
            .expect("metrics lock")
            .entry((route.to_owned(), status))
            .or_default() += 1;
        let seconds = took.as_secs_f64();
        let mut latency = self.latency.lock().expect("metrics lock");
        let entry = latency.entry(route.to_owned()).or_default();
        let bucket = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        entry.buckets[bucket] += 1;
        entry.sum += seconds;
        entry.count += 1;
    }

    /// Counts a run that ended as `status`.
    pub fn run_ended(&self, status: &str) {
        *self
            .runs
            .lock()
            .expect("metrics lock")
            .entry(status.to_owned())
            .or_default() += 1;
    }

    /// Adds to what garbage collection did.
    pub fn collected(&self, more: Collected) {
        let mut gc = self.gc.lock().expect("metrics lock");
        gc.runs += more.runs;
        gc.rows += more.rows;
        gc.row_bytes += more.row_bytes;
        gc.deleted += more.deleted;
    }

    /// The text of `/metrics`, with the gauges read at the time.
    pub fn render(&self, now: Gauges) -> String {
        let Gauges {
            active,
            max_concurrent,
            stored_bytes,
            queued,
        } = now;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP rye_node_requests_total Requests answered, by route and status.\n# TYPE rye_node_requests_total counter"
        );
        for ((route, status), count) in self.requests.lock().expect("metrics lock").iter() {
            let _ = writeln!(
                out,
                "rye_node_requests_total{{route=\"{}\",status=\"{status}\"}} {count}",
                escape(route)
            );
        }
        let _ = writeln!(
            out,
            "# HELP rye_node_request_seconds Time to answer a request, by route.\n# TYPE rye_node_request_seconds histogram"
        );
        for (route, latency) in self.latency.lock().expect("metrics lock").iter() {
            let route = escape(route);
            let mut cumulative = 0;
            for (i, bound) in BUCKETS.iter().enumerate() {
                cumulative += latency.buckets[i];
                let _ = writeln!(
                    out,
                    "rye_node_request_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "rye_node_request_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}\nrye_node_request_seconds_sum{{route=\"{route}\"}} {}\nrye_node_request_seconds_count{{route=\"{route}\"}} {}",
                latency.count, latency.sum, latency.count
            );
        }
        let _ = writeln!(
            out,
            "# HELP rye_node_runs_total Runs ended, by status.\n# TYPE rye_node_runs_total counter"
        );
        for (status, count) in self.runs.lock().expect("metrics lock").iter() {
            let _ = writeln!(
                out,
                "rye_node_runs_total{{status=\"{}\"}} {count}",
                escape(status)
            );
        }
        let _ = writeln!(
            out,
            "# HELP rye_node_runs_active Runs under way on this replica.\n# TYPE rye_node_runs_active gauge\nrye_node_runs_active {active}\n\
             # HELP rye_node_runs_max Runs this replica takes at once.\n# TYPE rye_node_runs_max gauge\nrye_node_runs_max {max_concurrent}\n\
             # HELP rye_node_jobs_queued Async runs waiting for a replica with a free slot, node-wide.\n# TYPE rye_node_jobs_queued gauge\nrye_node_jobs_queued {queued}\n\
             # HELP rye_node_stored_bytes Bytes every principal holds, as the database counts them.\n# TYPE rye_node_stored_bytes gauge\nrye_node_stored_bytes {stored_bytes}"
        );
        let gc = *self.gc.lock().expect("metrics lock");
        let _ = writeln!(
            out,
            "# HELP rye_node_gc_runs_total Collections of a principal's objects.\n# TYPE rye_node_gc_runs_total counter\nrye_node_gc_runs_total {}\n\
             # HELP rye_node_gc_swept_objects_total Objects principals no longer hold after a collection.\n# TYPE rye_node_gc_swept_objects_total counter\nrye_node_gc_swept_objects_total {}\n\
             # HELP rye_node_gc_swept_bytes_total Bytes those objects counted.\n# TYPE rye_node_gc_swept_bytes_total counter\nrye_node_gc_swept_bytes_total {}\n\
             # HELP rye_node_gc_deleted_total Blobs and objects deleted from the object store.\n# TYPE rye_node_gc_deleted_total counter\nrye_node_gc_deleted_total {}",
            gc.runs, gc.rows, gc.row_bytes, gc.deleted
        );
        out
    }
}

/// What is so at the moment metrics are asked for.
#[derive(Debug, Clone, Copy)]
pub struct Gauges {
    /// Runs under way on this replica.
    pub active: usize,
    pub max_concurrent: usize,
    /// Bytes every principal holds.
    pub stored_bytes: u64,
    /// Jobs waiting for a replica, node-wide.
    pub queued: i64,
}

/// A label value as the text format writes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_buckets_are_written_in_the_text_format() {
        let metrics = Metrics::default();
        metrics.request("/push", 200, Duration::from_millis(3));
        metrics.request("/push", 200, Duration::from_millis(700));
        metrics.request("/push", 409, Duration::from_millis(1));
        metrics.run_ended("completed");
        metrics.collected(Collected {
            runs: 1,
            rows: 5,
            row_bytes: 700,
            deleted: 2,
        });
        let text = metrics.render(Gauges {
            active: 1,
            max_concurrent: 8,
            stored_bytes: 4096,
            queued: 3,
        });
        assert!(text.contains("rye_node_requests_total{route=\"/push\",status=\"200\"} 2\n"));
        assert!(text.contains("rye_node_requests_total{route=\"/push\",status=\"409\"} 1\n"));
        assert!(text.contains("rye_node_request_seconds_bucket{route=\"/push\",le=\"0.001\"} 1\n"));
        assert!(text.contains("rye_node_request_seconds_bucket{route=\"/push\",le=\"0.005\"} 2\n"));
        assert!(text.contains("rye_node_request_seconds_bucket{route=\"/push\",le=\"1\"} 3\n"));
        assert!(text.contains("rye_node_request_seconds_bucket{route=\"/push\",le=\"+Inf\"} 3\n"));
        assert!(text.contains("rye_node_request_seconds_count{route=\"/push\"} 3\n"));
        assert!(text.contains("rye_node_runs_total{status=\"completed\"} 1\n"));
        assert!(text.contains("rye_node_runs_active 1\n"));
        assert!(text.contains("rye_node_stored_bytes 4096\n"));
        assert!(text.contains("rye_node_jobs_queued 3\n"));
        assert!(text.contains("rye_node_gc_swept_objects_total 5\n"));
        assert!(text.contains("rye_node_gc_deleted_total 2\n"));
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
