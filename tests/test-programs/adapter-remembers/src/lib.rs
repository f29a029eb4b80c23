//! Plans `echo <calls> <earlier parameters>`: the number of plans this
//! instance has made, and the parameters of the one before. In a fresh
//! instance per plan that is always `1` and nothing.

use std::sync::Mutex;

use rye_guest::adapter::{PlanError, PlanInput, Planned, ProcessPlan, RuntimeAdapter};

static SEEN: Mutex<(u32, String)> = Mutex::new((0, String::new()));

struct Remembers;

impl RuntimeAdapter for Remembers {
    fn plan(input: PlanInput) -> Result<Planned, PlanError> {
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        seen.0 += 1;
        let earlier = std::mem::replace(&mut seen.1, input.parameters);
        Ok(ProcessPlan::new("echo")
            .arg(seen.0.to_string())
            .arg(earlier)
            .into())
    }
}

rye_guest::export_adapter!(Remembers);
