//! The node's database: every fact that changes. Nonces seen (so a replay
//! is refused after a restart too), which objects each principal holds
//! (so `has` is one query, never a request per hash to the object store),
//! each project's head (moved only by compare-and-swap), each
//! principal's user space (by revision), the keys the node authorizes and
//! the runs it made.
//!
//! SQLite (one node on one machine, the default) or PostgreSQL (replicas
//! sharing one database), through `sqlx`, in SQL both speak but for the
//! one place a list of hashes is bound. One schema for both, in
//! `migrations/`, applied when the database is opened; on PostgreSQL the
//! migrator holds an advisory lock, so replicas starting together apply
//! each migration once.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{ColumnIndex, Decode, Row, Type};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("the node's database: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("the node's database could not be brought up to date: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(
        "the node's database {0:?} is neither a SQLite file (sqlite://PATH) nor a PostgreSQL server (postgres://…)"
    )]
    Url(String),
}

/// A compare-and-swap that found something else than it expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved<T> {
    pub actual: Option<T>,
}

/// One object a principal now holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub hash: String,
    /// `blob` or `object`.
    pub kind: &'static str,
    pub size: u64,
    /// An object's own `kind` (`item_source`, `source_manifest`, ...).
    pub object_kind: Option<String>,
    /// An `item_source`'s content blob.
    pub content_blob: Option<String>,
}

/// What the database knows of one held object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// `blob` or `object`.
    pub kind: String,
    pub object_kind: Option<String>,
    pub content_blob: Option<String>,
}

/// One run on the node.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadRow {
    pub thread_id: String,
    pub project_path: String,
    pub item_id: String,
    pub status: String,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub record: serde_json::Value,
}

/// A webhook binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub hook_id: String,
    pub item_id: String,
    pub project_path: String,
    pub description: Option<String>,
    pub secret: String,
    pub created_at: i64,
    /// `{"secret_envelope": …, "vault_keys": […]}` for its runs, if any.
    pub secrets: Option<serde_json::Value>,
}

/// What a revocation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    Gone,
    NotFound,
    /// Refused: it is the last key that may manage keys.
    LastManager,
}

/// What a delivery is to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    New,
    /// Its id was delivered before: already processed.
    SameId,
    /// Its signature came before under another id: a replay.
    SameSignature,
}

/// A principal's user space as last pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSpace {
    pub manifest: String,
    pub revision: i64,
    pub pushed_at: i64,
}

#[derive(Debug, Clone)]
pub struct Db {
    pool: Pool,
}

#[derive(Debug, Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// `$body` with `$pool` bound to whichever pool the database has: the
/// statements are the same text for both, typed for each.
macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match &$db.pool {
            Pool::Sqlite($pool) => $body,
            Pool::Postgres($pool) => $body,
        }
    };
}

/// Moves a head from `expected` (none: the project has none yet) to
/// `new` through `$on` (a pool or a transaction); rows changed (1: moved).
macro_rules! set_head {
    ($on:expr, $principal:expr, $project:expr, $expected:expr, $new:expr, $now:expr) => {
        match $expected {
            None => sqlx::query(
                "INSERT INTO project_heads (principal, project_path, head, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $4) ON CONFLICT (principal, project_path) DO NOTHING",
            )
            .bind($principal)
            .bind($project)
            .bind($new)
            .bind($now)
            .execute($on)
            .await?
            .rows_affected(),
            Some(expected) => sqlx::query(
                "UPDATE project_heads SET head = $3, updated_at = $5 \
                 WHERE principal = $1 AND project_path = $2 AND head = $4",
            )
            .bind($principal)
            .bind($project)
            .bind($new)
            .bind(expected)
            .bind($now)
            .execute($on)
            .await?
            .rows_affected(),
        }
    };
}

