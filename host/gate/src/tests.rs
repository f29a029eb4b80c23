use super::*;

#[test]
fn host_calls_by_world() {
    use HostCall::*;
    // (world, call, allowed)
    let table = [
        (World::Parser, GetEnv, false),
        (World::Parser, Environment, false),
        (World::Parser, Which, false),
        (World::Parser, RunDeclaredCommand, false),
        (World::Parser, ReadConfig, false),
        (World::Validator, GetEnv, false),
        (World::Validator, Environment, false),
        (World::Validator, Which, false),
        (World::Validator, RunDeclaredCommand, false),
        (World::Validator, ReadConfig, false),
        (World::RuntimeAdapter, GetEnv, true),
        (World::RuntimeAdapter, Environment, true),
        (World::RuntimeAdapter, Which, true),
        (World::RuntimeAdapter, RunDeclaredCommand, true),
        (World::RuntimeAdapter, ReadConfig, true),
        (World::GraphWalker, GetEnv, false),
        (World::GraphWalker, Environment, false),
        (World::GraphWalker, Which, false),
        (World::GraphWalker, RunDeclaredCommand, false),
        (World::GraphWalker, ReadConfig, false),
    ];
    for (world, call, allowed) in table {
        assert_eq!(world.may_call(call), allowed, "{world} {call:?}");
    }
    assert_eq!(table.len(), World::ALL.len() * HostCall::ALL.len());
    let linked: Vec<_> = World::ALL.into_iter().filter(|w| w.links_host()).collect();
    assert_eq!(linked, [World::RuntimeAdapter]);
}

