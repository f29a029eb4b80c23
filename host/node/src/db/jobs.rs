//! The queue of async runs. A job is queued with its thread in one
//! transaction; a replica with a free slot claims the oldest queued job
//! no other replica is claiming (`FOR UPDATE SKIP LOCKED` on PostgreSQL;
//! SQLite has one writer, so one statement is enough) and holds it under
//! its thread's lease. A job whose replica let the lease run out goes
//! back to the queue while it has attempts left; once it has none, its
//! thread is marked interrupted like any other run, and the row goes.

use sqlx::Row;

use super::{Db, DbError, Pool, ThreadRow};

/// A job a replica claimed.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub thread_id: String,
    pub principal: String,
    pub request: serde_json::Value,
    /// This one included.
    pub attempts: i64,
    pub max_attempts: i64,
}

/// Claims the oldest queued job for `$replica` until `$until` through the
/// transaction `$tx`; `$pick` is the statement choosing it.
macro_rules! claim {
    ($tx:ident, $pick:expr, $replica:expr, $until:expr) => {{
        let picked: Option<String> = sqlx::query_scalar($pick)
            .bind($replica)
            .bind($until)
            .fetch_optional(&mut *$tx)
            .await?;
        match picked {
            None => None,
            Some(thread_id) => {
                let row = sqlx::query(
                    "UPDATE jobs SET attempts = attempts + 1 WHERE thread_id = $1 \
                     RETURNING principal, request, attempts, max_attempts",
                )
                .bind(&thread_id)
                .fetch_optional(&mut *$tx)
                .await?;
                Some(match row {
                    Some(row) => {
                        let request: String = row.try_get("request")?;
                        Ok(Claimed {
                            thread_id,
                            principal: row.try_get("principal")?,
                            request: serde_json::from_str(&request)
                                .unwrap_or(serde_json::Value::Null),
                            attempts: row.try_get::<i64, _>("attempts")?,
                            max_attempts: row.try_get::<i64, _>("max_attempts")?,
                        })
                    }
                    None => Err(thread_id),
                })
            }
        }
    }};
}

/// Picks and holds the oldest queued thread; SQLite's one writer makes
/// the statement atomic as it is.
const PICK_SQLITE: &str = "UPDATE threads SET status = 'running', replica = $1, lease_until = $2 \
     WHERE thread_id = (SELECT thread_id FROM threads WHERE status = 'queued' \
     ORDER BY created_at, thread_id LIMIT 1) AND status = 'queued' RETURNING thread_id";

/// The same on PostgreSQL, passing over a row another replica is
/// claiming rather than waiting for it.
const PICK_POSTGRES: &str = "UPDATE threads SET status = 'running', replica = $1, lease_until = $2 \
     WHERE thread_id = (SELECT thread_id FROM threads WHERE status = 'queued' \
     ORDER BY created_at, thread_id LIMIT 1 FOR UPDATE SKIP LOCKED) AND status = 'queued' \
     RETURNING thread_id";

impl Db {
    /// Records `row` (its status `queued`) and its job: `request`, to be
    /// tried at most `max_attempts` times; unless `most` jobs are queued
    /// already (false).
    pub async fn enqueue(
        &self,
        principal: &str,
        row: &ThreadRow,
        request: &serde_json::Value,
        max_attempts: i64,
        most: i64,
    ) -> Result<bool, DbError> {
        macro_rules! enqueue {
            ($tx:ident) => {{
                // One statement counts and inserts: on SQLite, its one
                // writer makes that atomic; on PostgreSQL, the lock taken
                // before it.
                let queued = sqlx::query(
                    "INSERT INTO threads (thread_id, principal, project_path, item_id, status, created_at, \
                     record) SELECT $1, $2, $3, $4, 'queued', $5, $6 \
                     WHERE (SELECT COUNT(*) FROM threads WHERE status = 'queued') < $7",
                )
                .bind(&row.thread_id)
                .bind(principal)
                .bind(&row.project_path)
                .bind(&row.item_id)
                .bind(row.created_at)
                .bind(row.record.to_string())
                .bind(most)
                .execute(&mut *$tx)
                .await?
                .rows_affected()
                    == 1;
                if queued {
                    sqlx::query(
                        "INSERT INTO jobs (thread_id, principal, request, attempts, max_attempts, queued_at) \
                         VALUES ($1, $2, $3, 0, $4, $5)",
                    )
                    .bind(&row.thread_id)
                    .bind(principal)
                    .bind(request.to_string())
                    .bind(max_attempts)
                    .bind(row.created_at)
                    .execute(&mut *$tx)
                    .await?;
                }
                $tx.commit().await?;
                Ok(queued)
            }};
        }
        match &self.pool {
            Pool::Sqlite(pool) => {
                let mut tx = pool.begin().await?;
                enqueue!(tx)
            }
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock(7310202)")
                    .execute(&mut *tx)
                    .await?;
                enqueue!(tx)
            }
        }
    }

    /// Claims the oldest queued job for `replica`, held until
    /// `lease_until`; none when the queue is empty. A queued thread that
    /// lost its job (it cannot, but a database edited by hand might) is
    /// marked interrupted and the next one tried.
    pub async fn claim(&self, replica: &str, lease_until: i64) -> Result<Option<Claimed>, DbError> {
        loop {
            let claimed = match &self.pool {
                Pool::Sqlite(pool) => {
                    let mut tx = pool.begin().await?;
                    let claimed = claim!(tx, PICK_SQLITE, replica, lease_until);
                    tx.commit().await?;
                    claimed
                }
                Pool::Postgres(pool) => {
                    let mut tx = pool.begin().await?;
                    let claimed = claim!(tx, PICK_POSTGRES, replica, lease_until);
                    tx.commit().await?;
                    claimed
                }
            };
            match claimed {
                None => return Ok(None),
                Some(Ok(claimed)) => return Ok(Some(claimed)),
                Some(Err(orphan)) => {
                    let record = serde_json::json!({"status": "interrupted", "thread_id": orphan,
                                                    "error": "its job was lost"});
                    self.finish_thread(&orphan, "interrupted", &record, lease_until)
                        .await?;
                }
            }
        }
    }

    /// Queues again every job held by a replica whose lease ran out by
    /// `now`, or held by `replica` (starting again: what it held died
    /// with its earlier process), that has attempts left; how many.
    pub async fn requeue_orphans(&self, now: i64, replica: Option<&str>) -> Result<u64, DbError> {
        Ok(on_pool!(self, pool => {
            sqlx::query(
                "UPDATE threads SET status = 'queued', replica = NULL, lease_until = NULL \
                 WHERE status = 'running' AND (lease_until IS NULL OR lease_until < $1 OR replica = $2) \
                 AND thread_id IN (SELECT thread_id FROM jobs WHERE attempts < max_attempts)",
            )
            .bind(now)
            .bind(replica)
            .execute(pool)
            .await?
            .rows_affected()
        }))
    }

    /// How many jobs wait for a replica.
    pub async fn queued(&self) -> Result<i64, DbError> {
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM threads WHERE status = 'queued'")
                .fetch_one(pool)
                .await?
        }))
    }
}
