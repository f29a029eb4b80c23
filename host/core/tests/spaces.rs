//! Items and parser components resolved through project, user and system
//! spaces, end to end through the host.

mod common;

// Loading and searching need no signatures: items are written as they are.
use common::write_unsigned as write;
use rye_host::{HostError, ItemKind, LoadRequest, SearchRequest, SourceFilter, Space};
use rye_test_artifacts as artifacts;

const TOOL: &str = "\"\"\"Count words.\"\"\"\n__version__ = \"1.0.0\"\n__executor_id__ = \"rye/core/runtimes/python/script\"\n";

#[test]
fn a_project_parser_overrides_the_system_one() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(project.path(), ".ai/tools/demo/count.py", TOOL);
    let rye = common::rye(user.path());
    let load = || {
        rye.load(&LoadRequest {
            project: Some(project.path().to_owned()),
            ..LoadRequest::new(ItemKind::Tool, "demo/count")
        })
        .unwrap()
    };

    let before = load();
    assert_eq!(before.metadata["version"], "1.0.0");
    assert_eq!(before.metadata["description"], "Count words.");

    std::fs::create_dir_all(project.path().join(".ai/parsers/python")).unwrap();
    common::copy_signed(
        artifacts::PARSER_OVERRIDE,
        &project.path().join(".ai/parsers/python/ast.wasm"),
    );
    let after = load();
    assert_eq!(after.metadata["version"], "9.9.9");
    assert_eq!(
        after.metadata["description"],
        "read by the override: demo/count"
    );

    // Search sees the override too: its index is keyed by parser.
    let found = rye
        .search(&SearchRequest::new("tool", "override").project(project.path()))
        .unwrap();
    assert_eq!(found.results.len(), 1, "{found:#?}");
    assert_eq!(found.results[0].id, "demo/count");
}

#[test]
fn a_user_parser_overrides_the_system_one_and_a_project_parser_overrides_it() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(project.path(), ".ai/tools/demo/count.py", TOOL);
    std::fs::create_dir_all(user.path().join(".ai/parsers/python")).unwrap();
    common::copy_signed(
        artifacts::PARSER_OVERRIDE,
        &user.path().join(".ai/parsers/python/ast.wasm"),
    );
    let rye = common::rye(user.path());
    let request = LoadRequest {
        project: Some(project.path().to_owned()),
        ..LoadRequest::new(ItemKind::Tool, "demo/count")
    };
    assert_eq!(rye.load(&request).unwrap().metadata["version"], "9.9.9");

    // A broken project parser wins over the user one and says so.
    common::write(
        project.path(),
        ".ai/parsers/python/ast.wasm",
        "not a component",
    );
    let loaded = rye.load(&request).unwrap();
    let error = loaded.parse_error.expect("the broken parser is reported");
    assert!(
        error.contains("parsers/python/ast.wasm") && error.contains("not a WebAssembly file"),
        "{error}"
    );
    assert_eq!(loaded.content, TOOL, "the content is returned all the same");
}

#[test]
fn project_items_shadow_user_and_system_items_visibly() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rye = common::rye(user.path());
    // Copies of the system entry, so all three score the same.
    let knowledge =
        std::fs::read(rye.system_base().join(".ai/knowledge/rye/core/spaces.md")).unwrap();
    write(
        project.path(),
        ".ai/knowledge/rye/core/spaces.md",
        &knowledge,
    );
    write(user.path(), ".ai/knowledge/rye/core/spaces.md", &knowledge);

    let loaded = rye
        .load(&LoadRequest {
            project: Some(project.path().to_owned()),
            ..LoadRequest::new(ItemKind::Knowledge, "rye/core/spaces")
        })
        .unwrap();
    assert_eq!(loaded.source, Space::Project);
    let shadowed: Vec<Space> = loaded.shadows.iter().map(|s| s.source).collect();
    assert_eq!(shadowed, [Space::User, Space::System]);

    let found = rye
        .search(&SearchRequest {
            limit: 50,
            ..SearchRequest::new("knowledge", "spaces").project(project.path())
        })
        .unwrap();
    let same: Vec<_> = found
        .results
        .iter()
        .filter(|h| h.id == "rye/core/spaces")
        .collect();
    assert_eq!(same.len(), 3);
    assert_eq!(same[0].source, Space::Project, "project first among equals");
    assert_eq!(same[0].shadows.len(), 2);
    assert!(
        same[1..]
            .iter()
            .all(|h| h.shadowed_by == Some(Space::Project))
    );

    let system_only = rye
        .search(&SearchRequest {
            source: SourceFilter::System,
            ..SearchRequest::new("knowledge", "spaces").project(project.path())
        })
        .unwrap();
    assert!(
        system_only
            .results
            .iter()
            .all(|h| h.source == Space::System)
    );
}