/// Sets a user space if its revision is still `expected` through `$on`;
/// rows changed (1: set) and the revision it would have.
macro_rules! set_user_space {
    ($on:expr, $principal:expr, $expected:expr, $manifest:expr, $now:expr) => {
        match $expected {
            None => (
                sqlx::query(
                    "INSERT INTO user_spaces (principal, manifest, revision, pushed_at) VALUES ($1, $2, 1, $3) \
                     ON CONFLICT (principal) DO NOTHING",
                )
                .bind($principal)
                .bind($manifest)
                .bind($now)
                .execute($on)
                .await?
                .rows_affected(),
                1,
            ),
            Some(expected) => (
                sqlx::query(
                    "UPDATE user_spaces SET manifest = $2, revision = revision + 1, pushed_at = $3 \
                     WHERE principal = $1 AND revision = $4",
                )
                .bind($principal)
                .bind($manifest)
                .bind($now)
                .bind(expected)
                .execute($on)
                .await?
                .rows_affected(),
                expected + 1,
            ),
        }
    };
}

/// A URL that names a database without its password, for messages.
fn shown(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://…{}", &url[..scheme], &url[at..])
        }
        _ => url.to_owned(),
    }
}

impl Db {
    /// Opens (creating if need be) the SQLite database at `path` and
    /// brings its schema up to date.
    pub async fn open(path: &std::path::Path) -> Result<Db, DbError> {
        let options = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(std::time::Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Db {
            pool: Pool::Sqlite(pool),
        })
    }

