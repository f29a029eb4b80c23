//! `has` against a large store, on each database: 20,000 hashes asked, 1 %
//! of them missing, of a principal holding 200,000 objects (beside another
//! holding 50,000). Three ways to answer, run alternately in one process so
//! that they meet the same machine: the present ones by `IN`/`ANY` (what
//! `has` answered before), the missing ones by a plain anti-join (`LEFT
//! JOIN … IS NULL`) of the hashes as asked (the reference), and
//! `Db::missing`, what `has` answers by now: the same anti-join on
//! SQLite; on PostgreSQL, of the hashes as their 32 bytes, sorted so that
//! the lookups walk the index of `(principal, hash_bytes)` forward. Also
//! the time to note 200,000 objects held, as a push of that size does.
//!
//! `cargo bench -p rye-node --bench has` (PostgreSQL from the system's
//! packages, started by the bench; SQLite in a temporary file).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rye_node::db::{Db, Held};
use sha2::{Digest, Sha256};

const STORED: usize = 200_000;
const ASKED: usize = 20_000;
const ROUNDS: usize = 15;

fn hash(i: usize) -> String {
    hex::encode(Sha256::digest(i.to_le_bytes()))
}

fn held(hash: String) -> Held {
    Held {
        hash,
        kind: "blob",
        size: 1_000,
        object_kind: None,
        content_blob: None,
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The reference: the missing ones by a plain anti-join of the hashes as
/// asked, through a connection of the bench's own to the same database.
enum Reference {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl Reference {
    async fn missing(&self, principal: &str, hashes: &[String]) -> HashSet<String> {
        let rows: Vec<String> = match self {
            Reference::Sqlite(pool) => sqlx::query_scalar(
                "SELECT asked.value FROM json_each($2) AS asked LEFT JOIN objects o \
                 ON o.principal = $1 AND o.hash = asked.value WHERE o.hash IS NULL",
            )
            .bind(principal)
            .bind(serde_json::to_string(hashes).unwrap())
            .fetch_all(pool)
            .await
            .unwrap(),
            Reference::Postgres(pool) => sqlx::query_scalar(
                "SELECT asked.hash FROM UNNEST($2::text[]) AS asked(hash) LEFT JOIN objects o \
                 ON o.principal = $1 AND o.hash = asked.hash WHERE o.hash IS NULL",
            )
            .bind(principal)
            .bind(hashes)
            .fetch_all(pool)
            .await
            .unwrap(),
        };
        rows.into_iter().collect()
    }
}

async fn measure(name: &str, db: Db, reference: Reference) {
    let alice: Vec<Held> = (0..STORED).map(|i| held(hash(i))).collect();
    let started = Instant::now();
    db.hold("alice", &alice, 1).await.unwrap();
    let holding = started.elapsed();
    let bob: Vec<Held> = (STORED..STORED + 50_000).map(|i| held(hash(i))).collect();
    db.hold("bob", &bob, 1).await.unwrap();
    // 19,800 held, spread over the store, and 200 never stored.
    let mut asked: Vec<String> = (0..ASKED - ASKED / 100)
        .map(|i| hash(i * (STORED / ASKED)))
        .collect();
    asked.extend((0..ASKED / 100).map(|i| hash(10_000_000 + i)));
    let absent: HashSet<String> = asked[ASKED - ASKED / 100..].iter().cloned().collect();

    let mut present = Vec::new();
    let mut missing = Vec::new();
    let mut anti = Vec::new();
    for round in 0..ROUNDS + 2 {
        let t = Instant::now();
        let got = db.held("alice", &asked).await.unwrap();
        let a = t.elapsed();
        assert_eq!(got.len(), ASKED - absent.len());
        let t = Instant::now();
        let got = db.missing("alice", &asked).await.unwrap();
        let b = t.elapsed();
        assert_eq!(got, absent);
        let t = Instant::now();
        let got = reference.missing("alice", &asked).await;
        let c = t.elapsed();
        assert_eq!(got, absent);
        // The first two rounds warm the caches.
        if round >= 2 {
            present.push(a);
            missing.push(b);
            anti.push(c);
        }
    }
    println!(
        "{name}: note {STORED} held {} | has of {ASKED} (1 % missing), median of {ROUNDS}: present by IN/ANY {} | plain anti-join as asked {} | Db::missing {}",
        ms(holding),
        ms(median(present)),
        ms(median(anti)),
        ms(median(missing)),
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.db");
        let db = Db::open(&file).await.unwrap();
        let reference = sqlx::SqlitePool::connect(&format!("sqlite://{}", file.display()))
            .await
            .unwrap();
        measure("SQLite", db, Reference::Sqlite(reference)).await;
        match rye_test_artifacts::servers::Postgres::shared() {
            Ok(cluster) => {
                let url = cluster.database();
                let db = Db::connect(&url).await.unwrap();
                let reference = sqlx::PgPool::connect(&url).await.unwrap();
                measure("PostgreSQL", db, Reference::Postgres(reference)).await
            }
            Err(missing) => println!("PostgreSQL: not measured ({missing})"),
        }
    });
}
