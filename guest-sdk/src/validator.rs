//! The `validator` world: report findings about items and chains.
//!
//! A validator receives one subject (an item with its parsed document, or a
//! tool's execution chain) and nothing else: no filesystem, network,
//! environment or clock, a CPU deadline and a memory cap. It runs on `sign`,
//! before `execute`, and in `rye validate`, possibly from the very tree it
//! checks, so the host treats it as untrusted.
//!
//! Install a built validator as `.ai/validators/<name>.wasm`.
//!
//! # Examples
//!
//! ```no_run
//! use rye_guest::validator::{Diagnostic, ItemKind, Subject, Validator, ValidatorInfo};
//!
//! /// Every directive must declare permissions.
//! struct NeedsPermissions;
//!
//! impl Validator for NeedsPermissions {
//!     fn describe() -> ValidatorInfo {
//!         ValidatorInfo::new("needs-permissions", "1.0.0").kinds([ItemKind::Directive])
//!     }
//!
//!     fn validate(subject: Subject) -> Result<Vec<Diagnostic>, String> {
//!         let Subject::Item(item) = subject else { return Ok(Vec::new()) };
//!         if item.parsed.contains("\"permissions\"") {
//!             return Ok(Vec::new());
//!         }
//!         Ok(vec![Diagnostic::error("policy/permissions", "declare <permissions>")])
//!     }
//! }
//!
//! rye_guest::export_validator!(NeedsPermissions);
//! ```

#[doc(hidden)]
pub mod __wit {
    wit_bindgen::generate!({
        world: "validator",
        path: "../wit/rye-plugin@0.1.0",
        pub_export_macro: true,
        export_macro_name: "export_validator_world",
        default_bindings_module: "rye_guest::validator::__wit",
        runtime_path: "rye_guest::__private::wit_bindgen::rt",
        generate_all,
    });
}

use __wit::exports::rye::plugin::validation as wit;

pub use __wit::rye::plugin::types::{
    Diagnostic, ItemKind, LocatedError, Position, Severity, Space,
};
pub use wit::{ChainLink, ConfigSchema, Item, Subject, ValidatorInfo};

crate::diagnostics::impl_type_helpers!(crate::validator::__wit::rye::plugin::types);

impl ValidatorInfo {
    /// Describes a validator that sees no item kinds and no chains yet.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            kinds: Vec::new(),
            checks_chains: false,
        }
    }

    /// The item kinds this validator wants to see.
    pub fn kinds(mut self, kinds: impl IntoIterator<Item = ItemKind>) -> Self {
        self.kinds = kinds.into_iter().collect();
        self
    }

    /// Asks to see every tool's execution chain as well.
    pub fn checks_chains(mut self) -> Self {
        self.checks_chains = true;
        self
    }
}

/// A validator component. Implement it and pass the type to
/// [`export_validator!`].
pub trait Validator {
    /// What this validator is and what it wants to see.
    fn describe() -> ValidatorInfo;

    /// Findings about `subject`. Return `Err` only when the validator itself
    /// cannot work; an invalid subject is reported through diagnostics.
    fn validate(subject: Subject) -> Result<Vec<Diagnostic>, String>;
}

#[doc(hidden)]
pub use wit::Guest as __Guest;

/// Exports a [`Validator`](validator::Validator) implementation as this
/// component's `rye:plugin/validation` interface.
#[macro_export]
macro_rules! export_validator {
    ($validator:ty) => {
        // Exports exist only in the component; a native build (the crate's
        // unit tests) compiles the implementation without them.
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct RyeValidatorExport;
            impl $crate::validator::__Guest for RyeValidatorExport {
                fn describe() -> $crate::validator::ValidatorInfo {
                    <$validator as $crate::validator::Validator>::describe()
                }
                fn validate(
                    subject: $crate::validator::Subject,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<$crate::validator::Diagnostic>,
                    ::std::string::String,
                > {
                    <$validator as $crate::validator::Validator>::validate(subject)
                }
            }
            $crate::validator::__wit::export_validator_world!(
                RyeValidatorExport with_types_in $crate::validator::__wit
            );
        };
    };
}
