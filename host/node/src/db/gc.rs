//! What garbage collection asks of the database, and the fence between
//! it and every head that moves.
//!
//! A principal's rows go in one transaction that first moves the
//! principal's fence and checks its heads and user space are still those
//! its marks were made from; a head or user space moves only in a
//! transaction that finds the fence where it was when the push checked
//! its objects. Either the collection sees the new head (and gives up
//! until its next round) or the push sees the fence moved (and checks
//! its objects again): never both miss.
//!
//! Bytes go later, node-wide: a hash no principal holds any longer is
//! doomed, and its bytes are deleted once it has stayed so for the grace
//! period, unless a writer staged it meanwhile. A replica claims a doomed
//! hash (`deleting_since`) in a statement that checks nobody holds or
//! stages it; a writer stages its hashes, un-dooms those not yet claimed
//! and waits for those claimed, whose bytes it then writes again.

use std::collections::HashMap;

use sqlx::Row;

use super::{Db, DbError, Moved, Pool, UserSpace};

/// `principal`'s heads (project path to head) and user space, read in
/// the transaction `$tx`.
macro_rules! heads_and_user_space {
    ($tx:ident, $principal:expr) => {{
        let heads =
            sqlx::query("SELECT project_path, head FROM project_heads WHERE principal = $1")
                .bind($principal)
                .fetch_all(&mut *$tx)
                .await?
                .iter()
                .map(|row| Ok((row.try_get("project_path")?, row.try_get("head")?)))
                .collect::<Result<HashMap<String, String>, DbError>>()?;
        let user_space: Option<String> =
            sqlx::query_scalar("SELECT manifest FROM user_spaces WHERE principal = $1")
                .bind($principal)
                .fetch_optional(&mut *$tx)
                .await?;
        (heads, user_space)
    }};
}

/// Whether `principal`'s fence moved past `epoch`, its row written (and
/// so locked to the transaction's end) to find out.
macro_rules! fence_moved {
    ($tx:ident, $principal:expr, $epoch:expr) => {{
        let now: i64 = sqlx::query_scalar(
            "INSERT INTO gc_fence (principal, epoch) VALUES ($1, 0) \
             ON CONFLICT (principal) DO UPDATE SET epoch = gc_fence.epoch RETURNING epoch",
        )
        .bind($principal)
        .fetch_one(&mut *$tx)
        .await?;
        now != $epoch
    }};
}

/// A doomed hash claimed longer ago than this was let go by a replica
/// that died: another may claim it again, and writers no longer wait.
pub const ABANDONED_AFTER: i64 = 600;

/// One of a principal's rows, as collection weighs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub hash: String,
    /// `blob` or `object`.
    pub kind: String,
    pub size: u64,
    pub stored_at: i64,
    pub content_blob: Option<String>,
}

/// What a principal's heads and user space were when its marks were made.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Roots {
    pub epoch: i64,
    /// Project path to head.
    pub heads: HashMap<String, String>,
    pub user_space: Option<String>,
}

/// What a sweep of a principal's rows did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swept {
    /// Rows deleted, and how many of their hashes no principal holds now.
    Done { rows: u64, doomed: u64 },
    /// A head or the user space moved since the marks: nothing deleted.
    Moved,
}

/// A hash whose bytes a replica may delete now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub hash: String,
    pub kind: String,
}

/// Statement text made of this module's own fragments, never of input
/// (every value is bound).
pub(super) fn safe(text: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(text)
}

impl Db {
    /// A query of the values of a JSON array of text bound as parameter
    /// `n`: `json_each` on SQLite, `jsonb_array_elements_text` on
    /// PostgreSQL.
    pub(super) fn listed(&self, n: usize) -> String {
        match self.pool {
            Pool::Sqlite(_) => format!("SELECT value FROM json_each(${n})"),
            Pool::Postgres(_) => {
                format!("SELECT jsonb_array_elements_text(CAST(${n} AS jsonb)) AS value")
            }
        }
    }

