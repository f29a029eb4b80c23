//! Every fuzz target, on stable: seeds like the files and messages each
//! parser reads, and a bounded number of mutations of them (bytes flipped,
//! inserted, deleted, runs of nesting characters, pieces of other seeds
//! spliced in), from a fixed random seed so a failure reproduces. The
//! nightly `cargo fuzz` runs explore far more; this keeps the targets
//! building and their invariants holding.

use rye_fuzz_targets::TARGETS;

/// Inputs shaped like what each target reads.
const SEEDS: &[&str] = &[
    "python OR (node AND NOT \"shell script\") pyth* r?n",
    "# rye:signed:2026-01-02T03:04:05Z:abababababababababababababababababababababababababababababababab:BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc:0123456789abcdef\n",
    "<!-- rye:signed:v2:2026-01-02T03:04:05Z:abababababababababababababababababababababababababababababababab:BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc==:0123456789abcdef|github@x -->\n# Title\n",
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"x"}}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    "version: '1.0.0'\nexecutor_id: rye/core/runtimes/python/script\nconfig:\n  args: [a, {b: c}]\n  env: {X: \"${HOME:-/}\"}\n",
    "---\nname: demo\ntags: [a, b]\n---\n# Body\n\ntext\n",
    "```yaml\nname: demo\n```\nbody\n",
    "<!-- rye:signed:x -->\n# Directive\n\n```xml\n<directive name=\"d\" version=\"1.0.0\">\n  <metadata><description>d</description></metadata>\n  <inputs><input name=\"id\" type=\"string\" required=\"true\">the id</input></inputs>\n  <process><step name=\"s\">do {input:id}</step></process>\n</directive>\n```\n",
    "#!/usr/bin/env python3\n\"\"\"Doc.\"\"\"\n__version__ = \"1.2.3\"\n__executor_id__ = 'rye/core/runtimes/python/script'\nCONFIG_SCHEMA = {'type': 'object', 'properties': {'x': {'type': ['string', None]}}, 'n': (1, 2.5, -3, 0x1f, True)}\n",
    "// rye:signed:x\nexport const __version__ = '1.0.0';\nexport const CONFIG_SCHEMA = { type: 'object', properties: { a: [1, 2, {b: `t`}] } };\n/* c */\n",
    "#!/bin/bash\n# __version__ = \"1.0.0\"\n# __executor_id__ = \"rye/core/runtimes/bash/bash\"\n# __tool_description__ = \"d\"\necho hi\n",
];

/// Fragments that stress parsers: nesting, quoting, comments, fences.
const PIECES: &[&str] = &[
    "(",
    ")",
    "NOT ",
    "OR ",
    "\"",
    "[",
    "]",
    "{",
    "}",
    "---\n",
    "```",
    "<!--",
    "-->",
    "#",
    "\\",
    "'",
    "'''",
    "\"\"\"",
    "\n",
    "\r\n",
    ": ",
    "- ",
    "&a ",
    "*a",
    "!!",
    "<",
    ">",
    "</",
    "${",
    "\u{feff}",
    "é",
    "\u{10ffff}",
    "0x",
    "1e999",
    "-",
    "{input:",
    "?",
    "|",
    "\t",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    for _ in 0..=rng.below(4) {
        let at = rng.below(input.len() + 1);
        match rng.below(6) {
            0 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] ^= 1 << rng.below(8);
            }
            1 if !input.is_empty() => {
                let end = (at + rng.below(16)).min(input.len());
                input.drain(at.min(end)..end);
            }
            2 => {
                let piece = PIECES[rng.below(PIECES.len())].repeat(1 + rng.below(3));
                input.splice(at..at, piece.bytes());
            }
            3 => {
                // A run of one nesting character, sometimes far past any bound.
                let piece = PIECES[rng.below(15)];
                let count = [8, 150, 5_000][rng.below(3)];
                input.splice(at..at, piece.repeat(count).bytes());
            }
            4 => {
                let other = SEEDS[rng.below(SEEDS.len())].as_bytes();
                let from = rng.below(other.len());
                let to = (from + rng.below(64)).min(other.len());
                input.splice(at..at, other[from..to].iter().copied());
            }
            _ => input.push(rng.below(256) as u8),
        }
    }
    input.truncate(256 << 10);
}

#[test]
fn every_target_survives_a_bounded_run_of_mutated_inputs() {
    const RUNS: usize = 600;
    for (name, target) in TARGETS {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
        for seed in SEEDS {
            target(seed.as_bytes());
        }
        for run in 0..RUNS {
            let mut input = SEEDS[run % SEEDS.len()].as_bytes().to_vec();
            for _ in 0..=rng.below(3) {
                mutate(&mut rng, &mut input);
            }
            let outcome = std::panic::catch_unwind(|| target(&input));
            assert!(
                outcome.is_ok(),
                "{name} failed on input {run}: {:?}",
                String::from_utf8_lossy(&input)
            );
        }
    }
}