    /// Connects to the database `url` names, `sqlite://PATH` or
    /// `postgres://USER:PASSWORD@HOST:PORT/NAME` (the usual libpq
    /// parameters, `sslmode` among them), and brings its schema up to
    /// date.
    pub async fn connect(url: &str) -> Result<Db, DbError> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            return Db::open(std::path::Path::new(path)).await;
        }
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(DbError::Url(shown(url)));
        }
        let options = PgConnectOptions::from_str(url)?.application_name("rye-node");
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect_with(options)
            .await?;
        // The shared schema, then what only PostgreSQL has; each run leaves
        // the other's applied versions be.
        let mut shared = sqlx::migrate!("./migrations");
        shared.set_ignore_missing(true);
        shared.run(&pool).await?;
        let mut own = sqlx::migrate!("./migrations-postgres");
        own.set_ignore_missing(true);
        own.run(&pool).await?;
        Ok(Db {
            pool: Pool::Postgres(pool),
        })
    }

    /// The database server's clock, in Unix seconds: PostgreSQL's; none
    /// for SQLite, which is this machine's.
    pub async fn server_time(&self) -> Result<Option<f64>, DbError> {
        match &self.pool {
            Pool::Sqlite(_) => Ok(None),
            Pool::Postgres(pool) => Ok(Some(
                sqlx::query_scalar(
                    "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)",
                )
                .fetch_one(pool)
                .await?,
            )),
        }
    }

    /// Which database this is: `sqlite` or `postgres`.
    pub fn kind(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    /// Records `key` as seen at `now` (Unix seconds); `false` when it was
    /// seen within `window` seconds before: a replay. Keys older than the
    /// window are let go.
    pub async fn fresh_nonce(&self, key: &str, now: i64, window: i64) -> Result<bool, DbError> {
        let inserted = on_pool!(self, pool => {
            sqlx::query("DELETE FROM nonces WHERE seen_at < $1")
                .bind(now - window)
                .execute(pool)
                .await?;
            sqlx::query(
                "INSERT INTO nonces (nonce_key, seen_at) VALUES ($1, $2) ON CONFLICT (nonce_key) DO NOTHING",
            )
            .bind(key)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(inserted == 1)
    }

    /// Notes that `principal` holds `objects` (already in the object
    /// store) as of `now`, in one transaction of a statement per
    /// thousands of objects, not one per object. An object held before is
    /// held anew: garbage collection spares what was held lately.
    pub async fn hold(&self, principal: &str, objects: &[Held], now: i64) -> Result<(), DbError> {
        if objects.is_empty() {
            return Ok(());
        }
        match &self.pool {
            Pool::Sqlite(pool) => {
                let mut tx = pool.begin().await?;
                for chunk in objects.chunks(5_000) {
                    let rows: Vec<serde_json::Value> = chunk
                        .iter()
                        .map(|h| {
                            serde_json::json!([
                                h.hash,
                                h.kind,
                                h.size,
                                h.object_kind,
                                h.content_blob
                            ])
                        })
                        .collect();
                    sqlx::query(
                        "INSERT INTO objects (principal, hash, kind, size, stored_at, object_kind, content_blob) \
                         SELECT $1, held.value ->> 0, held.value ->> 1, held.value ->> 2, $2, \
                         held.value ->> 3, held.value ->> 4 FROM json_each($3) AS held WHERE true \
                         ON CONFLICT (principal, hash) DO UPDATE SET stored_at = excluded.stored_at \
                         WHERE objects.stored_at < excluded.stored_at",
                    )
                    .bind(principal)
                    .bind(now)
                    .bind(serde_json::Value::Array(rows).to_string())
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
            }
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                for chunk in objects.chunks(5_000) {
                    let column = |f: fn(&Held) -> Option<String>| -> Vec<Option<String>> {
                        chunk.iter().map(f).collect()
                    };
                    let sizes: Vec<i64> = chunk.iter().map(|h| h.size as i64).collect();
                    sqlx::query(
                        "INSERT INTO objects (principal, hash, kind, size, stored_at, object_kind, content_blob) \
                         SELECT $1, hash, kind, size, $2, object_kind, content_blob \
                         FROM UNNEST($3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[]) \
                         AS held(hash, kind, size, object_kind, content_blob) \
                         ON CONFLICT (principal, hash) DO UPDATE SET stored_at = excluded.stored_at \
                         WHERE objects.stored_at < excluded.stored_at",
                    )
                    .bind(principal)
                    .bind(now)
                    .bind(column(|h| Some(h.hash.clone())))
                    .bind(column(|h| Some(h.kind.to_owned())))
                    .bind(sizes)
                    .bind(column(|h| h.object_kind.clone()))
                    .bind(column(|h| h.content_blob.clone()))
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
            }
        }
        Ok(())
    }

    /// Which of `hashes` `principal` does not hold: one query however
    /// many (an anti-join), answered with the few missing rather than the
    /// many present.
    pub async fn missing(
        &self,
        principal: &str,
        hashes: &[String],
    ) -> Result<HashSet<String>, DbError> {
        let rows: Vec<String> = match &self.pool {
            Pool::Sqlite(pool) => {
                let list = serde_json::to_string(hashes).unwrap_or_else(|_| "[]".into());
                sqlx::query_scalar(
                    "SELECT asked.value FROM json_each($2) AS asked LEFT JOIN objects o \
                     ON o.principal = $1 AND o.hash = asked.value WHERE o.hash IS NULL",
                )
                .bind(principal)
                .bind(list)
                .fetch_all(pool)
                .await?
            }
            Pool::Postgres(pool) => {
                // As their 32 bytes (one not in lower-case hex, as every
                // hash held is, is held by nobody), and in index order, so
                // that the lookups walk the index forward.
                let mut keys = Vec::with_capacity(hashes.len());
                let mut odd = Vec::new();
                for hash in hashes {
                    let lower = hash.len() == 64
                        && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                    match hex::decode(hash) {
                        Ok(key) if lower => keys.push(key),
                        _ => odd.push(hash.clone()),
                    }
                }
                keys.sort_unstable();
                keys.dedup();
                let lacking: Vec<Vec<u8>> = sqlx::query_scalar(
                    "SELECT asked.key FROM UNNEST($2::bytea[]) AS asked(key) LEFT JOIN objects o \
                     ON o.principal = $1 AND o.hash_bytes = asked.key WHERE o.hash_bytes IS NULL",
                )
                .bind(principal)
                .bind(&keys)
                .fetch_all(pool)
                .await?;
                lacking.iter().map(hex::encode).chain(odd).collect()
            }
        };
        Ok(rows.into_iter().collect())
    }

    /// Which of `hashes` `principal` holds: one query however many.
    pub async fn held(
        &self,
        principal: &str,
        hashes: &[String],
    ) -> Result<HashSet<String>, DbError> {
        Ok(self
            .holdings(principal, hashes)
            .await?
            .into_keys()
            .collect())
    }

    /// What is known of those of `hashes` that `principal` holds: one
    /// query however many.
    pub async fn holdings(
        &self,
        principal: &str,
        hashes: &[String],
    ) -> Result<HashMap<String, Holding>, DbError> {
        match &self.pool {
            Pool::Sqlite(pool) => {
                let list = serde_json::to_string(hashes).unwrap_or_else(|_| "[]".into());
                let rows = sqlx::query(
                    "SELECT hash, kind, object_kind, content_blob FROM objects \
                     WHERE principal = $1 AND hash IN (SELECT value FROM json_each($2))",
                )
                .bind(principal)
                .bind(list)
                .fetch_all(pool)
                .await?;
                rows.iter().map(holding).collect()
            }
            Pool::Postgres(pool) => {
                let rows = sqlx::query(
                    "SELECT hash, kind, object_kind, content_blob FROM objects \
                     WHERE principal = $1 AND hash = ANY($2)",
                )
                .bind(principal)
                .bind(hashes)
                .fetch_all(pool)
                .await?;
                rows.iter().map(holding).collect()
            }
        }
    }

    /// The bytes `principal` holds, counted.
    pub async fn stored_bytes(&self, principal: &str) -> Result<u64, DbError> {
        let total: i64 = on_pool!(self, pool => {
            sqlx::query_scalar(
                "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM objects WHERE principal = $1",
            )
            .bind(principal)
            .fetch_one(pool)
            .await?
        });
        Ok(total.max(0) as u64)
    }

    /// The bytes every principal holds, counted.
    pub async fn all_stored_bytes(&self) -> Result<u64, DbError> {
        let total: i64 = on_pool!(self, pool => {
            sqlx::query_scalar("SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM objects")
                .fetch_one(pool)
                .await?
        });
        Ok(total.max(0) as u64)
    }

    /// The head of `principal`'s project at `project`.
    pub async fn head(&self, principal: &str, project: &str) -> Result<Option<String>, DbError> {
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar(
                "SELECT head FROM project_heads WHERE principal = $1 AND project_path = $2",
            )
            .bind(principal)
            .bind(project)
            .fetch_optional(pool)
            .await?
        }))
    }

    /// Moves the head from `expected` (none: the project has none yet) to
    /// `new`, or says where it is instead.
    pub async fn advance_head(
        &self,
        principal: &str,
        project: &str,
        expected: Option<&str>,
        new: &str,
        now: i64,
    ) -> Result<Result<(), Moved<String>>, DbError> {
        let done = on_pool!(self, pool => set_head!(pool, principal, project, expected, new, now));
        if done == 1 {
            return Ok(Ok(()));
        }
        Ok(Err(Moved {
            actual: self.head(principal, project).await?,
        }))
    }

    pub async fn user_space(&self, principal: &str) -> Result<Option<UserSpace>, DbError> {
        on_pool!(self, pool => {
            let row = sqlx::query(
                "SELECT manifest, revision, pushed_at FROM user_spaces WHERE principal = $1",
            )
            .bind(principal)
            .fetch_optional(pool)
            .await?;
            row.map(|row| {
                Ok(UserSpace {
                    manifest: row.try_get("manifest")?,
                    revision: row.try_get("revision")?,
                    pushed_at: row.try_get("pushed_at")?,
                })
            })
            .transpose()
        })
    }

    /// Sets `principal`'s user space to `manifest` if its revision is
    /// still `expected` (none: never pushed); the new revision, or the one
    /// it has instead.
    pub async fn push_user_space(
        &self,
        principal: &str,
        expected: Option<i64>,
        manifest: &str,
        now: i64,
    ) -> Result<Result<i64, Moved<i64>>, DbError> {
        let (done, revision) =
            on_pool!(self, pool => set_user_space!(pool, principal, expected, manifest, now));
        if done == 1 {
            return Ok(Ok(revision));
        }
        Ok(Err(Moved {
            actual: self.user_space(principal).await?.map(|u| u.revision),
        }))
    }

    /// The signed document authorizing the key `fingerprint`, if any.
    pub async fn authorized_key(&self, fingerprint: &str) -> Result<Option<String>, DbError> {
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar("SELECT document FROM authorized_keys WHERE fingerprint = $1")
                .bind(fingerprint)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// Every authorized key's fingerprint and document.
    pub async fn authorized_keys(&self) -> Result<Vec<(String, String)>, DbError> {
        on_pool!(self, pool => {
            let rows = sqlx::query(
                "SELECT fingerprint, document FROM authorized_keys ORDER BY created_at, fingerprint",
            )
            .fetch_all(pool)
            .await?;
            rows.iter()
                .map(|row| Ok((row.try_get("fingerprint")?, row.try_get("document")?)))
                .collect()
        })
    }

    /// Authorizes `fingerprint` by `document` (replacing an earlier one).
    pub async fn authorize(
        &self,
        fingerprint: &str,
        document: &str,
        now: i64,
    ) -> Result<(), DbError> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO authorized_keys (fingerprint, document, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (fingerprint) DO UPDATE SET document = excluded.document",
            )
            .bind(fingerprint)
            .bind(document)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(())
    }

    /// Revokes the key `fingerprint`, unless no key `manages` (a test of
    /// a key's document) would be left: checked and done as one, so two
    /// revocations at once cannot both pass the check.
    pub async fn revoke_key(
        &self,
        fingerprint: &str,
        manages: impl Fn(&str) -> bool,
    ) -> Result<Revoked, DbError> {
        macro_rules! revoke {
            ($tx:ident) => {{
                let gone = sqlx::query("DELETE FROM authorized_keys WHERE fingerprint = $1")
                    .bind(fingerprint)
                    .execute(&mut *$tx)
                    .await?
                    .rows_affected();
                if gone == 0 {
                    return Ok(Revoked::NotFound);
                }
                let left: Vec<String> = sqlx::query_scalar("SELECT document FROM authorized_keys")
                    .fetch_all(&mut *$tx)
                    .await?;
                if !left.iter().any(|doc| manages(doc)) {
                    $tx.rollback().await?;
                    return Ok(Revoked::LastManager);
                }
                $tx.commit().await?;
                Ok(Revoked::Gone)
            }};
        }
        match &self.pool {
            // The delete takes SQLite's one write lock before the rest is
            // read.
            Pool::Sqlite(pool) => {
                let mut tx = pool.begin().await?;
                revoke!(tx)
            }
            // PostgreSQL: one revocation at a time, by a lock held until
            // the transaction ends.
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock(7310201)")
                    .execute(&mut *tx)
                    .await?;
                revoke!(tx)
            }
        }
    }

    /// Records a run that starts now, held by `replica` until `lease_until`.
    pub async fn start_thread(
        &self,
        principal: &str,
        row: &ThreadRow,
        replica: &str,
        lease_until: i64,
    ) -> Result<(), DbError> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO threads (thread_id, principal, project_path, item_id, status, created_at, \
                 finished_at, record, replica, lease_until) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(&row.thread_id)
            .bind(principal)
            .bind(&row.project_path)
            .bind(&row.item_id)
            .bind(&row.status)
            .bind(row.created_at)
            .bind(row.finished_at)
            .bind(row.record.to_string())
            .bind(replica)
            .bind(lease_until)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(())
    }

    /// Adds `hashes` to the `new_object_hashes` of the record of the run
    /// `thread_id` while it is under way, so that collections keep them
    /// before a head names them; nothing once it ended.
    pub async fn note_run_objects(&self, thread_id: &str, hashes: &[&str]) -> Result<(), DbError> {
        if hashes.is_empty() {
            return Ok(());
        }
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            // Written first, so the transaction holds the write lock (the
            // row's, on PostgreSQL) before it reads: SQLite refuses a read
            // that turns into a write once another writer went first.
            let record: Option<String> = sqlx::query_scalar(
                "UPDATE threads SET record = record WHERE thread_id = $1 AND finished_at IS NULL \
                 RETURNING record",
            )
            .bind(thread_id)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(Ok(serde_json::Value::Object(mut record))) =
                record.map(|r| serde_json::from_str::<serde_json::Value>(&r))
            {
                let listed = record
                    .entry("new_object_hashes")
                    .or_insert_with(|| serde_json::Value::Array(Vec::new()));
                if let serde_json::Value::Array(listed) = listed {
                    let known: HashSet<String> =
                        listed.iter().filter_map(|h| h.as_str().map(str::to_owned)).collect();
                    listed.extend(
                        hashes
                            .iter()
                            .filter(|h| !known.contains(**h))
                            .map(|h| serde_json::Value::from(*h)),
                    );
                }
                sqlx::query(
                    "UPDATE threads SET record = $2 WHERE thread_id = $1 AND finished_at IS NULL",
                )
                .bind(thread_id)
                .bind(serde_json::Value::Object(record).to_string())
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Records how a run ended; its job, if it was one, goes.
    pub async fn finish_thread(
        &self,
        thread_id: &str,
        status: &str,
        record: &serde_json::Value,
        now: i64,
    ) -> Result<(), DbError> {
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(
                "UPDATE threads SET status = $2, record = $3, finished_at = $4, lease_until = NULL \
                 WHERE thread_id = $1",
            )
            .bind(thread_id)
            .bind(status)
            .bind(record.to_string())
            .bind(now)
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM jobs WHERE thread_id = $1")
                .bind(thread_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Extends to `until` the lease of every run `replica` holds.
    pub async fn renew_leases(&self, replica: &str, until: i64) -> Result<u64, DbError> {
        Ok(on_pool!(self, pool => {
            sqlx::query(
                "UPDATE threads SET lease_until = $2 WHERE replica = $1 AND status = 'running'",
            )
            .bind(replica)
            .bind(until)
            .execute(pool)
            .await?
            .rows_affected()
        }))
    }

    /// Marks `interrupted` every run still recorded as running whose
    /// lease ran out by `now` or that has none, and, when `replica` is
    /// given, every run that replica holds (a replica starting again
    /// under the same name: its runs died with its earlier process); but
    /// never a job with attempts left, which [`Db::requeue_orphans`]
    /// queues again instead. The jobs of ended runs go.
    pub async fn interrupt_running(&self, now: i64, replica: Option<&str>) -> Result<u64, DbError> {
        Ok(on_pool!(self, pool => {
            let cut = sqlx::query(
                "UPDATE threads SET status = 'interrupted', finished_at = $1, lease_until = NULL \
                 WHERE status = 'running' AND (lease_until IS NULL OR lease_until < $1 OR replica = $2) \
                 AND thread_id NOT IN (SELECT thread_id FROM jobs WHERE attempts < max_attempts)",
            )
            .bind(now)
            .bind(replica)
            .execute(pool)
            .await?
            .rows_affected();
            if cut > 0 {
                sqlx::query(
                    "DELETE FROM jobs WHERE thread_id IN \
                     (SELECT thread_id FROM threads WHERE status NOT IN ('queued', 'running'))",
                )
                .execute(pool)
                .await?;
            }
            cut
        }))
    }

    /// Records a new webhook binding.
    pub async fn bind_webhook(
        &self,
        principal: &str,
        hook: &Webhook,
        now: i64,
    ) -> Result<(), DbError> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO webhook_bindings (hook_id, principal, item_id, project_path, description, secret, \
                 created_at, secrets) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(&hook.hook_id)
            .bind(principal)
            .bind(&hook.item_id)
            .bind(&hook.project_path)
            .bind(hook.description.as_deref())
            .bind(&hook.secret)
            .bind(now)
            .bind(hook.secrets.as_ref().map(|s| s.to_string()))
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(())
    }

    /// The binding `hook_id` and whose it is.
    pub async fn webhook(&self, hook_id: &str) -> Result<Option<(String, Webhook)>, DbError> {
        on_pool!(self, pool => {
            let row = sqlx::query(
                "SELECT principal, hook_id, item_id, project_path, description, secret, created_at, secrets \
                 FROM webhook_bindings WHERE hook_id = $1",
            )
            .bind(hook_id)
            .fetch_optional(pool)
            .await?;
            row.as_ref()
                .map(|row| Ok((row.try_get("principal")?, webhook(row)?)))
                .transpose()
        })
    }

    /// `principal`'s bindings, oldest first.
    pub async fn webhooks(&self, principal: &str) -> Result<Vec<Webhook>, DbError> {
        on_pool!(self, pool => {
            let rows = sqlx::query(
                "SELECT hook_id, item_id, project_path, description, secret, created_at, secrets \
                 FROM webhook_bindings WHERE principal = $1 ORDER BY created_at, hook_id",
            )
            .bind(principal)
            .fetch_all(pool)
            .await?;
            rows.iter().map(webhook).collect()
        })
    }

    /// Deletes `principal`'s binding `hook_id`; whether there was one.
    pub async fn unbind_webhook(&self, principal: &str, hook_id: &str) -> Result<bool, DbError> {
        let gone = on_pool!(self, pool => {
            sqlx::query("DELETE FROM webhook_bindings WHERE principal = $1 AND hook_id = $2")
                .bind(principal)
                .bind(hook_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(gone == 1)
    }

    /// Remembers the delivery `delivery_id` of `hook_id`, signed with
    /// `signature`, at `now`, forgetting deliveries older than
    /// `remember` seconds; whether it is new, or which of the two was
    /// seen before.
    pub async fn delivered(
        &self,
        hook_id: &str,
        delivery_id: &str,
        signature: &str,
        now: i64,
        remember: i64,
    ) -> Result<Delivered, DbError> {
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM webhook_deliveries WHERE seen_at < $1")
                .bind(now - remember)
                .execute(pool)
                .await?;
            let inserted = sqlx::query(
                "INSERT INTO webhook_deliveries (hook_id, delivery_id, signature, seen_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            )
            .bind(hook_id)
            .bind(delivery_id)
            .bind(signature)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected();
            if inserted == 1 {
                return Ok(Delivered::New);
            }
            let same_id: Option<i64> = sqlx::query_scalar(
                "SELECT seen_at FROM webhook_deliveries WHERE hook_id = $1 AND delivery_id = $2",
            )
            .bind(hook_id)
            .bind(delivery_id)
            .fetch_optional(pool)
            .await?;
            Ok(if same_id.is_some() {
                Delivered::SameId
            } else {
                Delivered::SameSignature
            })
        })
    }

    /// Forgets a delivery that did not run, so its retry is let in.
    pub async fn forget_delivery(&self, hook_id: &str, delivery_id: &str) -> Result<(), DbError> {
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM webhook_deliveries WHERE hook_id = $1 AND delivery_id = $2")
                .bind(hook_id)
                .bind(delivery_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(())
    }

    /// Keeps `envelope` as `principal`'s secret `name`, replacing one of
    /// that name.
    pub async fn vault_set(
        &self,
        principal: &str,
        name: &str,
        envelope: &str,
        now: i64,
    ) -> Result<(), DbError> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO vault (principal, name, envelope, updated_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (principal, name) DO UPDATE SET envelope = excluded.envelope, \
                 updated_at = excluded.updated_at",
            )
            .bind(principal)
            .bind(name)
            .bind(envelope)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(())
    }

    /// The names in `principal`'s vault, sorted.
    pub async fn vault_names(&self, principal: &str) -> Result<Vec<String>, DbError> {
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar("SELECT name FROM vault WHERE principal = $1 ORDER BY name")
                .bind(principal)
                .fetch_all(pool)
                .await?
        }))
    }

    /// The sealed envelopes of `principal`'s secrets `names` that exist.
    pub async fn vault_get(
        &self,
        principal: &str,
        names: &[String],
    ) -> Result<Vec<(String, String)>, DbError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT name, envelope FROM vault WHERE principal = $1 AND name IN ({})",
            self.listed(2)
        );
        let list = serde_json::to_string(names).unwrap_or_else(|_| "[]".into());
        let kept: HashMap<String, String> = on_pool!(self, pool => {
            sqlx::query_as::<_, (String, String)>(gc::safe(sql))
                .bind(principal)
                .bind(list)
                .fetch_all(pool)
                .await?
                .into_iter()
                .collect()
        });
        // In the order asked, so that a later name's variables win.
        Ok(names
            .iter()
            .filter_map(|name| {
                kept.get(name)
                    .map(|envelope| (name.clone(), envelope.clone()))
            })
            .collect())
    }

    /// Deletes `principal`'s secret `name`; whether there was one.
    pub async fn vault_delete(&self, principal: &str, name: &str) -> Result<bool, DbError> {
        let gone = on_pool!(self, pool => {
            sqlx::query("DELETE FROM vault WHERE principal = $1 AND name = $2")
                .bind(principal)
                .bind(name)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(gone == 1)
    }

    /// `principal`'s runs, newest first, of one project or all.
    pub async fn threads(
        &self,
        principal: &str,
        project: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ThreadRow>, DbError> {
        on_pool!(self, pool => {
            let rows = sqlx::query(
                "SELECT thread_id, project_path, item_id, status, created_at, finished_at, record \
                 FROM threads WHERE principal = $1 AND ($2 IS NULL OR project_path = $2) \
                 ORDER BY created_at DESC, thread_id DESC LIMIT $3",
            )
            .bind(principal)
            .bind(project)
            .bind(limit)
            .fetch_all(pool)
            .await?;
            rows.iter().map(thread_row).collect()
        })
    }

    /// One of `principal`'s runs.
    pub async fn thread(
        &self,
        principal: &str,
        thread_id: &str,
    ) -> Result<Option<ThreadRow>, DbError> {
        on_pool!(self, pool => {
            let row = sqlx::query(
                "SELECT thread_id, project_path, item_id, status, created_at, finished_at, record \
                 FROM threads WHERE principal = $1 AND thread_id = $2",
            )
            .bind(principal)
            .bind(thread_id)
            .fetch_optional(pool)
            .await?;
            row.as_ref().map(thread_row).transpose()
        })
    }
}

/// One row of `holdings`, of either database.
fn holding<R: Row>(row: &R) -> Result<(String, Holding), DbError>
where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'c> &'c str: ColumnIndex<R>,
{
    Ok((
        row.try_get("hash")?,
        Holding {
            kind: row.try_get("kind")?,
            object_kind: row.try_get("object_kind")?,
            content_blob: row.try_get("content_blob")?,
        },
    ))
}

/// One row of `webhook_bindings`, of either database.
fn webhook<R: Row>(row: &R) -> Result<Webhook, DbError>
where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'c> &'c str: ColumnIndex<R>,
{
    Ok(Webhook {
        hook_id: row.try_get("hook_id")?,
        item_id: row.try_get("item_id")?,
        project_path: row.try_get("project_path")?,
        description: row.try_get("description")?,
        secret: row.try_get("secret")?,
        created_at: row.try_get("created_at")?,
        secrets: row
            .try_get::<Option<String>, _>("secrets")?
            .and_then(|text| serde_json::from_str(&text).ok()),
    })
}

/// One row of `threads`, of either database.
fn thread_row<R: Row>(row: &R) -> Result<ThreadRow, DbError>
where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'c> &'c str: ColumnIndex<R>,
{
    let record: String = row.try_get("record")?;
    Ok(ThreadRow {
        thread_id: row.try_get("thread_id")?,
        project_path: row.try_get("project_path")?,
        item_id: row.try_get("item_id")?,
        status: row.try_get("status")?,
        created_at: row.try_get("created_at")?,
        finished_at: row.try_get("finished_at")?,
        record: serde_json::from_str(&record).unwrap_or(serde_json::Value::Null),
    })
}

#[cfg(test)]
mod tests;

pub mod api_keys;
pub mod gc;
pub mod jobs;
