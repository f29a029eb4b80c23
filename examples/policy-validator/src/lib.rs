//! A project's policy as a validator component:
//!
//! - `policy/no-bash`: no tool may run through the bash runtime (a shell
//!   is the one runtime whose behaviour its YAML cannot bound);
//! - `policy/permissions`: every directive declares its permissions.
//!
//! Build it for wasm32-wasip2 and install it as
//! `.ai/validators/policy.wasm` in the project. `rye validate` runs it on
//! every directive and every tool's chain; `rye sign` and `rye execute`
//! refuse what it reports as an error.

use rye_guest::serde_json::Value;
use rye_guest::validator::{Diagnostic, Item, ItemKind, Subject, Validator, ValidatorInfo};

/// The runtime this policy forbids.
pub const BASH_RUNTIME: &str = "rye/core/runtimes/bash/bash";

struct Policy;

impl Validator for Policy {
    fn describe() -> ValidatorInfo {
        ValidatorInfo::new("policy", "1.0.0")
            .kinds([ItemKind::Directive])
            .checks_chains()
    }

    fn validate(subject: Subject) -> Result<Vec<Diagnostic>, String> {
        Ok(match subject {
            Subject::Item(item) => permissions(&item),
            Subject::Chain(links) => links
                .iter()
                .skip(1)
                .filter(|link| link.item_id == BASH_RUNTIME)
                .map(|_| {
                    Diagnostic::error(
                        "policy/no-bash",
                        format!(
                            "tool {} runs through {BASH_RUNTIME}; this project allows no shell runtime",
                            links[0].item_id
                        ),
                    )
                })
                .collect(),
        })
    }
}

fn permissions(item: &Item) -> Vec<Diagnostic> {
    let parsed: Value = rye_guest::serde_json::from_str(&item.parsed).unwrap_or(Value::Null);
    let declared = parsed
        .get("permissions")
        .and_then(Value::as_array)
        .is_some_and(|p| !p.is_empty());
    if declared {
        return Vec::new();
    }
    let finding = Diagnostic::error(
        "policy/permissions",
        format!(
            "directive {} declares no permissions; add <permissions> to its <metadata>",
            item.item_id
        ),
    );
    // Point at the opening tag, where <metadata> begins.
    match item
        .content
        .lines()
        .position(|line| line.trim_start().starts_with("<directive"))
    {
        Some(line) => vec![finding.at(line as u32 + 1, 1)],
        None => vec![finding],
    }
}

rye_guest::export_validator!(Policy);
