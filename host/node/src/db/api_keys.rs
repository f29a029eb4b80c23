//! API keys: bearer tokens kept as their SHA-256 only.

use sqlx::{ColumnIndex, Decode, Row, Type};

use super::{Db, DbError, Pool};

/// One API key as the database keeps it: never its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// `ak_<16 hex>`: how lists and revocations name it.
    pub key_id: String,
    /// The key it acts for.
    pub principal: String,
    pub label: String,
    /// `service:action` each; none: whatever its principal may do.
    pub scopes: Vec<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// Reads an API key out of a row of `api_keys`.
fn read<R: Row>(row: &R) -> Result<ApiKey, DbError>
where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'c> &'c str: ColumnIndex<R>,
{
    let scopes: String = row.try_get("scopes")?;
    Ok(ApiKey {
        key_id: row.try_get("key_id")?,
        principal: row.try_get("principal")?,
        label: row.try_get("label")?,
        scopes: serde_json::from_str(&scopes).unwrap_or_default(),
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

/// The columns [`read`] reads.
macro_rules! columns {
    () => {
        "key_id, principal, label, scopes, created_at, expires_at, revoked_at"
    };
}

impl Db {
    /// Records `key`, found again by `token_hash`.
    pub async fn create_api_key(&self, key: &ApiKey, token_hash: &str) -> Result<(), DbError> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO api_keys (key_id, token_hash, principal, label, scopes, created_at, \
                 expires_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(&key.key_id)
            .bind(token_hash)
            .bind(&key.principal)
            .bind(&key.label)
            .bind(serde_json::to_string(&key.scopes).unwrap_or_else(|_| "[]".into()))
            .bind(key.created_at)
            .bind(key.expires_at)
            .bind(key.revoked_at)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(())
    }

    /// The API key whose token hashes to `token_hash`, revoked or not.
    pub async fn api_key(&self, token_hash: &str) -> Result<Option<ApiKey>, DbError> {
        on_pool!(self, pool => {
            match sqlx::query(concat!("SELECT ", columns!(), " FROM api_keys WHERE token_hash = $1"))
                .bind(token_hash)
                .fetch_optional(pool)
                .await?
            {
                Some(row) => read(&row).map(Some),
                None => Ok(None),
            }
        })
    }

    /// `principal`'s API keys, newest first.
    pub async fn api_keys(&self, principal: &str) -> Result<Vec<ApiKey>, DbError> {
        on_pool!(self, pool => {
            sqlx::query(concat!(
                "SELECT ",
                columns!(),
                " FROM api_keys WHERE principal = $1 ORDER BY created_at DESC, key_id"
            ))
                .bind(principal)
                .fetch_all(pool)
                .await?
                .iter()
                .map(read)
                .collect()
        })
    }

    /// Revokes `principal`'s API key `key_id` at `now`; whether it had one
    /// by that id not yet revoked.
    pub async fn revoke_api_key(
        &self,
        principal: &str,
        key_id: &str,
        now: i64,
    ) -> Result<bool, DbError> {
        Ok(on_pool!(self, pool => {
            sqlx::query(
                "UPDATE api_keys SET revoked_at = $3 WHERE principal = $1 AND key_id = $2 \
                 AND revoked_at IS NULL",
            )
            .bind(principal)
            .bind(key_id)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        }) == 1)
    }
}
