-- Every mutable fact of a node: who may call it, which requests it has
-- seen, which objects each principal holds, and where each project's
-- history stands. Bytes live in the object store, never here.

CREATE TABLE nonces (
    nonce_key TEXT PRIMARY KEY,
    seen_at BIGINT NOT NULL
);
CREATE INDEX nonces_seen_at ON nonces (seen_at);

CREATE TABLE objects (
    principal TEXT NOT NULL,
    hash TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('blob', 'object')),
    size BIGINT NOT NULL,
    stored_at BIGINT NOT NULL,
    PRIMARY KEY (principal, hash)
);

CREATE TABLE project_heads (
    principal TEXT NOT NULL,
    project_path TEXT NOT NULL,
    head TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (principal, project_path)
);

CREATE TABLE user_spaces (
    principal TEXT PRIMARY KEY,
    manifest TEXT NOT NULL,
    revision BIGINT NOT NULL,
    pushed_at BIGINT NOT NULL
);
