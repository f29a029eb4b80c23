//! Building and validating execution chains, with every rule failing in
//! its own words.

mod common;

use common::write;
use rye_host::{ChainError, HostError, Space};

/// A tool at version 1.0.0 run by the system's Python script runtime.
const SCRIPT_TOOL: &str =
    "__version__ = '1.0.0'\n__executor_id__ = 'rye/core/runtimes/python/script'\n";

fn runtime(executor: &str) -> String {
    format!(
        "version: '1.0.0'\ntool_type: runtime\nexecutor_id: {executor}\nconfig:\n  command: echo\n"
    )
}

fn chain_ids(chain: &rye_host::Chain) -> Vec<(&str, Space)> {
    chain
        .elements
        .iter()
        .map(|e| (e.item_id.as_str(), e.space))
        .collect()
}

fn chain_error(result: Result<rye_host::Chain, HostError>) -> ChainError {
    match result {
        Err(HostError::Chain(e)) => e,
        other => panic!("expected a chain error, got {other:?}"),
    }
}

#[test]
fn standard_runtimes_chain_down_to_the_primitive() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/demo/script.py",
        "__executor_id__ = 'rye/core/runtimes/python/script'\n",
    );
    write(
        p,
        ".ai/tools/demo/function.py",
        "__executor_id__ = 'rye/core/runtimes/python/function'\n",
    );
    write(
        p,
        ".ai/tools/demo/tool.js",
        "export const __executor_id__ = 'rye/core/runtimes/node/node';\n",
    );
    write(
        p,
        ".ai/tools/demo/legacy.yaml",
        runtime("rye/core/primitives/subprocess"),
    );
    let rye = common::rye(user.path());
    for (tool, runtime) in [
        ("demo/script", "rye/core/runtimes/python/script"),
        ("demo/function", "rye/core/runtimes/python/function"),
        ("demo/tool", "rye/core/runtimes/node/node"),
    ] {
        let chain = rye.chain(Some(p), tool).unwrap();
        assert_eq!(
            chain_ids(&chain),
            [
                (tool, Space::Project),
                (runtime, Space::System),
                ("rye/core/primitives/execute", Space::System)
            ]
        );
    }
    let bash = rye.chain(Some(p), "rye/bash/bash").unwrap();
    assert_eq!(bash.elements[1].item_id, "rye/core/runtimes/bash/bash");
    let legacy = rye.chain(Some(p), "demo/legacy").unwrap();
    assert_eq!(
        legacy.primitive().item_id,
        "rye/core/primitives/execute",
        "the subprocess alias"
    );
    assert_eq!(legacy.elements[0].summary().integrity.len(), 64);
}

#[test]
fn a_project_runtime_shadows_the_system_one_visibly() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/demo/script.py",
        "__executor_id__ = 'rye/core/runtimes/python/script'\n",
    );
    write(
        p,
        ".ai/tools/rye/core/runtimes/python/script.yaml",
        runtime("rye/core/primitives/execute"),
    );
    let rye = common::rye(user.path());
    let chain = rye.chain(Some(p), "demo/script").unwrap();
    let runtime = &chain.elements[1];
    assert_eq!(runtime.space, Space::Project);
    assert_eq!(runtime.shadowed.len(), 1);
    assert_eq!(runtime.shadowed[0].space, Space::System);
}

#[test]
fn a_cycle_is_named_with_its_path() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(p, ".ai/tools/demo/tool.yaml", runtime("demo/a"));
    write(p, ".ai/tools/demo/a.yaml", runtime("demo/b"));
    write(p, ".ai/tools/demo/b.yaml", runtime("demo/a"));
    let rye = common::rye(user.path());
    let error = chain_error(rye.chain(Some(p), "demo/tool"));
    assert!(
        matches!(&error, ChainError::Cycle { path } if path == &["demo/tool", "demo/a", "demo/b", "demo/a"]),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "circular dependency: demo/tool -> demo/a -> demo/b -> demo/a"
    );
}

