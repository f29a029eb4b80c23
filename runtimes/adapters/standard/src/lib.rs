//! The standard runtime adapter (`rye/standard`): plans how a chain runs
//! from what its runtime YAML says. See [`plan`] for the rules.
//!
//! It reads files only through the host's read-only views (the project and
//! the tool's folders) and asks the host, through `rye:plugin/host`, for
//! the environment, `PATH` lookups, an element's own resolve command and
//! `.ai/config/` files.

mod http;
mod mcp;
mod plan;
mod template;

#[cfg(target_arch = "wasm32")]
use rye_guest::adapter::{PlanError, PlanInput, Planned, RuntimeAdapter, Space};

pub use plan::{Host, plan, space_name};

#[cfg(target_arch = "wasm32")]
struct Standard;

#[cfg(target_arch = "wasm32")]
impl RuntimeAdapter for Standard {
    fn plan(input: PlanInput) -> Result<Planned, PlanError> {
        plan::plan(&input, &Granted)
    }
}

rye_guest::export_adapter!(Standard);

/// The real host: its services, and the filesystem views it granted.
#[cfg(target_arch = "wasm32")]
struct Granted;

#[cfg(target_arch = "wasm32")]
impl Host for Granted {
    fn environment(&self) -> Vec<(String, String)> {
        rye_guest::adapter::host::environment()
    }

    fn which(&self, binary: &str) -> Option<String> {
        rye_guest::adapter::host::which(binary)
    }

    fn run_declared_command(&self, item_id: &str) -> Result<String, String> {
        rye_guest::adapter::host::run_declared_command(item_id)
    }

    fn read_config(&self, space: Space, path: &str) -> Result<Option<String>, String> {
        rye_guest::adapter::host::read_config(space, path)
    }

    fn is_file(&self, path: &str) -> bool {
        std::fs::metadata(path).is_ok_and(|m| m.is_file())
    }

