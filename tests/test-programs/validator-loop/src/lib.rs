use rye_guest::validator::{Diagnostic, ItemKind, Subject, Validator, ValidatorInfo};

struct Spin;

impl Validator for Spin {
    fn describe() -> ValidatorInfo {
        ValidatorInfo::new("spin", "1.0.0")
            .kinds([ItemKind::Tool, ItemKind::Directive, ItemKind::Knowledge])
            .checks_chains()
    }

    fn validate(_subject: Subject) -> Result<Vec<Diagnostic>, String> {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

rye_guest::export_validator!(Spin);
