//! What the code-reading parsers share about tool metadata.

use rye_guest::parser::Diagnostic;

/// The names the host reads as tool metadata (see the host's mapping in
/// `host/core/src/metadata.rs`). A value the parser cannot read for one of
/// these is worth a warning; for any other name it is ordinary code.
pub const METADATA_NAMES: &[&str] = &[
    "__version__",
    "__tool_type__",
    "__executor_id__",
    "__category__",
    "__tool_description__",
    "CONFIG_SCHEMA",
    "ENV_CONFIG",
    "CONFIG",
    "CONFIG_RESOLVE",
];

/// The warning for metadata `name`, at `line`:`column`, assigned something
/// other than a literal (`__version__ = VERSION`); `None` for other names.
/// `language` prefixes the rule (`python/non-literal-metadata`).
pub fn non_literal(language: &str, name: &str, line: u32, column: u32) -> Option<Diagnostic> {
    METADATA_NAMES.contains(&name).then(|| {
        Diagnostic::warning(
            &format!("{language}/non-literal-metadata"),
            format!("`{name}` is not assigned a literal value, so it is left out of the metadata"),
        )
        .at(line, column)
    })
}