#[test]
fn load_copies_between_spaces_and_refuses_to_overwrite() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rye = common::rye(user.path());
    let request = LoadRequest {
        destination: Some(Space::Project),
        project: Some(project.path().to_owned()),
        ..LoadRequest::new(ItemKind::Directive, "rye/core/create_knowledge")
    };
    let copied = rye.load(&request).unwrap();
    assert_eq!(copied.source, Space::System);
    let target = project
        .path()
        .join(".ai/directives/rye/core/create_knowledge.md");
    assert_eq!(copied.destination_path.as_deref(), Some(target.as_path()));
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        copied.content,
        "copied byte for byte"
    );
    assert!(!std::fs::metadata(&target).unwrap().permissions().readonly());

    // Now it resolves in the project: loading "to project" again is no copy.
    let again = rye.load(&request).unwrap();
    assert_eq!(again.source, Space::Project);
    assert!(again.copied_to.is_none());

    // From system to project over an existing file needs force.
    std::fs::write(&target, "edited").unwrap();
    let from_system = LoadRequest {
        source: Some(Space::System),
        ..request.clone()
    };
    match rye.load(&from_system) {
        Err(HostError::Exists { path }) => assert_eq!(path, target),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "edited",
        "nothing was overwritten"
    );
    rye.load(&LoadRequest {
        force: true,
        ..from_system
    })
    .unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), copied.content);

    let to_system = LoadRequest {
        destination: Some(Space::System),
        ..request
    };
    assert!(matches!(
        rye.load(&to_system),
        Err(HostError::SystemReadOnly { .. })
    ));
}

#[test]
fn a_copy_may_not_create_a_second_file_for_an_id() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(user.path(), ".ai/tools/demo/count.py", TOOL);
    write(
        project.path(),
        ".ai/tools/demo/count.yaml",
        "version: '2.0.0'\n",
    );
    let rye = common::rye(user.path());
    let error = rye
        .load(&LoadRequest {
            source: Some(Space::User),
            destination: Some(Space::Project),
            force: true,
            project: Some(project.path().to_owned()),
            ..LoadRequest::new(ItemKind::Tool, "demo/count")
        })
        .unwrap_err();
    assert!(error.to_string().contains("second file"), "{error}");
}

#[test]
fn two_files_for_one_id_are_an_error_naming_both() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let py = write(project.path(), ".ai/tools/demo/count.py", TOOL);
    let yaml = write(
        project.path(),
        ".ai/tools/demo/count.yaml",
        "version: '2.0.0'\n",
    );
    let rye = common::rye(user.path());
    let error = rye
        .load(&LoadRequest {
            project: Some(project.path().to_owned()),
            ..LoadRequest::new(ItemKind::Tool, "demo/count")
        })
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&py.display().to_string()) && error.contains(&yaml.display().to_string()),
        "{error}"
    );

    let found = rye
        .search(&SearchRequest::new("tool", "count").project(project.path()))
        .unwrap();
    let hit = found.results.iter().find(|h| h.id == "demo/count").unwrap();
    assert!(
        hit.error
            .as_deref()
            .is_some_and(|e| e.contains("more than one file")),
        "{hit:?}"
    );
}

#[test]
fn ids_that_escape_their_folder_are_refused() {
    let user = tempfile::tempdir().unwrap();
    let rye = common::rye(user.path());
    for id in ["../../etc/passwd", "/etc/passwd", "a/../../b", ""] {
        let error = rye
            .load(&LoadRequest::new(ItemKind::Tool, id))
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("invalid item id"), "{id}: {error}");
    }
}

#[test]
fn broken_data_gets_errors_naming_the_file_and_the_host_keeps_serving() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rye = common::rye(user.path());
    write(project.path(), ".ai/tools/demo/count.py", TOOL);
    write(project.path(), ".ai/tools/demo/bad.yaml", "version: [1.0\n");
    write(
        project.path(),
        ".ai/tools/demo/notes.toml",
        "version = '1'\n",
    );
    write(
        project.path(),
        ".ai/tools/demo/binary.py",
        [0xff, 0xfe, 0x00],
    );

    let found = rye
        .search(&SearchRequest {
            limit: 100,
            ..SearchRequest::new("tool.demo", "").project(project.path())
        })
        .unwrap();
    let error_of = |id: &str| {
        found
            .results
            .iter()
            .find(|h| h.id == id)
            .and_then(|h| h.error.clone())
            .unwrap_or_default()
    };
    assert!(
        error_of("demo/bad").contains("invalid YAML") && error_of("demo/bad").contains("line 1"),
        "{}",
        error_of("demo/bad")
    );
    assert!(
        error_of("demo/notes").contains("parser \"toml/toml\" was not found"),
        "{}",
        error_of("demo/notes")
    );
    assert!(
        error_of("demo/binary").contains("not UTF-8"),
        "{}",
        error_of("demo/binary")
    );
    assert!(error_of("demo/count").is_empty());

    // A broken extractor is an error naming it; fixing it heals the host.
    let extractor = write(
        project.path(),
        ".ai/tools/rye/core/extractors/tool/tool_extractor.yaml",
        "extensions: [py]\n",
    );
    let error = rye
        .search(&SearchRequest::new("tool", "").project(project.path()))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&extractor.display().to_string()) && error.contains("\"py\""),
        "{error}"
    );
    std::fs::remove_file(&extractor).unwrap();
    assert!(
        rye.search(&SearchRequest::new("tool", "count").project(project.path()))
            .is_ok()
    );
}

