use rye_guest::validator::{Diagnostic, Subject, Validator, ValidatorInfo};

struct Quiet;

impl Validator for Quiet {
    fn describe() -> ValidatorInfo {
        ValidatorInfo::new("quiet", "1.0.0")
    }

    fn validate(_subject: Subject) -> Result<Vec<Diagnostic>, String> {
        Ok(Vec::new())
    }
}

rye_guest::export_validator!(Quiet);
