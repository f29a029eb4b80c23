//! Put and get through the content-addressed store on local files: a 1 KB
//! object and a 10 MB blob, each a fresh write (a new hash every round)
//! followed by a checked read.
//!
//! `cargo bench -p rye-cas --bench cas`

use std::time::{Duration, Instant};

use rye_cas::{Cas, LocalStorage, object};
use serde_json::{Map, Value, json};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(dir.path()));
    runtime.block_on(async {
        // About 1 KB of canonical JSON, made distinct by the round.
        let small = |round: usize| {
            let mut fields = Map::new();
            fields.insert("round".into(), json!(round));
            fields.insert(
                "state".into(),
                json!({"notes": "é—x".repeat(60), "items": (0..40).collect::<Vec<_>>()}),
            );
            object("state_snapshot", fields)
        };
        assert!((900..1400).contains(&rye_cas::canonical::to_vec(&small(0)).len()));
        let (mut puts, mut gets) = (Vec::new(), Vec::new());
        for round in 0..2000 {
            let value = small(round);
            let started = Instant::now();
            let hash = cas.put_object(&value).await.unwrap();
            puts.push(started.elapsed());
            let started = Instant::now();
            let back: Value = cas.get_object(&hash).await.unwrap().unwrap();
            gets.push(started.elapsed());
            assert_eq!(back["round"], round);
        }
        println!(
            "1 KB object: put {:>9.1?}  get {:>9.1?}  (median of 2,000)",
            median(puts),
            median(gets)
        );

        let mut big = vec![0u8; 10 << 20];
        let (mut puts, mut gets) = (Vec::new(), Vec::new());
        for round in 0..20u8 {
            big[0] = round;
            let started = Instant::now();
            let hash = cas.put_blob(&big).await.unwrap();
            puts.push(started.elapsed());
            let started = Instant::now();
            let back = cas.get_blob(&hash).await.unwrap().unwrap();
            gets.push(started.elapsed());
            assert_eq!(back.len(), big.len());
        }
        println!(
            "10 MB blob:  put {:>9.1?}  get {:>9.1?}  (median of 20)",
            median(puts),
            median(gets)
        );
    });
}