#[test]
fn file_views_by_world_and_path() {
    let p = Path::new;
    let home = Some(p("/home/ann"));
    /// (world, project, tool file, views)
    type Row<'a> = (World, Option<&'a Path>, Option<&'a Path>, &'a [&'a str]);
    let table: &[Row<'_>] = &[
        // Pure worlds see nothing, whatever they are called for.
        (
            World::Parser,
            Some(p("/work/app")),
            Some(p("/work/app/.ai/tools/x/t.py")),
            &[],
        ),
        (
            World::Validator,
            Some(p("/work/app")),
            Some(p("/work/app/.ai/tools/x/t.py")),
            &[],
        ),
        (
            World::GraphWalker,
            Some(p("/work/app")),
            Some(p("/work/app/.ai/tools/x/t.yaml")),
            &[],
        ),
        // An adapter: the project, the tool's folder and the one above.
        (
            World::RuntimeAdapter,
            Some(p("/work/app")),
            Some(p("/work/app/.ai/tools/x/t.py")),
            &["/work/app", "/work/app/.ai/tools/x", "/work/app/.ai/tools"],
        ),
        // The same folder is given once.
        (
            World::RuntimeAdapter,
            Some(p("/work/app/.ai/tools")),
            Some(p("/work/app/.ai/tools/t.py")),
            &["/work/app/.ai/tools", "/work/app/.ai"],
        ),
        // Never the whole machine: a tool at the root has no folder above.
        (World::RuntimeAdapter, None, Some(p("/t.py")), &[]),
        // Never the home folder whole, nor what holds it: a project that is
        // the home folder is not shown, its tool folders are.
        (
            World::RuntimeAdapter,
            Some(p("/home/ann")),
            Some(p("/home/ann/.ai/tools/t.py")),
            &["/home/ann/.ai/tools", "/home/ann/.ai"],
        ),
        (World::RuntimeAdapter, Some(p("/home")), None, &[]),
        // Relative paths and `..` are not views, nor anything derived from
        // them (the folder above `/work/app/..` is not `/work`).
        (World::RuntimeAdapter, Some(p("work/app")), None, &[]),
        (
            World::RuntimeAdapter,
            Some(p("/work/app/../../etc")),
            Some(p("/work/app/../t.py")),
            &[],
        ),
    ];
    for &(world, project, tool_file, views) in table {
        let request = ViewRequest {
            project,
            tool_file,
            home,
        };
        let got = file_views(world, &request);
        let want: Vec<PathBuf> = views.iter().map(PathBuf::from).collect();
        assert_eq!(got, want, "{world} {project:?} {tool_file:?}");
    }
}

#[test]
fn withholding_patterns_read_and_refused() {
    // (setting, outcome: Ok(withheld names among the probes) or the rule)
    let probes = [
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS",
        "PATH",
        "HOME",
    ];
    let table: &[(&str, Result<&[&str], &str>)] = &[
        ("", Ok(&[])),
        ("GITHUB_TOKEN", Ok(&["GITHUB_TOKEN"])),
        ("AWS_*", Ok(&["AWS_SECRET_ACCESS_KEY"])),
        (
            "AWS*, GITHUB_TOKEN",
            Ok(&["GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS"]),
        ),
        ("GITHUB_TOKEN\tHOME\n", Ok(&["GITHUB_TOKEN", "HOME"])),
        ("*", Err("withholds everything; name the variables")),
        (
            "A*B",
            Err("is not a variable name (letters, digits and _, with * only at the end)"),
        ),
        (
            "PATH=x",
            Err("is not a variable name (letters, digits and _, with * only at the end)"),
        ),
    ];
    for &(setting, outcome) in table {
        match (EnvPolicy::parse(setting), outcome) {
            (Ok(policy), Ok(names)) => {
                let withheld: Vec<&str> =
                    probes.into_iter().filter(|n| policy.withholds(n)).collect();
                let mut want = names.to_vec();
                want.sort_by_key(|n| probes.iter().position(|p| p == n));
                assert_eq!(withheld, want, "{setting:?}");
            }
            (Err(e), Err(rule)) => {
                assert_eq!(e.rule, rule, "{setting:?}");
                assert!(e.to_string().starts_with(WITHHOLD_VAR), "{e}");
            }
            (got, want) => panic!("{setting:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn exposing_splits_values_from_withheld_names() {
    let policy = EnvPolicy::parse("SECRET_*").unwrap();
    let env = [
        ("PATH", "/bin"),
        ("SECRET_B", "b"),
        ("SECRET_A", "a"),
        ("SECRETLY", "c"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let exposed = policy.expose(env);
    assert_eq!(
        exposed.visible,
        [
            ("PATH".to_owned(), "/bin".to_owned()),
            ("SECRETLY".to_owned(), "c".to_owned())
        ]
    );
    assert_eq!(exposed.withheld, ["SECRET_A", "SECRET_B"]);
}

#[test]
fn writes_by_place() {
    let roots = [
        WriteRoot {
            space: Space::Project,
            ai_dir: Path::new("/work/app/.ai"),
        },
        WriteRoot {
            space: Space::User,
            ai_dir: Path::new("/home/ann/.ai"),
        },
        WriteRoot {
            space: Space::System,
            ai_dir: Path::new("/opt/rye/system/.ai"),
        },
    ];
    type Denial = fn(PathBuf) -> WriteDenied;
    let not_plain: Denial = |path| WriteDenied::NotPlain { path };
    let outside: Denial = |path| WriteDenied::Outside { path };
    let system: Denial = |path| WriteDenied::SystemSpace { path };
    let component: Denial = |path| WriteDenied::Component { path };
    // (target, outcome)
    let table: &[(&str, Result<Space, Denial>)] = &[
        ("/work/app/.ai/tools/x/t.py", Ok(Space::Project)),
        ("/work/app/.ai/directives/d.md", Ok(Space::Project)),
        ("/work/app/.ai/knowledge/k.md", Ok(Space::Project)),
        (
            "/work/app/.ai/config/keys/trusted/ab.toml",
            Ok(Space::Project),
        ),
        (
            "/work/app/.ai/lockfiles/x@1.0.0.lock.json",
            Ok(Space::Project),
        ),
        ("/home/ann/.ai/tools/t.py", Ok(Space::User)),
        ("/home/ann/.ai/parsers/p.wasm.sig", Ok(Space::User)),
        ("/home/ann/.ai/parsers/p.wasm", Err(component)),
        ("/home/ann/.ai/adapters/a.wasm", Err(component)),
        ("/opt/rye/system/.ai/tools/t.py", Err(system)),
        ("/work/app/.ai", Err(outside)),
        ("/work/app/.env", Err(outside)),
        ("/etc/passwd", Err(outside)),
        ("/work/app/.ai/tools/../../.bashrc", Err(not_plain)),
        ("/work/app/.ai/tools/x/../../../.env", Err(not_plain)),
        ("work/app/.ai/tools/t.py", Err(not_plain)),
    ];
    for &(target, outcome) in table {
        let target = Path::new(target);
        let want = outcome.map_err(|denial| denial(target.to_owned()));
        assert_eq!(may_write(target, &roots), want, "{}", target.display());
    }
    // A file directly in .ai, or in a folder rye does not write.
    for (target, folder) in [
        ("/work/app/.ai/notes.md", "notes.md"),
        ("/work/app/.ai/bin/run.sh", "bin"),
    ] {
        assert_eq!(
            may_write(Path::new(target), &roots),
            Err(WriteDenied::Folder {
                path: target.into(),
                folder: folder.into()
            })
        );
    }
}

#[test]
fn the_innermost_space_decides() {
    // A project inside the user's home: its .ai is its own, and the user
    // space does not swallow it (nor the other way round).
    let roots = [
        WriteRoot {
            space: Space::User,
            ai_dir: Path::new("/home/ann/.ai"),
        },
        WriteRoot {
            space: Space::System,
            ai_dir: Path::new("/home/ann/.ai/tools/vendored/.ai"),
        },
    ];
    assert_eq!(
        may_write(
            Path::new("/home/ann/.ai/tools/vendored/.ai/tools/t.py"),
            &roots
        ),
        Err(WriteDenied::SystemSpace {
            path: "/home/ann/.ai/tools/vendored/.ai/tools/t.py".into()
        })
    );
    assert_eq!(
        may_write(Path::new("/home/ann/.ai/tools/t.py"), &roots),
        Ok(Space::User)
    );
}

#[test]
fn lexical_paths() {
    let table = [
        ("/work/app", Some("/work/app")),
        ("/work/./app/", Some("/work/app")),
        ("/work/x/../app", Some("/work/app")),
        ("/../../etc", Some("/etc")),
        ("/", Some("/")),
        ("work/app", None),
        ("../app", None),
    ];
    for (path, want) in table {
        assert_eq!(lexical(Path::new(path)), want.map(PathBuf::from), "{path}");
    }
}
