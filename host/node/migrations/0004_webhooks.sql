-- Webhook bindings (spec §10): each fixes an item and a project of its
-- principal's, and holds the secret deliveries are signed with (the node
-- must know it to check them). Deliveries are remembered past the
-- timestamp window, by id and by signature, so neither a repeated id nor
-- a signature sent again under a new id runs twice, on any replica.

CREATE TABLE webhook_bindings (
    hook_id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    item_id TEXT NOT NULL,
    project_path TEXT NOT NULL,
    description TEXT,
    secret TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX webhook_bindings_by_principal ON webhook_bindings (principal, created_at);

CREATE TABLE webhook_deliveries (
    hook_id TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    signature TEXT NOT NULL,
    seen_at BIGINT NOT NULL,
    PRIMARY KEY (hook_id, delivery_id)
);
CREATE UNIQUE INDEX webhook_deliveries_by_signature ON webhook_deliveries (hook_id, signature);
CREATE INDEX webhook_deliveries_seen_at ON webhook_deliveries (seen_at);
