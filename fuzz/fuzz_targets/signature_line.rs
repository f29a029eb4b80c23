#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rye_fuzz_targets::signature_line(data));
