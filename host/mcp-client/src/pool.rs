//! Warm sessions, one per key, shared by concurrent calls.
//!
//! The caller's key says what makes two sessions the same (for Rye: the
//! server item's content hash and the environment resolved for it), so a
//! changed or re-signed server item gets a session of its own. A session
//! that has closed (its server exited, its stream ended) is replaced on the
//! next request; one a caller found untrustworthy (a timed-out request) is
//! discarded at once; one left unused past the idle time is closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{Connection, McpError, Transport};

/// What identifies a session.
pub type PoolKey = String;

struct Slot {
    /// Held while a session is opened, so concurrent first calls open one.
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    last_used: Mutex<Instant>,
}

/// Sessions by key.
pub struct Pool {
    idle: Duration,
    slots: Mutex<HashMap<PoolKey, Arc<Slot>>>,
}

impl Pool {
    /// A pool whose sessions close after `idle` unused.
    pub fn new(idle: Duration) -> Self {
        Pool {
            idle,
            slots: Mutex::new(HashMap::new()),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open session for `key`, or a new one started with `transport`
    /// within `startup`. Says whether it was started for this request.
    pub async fn session(
        &self,
        key: &str,
        server: &str,
        transport: &Transport,
        startup: Duration,
    ) -> Result<(Arc<Connection>, bool), McpError> {
        self.close_idle();
        let slot = self
            .slots()
            .entry(key.to_owned())
            .or_insert_with(|| {
                Arc::new(Slot {
                    connection: tokio::sync::Mutex::new(None),
                    last_used: Mutex::new(Instant::now()),
                })
            })
            .clone();
        *slot.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        let mut current = slot.connection.lock().await;
        if let Some(connection) = current.as_ref().filter(|c| c.is_open()) {
            return Ok((connection.clone(), false));
        }
        *current = None;
        // Boxed: a start's future is large, and awaited inline it would
        // make every warm call's future (which never starts one) as large.
        let connection = Arc::new(Box::pin(Connection::open(server, transport, startup)).await?);
        *current = Some(connection.clone());
        Ok((connection, true))
    }

    /// Ends `connection`, the session of `key`, if it still is: callers
    /// holding it finish with it, no new request gets it.
    pub fn discard(&self, key: &str, connection: &Arc<Connection>) {
        let slot = self.slots().get(key).cloned();
        if let Some(slot) = slot
            && let Ok(mut current) = slot.connection.try_lock()
            && current.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection))
        {
            *current = None;
        }
    }

    /// Closes the sessions unused for longer than the idle time.
    pub fn close_idle(&self) {
        let idle = self.idle;
        self.slots().retain(|_, slot| {
            let used = *slot.last_used.lock().unwrap_or_else(|e| e.into_inner());
            // A slot being opened or used right now is kept.
            used.elapsed() < idle || slot.connection.try_lock().is_err()
        });
    }

    /// How many sessions are open.
    pub fn open_sessions(&self) -> usize {
        self.slots()
            .values()
            .filter(|slot| {
                slot.connection
                    .try_lock()
                    .map(|c| c.as_ref().is_some_and(|c| c.is_open()))
                    .unwrap_or(true)
            })
            .count()
    }

    /// Closes every session.
    pub fn clear(&self) {
        self.slots().clear();
    }
}