    fn is_program(&self, path: &str) -> bool {
        // A virtualenv's `python` is a link to an interpreter outside what
        // the adapter is shown, so the link is all there is to see here.
        self.is_file(path) || std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink())
    }

    fn read_file(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap, HashSet};

    use rye_guest::adapter::{
        ChainElement, HttpPlan, PlanError, PlanInput, Planned, ProcessPlan, Space,
    };
    use rye_guest::serde_json::{Value, json};

    use super::*;

    #[derive(Default)]
    struct Fake {
        env: Vec<(String, String)>,
        files: HashMap<String, String>,
        on_path: HashSet<String>,
        configs: HashMap<(String, String), String>,
        command_output: Option<Result<String, String>>,
        /// The environment and the files asked for, in order.
        asked: std::cell::RefCell<Vec<String>>,
    }

    impl Host for Fake {
        fn environment(&self) -> Vec<(String, String)> {
            self.asked.borrow_mut().push("environment".into());
            self.env.clone()
        }
        fn which(&self, binary: &str) -> Option<String> {
            self.on_path
                .contains(binary)
                .then(|| format!("/usr/bin/{binary}"))
        }
        fn run_declared_command(&self, _item_id: &str) -> Result<String, String> {
            self.command_output
                .clone()
                .unwrap_or_else(|| Err("none".into()))
        }
        fn read_config(&self, space: Space, path: &str) -> Result<Option<String>, String> {
            Ok(self
                .configs
                .get(&(space_name(space).to_owned(), path.to_owned()))
                .cloned())
        }
        fn is_file(&self, path: &str) -> bool {
            self.files.contains_key(path)
        }
        fn is_program(&self, path: &str) -> bool {
            self.is_file(path)
        }
        fn read_file(&self, path: &str) -> Option<String> {
            self.asked.borrow_mut().push(path.into());
            self.files.get(path).cloned()
        }
    }

    fn element(id: &str, path: &str, metadata: Value) -> ChainElement {
        ChainElement {
            item_id: id.into(),
            space: Space::System,
            path: path.into(),
            metadata: metadata.to_string(),
        }
    }

    fn input(chain: Vec<ChainElement>, parameters: Value) -> PlanInput {
        PlanInput {
            chain,
            parameters: parameters.to_string(),
            project_path: "/proj".into(),
            user_space: "/home/me".into(),
            system_space: "/sys".into(),
        }
    }

    fn primitive() -> ChainElement {
        element(
            "rye/core/primitives/execute",
            "/sys/.ai/tools/rye/core/primitives/execute.yaml",
            json!({"executor_id": null}),
        )
    }

    fn process(input: &PlanInput, host: &dyn Host) -> Result<ProcessPlan, PlanError> {
        match plan::plan(input, host)? {
            Planned::Process(plan) => Ok(plan),
            other => panic!("something else where a process was due: {other:?}"),
        }
    }

    fn request(input: &PlanInput, host: &dyn Host) -> Result<HttpPlan, PlanError> {
        match plan::plan(input, host)? {
            Planned::Http(request) => Ok(request),
            other => panic!("something else where a request was due: {other:?}"),
        }
    }

    fn http_chain(tool_config: Value) -> Vec<ChainElement> {
        vec![
            element(
                "api/get",
                "/proj/.ai/tools/api/get.yaml",
                json!({"config": tool_config}),
            ),
            element(
                "rye/core/runtimes/http/http",
                "/sys/.ai/tools/rye/core/runtimes/http/http.yaml",
                json!({"config": {"method": "GET", "timeout": 30, "max_response_bytes": 1000, "max_redirects": 5}}),
            ),
            element(
                "rye/core/primitives/http_client",
                "/sys/.ai/tools/rye/core/primitives/http_client.yaml",
                json!({"executor_id": null}),
            ),
        ]
    }

    fn header<'p>(plan: &'p HttpPlan, name: &str) -> Option<&'p str> {
        plan.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }

    #[test]
    fn a_request_from_configuration_with_parameters_as_data() {
        let fake = Fake {
            env: vec![("API_TOKEN".into(), "s3cret".into())],
            ..Fake::default()
        };
        let chain = http_chain(json!({
            "method": "post",
            "url": "https://api.test/repos/{owner}/issues?label={label}",
            "headers": {"Accept": "application/json", "X-Trace": "{trace}", "X-Count": 3},
            "auth": {"type": "bearer", "token": "${API_TOKEN}"},
            "body": {"title": "{title}", "labels": "{labels}", "assignee": "{assignee}"},
            "timeout": 2.5,
            "retry": {"max_attempts": 3, "backoff": 0.25}
        }));
        let params = json!({"owner": "me/../you", "label": "a&b=c", "title": "Hi ${API_TOKEN}", "labels": ["x", 1]});
        let plan = request(&input(chain, params), &fake).unwrap();
        assert_eq!(plan.method, "POST");
        assert_eq!(
            plan.url,
            "https://api.test/repos/me%2F..%2Fyou/issues?label=a%26b%3Dc"
        );
        assert_eq!(header(&plan, "authorization"), Some("Bearer s3cret"));
        assert_eq!(header(&plan, "x-count"), Some("3"));
        assert_eq!(
            header(&plan, "x-trace"),
            None,
            "a header naming a missing parameter is left out"
        );
        assert_eq!(header(&plan, "content-type"), Some("application/json"));
        let body: Value = rye_guest::serde_json::from_slice(plan.body.as_ref().unwrap()).unwrap();
        // The caller's text is data: `${API_TOKEN}` in it stays as sent.
        assert_eq!(
            body,
            json!({"title": "Hi ${API_TOKEN}", "labels": ["x", 1]})
        );
        assert_eq!(plan.timeout_ms, Some(2500));
        assert_eq!(plan.max_response_bytes, Some(1000));
        assert_eq!(plan.max_redirects, Some(5));
        let retry = plan.retry.unwrap();
        assert_eq!((retry.max_attempts, retry.backoff_ms), (3, 250));
    }

    #[test]
    fn a_whole_url_from_the_caller_and_the_defaults() {
        let chain = http_chain(json!({"url": "{url}", "method": "{method}", "body": "{body}"}));
        let plan = request(
            &input(chain.clone(), json!({"url": "http://h.test:8080/a?b=c d"})),
            &Fake::default(),
        );
        let error = plan.unwrap_err();
        assert!(
            matches!(&error, PlanError::Config(e) if e.message.contains("whitespace")),
            "{error:?}"
        );
        let plan = request(
            &input(chain.clone(), json!({"url": "http://h.test:8080/a?b=c"})),
            &Fake::default(),
        )
        .unwrap();
        assert_eq!(
            (plan.method.as_str(), plan.url.as_str()),
            ("GET", "http://h.test:8080/a?b=c")
        );
        assert_eq!(plan.body, None);
        assert_eq!(plan.timeout_ms, Some(30_000));
        let plan = request(
            &input(
                chain,
                json!({"url": "https://h.test/", "method": "PUT", "body": "raw text"}),
            ),
            &Fake::default(),
        )
        .unwrap();
        assert_eq!(plan.body.as_deref(), Some(&b"raw text"[..]));
        assert_eq!(header(&plan, "content-type"), None);
    }

    #[test]
    fn requests_that_cannot_be_planned_say_why() {
        let fails = |config: Value, params: Value, env: Vec<(String, String)>, expect: &str| {
            let fake = Fake {
                env,
                ..Fake::default()
            };
            let error = request(&input(http_chain(config), params), &fake).unwrap_err();
            assert!(
                matches!(&error, PlanError::Config(e) if e.message.contains(expect) && e.item_id == "rye/core/primitives/http_client"),
                "{expect}: {error:?}"
            );
        };
        fails(json!({"url": "{url}"}), json!({}), vec![], "did not give");
        fails(json!({}), json!({}), vec![], "config.url");
        fails(
            json!({"url": "file:///etc/passwd"}),
            json!({}),
            vec![],
            "not an absolute http",
        );
        fails(
            json!({"url": "{url}"}),
            json!({"url": "gopher://h.test/"}),
            vec![],
            "not an absolute http",
        );
        fails(
            json!({"url": "https://h.test/{missing}/x"}),
            json!({}),
            vec![],
            "{missing}",
        );
        fails(
            json!({"url": "https:///x"}),
            json!({}),
            vec![],
            "names no host",
        );
        fails(
            json!({"url": "https://h.test", "method": "GE T"}),
            json!({}),
            vec![],
            "not an HTTP method",
        );
        fails(
            json!({"url": "https://h.test", "headers": {"X": "{v}"}}),
            json!({"v": "a
Host: evil"}),
            vec![],
            "line break",
        );
        fails(
            json!({"url": "https://h.test", "headers": {"Bad Name": "x"}}),
            json!({}),
            vec![],
            "not a header name",
        );
        fails(
            json!({"url": "https://h.test", "headers": ["x"]}),
            json!({}),
            vec![],
            "must be a mapping",
        );
        fails(
            json!({"url": "https://h.test", "auth": {"type": "bearer", "token": "${UNSET_TOKEN}"}}),
            json!({}),
            vec![],
            "auth.token is empty",
        );
        fails(
            json!({"url": "https://h.test", "auth": {"type": "basic"}}),
            json!({}),
            vec![],
            "not bearer or api_key",
        );
        fails(
            json!({"url": "https://h.test", "retry": {"max_attempts": 0}}),
            json!({}),
            vec![],
            "max_attempts",
        );
        fails(
            json!({"url": "https://h.test", "max_redirects": -1}),
            json!({}),
            vec![],
            "not a whole number",
        );
        fails(
            json!({"url": "https://h.test", "timeout": 0}),
            json!({}),
            vec![],
            "positive",
        );

        let fake = Fake {
            env: vec![("KEY".into(), "k1".into())],
            ..Fake::default()
        };
        let plan = request(
            &input(
                http_chain(
                    json!({"url": "https://h.test", "auth": {"type": "api_key", "key": "${KEY}"}}),
                ),
                json!({}),
            ),
            &fake,
        )
        .unwrap();
        assert_eq!(header(&plan, "x-api-key"), Some("k1"));
    }

    /// An element's metadata is read member by member as asked for: one
    /// that is no object is refused naming its item, a member given twice
    /// counts as its last, a null one as absent, and members never asked
    /// for (however large or odd) change nothing.
    #[test]
    fn metadata_is_read_as_json_member_by_member() {
        let call = |tool: ChainElement| {
            let chain = vec![
                tool,
                element(
                    "rye/core/primitives/mcp_client",
                    "/sys/.ai/tools/rye/core/primitives/mcp_client.yaml",
                    json!({"executor_id": null}),
                ),
            ];
            plan::plan(&input(chain, json!({})), &Fake::default())
        };
        let raw = |metadata: &str| ChainElement {
            item_id: "mcp/notes/add".into(),
            space: Space::Project,
            path: "/proj/.ai/tools/mcp/notes/add.yaml".into(),
            metadata: metadata.into(),
        };
        for bad in ["[1]", "\"text\"", "{\"config\": ", "null", ""] {
            let Err(PlanError::Config(e)) = call(raw(bad)) else {
                panic!("{bad:?} was planned")
            };
            assert_eq!(e.item_id, "mcp/notes/add");
            assert!(e.message.contains("not a JSON object"), "{}", e.message);
        }
        let deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
        let twice = format!(
            r#"{{"config": {{"server": "old"}}, "description": {deep}, "input_schema": {{"x": "\u00e9"}}, "config": {{"server": "mcp/servers/notes", "tool_name": "add"}}, "anchor": null}}"#
        );
        let Ok(Planned::Mcp(planned)) = call(raw(&twice)) else {
            panic!("not planned")
        };
        assert_eq!(
            (planned.server.as_str(), planned.tool_name.as_str()),
            ("mcp/servers/notes", "add")
        );
        // A name spelled with escapes is the name they spell.
        let escaped =
            r#"{"con\u0066ig": {"server": "mcp/servers/notes", "tool_\u006eame": "add"}}"#;
        let Ok(Planned::Mcp(planned)) = call(raw(escaped)) else {
            panic!("not planned")
        };
        assert_eq!(planned.server, "mcp/servers/notes");
    }

    #[test]
    fn an_mcp_call_takes_the_parameters_as_its_arguments() {
        let chain = vec![
            element(
                "mcp/notes/add",
                "/proj/.ai/tools/mcp/notes/add.yaml",
                json!({"config": {"server": "mcp/servers/notes", "tool_name": "add"}}),
            ),
            element(
                "rye/core/runtimes/mcp/stdio",
                "/sys/.ai/tools/rye/core/runtimes/mcp/stdio.yaml",
                json!({"config": {"timeout": 60, "startup_timeout": 5}}),
            ),
            element(
                "rye/core/primitives/mcp_client",
                "/sys/.ai/tools/rye/core/primitives/mcp_client.yaml",
                json!({"executor_id": null}),
            ),
        ];
        let params = json!({"a": 1, "b": "${HOME} {tool_path}"});
        let Planned::Mcp(call) =
            plan::plan(&input(chain.clone(), params.clone()), &Fake::default()).unwrap()
        else {
            panic!("not a call")
        };
        assert_eq!(
            (call.server.as_str(), call.tool_name.as_str()),
            ("mcp/servers/notes", "add")
        );
        let arguments: Value = rye_guest::serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(arguments, params, "the parameters as sent");
        assert_eq!(
            (call.startup_timeout_ms, call.timeout_ms),
            (Some(5000), Some(60_000))
        );
        assert!(call.reusable, "nothing but the chain went into it");

        let mut plain = chain.clone();
        plain[1] = element("rt", "/rt.yaml", json!({"config": {"timeout": 60}}));
        let Planned::Mcp(call) = plan::plan(&input(plain, json!({})), &Fake::default()).unwrap()
        else {
            panic!("not a call")
        };
        assert_eq!(
            call.startup_timeout_ms, None,
            "the server item's timeout decides"
        );

        let mut nameless = chain;
        nameless[0] = element(
            "mcp/notes/add",
            "/x.yaml",
            json!({"config": {"server": "mcp/servers/notes"}}),
        );
        let error = plan::plan(&input(nameless, json!({})), &Fake::default()).unwrap_err();
        assert!(
            matches!(&error, PlanError::Config(e) if e.message.contains("tool_name")),
            "{error:?}"
        );
    }

    #[test]
    fn an_mcp_call_is_reusable_only_when_nothing_but_the_chain_went_into_it() {
        let chain = |tool: Value| {
            vec![
                element("mcp/notes/add", "/proj/.ai/tools/mcp/notes/add.yaml", tool),
                element(
                    "rye/core/primitives/mcp_client",
                    "/sys/.ai/tools/rye/core/primitives/mcp_client.yaml",
                    json!({"executor_id": null}),
                ),
            ]
        };
        let reusable = |tool: Value, params: Value, host: &Fake| {
            let Planned::Mcp(call) = plan::plan(&input(chain(tool), params), host).unwrap() else {
                panic!("not a call")
            };
            call.reusable
        };
        let host = Fake {
            files: HashMap::from([("/proj/.ai/tools/mcp/notes/Cargo.toml".into(), String::new())]),
            configs: HashMap::from([(("project".into(), "notes.yaml".into()), "a: 1\n".into())]),
            ..Fake::default()
        };
        let plain = json!({"server": "mcp/servers/notes", "tool_name": "add", "timeout": 5});
        assert!(reusable(
            json!({"config": plain}),
            json!({"x": "{y}"}),
            &host
        ));
        // A parameter named in a key the plan uses.
        let from_parameters = json!({"server": "mcp/servers/notes", "tool_name": "{which}"});
        assert!(!reusable(
            json!({"config": from_parameters}),
            json!({"which": "add"}),
            &host
        ));
        let timeout = json!({"server": "mcp/servers/notes", "tool_name": "add", "timeout": "{t}"});
        assert!(!reusable(
            json!({"config": timeout}),
            json!({"t": 5}),
            &host
        ));
        // A file looked at for the anchor, a config file read.
        let anchored = json!({"config": plain, "anchor": {"mode": "auto", "markers_any": ["Cargo.toml"], "root": "tool_dir"}});
        assert!(!reusable(anchored, json!({}), &host));
        let resolved = json!({"config": plain, "config_resolve": {"path": "notes.yaml", "mode": "first_match"}});
        assert!(!reusable(resolved, json!({}), &host));
    }

    #[test]
    fn a_call_reads_the_environment_only_when_its_configuration_names_a_variable() {
        let chain = |tool_config: Value| {
            vec![
                element(
                    "mcp/notes/add",
                    "/proj/.ai/tools/mcp/notes/add.yaml",
                    json!({"config": tool_config, "description": "Uses ${NOT_READ}."}),
                ),
                element(
                    "rye/core/primitives/mcp_client",
                    "/sys/.ai/tools/rye/core/primitives/mcp_client.yaml",
                    json!({"executor_id": null}),
                ),
            ]
        };
        let fake = || Fake {
            env: vec![("NOTES".into(), "from-host".into())],
            files: HashMap::from([("/proj/.env".into(), "SERVER=from-dotenv\n".into())]),
            ..Fake::default()
        };
        let plain = fake();
        let params = json!({"text": "${NOTES}"});
        let config = json!({"server": "mcp/servers/notes", "tool_name": "add"});
        let Planned::Mcp(call) = plan::plan(&input(chain(config), params.clone()), &plain).unwrap()
        else {
            panic!("not a call")
        };
        assert_eq!(call.server, "mcp/servers/notes");
        assert_eq!(call.arguments, params.to_string(), "parameters are data");
        assert!(plain.asked.borrow().is_empty(), "{:?}", plain.asked);
        assert!(call.reusable);

        // Named anywhere in the configuration, however deep, it is read,
        // with the project's `.env` over the host's.
        let named = fake();
        let config = json!({"server": "mcp/servers/${SERVER}", "tool_name": "add", "extra": [{"x": "${NOTES}"}]});
        let Planned::Mcp(call) = plan::plan(&input(chain(config), json!({})), &named).unwrap()
        else {
            panic!("not a call")
        };
        assert_eq!(call.server, "mcp/servers/from-dotenv");
        assert_eq!(*named.asked.borrow(), ["environment", "/proj/.env"]);
        assert!(!call.reusable, "the environment went into it");

        // An element's own env_config is checked as before.
        let mut declared = chain(json!({"server": "mcp/servers/notes", "tool_name": "add"}));
        declared[0] = element(
            "mcp/notes/add",
            "/proj/.ai/tools/mcp/notes/add.yaml",
            json!({"config": {"server": "mcp/servers/notes", "tool_name": "add"}, "env_config": ["A"]}),
        );
        let error = plan::plan(&input(declared, json!({})), &fake()).unwrap_err();
        assert!(
            matches!(&error, PlanError::Config(e) if e.message.contains("env_config must be a mapping")),
            "{error:?}"
        );
    }

    fn env_of(plan: &ProcessPlan) -> BTreeMap<String, String> {
        plan.env
            .iter()
            .map(|v| (v.name.clone(), v.value.clone()))
            .collect()
    }

    fn note<'p>(plan: &'p ProcessPlan, step: &str) -> Vec<&'p str> {
        plan.notes
            .iter()
            .filter(|n| n.step == step)
            .map(|n| n.detail.as_str())
            .collect()
    }

    #[test]
    fn bash_runs_the_callers_command_as_data() {
        let runtime = element(
            "rye/core/runtimes/bash/bash",
            "/sys/.ai/tools/rye/core/runtimes/bash/bash.yaml",
            json!({"config": {"command": "/bin/bash", "args": ["-c", "{command}", "{tool_path}", "{project_path}"], "input_data": "{params_json}", "timeout": 300}}),
        );
        let tool = element(
            "rye/bash/bash",
            "/sys/.ai/tools/rye/bash/bash.yaml",
            json!({"executor_id": "rye/core/runtimes/bash/bash"}),
        );
        let params = json!({"command": "echo ${HOME} {tool_path} $(id)"});
        let plan = process(
            &input(vec![tool, runtime, primitive()], params.clone()),
            &Fake::default(),
        )
        .unwrap();
        assert_eq!(plan.command, "/bin/bash");
        assert_eq!(
            plan.args,
            [
                "-c",
                "echo ${HOME} {tool_path} $(id)",
                "/sys/.ai/tools/rye/bash/bash.yaml",
                "/proj"
            ]
        );
        assert_eq!(plan.stdin.as_deref(), Some(params.to_string().as_bytes()));
        assert_eq!(plan.timeout_ms, Some(300_000));
        assert_eq!(plan.cwd.as_deref(), Some("/proj"));
    }

    #[test]
    fn the_tools_env_wins_over_its_runtimes() {
        let runtime = element(
            "rt",
            "/sys/rt.yaml",
            json!({"env_config": {"env": {"MODE": "runtime", "BASE": "${HOME:-/none}/x"}}, "config": {"command": "run"}}),
        );
        let tool = element(
            "t",
            "/proj/.ai/tools/t.py",
            json!({"env_config": {"env": {"MODE": "tool", "DERIVED": "${BASE}/y"}}}),
        );
        let fake = Fake {
            env: vec![
                ("HOME".into(), "/home/me".into()),
                ("MODE".into(), "os".into()),
            ],
            ..Fake::default()
        };
        let plan = process(&input(vec![tool, runtime, primitive()], json!({})), &fake).unwrap();
        let env = env_of(&plan);
        assert_eq!(env["MODE"], "tool");
        assert_eq!(env["BASE"], "/home/me/x");
        assert_eq!(env["DERIVED"], "/home/me/x/y");
        let contributions = note(&plan, "resolve_env");
        assert_eq!(contributions.len(), 2);
        assert!(
            contributions[0].contains("\"rt\""),
            "runtime first: {contributions:?}"
        );
    }

    #[test]
    fn interpreters_local_system_command_and_fallback() {
        let local = json!({"env_config": {"interpreter": {"type": "local_binary", "binary": "python", "candidates": ["python3"], "search_paths": [".venv/bin"], "var": "RYE_PYTHON", "fallback": "python3"}}, "config": {"command": "${RYE_PYTHON}"}});
        let run = |metadata: Value, fake: &Fake| {
            process(
                &input(
                    vec![
                        element("t", "/proj/t.py", json!({})),
                        element("rt", "/sys/rt.yaml", metadata),
                        primitive(),
                    ],
                    json!({}),
                ),
                fake,
            )
        };

        let mut fake = Fake::default();
        fake.files
            .insert("/proj/.venv/bin/python3".into(), String::new());
        assert_eq!(
            run(local.clone(), &fake).unwrap().command,
            "/proj/.venv/bin/python3"
        );
        assert_eq!(
            run(local.clone(), &Fake::default()).unwrap().command,
            "python3",
            "the fallback"
        );

        let system = json!({"env_config": {"interpreter": {"type": "system_binary", "binary": "ruby", "var": "RYE_RUBY"}}, "config": {"command": "${RYE_RUBY}"}});
        let mut fake = Fake::default();
        fake.on_path.insert("ruby".into());
        assert_eq!(run(system.clone(), &fake).unwrap().command, "/usr/bin/ruby");
        let missing = run(system, &Fake::default()).unwrap_err();
        assert!(
            matches!(&missing, PlanError::InterpreterNotFound(e) if e.item_id == "rt" && e.message.contains("ruby on PATH")),
            "{missing:?}"
        );

        let command = json!({"env_config": {"interpreter": {"type": "command", "resolve_cmd": ["pyenv", "which", "python"], "var": "PY"}}, "config": {"command": "${PY}"}});
        let fake = Fake {
            command_output: Some(Ok("/opt/py/bin/python\n".into())),
            ..Fake::default()
        };
        assert_eq!(run(command, &fake).unwrap().command, "/opt/py/bin/python");
    }

    #[test]
    fn an_active_anchor_sets_paths_and_cwd() {
        let runtime = element(
            "node",
            "/sys/.ai/tools/rye/core/runtimes/node/node.yaml",
            json!({
                "anchor": {"enabled": true, "mode": "auto", "markers_any": ["package.json"], "root": "tool_dir", "lib": "lib/node", "cwd": "{anchor_path}",
                           "env_paths": {"NODE_PATH": {"prepend": ["{anchor_path}", "{anchor_path}/node_modules"]}, "PATH": {"prepend": ["{anchor_path}/node_modules/.bin"], "append": ["/extra"]}}},
                "config": {"command": "node", "args": ["{tool_path}"]}
            }),
        );
        let tool = element("web/fetch", "/proj/.ai/tools/web/fetch.js", json!({}));
        let mut fake = Fake {
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            ..Fake::default()
        };
        let chain = || vec![tool.clone(), runtime.clone(), primitive()];

        let unanchored = process(&input(chain(), json!({})), &fake).unwrap();
        assert_eq!(unanchored.cwd.as_deref(), Some("/proj"));
        assert_eq!(env_of(&unanchored)["PATH"], "/usr/bin:/bin");

        fake.files
            .insert("/proj/.ai/tools/web/package.json".into(), "{}".into());
        let anchored = process(&input(chain(), json!({})), &fake).unwrap();
        assert_eq!(anchored.cwd.as_deref(), Some("/proj/.ai/tools/web"));
        let env = env_of(&anchored);
        assert_eq!(
            env["NODE_PATH"],
            "/proj/.ai/tools/web:/proj/.ai/tools/web/node_modules"
        );
        assert_eq!(
            env["PATH"],
            "/proj/.ai/tools/web/node_modules/.bin:/usr/bin:/bin:/extra"
        );
    }

    #[test]
    fn dotenv_and_config_resolve() {
        let mut fake = Fake::default();
        fake.files.insert(
            "/proj/.env".into(),
            "# comment\nexport TOKEN=\"abc def\"\nPLAIN=1\n".into(),
        );
        fake.configs.insert(
            ("system".into(), "web/web.yaml".into()),
            "limits: {rps: 5, burst: 10}\nname: sys\n".into(),
        );
        fake.configs.insert(
            ("project".into(), "web/web.yaml".into()),
            "limits: {rps: 50}\nextends: x\n".into(),
        );
        let tool = element(
            "t",
            "/proj/.ai/tools/t.py",
            json!({"config_resolve": {"path": "web/web.yaml", "mode": "deep_merge"}, "config": {"command": "run", "input_data": "{params_json}"}}),
        );
        let plan = process(&input(vec![tool, primitive()], json!({"q": 1})), &fake).unwrap();
        let env = env_of(&plan);
        assert_eq!(env["TOKEN"], "abc def");
        assert_eq!(env["PLAIN"], "1");
        let stdin: Value = rye_guest::serde_json::from_slice(plan.stdin.as_ref().unwrap()).unwrap();
        assert_eq!(
            stdin,
            json!({"q": 1, "resolved_config": {"limits": {"rps": 50, "burst": 10}, "name": "sys"}})
        );
    }

    #[test]
    fn bad_configuration_names_the_element() {
        let tool = element("t", "/t.py", json!({}));
        let runtime = element("rt", "/rt.yaml", json!({"config": {"args": ["x"]}}));
        let error = process(
            &input(vec![tool.clone(), runtime, primitive()], json!({})),
            &Fake::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&error, PlanError::Config(e) if e.message.contains("config.command")),
            "{error:?}"
        );
        let runtime = element(
            "rt",
            "/rt.yaml",
            json!({"config": {"command": "x", "timeout": "soon"}}),
        );
        let error = process(
            &input(vec![tool, runtime, primitive()], json!({})),
            &Fake::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&error, PlanError::Config(e) if e.item_id == "rye/core/primitives/execute" && e.message.contains("soon")),
            "{error:?}"
        );
    }
}
