-- Async runs wait here until a replica with a free slot claims one, so
-- any replica runs any of them. Where a job is, its thread says: queued,
-- running (held by a replica under the thread's lease), or ended, when
-- its row is gone. A job whose replica died is queued again while it has
-- attempts left; else its thread is marked interrupted.
--
-- The request keeps what the run needs to start on any replica: the
-- item, parameters, base snapshot, and the secrets as asked (the vault's
-- names and the envelope sealed to the node's box key), never opened.

CREATE TABLE jobs (
    thread_id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    request TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    max_attempts BIGINT NOT NULL,
    queued_at BIGINT NOT NULL
);
CREATE INDEX threads_queued ON threads (created_at) WHERE status = 'queued';
