//! What recording a thread costs: opening a registry (what a one-shot
//! command pays, also with a long history behind it), and a thread's
//! start and finish (what every execute will pay), on a real SQLite file.
//!
//! `cargo bench -p rye-threads --bench registry`

use std::time::{Duration, Instant};

use rye_threads::{Ended, Ending, NewThread, Registry, Status};
use serde_json::json;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn thread(chain: &serde_json::Value, n: usize) -> NewThread {
    NewThread {
        item_type: "tool".into(),
        item_id: "demo/echo".into(),
        params_hash: format!("{n:064}"),
        chain: chain.clone(),
        execution_mode: "sync".into(),
        ..NewThread::default()
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut opens = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let registry = Registry::open(dir.path()).await.unwrap();
            opens.push(started.elapsed());
            registry.close().await;
        }
        let registry = Registry::open(dir.path()).await.unwrap();
        let chain = json!([{"item_id": "demo/echo", "space": "project"}, {"item_id": "rye/core/runtimes/bash/bash"}, {"item_id": "rye/core/primitives/execute"}]);
        let (mut starts, mut finishes) = (Vec::new(), Vec::new());
        for n in 0..2000 {
            let started = Instant::now();
            let id = registry.start(thread(&chain, n)).await.unwrap();
            starts.push(started.elapsed());
            let started = Instant::now();
            registry
                .finish(
                    &id,
                    Ending {
                        status: Status::Completed,
                        result_hash: Some(format!("{n:064}")),
                        result: None,
                        error: None,
                        chain: None,
                    },
                )
                .await
                .unwrap();
            finishes.push(started.elapsed());
        }
        println!("open (existing registry, sweep included): median {:>9.1?}", median(opens));
        println!("start a thread:                           median {:>9.1?}", median(starts.clone()));
        println!("finish it:                                median {:>9.1?}", median(finishes.clone()));
        let pairs: Vec<Duration> = starts.iter().zip(&finishes).map(|(a, b)| *a + *b).collect();
        println!("start + finish:                           median {:>9.1?}", median(pairs));

        // A long history: finished runs recorded whole, a thousand to a
        // transaction, and one run left running by a live process.
        registry.start(thread(&chain, 0)).await.unwrap();
        let mut recorded = 2_000;
        for target in [10_000, 100_000] {
            while recorded < target {
                let batch: Vec<Ended> = (recorded..recorded + 1_000)
                    .map(|n| Ended {
                        id: rye_threads::new_thread_id(),
                        ending: Ending {
                            status: Status::Completed,
                            result_hash: Some(format!("{n:064}")),
                            result: None,
                            error: None,
                            chain: None,
                        },
                        whole: Some((thread(&chain, n), rye_threads::now_ms())),
                    })
                    .collect();
                registry.end_all(batch).await.unwrap();
                recorded += 1_000;
            }
            let mut opens = Vec::new();
            for _ in 0..20 {
                let started = Instant::now();
                let again = Registry::open(dir.path()).await.unwrap();
                opens.push(started.elapsed());
                again.close().await;
            }
            println!(
                "open with {target:>7} threads recorded, one running:   median {:>9.1?}",
                median(opens)
            );
        }
    });
}
