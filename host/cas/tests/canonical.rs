//! Canonical JSON against Python's `json.dumps(sort_keys=True,
//! separators=(",", ":"), ensure_ascii=True)` on a generated corpus:
//! identical bytes, value by value.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Map, Number, Value};

/// A small deterministic generator (xorshift64*), so a failure repeats.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn char(&mut self) -> char {
        let pick = match self.below(9) {
            0 => self.below(0x20) as u32,                 // control characters
            1 => 0x7f + self.below(0x21) as u32,          // DEL and C1 controls
            2 => 0xa0 + self.below(0x700) as u32,         // Latin and more
            3 => 0x3000 + self.below(0xa000) as u32, // CJK and the rest of the BMP below surrogates
            4 => 0xe000 + self.below(0x2000) as u32, // private use up to U+FFFF
            5 => 0x1_0000 + self.below(0x10_0000) as u32, // above the BMP: surrogate pairs
            6 => *[0x22u32, 0x5c, 0x2f, 0x08, 0x0c, 0xfeff, 0xffff, 0x10_ffff]
                .get(self.below(8) as usize)
                .unwrap(),
            _ => 0x20 + self.below(0x5f) as u32, // printable ASCII
        };
        char::from_u32(pick).unwrap_or('?')
    }

    fn string(&mut self) -> String {
        let len = self.below(12);
        (0..len).map(|_| self.char()).collect()
    }

    fn number(&mut self) -> Value {
        match self.below(6) {
            0 => Value::from(self.next() as i64),
            1 => Value::from(self.next()),
            2 => Value::from(self.below(2000) as i64 - 1000),
            3 => Value::from([i64::MIN, i64::MAX, 0, -1][self.below(4) as usize]),
            4 => {
                // Any finite float, by its bits.
                let f = f64::from_bits(self.next());
                if f.is_finite() {
                    Value::Number(Number::from_f64(f).unwrap())
                } else {
                    Value::from(0.5)
                }
            }
            _ => {
                // Around the switch between positional and scientific.
                let exponent = self.below(50) as i32 - 25;
                let f = (self.below(100_000) as f64 + 0.5) * 10f64.powi(exponent);
                Value::Number(Number::from_f64(f).unwrap())
            }
        }
    }

    fn value(&mut self, depth: u32) -> Value {
        let leaf = depth > 6 || self.below(3) == 0;
        if leaf {
            return match self.below(5) {
                0 => Value::Null,
                1 => Value::Bool(self.below(2) == 0),
                2 => self.number(),
                _ => Value::String(self.string()),
            };
        }
        if self.below(2) == 0 {
            let len = self.below(6);
            Value::Array((0..len).map(|_| self.value(depth + 1)).collect())
        } else {
            let len = self.below(6);
            let mut map = Map::new();
            for _ in 0..len {
                map.insert(self.string(), self.value(depth + 1));
            }
            Value::Object(map)
        }
    }
}

fn python() -> Option<&'static str> {
    let found = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found || std::env::var_os("CI").is_none(),
        "python3 is needed for the canonical JSON comparison"
    );
    found.then_some("python3")
}

#[test]
fn canonical_json_is_byte_for_byte_pythons() {
    let Some(python) = python() else {
        return;
    };
    let mut generator = Gen(0x9e37_79b9_7f4a_7c15);
    let mut corpus: Vec<Value> = (0..3000).map(|_| generator.value(0)).collect();
    // Deep nesting, within what serde_json reads (128 levels).
    let mut deep = Value::String("bottom é".into());
    for level in 0..120 {
        deep = if level % 2 == 0 {
            Value::Array(vec![deep])
        } else {
            let mut map = Map::new();
            map.insert(format!("k{level}\u{1F600}"), deep);
            Value::Object(map)
        };
    }
    corpus.push(deep);

    // Written in serde_json's own (non-canonical) form: keys in insertion
    // order, non-ASCII as UTF-8.
    let mut input = String::new();
    for value in &corpus {
        input.push_str(&serde_json::to_string(value).unwrap());
        input.push('\n');
    }
    let script = "import json, sys\nfor line in sys.stdin:\n    print(json.dumps(json.loads(line), sort_keys=True, separators=(',', ':'), ensure_ascii=True))\n";
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success());
    let theirs = String::from_utf8(out.stdout).unwrap();
    let theirs: Vec<&str> = theirs.lines().collect();
    assert_eq!(theirs.len(), corpus.len());
    for (value, python) in corpus.iter().zip(theirs) {
        let ours = rye_cas::canonical::to_string(value);
        assert_eq!(ours, python, "for {value}");
    }
}

#[test]
fn an_object_written_from_borrowed_fields_is_the_object_made_and_written() {
    let mut generated = Gen(0x0bad_5eed);
    for round in 0..500 {
        let values: Vec<Value> = (0..4).map(|_| generated.value(3)).collect();
        // Keys around and equal to the two the object adds.
        let keys = ["a", "kind", "kinda", "result", "schema", "thread_id", "é"];
        let fields: Vec<(&str, &Value)> = (0..4)
            .map(|i| (keys[(round + i * 3) % keys.len()], &values[i]))
            .collect();
        let mut map = Map::new();
        for (key, value) in &fields {
            map.insert((*key).to_owned(), (*value).clone());
        }
        let made = rye_cas::canonical::to_vec(&rye_cas::object("execution_result", map));
        assert_eq!(
            rye_cas::object_bytes("execution_result", &fields),
            made,
            "{fields:?}"
        );
    }
}
