use rye_guest::validator::{Diagnostic, ItemKind, Subject, Validator, ValidatorInfo};

struct Crash;

impl Validator for Crash {
    fn describe() -> ValidatorInfo {
        ValidatorInfo::new("crash", "1.0.0").kinds([
            ItemKind::Tool,
            ItemKind::Directive,
            ItemKind::Knowledge,
        ])
    }

    fn validate(subject: Subject) -> Result<Vec<Diagnostic>, String> {
        let id = match subject {
            Subject::Item(item) => item.item_id,
            Subject::Chain(links) => links.first().map(|l| l.item_id.clone()).unwrap_or_default(),
        };
        panic!("validator crashed on {id}");
    }
}

rye_guest::export_validator!(Crash);
