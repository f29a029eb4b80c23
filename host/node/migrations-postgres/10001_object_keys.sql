-- PostgreSQL only (SQLite's `has` needs none of it): each held object's
-- hash also as its 32 bytes, indexed with its principal, so that `has`
-- probes fixed-width keys compared byte for byte rather than
-- 64-character text through the database's collation. Kept by the
-- database from `hash`, never written by the node.

ALTER TABLE objects
    ADD COLUMN hash_bytes BYTEA GENERATED ALWAYS AS (decode(hash, 'hex')) STORED;
CREATE UNIQUE INDEX objects_by_bytes ON objects (principal, hash_bytes);
