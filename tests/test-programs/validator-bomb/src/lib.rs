use rye_guest::validator::{Diagnostic, ItemKind, Subject, Validator, ValidatorInfo};

struct Bomb;

impl Validator for Bomb {
    fn describe() -> ValidatorInfo {
        ValidatorInfo::new("bomb", "1.0.0").kinds([
            ItemKind::Tool,
            ItemKind::Directive,
            ItemKind::Knowledge,
        ])
    }

    fn validate(_subject: Subject) -> Result<Vec<Diagnostic>, String> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

rye_guest::export_validator!(Bomb);
