-- Garbage collection. A principal's rows go when nothing kept reaches
-- them; bytes go only when no principal holds them, a grace period later.
--
-- gc_fence: a count each principal's collection moves, and every head or
-- user space that moves checks in the same transaction, so a push that
-- checked its objects before a collection took some of them checks again.
-- staged: hashes being written, each held until a time: their bytes are
-- not deleted meanwhile. doomed: hashes no principal holds any longer,
-- since when, and since when a replica is deleting their bytes (a writer
-- that finds one being deleted waits, then writes it again).

CREATE INDEX objects_by_hash ON objects (hash);

CREATE TABLE gc_fence (
    principal TEXT PRIMARY KEY,
    epoch BIGINT NOT NULL
);

CREATE TABLE staged (
    hash TEXT PRIMARY KEY,
    until_at BIGINT NOT NULL
);

CREATE TABLE doomed (
    hash TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    since BIGINT NOT NULL,
    deleting_since BIGINT
);
CREATE INDEX doomed_since ON doomed (since);

-- What each collection did, the last ones kept per principal ('*': the
-- node's sweeps of bytes).
CREATE TABLE gc_log (
    principal TEXT NOT NULL,
    at BIGINT NOT NULL,
    report TEXT NOT NULL
);
CREATE INDEX gc_log_by_principal ON gc_log (principal, at);