#[test]
fn the_custom_toml_parser_example_makes_toml_tools_work() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(
        project.path(),
        ".ai/tools/demo/resize.toml",
        "# rye:signed:x\nversion = \"1.0.0\"\nexecutor_id = \"rye/core/runtimes/python/script\"\ndescription = \"Resize images\"\n\n[config_schema]\ntype = \"object\"\n",
    );
    let parser = project.path().join(".ai/parsers/toml/toml.wasm");
    std::fs::create_dir_all(parser.parent().unwrap()).unwrap();
    common::copy_signed(artifacts::TOML_PARSER, &parser);
    let rye = common::rye(user.path());
    let loaded = rye
        .load(&LoadRequest {
            project: Some(project.path().to_owned()),
            ..LoadRequest::new(ItemKind::Tool, "demo/resize")
        })
        .unwrap();
    assert_eq!(loaded.parse_error, None);
    assert_eq!(loaded.metadata["description"], "Resize images");
    assert_eq!(loaded.metadata["config_schema"]["type"], "object");

    write(project.path(), ".ai/tools/demo/broken.toml", "version = \n");
    let broken = rye
        .load(&LoadRequest {
            project: Some(project.path().to_owned()),
            ..LoadRequest::new(ItemKind::Tool, "demo/broken")
        })
        .unwrap();
    assert!(broken.parse_error.unwrap().contains("line 1"));
}

#[test]
fn search_is_deterministic_and_ranks_by_field_weight() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(
        project.path(),
        ".ai/knowledge/a/zeta.md",
        "```yaml\nname: zeta\ntitle: Retry budget\n```\nAbout retries.\n",
    );
    write(
        project.path(),
        ".ai/knowledge/a/alpha.md",
        "```yaml\nname: alpha\ntitle: Something\n```\nMentions retry once.\n",
    );
    let rye = common::rye(user.path());
    let search = || {
        rye.search(&SearchRequest::new("knowledge.a", "retry").project(project.path()))
            .unwrap()
    };
    let first = search();
    let ids: Vec<_> = first.results.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(
        ids,
        ["a/zeta", "a/alpha"],
        "the title match outranks the body match"
    );
    assert!(first.results[0].score > first.results[1].score);
    let again: Vec<_> = search()
        .results
        .into_iter()
        .map(|h| (h.id, h.score))
        .collect();
    assert_eq!(
        again,
        first
            .results
            .iter()
            .map(|h| (h.id.clone(), h.score))
            .collect::<Vec<_>>()
    );

    let bad = rye.search(&SearchRequest::new("knowledge", "(retry").project(project.path()));
    assert!(bad.unwrap_err().to_string().contains("never closed"));
    let scope = rye
        .search(&SearchRequest::new("widgets", "x"))
        .unwrap_err()
        .to_string();
    assert!(scope.contains("scope \"widgets\""), "{scope}");
}

#[test]
fn an_edited_item_is_reparsed() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let path = write(project.path(), ".ai/tools/demo/count.py", TOOL);
    let rye = common::rye(user.path());
    let search = |q: &str| {
        rye.search(&SearchRequest::new("tool.demo", q).project(project.path()))
            .unwrap()
            .total
    };
    assert_eq!(search("words"), 1);
    std::fs::write(&path, TOOL.replace("Count words.", "Tally tokens.")).unwrap();
    common::sign_file(&path);
    assert_eq!(search("words"), 0);
    assert_eq!(search("tokens"), 1);

    write(
        project.path(),
        ".ai/tools/demo/nested/more.py",
        TOOL.replace("Count words.", "More tokens."),
    );
    assert_eq!(
        search("tokens"),
        2,
        "a new file in a new folder is found at once"
    );
    std::fs::remove_file(&path).unwrap();
    assert_eq!(search("tokens"), 1, "a deleted file is gone at once");
    std::fs::rename(
        project.path().join(".ai/tools/demo/nested"),
        project.path().join(".ai/tools/demo/moved"),
    )
    .unwrap();
    let found = rye
        .search(&SearchRequest::new("tool.demo", "tokens").project(project.path()))
        .unwrap();
    assert_eq!(found.results[0].id, "demo/moved/more");
}

#[test]
fn every_bundled_system_item_parses_cleanly() {
    let user = tempfile::tempdir().unwrap();
    let rye = common::rye(user.path());
    let all = rye
        .search(&SearchRequest {
            limit: usize::MAX,
            source: SourceFilter::System,
            ..SearchRequest::new("all", "")
        })
        .unwrap();
    assert!(all.total >= 8, "{all:#?}");
    for hit in &all.results {
        assert_eq!(hit.error, None, "{} {}", hit.kind, hit.id);
        let loaded = rye
            .load(&LoadRequest::new(hit.kind, hit.id.clone()))
            .unwrap();
        assert!(
            loaded.diagnostics.is_empty(),
            "{} {}: {:?}",
            hit.kind,
            hit.id,
            loaded.diagnostics
        );
        assert!(
            loaded.metadata.contains_key("version"),
            "{} {} has no version",
            hit.kind,
            hit.id
        );
    }
}
