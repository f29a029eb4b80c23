//! Exports the validation interface but also imports `rye:plugin/host`, to
//! read the host's environment through it. The host must refuse to load
//! it: that interface is granted to runtime adapters only.

wit_bindgen::generate!({
    inline: r#"
        package test:asks-host;

        world validator-with-host {
            import rye:plugin/host@0.1.0;
            export rye:plugin/validation@0.1.0;
        }
    "#,
    path: "../../../wit/rye-plugin@0.1.0",
    generate_all,
});

use exports::rye::plugin::validation::{Guest, Subject, ValidatorInfo};
use rye::plugin::types::{Diagnostic, ItemKind, Severity};

struct AsksHost;

impl Guest for AsksHost {
    fn describe() -> ValidatorInfo {
        ValidatorInfo {
            name: "asks-host".into(),
            version: "1.0.0".into(),
            kinds: vec![ItemKind::Tool],
            checks_chains: false,
        }
    }

    fn validate(_subject: Subject) -> Result<Vec<Diagnostic>, String> {
        let seen = rye::plugin::host::environment().len();
        Ok(vec![Diagnostic {
            severity: Severity::Info,
            rule: "asks-host/env".into(),
            message: format!("{seen} variables"),
            at: None,
        }])
    }
}

export!(AsksHost);
