//! The runs folder: what the next host reads to stop the runs of a host
//! that was killed. Its own test binary, since the folder is set once per
//! process.

use rye_process::{Capture, Plan, run};

#[test]
fn a_child_finds_its_run_recorded_from_its_first_instruction_and_gone_after() {
    let runs = tempfile::tempdir().unwrap();
    rye_process::init(Some(runs.path().to_owned()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // A host killed at any moment after the spawn leaves a record the
    // next host can act on: the record is there before the child runs.
    for _ in 0..20 {
        let plan = Plan::new("/bin/sh")
            .arg("-c")
            .arg(format!("cat {}/*.run", runs.path().display()));
        let out = rt.block_on(run(&plan, &Capture::default())).unwrap();
        let record = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.success(),
            "no record: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            record.contains(&format!("host {}\n", std::process::id())),
            "{record}"
        );
        assert!(record.contains("host_start "), "{record}");
    }
    let left: Vec<_> = std::fs::read_dir(runs.path()).unwrap().collect();
    assert!(left.is_empty(), "records outlived their runs: {left:?}");
}
