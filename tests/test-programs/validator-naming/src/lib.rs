//! Item ids must be lowercase words: letters, digits, `_` and `-`
//! between the slashes.

use rye_guest::validator::{Diagnostic, ItemKind, Subject, Validator, ValidatorInfo};

struct Naming;

impl Validator for Naming {
    fn describe() -> ValidatorInfo {
        ValidatorInfo::new("naming", "1.0.0").kinds([
            ItemKind::Tool,
            ItemKind::Directive,
            ItemKind::Knowledge,
        ])
    }

    fn validate(subject: Subject) -> Result<Vec<Diagnostic>, String> {
        let Subject::Item(item) = subject else {
            return Ok(Vec::new());
        };
        let bad = item.item_id.split('/').any(|part| {
            part.is_empty()
                || !part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        });
        Ok(if bad {
            vec![Diagnostic::warning(
                "naming/id",
                format!("{} is not lowercase words separated by /", item.item_id),
            )]
        } else {
            Vec::new()
        })
    }
}

rye_guest::export_validator!(Naming);
