//! The node's database: every fact that changes. Nonces seen (so a replay
//! is refused after a restart too), which objects each principal holds
//! (so `has` is one query, never a request per hash to the object store),
//! each project's head (moved only by compare-and-swap), each
//! principal's user space (by revision), the keys the node authorizes and
//! the runs it made.
//!
//! SQLite here, through `sqlx`, in SQL that PostgreSQL also speaks; the
//! schema is in `migrations/`, applied when the database is opened.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use sqlx::Row;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("the node's database: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("the node's database could not be brought up to date: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
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

/// A principal's user space as last pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSpace {
    pub manifest: String,
    pub revision: i64,
    pub pushed_at: i64,
}

#[derive(Debug, Clone)]
pub struct Db {
    pool: SqlitePool,
}

impl Db {
    /// Opens (creating if need be) the database at `path` and brings its
    /// schema up to date.
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
        Ok(Db { pool })
    }

    /// Records `key` as seen at `now` (Unix seconds); `false` when it was
    /// seen within `window` seconds before: a replay. Keys older than the
    /// window are let go.
    pub async fn fresh_nonce(&self, key: &str, now: i64, window: i64) -> Result<bool, DbError> {
        sqlx::query("DELETE FROM nonces WHERE seen_at < ?1")
            .bind(now - window)
            .execute(&self.pool)
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO nonces (nonce_key, seen_at) VALUES (?1, ?2) ON CONFLICT (nonce_key) DO NOTHING",
        )
        .bind(key)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(inserted.rows_affected() == 1)
    }

    /// Notes that `principal` holds `objects` (already in the object
    /// store).
    pub async fn hold(&self, principal: &str, objects: &[Held], now: i64) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await?;
        for held in objects {
            sqlx::query(
                "INSERT INTO objects (principal, hash, kind, size, stored_at, object_kind, content_blob) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (principal, hash) DO NOTHING",
            )
            .bind(principal)
            .bind(&held.hash)
            .bind(held.kind)
            .bind(held.size as i64)
            .bind(now)
            .bind(held.object_kind.as_deref())
            .bind(held.content_blob.as_deref())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Which of `hashes` `principal` holds: one query however many.
    pub async fn held(
        &self,
        principal: &str,
        hashes: &[String],
    ) -> Result<HashSet<String>, DbError> {
        let list = serde_json::to_string(hashes).unwrap_or_else(|_| "[]".into());
        let rows = sqlx::query(
            "SELECT hash FROM objects WHERE principal = ?1 AND hash IN (SELECT value FROM json_each(?2))",
        )
        .bind(principal)
        .bind(list)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| row.try_get::<String, _>("hash").map_err(DbError::from))
            .collect()
    }

    /// What is known of those of `hashes` that `principal` holds: one
    /// query however many.
    pub async fn holdings(
        &self,
        principal: &str,
        hashes: &[String],
    ) -> Result<HashMap<String, Holding>, DbError> {
        let list = serde_json::to_string(hashes).unwrap_or_else(|_| "[]".into());
        let rows = sqlx::query(
            "SELECT hash, kind, object_kind, content_blob FROM objects \
             WHERE principal = ?1 AND hash IN (SELECT value FROM json_each(?2))",
        )
        .bind(principal)
        .bind(list)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("hash")?,
                    Holding {
                        kind: row.try_get("kind")?,
                        object_kind: row.try_get("object_kind")?,
                        content_blob: row.try_get("content_blob")?,
                    },
                ))
            })
            .collect()
    }

    /// The bytes `principal` holds, counted.
    pub async fn stored_bytes(&self, principal: &str) -> Result<u64, DbError> {
        let total: Option<i64> =
            sqlx::query_scalar("SELECT SUM(size) FROM objects WHERE principal = ?1")
                .bind(principal)
                .fetch_one(&self.pool)
                .await?;
        Ok(total.unwrap_or(0).max(0) as u64)
    }

    /// The head of `principal`'s project at `project`.
    pub async fn head(&self, principal: &str, project: &str) -> Result<Option<String>, DbError> {
        Ok(sqlx::query_scalar(
            "SELECT head FROM project_heads WHERE principal = ?1 AND project_path = ?2",
        )
        .bind(principal)
        .bind(project)
        .fetch_optional(&self.pool)
        .await?)
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
        let done = match expected {
            None => sqlx::query(
                "INSERT INTO project_heads (principal, project_path, head, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (principal, project_path) DO NOTHING",
            )
            .bind(principal)
            .bind(project)
            .bind(new)
            .bind(now)
            .execute(&self.pool)
            .await?,
            Some(expected) => {
                sqlx::query(
                    "UPDATE project_heads SET head = ?3, updated_at = ?5 \
                 WHERE principal = ?1 AND project_path = ?2 AND head = ?4",
                )
                .bind(principal)
                .bind(project)
                .bind(new)
                .bind(expected)
                .bind(now)
                .execute(&self.pool)
                .await?
            }
        };
        if done.rows_affected() == 1 {
            return Ok(Ok(()));
        }
        Ok(Err(Moved {
            actual: self.head(principal, project).await?,
        }))
    }

    pub async fn user_space(&self, principal: &str) -> Result<Option<UserSpace>, DbError> {
        let row = sqlx::query(
            "SELECT manifest, revision, pushed_at FROM user_spaces WHERE principal = ?1",
        )
        .bind(principal)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(UserSpace {
                manifest: row.try_get("manifest")?,
                revision: row.try_get("revision")?,
                pushed_at: row.try_get("pushed_at")?,
            })
        })
        .transpose()
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
        let (done, revision) = match expected {
            None => (
                sqlx::query(
                    "INSERT INTO user_spaces (principal, manifest, revision, pushed_at) VALUES (?1, ?2, 1, ?3) \
                     ON CONFLICT (principal) DO NOTHING",
                )
                .bind(principal)
                .bind(manifest)
                .bind(now)
                .execute(&self.pool)
                .await?,
                1,
            ),
            Some(expected) => (
                sqlx::query(
                    "UPDATE user_spaces SET manifest = ?2, revision = revision + 1, pushed_at = ?3 \
                     WHERE principal = ?1 AND revision = ?4",
                )
                .bind(principal)
                .bind(manifest)
                .bind(now)
                .bind(expected)
                .execute(&self.pool)
                .await?,
                expected + 1,
            ),
        };
        if done.rows_affected() == 1 {
            return Ok(Ok(revision));
        }
        Ok(Err(Moved {
            actual: self.user_space(principal).await?.map(|u| u.revision),
        }))
    }

    /// The signed document authorizing the key `fingerprint`, if any.
    pub async fn authorized_key(&self, fingerprint: &str) -> Result<Option<String>, DbError> {
        Ok(
            sqlx::query_scalar("SELECT document FROM authorized_keys WHERE fingerprint = ?1")
                .bind(fingerprint)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Every authorized key's fingerprint and document.
    pub async fn authorized_keys(&self) -> Result<Vec<(String, String)>, DbError> {
        let rows = sqlx::query(
            "SELECT fingerprint, document FROM authorized_keys ORDER BY created_at, fingerprint",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("fingerprint")?, row.try_get("document")?)))
            .collect()
    }

    /// Authorizes `fingerprint` by `document` (replacing an earlier one).
    pub async fn authorize(
        &self,
        fingerprint: &str,
        document: &str,
        now: i64,
    ) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO authorized_keys (fingerprint, document, created_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (fingerprint) DO UPDATE SET document = excluded.document",
        )
        .bind(fingerprint)
        .bind(document)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records a run that starts now.
    pub async fn start_thread(&self, principal: &str, row: &ThreadRow) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO threads (thread_id, principal, project_path, item_id, status, created_at, finished_at, record) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .bind(&row.thread_id)
        .bind(principal)
        .bind(&row.project_path)
        .bind(&row.item_id)
        .bind(&row.status)
        .bind(row.created_at)
        .bind(row.finished_at)
        .bind(row.record.to_string())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records how a run ended.
    pub async fn finish_thread(
        &self,
        thread_id: &str,
        status: &str,
        record: &serde_json::Value,
        now: i64,
    ) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE threads SET status = ?2, record = ?3, finished_at = ?4 WHERE thread_id = ?1",
        )
        .bind(thread_id)
        .bind(status)
        .bind(record.to_string())
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Marks every run still recorded as running as `interrupted`: for a
    /// node starting, whose earlier process died with them.
    pub async fn interrupt_running(&self, now: i64) -> Result<u64, DbError> {
        Ok(sqlx::query(
            "UPDATE threads SET status = 'interrupted', finished_at = ?1 WHERE status = 'running'",
        )
        .bind(now)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }

    /// `principal`'s runs, newest first, of one project or all.
    pub async fn threads(
        &self,
        principal: &str,
        project: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ThreadRow>, DbError> {
        let rows = sqlx::query(
            "SELECT thread_id, project_path, item_id, status, created_at, finished_at, record \
             FROM threads WHERE principal = ?1 AND (?2 IS NULL OR project_path = ?2) \
             ORDER BY created_at DESC, thread_id DESC LIMIT ?3",
        )
        .bind(principal)
        .bind(project)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(thread_row).collect()
    }

    /// One of `principal`'s runs.
    pub async fn thread(
        &self,
        principal: &str,
        thread_id: &str,
    ) -> Result<Option<ThreadRow>, DbError> {
        let row = sqlx::query(
            "SELECT thread_id, project_path, item_id, status, created_at, finished_at, record \
             FROM threads WHERE principal = ?1 AND thread_id = ?2",
        )
        .bind(principal)
        .bind(thread_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(thread_row).transpose()
    }
}

fn thread_row(row: &sqlx::sqlite::SqliteRow) -> Result<ThreadRow, DbError> {
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
