//! Plans `echo planned`, or, when the parameters are `{"spin": true}`,
//! loops for ever without calling out.

use rye_guest::adapter::{PlanError, PlanInput, Planned, ProcessPlan, RuntimeAdapter};

struct Spin;

impl RuntimeAdapter for Spin {
    fn plan(input: PlanInput) -> Result<Planned, PlanError> {
        if input.parameters.contains("\"spin\":true") {
            let mut turns: u64 = 0;
            loop {
                turns = std::hint::black_box(turns.wrapping_add(1));
            }
        }
        Ok(ProcessPlan::new("echo").arg("planned").into())
    }
}

rye_guest::export_adapter!(Spin);
