use rye_guest::validator::{Diagnostic, ItemKind, Subject, Validator, ValidatorInfo};

struct Flood;

impl Validator for Flood {
    fn describe() -> ValidatorInfo {
        ValidatorInfo::new("flood", "1.0.0").kinds([
            ItemKind::Tool,
            ItemKind::Directive,
            ItemKind::Knowledge,
        ])
    }

    /// 100,000 findings, each with a 100 KiB message: far past what the
    /// host keeps, within the memory cap only because the text is shared
    /// until it is lowered one finding at a time.
    fn validate(_subject: Subject) -> Result<Vec<Diagnostic>, String> {
        let long = "x".repeat(100 * 1024);
        let mut found = Vec::new();
        for i in 0..100_000 {
            let message = if i < 50 { long.clone() } else { String::new() };
            found.push(Diagnostic::warning("flood/noise", message));
        }
        Ok(found)
    }
}

rye_guest::export_validator!(Flood);
