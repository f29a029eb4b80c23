use rye_guest::parser::{ParseError, ParseInput, Parsed, Parser};

struct Spin;

impl Parser for Spin {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        let mut n: u64 = input.content.len() as u64;
        loop {
            n = std::hint::black_box(n.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

rye_guest::export_parser!(Spin);