#[test]
fn more_than_ten_elements_is_too_deep() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    for i in 0..10 {
        write(
            p,
            &format!(".ai/tools/deep/r{i}.yaml"),
            runtime(&format!("deep/r{}", i + 1)),
        );
    }
    write(
        p,
        ".ai/tools/deep/r10.yaml",
        runtime("rye/core/primitives/execute"),
    );
    let rye = common::rye(user.path());
    let error = chain_error(rye.chain(Some(p), "deep/r0"));
    assert!(
        matches!(&error, ChainError::TooDeep { path } if path.len() == 11),
        "{error}"
    );

    // Ten elements is the most, and fine.
    write(
        p,
        ".ai/tools/deep/r8.yaml",
        runtime("rye/core/primitives/execute"),
    );
    assert_eq!(rye.chain(Some(p), "deep/r0").unwrap().elements.len(), 10);
}

#[test]
fn a_missing_executor_names_who_pointed_to_it() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let tool = write(
        p,
        ".ai/tools/demo/tool.py",
        "__executor_id__ = 'no/such/runtime'\n",
    );
    let rye = common::rye(user.path());
    let error = chain_error(rye.chain(Some(p), "demo/tool"));
    let message = error.to_string();
    assert!(
        message.contains("\"no/such/runtime\" not found") && message.contains("\"demo/tool\""),
        "{message}"
    );
    assert!(message.contains(&tool.display().to_string()), "{message}");
    assert!(matches!(
        chain_error(rye.chain(Some(p), "no/such/tool")),
        ChainError::ToolNotFound { .. }
    ));
}

#[test]
fn a_user_tool_may_not_depend_on_a_project_runtime() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(
        user.path(),
        ".ai/tools/mine/tool.yaml",
        runtime("proj/runtime"),
    );
    write(
        project.path(),
        ".ai/tools/proj/runtime.yaml",
        runtime("rye/core/primitives/execute"),
    );
    let rye = common::rye(user.path());
    let error = chain_error(rye.chain(Some(project.path()), "mine/tool"));
    match &error {
        ChainError::Invalid {
            child,
            child_space,
            parent,
            parent_space,
            rule,
        } => {
            assert_eq!((child.as_str(), *child_space), ("mine/tool", Space::User));
            assert_eq!(
                (parent.as_str(), *parent_space),
                ("proj/runtime", Space::Project)
            );
            assert!(rule.contains("equal or lower precedence"), "{rule}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_system_tool_may_not_depend_on_a_project_runtime() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let system = common::system_copy();
    write(
        system.path(),
        ".ai/tools/sys/tool.yaml",
        runtime("proj/runtime"),
    );
    write(
        project.path(),
        ".ai/tools/proj/runtime.yaml",
        runtime("rye/core/primitives/execute"),
    );
    let rye = common::rye_with_system(user.path(), Some(system.path()));
    let error = chain_error(rye.chain(Some(project.path()), "sys/tool"));
    assert!(
        matches!(
            &error,
            ChainError::Invalid {
                child_space: Space::System,
                parent_space: Space::Project,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_version_outside_the_parents_constraints_is_refused() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/demo/tool.py",
        "__version__ = '1.4.0'\n__executor_id__ = 'demo/runtime'\n",
    );
    let constrained = |min: &str, max: &str| {
        format!(
            "version: '1.0.0'\nexecutor_id: rye/core/primitives/execute\nchild_constraints:\n  demo/tool: {{min_version: '{min}', max_version: '{max}'}}\n"
        )
    };
    write(
        p,
        ".ai/tools/demo/runtime.yaml",
        constrained("2.0.0", "3.0.0"),
    );
    let rye = common::rye(user.path());
    let error = chain_error(rye.chain(Some(p), "demo/tool")).to_string();
    assert!(
        error.contains("\"demo/tool\" (project) -> \"demo/runtime\" (project)")
            && error.contains("min_version 2.0.0"),
        "{error}"
    );

    write(
        p,
        ".ai/tools/demo/runtime.yaml",
        constrained("1.0.0", "1.3.9"),
    );
    let error = chain_error(rye.chain(Some(p), "demo/tool")).to_string();
    assert!(error.contains("max_version 1.3.9"), "{error}");

    write(
        p,
        ".ai/tools/demo/runtime.yaml",
        constrained("1.0.0", "2.0.0"),
    );
    rye.chain(Some(p), "demo/tool").unwrap();
}

#[test]
fn declared_inputs_must_be_among_declared_outputs() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/demo/tool.yaml",
        "executor_id: demo/runtime\noutputs: [text]\n",
    );
    write(
        p,
        ".ai/tools/demo/runtime.yaml",
        "executor_id: rye/core/primitives/execute\ninputs: [text, image]\n",
    );
    let rye = common::rye(user.path());
    let error = chain_error(rye.chain(Some(p), "demo/tool")).to_string();
    assert!(error.contains("[\"image\"]"), "{error}");
}

#[test]
fn a_root_that_is_not_a_primitive_is_refused() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(p, ".ai/tools/demo/tool.yaml", "executor_id: demo/fake\n");
    write(p, ".ai/tools/demo/fake.yaml", "executor_id: null\n");
    let rye = common::rye(user.path());
    assert!(matches!(
        chain_error(rye.chain(Some(p), "demo/tool")),
        ChainError::NotAPrimitive { .. }
    ));
}

#[test]
fn an_edited_element_is_read_again() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let tool = write(p, ".ai/tools/demo/tool.py", SCRIPT_TOOL);
    let rye = common::rye(user.path());
    let before = rye.chain(Some(p), "demo/tool").unwrap();
    std::fs::write(
        &tool,
        "__version__ = '2.0.0'\n__executor_id__ = 'rye/core/runtimes/bash/bash'\n",
    )
    .unwrap();
    common::sign_file(&tool);
    let after = rye.chain(Some(p), "demo/tool").unwrap();
    assert_eq!(after.elements[0].metadata["version"], "2.0.0");
    assert_eq!(after.elements[1].item_id, "rye/core/runtimes/bash/bash");
    assert_ne!(
        before.elements[0].content_hash,
        after.elements[0].content_hash
    );
}