    /// `principal`'s fence, its heads and its user space, read together.
    pub async fn roots(&self, principal: &str) -> Result<Roots, DbError> {
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let epoch: Option<i64> =
                sqlx::query_scalar("SELECT epoch FROM gc_fence WHERE principal = $1")
                    .bind(principal)
                    .fetch_optional(&mut *tx)
                    .await?;
            let (heads, user_space) = heads_and_user_space!(tx, principal);
            tx.commit().await?;
            Ok(Roots { epoch: epoch.unwrap_or(0), heads, user_space })
        })
    }

    /// `principal`'s fence as it stands.
    pub async fn fence(&self, principal: &str) -> Result<i64, DbError> {
        let epoch: Option<i64> = on_pool!(self, pool => {
            sqlx::query_scalar("SELECT epoch FROM gc_fence WHERE principal = $1")
                .bind(principal)
                .fetch_optional(pool)
                .await?
        });
        Ok(epoch.unwrap_or(0))
    }

    /// Every row `principal` holds.
    pub async fn rows_of(&self, principal: &str) -> Result<Vec<Owned>, DbError> {
        on_pool!(self, pool => {
            sqlx::query(
                "SELECT hash, kind, size, stored_at, content_blob FROM objects WHERE principal = $1",
            )
            .bind(principal)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| {
                Ok(Owned {
                    hash: row.try_get("hash")?,
                    kind: row.try_get("kind")?,
                    size: row.try_get::<i64, _>("size")?.max(0) as u64,
                    stored_at: row.try_get("stored_at")?,
                    content_blob: row.try_get("content_blob")?,
                })
            })
            .collect()
        })
    }

    /// Every principal that holds anything.
    pub async fn principals(&self) -> Result<Vec<String>, DbError> {
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar("SELECT DISTINCT principal FROM objects ORDER BY principal")
                .fetch_all(pool)
                .await?
        }))
    }

    /// The records of `principal`'s runs that are under way, or ended at
    /// or after `since`: what they name is kept.
    pub async fn thread_records(
        &self,
        principal: &str,
        since: i64,
    ) -> Result<Vec<serde_json::Value>, DbError> {
        let records: Vec<String> = on_pool!(self, pool => {
            sqlx::query_scalar(
                "SELECT record FROM threads WHERE principal = $1 \
                 AND (finished_at IS NULL OR finished_at >= $2)",
            )
            .bind(principal)
            .bind(since)
            .fetch_all(pool)
            .await?
        });
        Ok(records
            .iter()
            .filter_map(|r| serde_json::from_str(r).ok())
            .collect())
    }

    /// Deletes `principal`'s rows of `hashes` if its fence, heads and user
    /// space are still `roots`, moving the fence; dooms those hashes no
    /// principal holds any longer. A row held anew since `cutoff` (a
    /// write of the same bytes after the marks were made) stays.
    pub async fn sweep(
        &self,
        principal: &str,
        roots: &Roots,
        hashes: &[(String, String)],
        cutoff: i64,
        now: i64,
    ) -> Result<Swept, DbError> {
        let listed = self.listed(2);
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            // The fence's row is written first: SQLite's write lock, or
            // the row's lock on PostgreSQL, held to the end.
            let epoch: i64 = sqlx::query_scalar(
                "INSERT INTO gc_fence (principal, epoch) VALUES ($1, 1) \
                 ON CONFLICT (principal) DO UPDATE SET epoch = gc_fence.epoch + 1 RETURNING epoch",
            )
            .bind(principal)
            .fetch_one(&mut *tx)
            .await?;
            let (heads, user_space) = heads_and_user_space!(tx, principal);
            if epoch != roots.epoch + 1 || heads != roots.heads || user_space != roots.user_space {
                tx.rollback().await?;
                return Ok(Swept::Moved);
            }
            let mut rows = 0;
            let mut doomed = 0;
            for chunk in hashes.chunks(5_000) {
                let list = serde_json::to_string(
                    &chunk.iter().map(|(h, _)| h.as_str()).collect::<Vec<_>>(),
                )
                .unwrap_or_else(|_| "[]".into());
                rows += sqlx::query(safe(format!(
                    "DELETE FROM objects WHERE principal = $1 AND hash IN ({listed}) \
                     AND stored_at <= $3"
                )))
                .bind(principal)
                .bind(&list)
                .bind(cutoff)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let kinds = serde_json::to_string(
                    &chunk.iter().map(|(h, k)| [h.as_str(), k.as_str()]).collect::<Vec<_>>(),
                )
                .unwrap_or_else(|_| "[]".into());
                doomed += sqlx::query(safe(self.doom_sql()))
                    .bind(&kinds)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
            Ok(Swept::Done { rows, doomed })
        })
    }

    /// Dooms the `[hash, kind]` pairs of parameter 1 that no principal
    /// holds, since parameter 2.
    fn doom_sql(&self) -> String {
        let pairs = match self.pool {
            Pool::Sqlite(_) => {
                "SELECT p.value ->> 0 AS hash, p.value ->> 1 AS kind FROM json_each($1) AS p"
            }
            Pool::Postgres(_) => {
                "SELECT p.value ->> 0 AS hash, p.value ->> 1 AS kind \
                 FROM jsonb_array_elements(CAST($1 AS jsonb)) AS p(value)"
            }
        };
        format!(
            "INSERT INTO doomed (hash, kind, since) SELECT d.hash, d.kind, $2 FROM ({pairs}) AS d \
             WHERE NOT EXISTS (SELECT 1 FROM objects o WHERE o.hash = d.hash) \
             ON CONFLICT (hash) DO NOTHING"
        )
    }

    /// Moves `principal`'s project head as [`Db::advance_head`] does, if
    /// its fence is still at `epoch`; none when a collection moved it
    /// since (the objects checked then may be gone).
    pub async fn advance_head_fenced(
        &self,
        principal: &str,
        project: &str,
        expected: Option<&str>,
        new: &str,
        now: i64,
        epoch: i64,
    ) -> Result<Option<Result<(), Moved<String>>>, DbError> {
        let done = on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            if fence_moved!(tx, principal, epoch) {
                tx.rollback().await?;
                return Ok(None);
            }
            let done = set_head!(&mut *tx, principal, project, expected, new, now);
            tx.commit().await?;
            done
        });
        if done == 1 {
            return Ok(Some(Ok(())));
        }
        Ok(Some(Err(Moved {
            actual: self.head(principal, project).await?,
        })))
    }

    /// Sets `principal`'s user space as [`Db::push_user_space`] does, if
    /// its fence is still at `epoch`; none when a collection moved it.
    pub async fn push_user_space_fenced(
        &self,
        principal: &str,
        expected: Option<i64>,
        manifest: &str,
        now: i64,
        epoch: i64,
    ) -> Result<Option<Result<i64, Moved<i64>>>, DbError> {
        let (done, revision) = on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            if fence_moved!(tx, principal, epoch) {
                tx.rollback().await?;
                return Ok(None);
            }
            let done = set_user_space!(&mut *tx, principal, expected, manifest, now);
            tx.commit().await?;
            done
        });
        if done == 1 {
            return Ok(Some(Ok(revision)));
        }
        Ok(Some(Err(Moved {
            actual: self
                .user_space(principal)
                .await?
                .map(|u: UserSpace| u.revision),
        })))
    }

    /// Stages `hashes` until `until`: their bytes are not deleted while it
    /// lasts. Those doomed and not yet claimed are doomed no longer; for
    /// those a replica is deleting, waits until it is done (the caller
    /// then writes them again). Call before writing their bytes.
    pub async fn stage(&self, hashes: &[String], now: i64, until: i64) -> Result<(), DbError> {
        if hashes.is_empty() {
            return Ok(());
        }
        // In one order, so two writers of the same hashes lock them alike.
        let mut sorted: Vec<&str> = hashes.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let list = serde_json::to_string(&sorted).unwrap_or_else(|_| "[]".into());
        let listed = self.listed(1);
        let started = std::time::Instant::now();
        loop {
            let deleting: Vec<String> = on_pool!(self, pool => {
                let mut tx = pool.begin().await?;
                sqlx::query(safe(format!(
                    "INSERT INTO staged (hash, until_at) SELECT l.value, $2 FROM ({listed}) AS l \
                     WHERE true ON CONFLICT (hash) DO UPDATE SET until_at = excluded.until_at \
                     WHERE staged.until_at < excluded.until_at"
                )))
                .bind(&list)
                .bind(until)
                .execute(&mut *tx)
                .await?;
                sqlx::query(safe(format!(
                    "DELETE FROM doomed WHERE hash IN ({listed}) AND deleting_since IS NULL"
                )))
                .bind(&list)
                .execute(&mut *tx)
                .await?;
                let deleting = sqlx::query_scalar(safe(format!(
                    "SELECT hash FROM doomed WHERE hash IN ({listed}) AND deleting_since >= $2"
                )))
                .bind(&list)
                .bind(now - ABANDONED_AFTER)
                .fetch_all(&mut *tx)
                .await?;
                tx.commit().await?;
                deleting
            });
            if deleting.is_empty() {
                return Ok(());
            }
            if started.elapsed() > std::time::Duration::from_secs(ABANDONED_AFTER as u64) {
                return Err(DbError::Sql(sqlx::Error::Protocol(format!(
                    "{} objects stayed claimed for deletion by another replica",
                    deleting.len()
                ))));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Claims up to `limit` doomed hashes, doomed at or before `cutoff`, that
    /// no principal holds or stages and no live replica is deleting: their
    /// bytes are this replica's to delete, then [`Db::deleted`].
    pub async fn claim_doomed(
        &self,
        cutoff: i64,
        now: i64,
        limit: i64,
    ) -> Result<Vec<Claimed>, DbError> {
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            // Hashes held again (a hold that did not stage) are doomed no
            // longer; stages that ran out go.
            sqlx::query(
                "DELETE FROM doomed WHERE EXISTS (SELECT 1 FROM objects o WHERE o.hash = doomed.hash)",
            )
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM staged WHERE until_at <= $1")
                .bind(now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            let claimed = sqlx::query(
                "UPDATE doomed SET deleting_since = $2 \
                 WHERE hash IN (SELECT hash FROM doomed WHERE since <= $1 \
                     AND (deleting_since IS NULL OR deleting_since < $3) ORDER BY since LIMIT $4) \
                 AND since <= $1 AND (deleting_since IS NULL OR deleting_since < $3) \
                 AND NOT EXISTS (SELECT 1 FROM objects o WHERE o.hash = doomed.hash) \
                 AND NOT EXISTS (SELECT 1 FROM staged s WHERE s.hash = doomed.hash AND s.until_at > $2) \
                 RETURNING hash, kind",
            )
            .bind(cutoff)
            .bind(now)
            .bind(now - ABANDONED_AFTER)
            .bind(limit)
            .fetch_all(pool)
            .await?;
            claimed
                .iter()
                .map(|row| Ok(Claimed { hash: row.try_get("hash")?, kind: row.try_get("kind")? }))
                .collect()
        })
    }

    /// Lets go of claimed hashes whose bytes are gone.
    pub async fn deleted(&self, hashes: &[String]) -> Result<(), DbError> {
        let list = serde_json::to_string(hashes).unwrap_or_else(|_| "[]".into());
        let listed = self.listed(1);
        on_pool!(self, pool => {
            sqlx::query(safe(format!("DELETE FROM doomed WHERE hash IN ({listed})")))
                .bind(&list)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(())
    }

    /// How many hashes are doomed (their bytes not yet deleted).
    pub async fn doomed_count(&self) -> Result<u64, DbError> {
        let n: i64 = on_pool!(self, pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM doomed").fetch_one(pool).await?
        });
        Ok(n.max(0) as u64)
    }

    /// Keeps what a collection did, and the last 20 of `principal`'s.
    pub async fn log_gc(
        &self,
        principal: &str,
        now: i64,
        report: &serde_json::Value,
    ) -> Result<(), DbError> {
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query("INSERT INTO gc_log (principal, at, report) VALUES ($1, $2, $3)")
                .bind(principal)
                .bind(now)
                .bind(report.to_string())
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "DELETE FROM gc_log WHERE principal = $1 AND at < (SELECT MIN(at) FROM \
                 (SELECT at FROM gc_log WHERE principal = $1 ORDER BY at DESC LIMIT 20) AS kept)",
            )
            .bind(principal)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// The last collections of `principal`, newest first.
    pub async fn gc_log(
        &self,
        principal: &str,
        limit: i64,
    ) -> Result<Vec<(i64, serde_json::Value)>, DbError> {
        on_pool!(self, pool => {
            sqlx::query(
                "SELECT at, report FROM gc_log WHERE principal = $1 ORDER BY at DESC LIMIT $2",
            )
            .bind(principal)
            .bind(limit)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| {
                let report: String = row.try_get("report")?;
                Ok((row.try_get("at")?, serde_json::from_str(&report).unwrap_or_default()))
            })
            .collect()
        })
    }
}
