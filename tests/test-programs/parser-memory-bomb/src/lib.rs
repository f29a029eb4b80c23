use rye_guest::parser::{ParseError, ParseInput, Parsed, Parser};

struct Hog;

impl Parser for Hog {
    fn parse(_input: ParseInput) -> Result<Parsed, ParseError> {
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        loop {
            chunks.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&chunks);
        }
    }
}

rye_guest::export_parser!(Hog);
