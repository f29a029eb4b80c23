//! Constructors shared by the shapes every world uses.

/// Implements builders on one world's copy of the shared `types` records.
macro_rules! impl_type_helpers {
    ($types:path) => {
        use $types as types;

        impl types::Position {
            /// A position; both numbers start at 1.
            pub fn new(line: u32, column: u32) -> Self {
                Self { line, column }
            }
        }

        impl types::Diagnostic {
            fn with(severity: types::Severity, rule: &str, message: impl Into<String>) -> Self {
                Self {
                    severity,
                    rule: rule.to_owned(),
                    message: message.into(),
                    at: None,
                }
            }

            /// A finding that makes the item invalid.
            pub fn error(rule: &str, message: impl Into<String>) -> Self {
                Self::with(types::Severity::Error, rule, message)
            }

            /// A finding the author should fix but that does not stop use.
            pub fn warning(rule: &str, message: impl Into<String>) -> Self {
                Self::with(types::Severity::Warning, rule, message)
            }

            /// A note for the author.
            pub fn info(rule: &str, message: impl Into<String>) -> Self {
                Self::with(types::Severity::Info, rule, message)
            }

            /// Ties the finding to a line and column (both from 1).
            pub fn at(mut self, line: u32, column: u32) -> Self {
                self.at = Some(types::Position::new(line, column));
                self
            }
        }

        impl types::LocatedError {
            /// An error with no position.
            pub fn new(message: impl Into<String>) -> Self {
                Self {
                    message: message.into(),
                    at: None,
                }
            }

            /// Ties the error to a line and column (both from 1).
            pub fn at(mut self, line: u32, column: u32) -> Self {
                self.at = Some(types::Position::new(line, column));
                self
            }
        }
    };
}

pub(crate) use impl_type_helpers;
