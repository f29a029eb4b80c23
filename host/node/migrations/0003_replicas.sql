-- Replicas of one node share this database. A run is held by the replica
-- running it, which renews its lease while it lives; a run whose lease
-- ran out (its replica died, or was cut off) is marked interrupted by
-- whichever replica sees it first. Runs from before leases hold none.

ALTER TABLE threads ADD COLUMN replica TEXT;
ALTER TABLE threads ADD COLUMN lease_until BIGINT;
CREATE INDEX threads_running ON threads (status, lease_until);