/// A chain once built is kept while the watches report nothing, and
/// every change to what it was built from is seen by the next build all
/// the same: a tampered byte, the file signed again, a runtime that
/// shadows the system's added and removed.
#[test]
fn a_kept_chain_gives_way_to_every_change_of_what_it_was_built_from() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let tool = write(p, ".ai/tools/demo/tool.py", SCRIPT_TOOL);
    let rye = common::rye(user.path());
    let first = rye.chain(Some(p), "demo/tool").unwrap();
    let again = rye.chain(Some(p), "demo/tool").unwrap();
    assert_eq!(chain_ids(&first), chain_ids(&again));
    assert_eq!(
        first.elements[0].content_hash,
        again.elements[0].content_hash
    );

    let signed = std::fs::read_to_string(&tool).unwrap();
    std::fs::write(&tool, format!("{signed}# one more line\n")).unwrap();
    assert!(
        matches!(
            rye.chain(Some(p), "demo/tool"),
            Err(HostError::Integrity { .. })
        ),
        "a tampered tool is refused however warm its chain"
    );
    common::sign_file(&tool);
    let resigned = rye.chain(Some(p), "demo/tool").unwrap();
    assert_ne!(
        resigned.elements[0].content_hash,
        first.elements[0].content_hash
    );

    let runtime = write(
        p,
        ".ai/tools/rye/core/runtimes/python/script.yaml",
        runtime("rye/core/primitives/execute"),
    );
    let shadowed = rye.chain(Some(p), "demo/tool").unwrap();
    assert_eq!(shadowed.elements[1].space, Space::Project);
    std::fs::remove_file(&runtime).unwrap();
    let back = rye.chain(Some(p), "demo/tool").unwrap();
    assert_eq!(back.elements[1].space, Space::System);
}

/// A tool file that is a link inside the space: its target lies where no
/// watch sees it, so its chain is built again each time and an edit of
/// the target shows at once.
#[test]
fn a_chain_through_a_link_sees_its_target_change() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let target = common::write_unsigned(p, ".ai/shared/tool.py", SCRIPT_TOOL);
    let link = p.join(".ai/tools/demo/tool.py");
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    common::sign_file(&link);
    let rye = common::rye(user.path());
    for _ in 0..2 {
        let chain = rye.chain(Some(p), "demo/tool").unwrap();
        assert_eq!(chain.elements[0].metadata["version"], "1.0.0");
    }
    std::fs::write(
        &target,
        "__version__ = '2.0.0'\n__executor_id__ = 'rye/core/runtimes/python/script'\n",
    )
    .unwrap();
    common::sign_file(&link);
    let chain = rye.chain(Some(p), "demo/tool").unwrap();
    assert_eq!(chain.elements[0].metadata["version"], "2.0.0");
}
