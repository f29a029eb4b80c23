//! The `parser` world: turn the text of one item file into a JSON document.
//!
//! The host hands a parser the file's content and nothing else (no
//! filesystem, network, environment or clock) and caches the result by the
//! SHA-256 of that content, so `parse` must be a pure function of its input.
//!
//! What the document holds depends on the item kind:
//!
//! - **tool**: the metadata keys as the file writes them. Dunder names
//!   (`__version__`, `__executor_id__`, …) and bare names (`version`,
//!   `executor_id`, …) are both understood by the host.
//! - **directive**: `name`, `version`, `description`, `inputs`, `process`, …
//! - **knowledge**: the frontmatter keys plus `body`.
//!
//! Install a built parser as `.ai/parsers/<name>.wasm` in a project or user
//! space; it overrides a system parser of the same name.
//!
//! # Examples
//!
//! ```no_run
//! use rye_guest::parser::{Diagnostic, ParseError, ParseInput, Parsed, Parser};
//! use rye_guest::serde_json::{Map, Value};
//!
//! struct FirstLine;
//!
//! impl Parser for FirstLine {
//!     fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
//!         let Some(first) = input.content.lines().next() else {
//!             return Err(ParseError::structure("the file is empty"));
//!         };
//!         let mut document = Map::new();
//!         document.insert("description".into(), Value::from(first));
//!         Ok(Parsed::new(document)
//!             .with_diagnostic(Diagnostic::info("first-line/used", "description taken from line 1").at(1, 1)))
//!     }
//! }
//!
//! rye_guest::export_parser!(FirstLine);
//! ```

use serde_json::{Map, Value};

#[doc(hidden)]
pub mod __wit {
    wit_bindgen::generate!({
        world: "parser",
        path: "../wit/rye-plugin@0.1.0",
        pub_export_macro: true,
        export_macro_name: "export_parser_world",
        default_bindings_module: "rye_guest::parser::__wit",
        runtime_path: "rye_guest::__private::wit_bindgen::rt",
        generate_all,
    });
}

use __wit::exports::rye::plugin::parsing as wit;

pub use __wit::rye::plugin::types::{Diagnostic, ItemKind, LocatedError, Position, Severity};
pub use wit::{ParseError, ParseInput};

crate::diagnostics::impl_type_helpers!(crate::parser::__wit::rye::plugin::types);

/// What a parser returns: a JSON object and any findings.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    /// The document describing the item.
    pub document: Map<String, Value>,
    /// Findings that did not stop the parse.
    pub diagnostics: Vec<Diagnostic>,
}

impl Parsed {
    /// A document with no findings.
    pub fn new(document: Map<String, Value>) -> Self {
        Self {
            document,
            diagnostics: Vec::new(),
        }
    }

    /// Adds a finding.
    pub fn with_diagnostic(mut self, diagnostic: Diagnostic) -> Self {
        self.diagnostics.push(diagnostic);
        self
    }
}

impl ParseError {
    /// The content is not well formed.
    pub fn syntax(message: impl Into<String>) -> Self {
        Self::Syntax(LocatedError::new(message))
    }

    /// The content is not well formed at `line`:`column` (both from 1).
    pub fn syntax_at(message: impl Into<String>, line: u32, column: u32) -> Self {
        Self::Syntax(LocatedError::new(message).at(line, column))
    }

    /// Well formed, but not a valid item of this format.
    pub fn structure(message: impl Into<String>) -> Self {
        Self::Structure(LocatedError::new(message))
    }

    /// Well formed, but not a valid item, because of `line`:`column`.
    pub fn structure_at(message: impl Into<String>, line: u32, column: u32) -> Self {
        Self::Structure(LocatedError::new(message).at(line, column))
    }
}

/// A parser component. Implement it and pass the type to [`export_parser!`].
pub trait Parser {
    /// Parses one file.
    fn parse(input: ParseInput) -> Result<Parsed, ParseError>;
}

#[doc(hidden)]
pub fn __call<P: Parser>(input: ParseInput) -> Result<wit::Parsed, ParseError> {
    let parsed = P::parse(input)?;
    Ok(wit::Parsed {
        document: Value::Object(parsed.document).to_string(),
        diagnostics: parsed.diagnostics,
    })
}

#[doc(hidden)]
pub use wit::Guest as __Guest;
#[doc(hidden)]
pub use wit::Parsed as __WitParsed;

/// Exports a [`Parser`](parser::Parser) implementation as this component's
/// `rye:plugin/parsing` interface.
///
/// Call it once, at the crate root of a `cdylib` built for `wasm32-wasip2`.
#[macro_export]
macro_rules! export_parser {
    ($parser:ty) => {
        // Exports exist only in the component; a native build (the crate's
        // unit tests) compiles the implementation without them.
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct RyeParserExport;
            impl $crate::parser::__Guest for RyeParserExport {
                fn parse(
                    input: $crate::parser::ParseInput,
                ) -> ::core::result::Result<$crate::parser::__WitParsed, $crate::parser::ParseError>
                {
                    $crate::parser::__call::<$parser>(input)
                }
            }
            $crate::parser::__wit::export_parser_world!(
                RyeParserExport with_types_in $crate::parser::__wit
            );
        };
    };
}
