-- Each principal's vault (spec §12): secrets kept sealed to the node's
-- box key, opened only into the environment of a run that names them.

CREATE TABLE vault (
    principal TEXT NOT NULL,
    name TEXT NOT NULL,
    envelope TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (principal, name)
);

-- A webhook binding may carry secrets for its runs: an envelope sealed to
-- the node and names of its principal's vault, as JSON.
ALTER TABLE webhook_bindings ADD COLUMN secrets TEXT;
