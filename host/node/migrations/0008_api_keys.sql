-- API keys (the older spec's form): a bearer token `rye_sk_<64 hex>` that
-- acts for the key that minted it, with scopes of its own
-- (`service:action`, `service:*`) within that key's. Only the token's
-- SHA-256 is kept; the token is shown once. `key_id` names it in lists
-- and revocations.

CREATE TABLE api_keys (
    key_id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    principal TEXT NOT NULL,
    label TEXT NOT NULL,
    scopes TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    revoked_at BIGINT
);
CREATE INDEX api_keys_by_principal ON api_keys (principal, created_at);
