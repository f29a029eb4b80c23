-- What the service needs besides: the keys a node authorizes (each
-- document signed by the node's own key, checked on every use), the runs
-- it made, and for each object held what a manifest's closure check asks
-- of it (its kind, and an item source's content blob), so a push is
-- checked from the database without reading the objects.

CREATE TABLE authorized_keys (
    fingerprint TEXT PRIMARY KEY,
    document TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE threads (
    thread_id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    project_path TEXT NOT NULL,
    item_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    finished_at BIGINT,
    record TEXT NOT NULL
);
CREATE INDEX threads_by_principal ON threads (principal, created_at);

ALTER TABLE objects ADD COLUMN object_kind TEXT;
ALTER TABLE objects ADD COLUMN content_blob TEXT;
