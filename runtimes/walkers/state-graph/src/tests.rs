//! The walker driven as the host drives it, with actions answered here.

use rye_guest::serde_json::{Value, json};
use rye_guest::walker::{Action, Clock, Next, Outcome, WalkInput};

use crate::walk::{Run, unwrap};

fn input(graph: Value, parameters: Value) -> WalkInput {
    WalkInput {
        graph_id: "demo/g".into(),
        graph: graph.to_string(),
        defaults: json!({"max_steps": 100}).to_string(),
        parameters: parameters.to_string(),
        run_id: "demo-g-1".into(),
        env_names: vec!["HOME".into()],
    }
}

fn clock() -> Clock {
    Clock {
        epoch_ms: 1_700_000_000_000,
        iso: "2023-11-14T22:13:20.000000+00:00".into(),
    }
}

/// A run to its end: each dispatch answered by `answer` (an execution's
/// result envelope); returns the result and every action asked for.
fn walk(
    graph: Value,
    parameters: Value,
    answer: impl Fn(&Action) -> Value,
) -> (Value, Vec<Action>) {
    let (mut run, mut outcome) = Run::start(&input(graph, parameters), &clock()).unwrap();
    let mut asked = Vec::new();
    for _ in 0..1000 {
        let results = match outcome.next {
            Next::Finished(result) | Next::Waiting(result) => {
                return (serde_json::from_str(&result).unwrap(), asked);
            }
            Next::Proceed => Vec::new(),
            Next::Dispatch(dispatch) => {
                let results = dispatch
                    .actions
                    .iter()
                    .map(|a| answer(a).to_string())
                    .collect();
                asked.extend(dispatch.actions);
                results
            }
        };
        outcome = run.advance(results, &clock()).unwrap();
    }
    panic!("the walk did not end");
}

use rye_guest::serde_json;

fn ok(data: Value) -> Value {
    json!({"status": "success", "type": "tool", "item_id": "x", "data": data,
           "chain": [], "metadata": {"duration_ms": 1}})
}

fn graph(nodes: Value) -> Value {
    json!({"permissions": ["rye.execute.tool.*"], "config": {"start": "a", "nodes": nodes}})
}

#[test]
fn the_specs_example_branches_on_the_count() {
    let graph = json!({
        "permissions": ["rye.execute.tool.rye.bash.*"],
        "config_schema": {"type": "object", "properties": {"path": {"type": "string", "default": "README.md"}}},
        "config": {"start": "count", "max_steps": 5, "nodes": {
            "count": {"action": {"primary": "execute", "kind": "tool", "item_id": "rye/bash/bash",
                                 "params": {"command": "wc -l < ${inputs.path}"}},
                      "assign": {"lines": "${result.stdout}"}, "on_error": "failed",
                      "next": [{"to": "big", "when": {"path": "state.lines", "op": "regex", "value": "^[0-9]{3,}"}},
                               {"to": "small"}]},
            "big": {"type": "return", "output": {"size": "big", "lines": "${state.lines}"}},
            "small": {"type": "return", "output": {"size": "small"}},
            "failed": {"type": "return", "output": {"error": "${state._last_error.error}"}}
        }}
    });
    let (result, asked) = walk(graph.clone(), json!({}), |_| {
        ok(json!({"stdout": "1234\n"}))
    });
    assert_eq!(
        asked[0].params,
        json!({"command": "wc -l < README.md"}).to_string()
    );
    assert_eq!(asked[0].kind, "tool");
    assert_eq!(result["success"], true);
    assert_eq!(result["status"], "completed");
    assert_eq!(result["output"], json!({"size": "big", "lines": "1234\n"}));
    assert_eq!(result["steps"], 2);
    assert_eq!(result["graph_run_id"], "demo-g-1");

    let (small, _) = walk(graph.clone(), json!({"path": "x"}), |_| {
        ok(json!({"stdout": "7\n"}))
    });
    assert_eq!(small["output"], json!({"size": "small"}));

    let failing = |_: &Action| json!({"status": "error", "error": "no such file", "data": null});
    let (failed, _) = walk(graph, json!({}), failing);
    assert_eq!(failed["success"], true);
    assert_eq!(failed["output"], json!({"error": "no such file"}));
}

#[test]
fn a_gate_assigns_and_moves_on_and_a_node_without_next_ends_the_run() {
    let (result, asked) = walk(
        graph(json!({
            "a": {"type": "gate", "assign": {"n": 1}, "next": "b"},
            "b": {"type": "gate", "assign": {"m": "${state.n}"}}
        })),
        json!({}),
        |_| unreachable!(),
    );
    assert!(asked.is_empty());
    assert_eq!(result["status"], "completed");
    assert_eq!(result["steps"], 2);
    assert_eq!(result["state"]["m"], 1);
}

#[test]
fn max_steps_stops_a_loop() {
    let mut g = graph(json!({"a": {"type": "gate", "next": "a"}}));
    g["config"]["max_steps"] = json!(7);
    let (result, _) = walk(g, json!({}), |_| unreachable!());
    assert_eq!(result["success"], false);
    assert_eq!(result["error"], "Max steps exceeded (7)");
    assert_eq!(result["steps"], 7);
    // A return start node with max_steps 1 ends well.
    let mut one = graph(json!({"a": {"type": "return"}}));
    one["config"]["max_steps"] = json!(1);
    assert_eq!(walk(one, json!({}), |_| unreachable!()).0["success"], true);
}

#[test]
fn errors_fail_the_graph_or_are_suppressed() {
    let nodes = json!({
        "a": {"action": {"kind": "tool", "item_id": "t/x"}, "assign": {"got": "${result.v}"}, "next": "b"},
        "b": {"type": "return", "output": {"got": "${state.got}"}}
    });
    let failing = |_: &Action| json!({"status": "error", "error": "boom"});
    let (failed, _) = walk(graph(nodes.clone()), json!({}), failing);
    assert_eq!(failed["success"], false);
    assert_eq!(failed["error"], "boom");
    assert_eq!(failed["node"], "a");
    assert_eq!(
        failed["state"]["_last_error"],
        json!({"node": "a", "error": "boom"})
    );

    let mut lenient = graph(nodes);
    lenient["config"]["on_error"] = json!("continue");
    let (went_on, _) = walk(lenient, json!({}), failing);
    assert_eq!(went_on["status"], "completed_with_errors");
    assert_eq!(went_on["errors_suppressed"], 1);
    assert_eq!(went_on["output"]["got"], Value::Null, "assign was skipped");

    // `success: false` inside the data is an error too.
    let (inner, _) = walk(
        graph(
            json!({"a": {"action": {"kind": "tool", "item_id": "t/x"}, "next": "b"},
                     "b": {"type": "return"}}),
        ),
        json!({}),
        |_| ok(json!({"success": false, "error": "said no"})),
    );
    assert_eq!(inner["error"], "said no");
}

#[test]
fn an_action_without_a_kind_is_the_nodes_error() {
    let (result, asked) = walk(
        graph(json!({"a": {"action": {"item_id": "t/x"}, "on_error": "b"},
                     "b": {"type": "return", "output": "${state._last_error.error}"}})),
        json!({}),
        |_| unreachable!(),
    );
    assert!(asked.is_empty());
    assert!(
        result["output"].as_str().unwrap().contains("gives no kind"),
        "{result}"
    );
    // A canonical ref names the kind.
    let (_, asked) = walk(
        graph(json!({"a": {"action": {"item_id": "knowledge:k/one", "primary": "load"}}})),
        json!({}),
        |_| ok(json!({})),
    );
    assert_eq!(
        (asked[0].kind.as_str(), asked[0].item_id.as_str()),
        ("knowledge", "k/one")
    );
}

#[test]
fn foreach_in_order_and_in_parallel() {
    let nodes = |parallel: bool| {
        json!({
            "a": {"type": "gate", "assign": {"seen": 0}, "next": "b"},
            "b": {"type": "foreach", "over": "${inputs.files}", "as": "f", "parallel": parallel,
                  "max_concurrency": 2, "collect": "outs",
                  "action": {"kind": "tool", "item_id": "t/x", "params": {"file": "${f}", "seen": "${state.seen}"}},
                  "next": "c"},
            "c": {"type": "return", "output": {"outs": "${state.outs}", "f": "${state.f}"}}
        })
    };
    let answer = |a: &Action| {
        let params: Value = serde_json::from_str(&a.params).unwrap();
        if params["file"] == "bad" {
            json!({"status": "error", "error": "bad file"})
        } else {
            ok(json!({"len": params["file"].as_str().unwrap().len(), "seen": params["seen"]}))
        }
    };
    let files = json!({"files": ["a", "bb", "bad"]});
    let (ordered, asked) = walk(graph(nodes(false)), files.clone(), answer);
    assert_eq!(asked.len(), 3);
    assert_eq!(ordered["output"]["outs"][0], json!({"len": 1, "seen": 0}));
    assert_eq!(
        ordered["output"]["outs"][2]["status"], "error",
        "an item's error is collected"
    );
    assert_eq!(
        ordered["output"]["f"],
        Value::Null,
        "the loop variable is gone after"
    );
    assert_eq!(ordered["status"], "completed");

    let (parallel, _) = walk(graph(nodes(true)), files, answer);
    // In parallel an item does not see the state.
    assert_eq!(
        parallel["output"]["outs"][1],
        json!({"len": 2, "seen": null})
    );
    // A JSON string is a list too; an empty list runs nothing.
    let (empty, asked) = walk(graph(nodes(false)), json!({"files": "[]"}), answer);
    assert!(asked.is_empty());
    assert_eq!(empty["output"]["outs"], json!([]));
}

#[test]
fn inputs_are_checked_and_defaulted() {
    let mut g = graph(json!({"a": {"type": "return", "output": "${inputs.who}"}}));
    g["config_schema"] =
        json!({"properties": {"who": {"default": "ada"}, "what": {}}, "required": ["what"]});
    let err = Run::start(&input(g.clone(), json!({})), &clock())
        .err()
        .unwrap();
    assert!(err.contains("required inputs are missing: what"), "{err}");
    let (result, _) = walk(g, json!({"what": 1}), |_| unreachable!());
    assert_eq!(result["output"], "ada");

    let mut needs_env = graph(json!({"a": {"type": "return"}}));
    needs_env["env_requires"] = json!(["HOME", "NOT_SET_ANYWHERE"]);
    let err = Run::start(&input(needs_env, json!({})), &clock())
        .err()
        .unwrap();
    assert!(
        err.contains("NOT_SET_ANYWHERE") && !err.contains("HOME"),
        "{err}"
    );

    let no_permissions = json!({"config": {"start": "a", "nodes": {"a": {"type": "return"}}}});
    let err = Run::start(&input(no_permissions, json!({})), &clock())
        .err()
        .unwrap();
    assert!(err.contains("permissions"), "{err}");
}

#[test]
fn unmatched_edges_and_missing_nodes_are_errors_naming_the_node() {
    let (result, _) = walk(
        graph(
            json!({"a": {"type": "gate", "next": [{"to": "b", "when": {"path": "state.x", "op": "exists"}}]},
                     "b": {"type": "return"}}),
        ),
        json!({}),
        |_| unreachable!(),
    );
    assert_eq!(result["error"], "no edge of node \"a\" matched");
    let (result, _) = walk(
        graph(json!({"a": {"type": "gate", "next": "zz"}})),
        json!({}),
        |_| unreachable!(),
    );
    assert_eq!(result["error"], "Node 'zz' not found in graph");
}

/// Every outcome, stored as the host stores it, resumes to the same end.
#[test]
fn a_run_resumed_from_any_outcome_ends_as_an_uninterrupted_one() {
    let g = graph(json!({
        "a": {"type": "gate", "assign": {"n": 0}, "next": "b"},
        "b": {"action": {"kind": "tool", "item_id": "t/inc", "params": {"n": "${state.n}"}},
              "assign": {"n": "${result.n}"}, "next": "c"},
        "c": {"type": "foreach", "over": [1, 2, 3], "collect": "xs",
              "action": {"kind": "tool", "item_id": "t/inc", "params": {"n": "${item}"}}, "next": "d"},
        "d": {"type": "gate", "next": [{"to": "b", "when": {"path": "state.n", "op": "lt", "value": 3}}, {"to": "e"}]},
        "e": {"type": "return", "output": {"n": "${state.n}", "xs": "${state.xs}"}}
    }));
    let answer = |a: &Action| {
        let params: Value = serde_json::from_str(&a.params).unwrap();
        ok(json!({"n": params["n"].as_i64().unwrap_or(0) + 1}))
    };
    let whole = resumes_alike(g.clone(), answer);
    assert_eq!(
        whole["output"],
        json!({"n": 3, "xs": [{"n": 2}, {"n": 3}, {"n": 4}]})
    );

    // With hooks on every event, each a dispatch of its own.
    let mut hooked = g;
    hooked["config"]["hooks"] = json!([
        {"event": "graph_started", "action": {"kind": "tool", "item_id": "t/hook", "params": {}}},
        {"event": "after_step", "condition": {"path": "node", "value": "b"},
         "action": {"kind": "tool", "item_id": "t/hook", "params": {"n": "${state.n}"}}},
        {"event": "graph_completed", "action": {"kind": "tool", "item_id": "t/hook", "params": {}}}
    ]);
    let (result, asked) = walk(hooked.clone(), json!({}), answer);
    let hooks: Vec<&str> = asked
        .iter()
        .filter(|a| a.item_id == "t/hook")
        .map(|a| a.node.as_str())
        .collect();
    assert_eq!(
        hooks,
        [
            "hook:graph_started",
            "hook:after_step",
            "hook:after_step",
            "hook:after_step",
            "hook:graph_completed"
        ]
    );
    assert_eq!(result["output"], whole["output"]);
    assert_eq!(resumes_alike(hooked, answer)["output"], whole["output"]);
}

/// Walks `g` whole, then again from each outcome stored as the host
/// stores it, resumed as a fresh instance would; each ends as the whole
/// walk did, whose result this is.
fn resumes_alike(g: Value, answer: impl Fn(&Action) -> Value) -> Value {
    let (whole, _) = walk(g.clone(), json!({}), &answer);
    let walk_input = input(g, json!({}));
    let (mut run, first) = Run::start(&walk_input, &clock()).unwrap();
    let mut stored: Vec<(std::collections::BTreeMap<String, String>, String)> = Vec::new();
    let mut state = std::collections::BTreeMap::new();
    let mut keep = |outcome: &Outcome, state: &mut std::collections::BTreeMap<String, String>| {
        for change in &outcome.changes {
            match &change.value {
                Some(v) => state.insert(change.key.clone(), v.clone()),
                None => state.remove(&change.key),
            };
        }
        stored.push((state.clone(), outcome.cursor.clone()));
    };
    keep(&first, &mut state);
    let mut outcome = first;
    loop {
        let results = match &outcome.next {
            Next::Finished(_) | Next::Waiting(_) => break,
            Next::Proceed => Vec::new(),
            Next::Dispatch(d) => d.actions.iter().map(|a| answer(a).to_string()).collect(),
        };
        outcome = run.advance(results, &clock()).unwrap();
        keep(&outcome, &mut state);
    }
    for (i, (state, cursor)) in stored.iter().enumerate().take(stored.len() - 1) {
        let (mut resumed, mut outcome) = Run::resume(
            &walk_input,
            state.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            cursor,
            "null",
            &clock(),
        )
        .unwrap();
        let end = loop {
            let results = match outcome.next {
                Next::Finished(result) | Next::Waiting(result) => {
                    break serde_json::from_str::<Value>(&result).unwrap();
                }
                Next::Proceed => Vec::new(),
                Next::Dispatch(d) => d.actions.iter().map(|a| answer(a).to_string()).collect(),
            };
            outcome = resumed.advance(results, &clock()).unwrap();
        };
        assert_eq!(end["output"], whole["output"], "resumed from outcome {i}");
        assert_eq!(end["steps"], whole["steps"], "resumed from outcome {i}");
    }
    whole
}

#[test]
fn unwrap_takes_the_data_less_the_envelope() {
    let unwrapped =
        unwrap(&json!({"status": "success", "data": {"a": 1, "metadata": {}, "chain": []}}));
    assert_eq!(unwrapped, json!({"a": 1}));
    let failed = unwrap(&json!({"status": "error", "error": "x", "data": "text"}));
    assert_eq!(failed["status"], "error");
    assert_eq!(failed["error"], "x");
}

#[test]
fn analysis_reports_errors_and_warnings() {
    let report = crate::analyze::analyze(&json!({
        "config": {"start": "a", "state": {"unused": 1}, "nodes": {
            "a": {"type": "gate", "next": "nowhere", "colour": "red", "assign": {"x": "${state.never}"}},
            "b": {"type": "foreach", "action": {"kind": "tool", "item_id": "t", "async": true}},
            "c": {"type": "return", "output": "${state.x}"}
        }}
    }));
    let errors = report["errors"].to_string();
    let warnings = report["warnings"].to_string();
    assert_eq!(report["success"], false);
    assert!(errors.contains("permissions"), "{errors}");
    assert!(errors.contains("nowhere"), "{errors}");
    assert!(errors.contains("has no over"), "{errors}");
    assert!(errors.contains("async"), "{errors}");
    assert!(warnings.contains("colour"), "{warnings}");
    assert!(
        warnings.contains("state.never is read but never assigned"),
        "{warnings}"
    );
    assert!(
        warnings.contains("state.unused is assigned but never read"),
        "{warnings}"
    );
    assert!(warnings.contains("\\\"b\\\" is unreachable"), "{warnings}");
    assert_eq!(report["node_count"], 3);
}

fn outcome_json(outcome: &Outcome) -> Value {
    match &outcome.next {
        Next::Finished(r) | Next::Waiting(r) => serde_json::from_str(r).unwrap(),
        other => panic!("the run neither ended nor waits: {other:?}"),
    }
}

fn stored(outcome: &Outcome) -> Vec<(String, String)> {
    outcome
        .changes
        .iter()
        .filter_map(|c| Some((c.key.clone(), c.value.clone()?)))
        .collect()
}

#[test]
fn an_interrupt_waits_for_inputs_and_goes_on_with_them() {
    let g = graph(json!({
        "a": {"type": "gate", "assign": {"version": "1.2"}, "next": "ask"},
        "ask": {"type": "interrupt", "prompt": "Deploy ${state.version}?", "required": ["approved"],
                "assign": {"approved": "${result.approved}", "by": "${result.by}"},
                "next": [{"to": "yes", "when": {"path": "result.approved", "value": true}}, {"to": "no"}]},
        "yes": {"type": "return", "output": {"deployed": "${state.version}", "by": "${state.by}"}},
        "no": {"type": "return", "output": {"deployed": false}}
    }));
    let walk_input = input(g, json!({}));
    let (mut run, mut outcome) = Run::start(&walk_input, &clock()).unwrap();
    let mut state = stored(&outcome);
    while matches!(outcome.next, Next::Proceed) {
        outcome = run.advance(Vec::new(), &clock()).unwrap();
        state.extend(stored(&outcome));
    }
    let told = outcome_json(&outcome);
    assert_eq!(told["status"], "waiting");
    assert_eq!(told["node"], "ask");
    assert_eq!(told["prompt"], "Deploy 1.2?");
    assert_eq!(told["required"], json!(["approved"]));
    let error = run.advance(Vec::new(), &clock()).unwrap_err();
    assert!(error.contains("waits for input"), "{error}");

    let cursor = outcome.cursor.clone();
    let resume = |inputs: &str| Run::resume(&walk_input, state.clone(), &cursor, inputs, &clock());
    let error = resume("null").err().unwrap();
    assert!(error.contains("resume it with inputs"), "{error}");
    let error = resume("{\"by\": \"ann\"}").err().unwrap();
    assert!(error.contains("needs inputs approved"), "{error}");
    let error = resume("[1]").err().unwrap();
    assert!(error.contains("not a JSON object"), "{error}");

    let (mut resumed, mut outcome) = resume(r#"{"approved": true, "by": "ann"}"#).unwrap();
    while matches!(outcome.next, Next::Proceed) {
        outcome = resumed.advance(Vec::new(), &clock()).unwrap();
    }
    let ended = outcome_json(&outcome);
    assert_eq!(ended["output"], json!({"deployed": "1.2", "by": "ann"}));
    assert_eq!(ended["steps"], 3);
    let (mut other, mut outcome) = resume(r#"{"approved": false}"#).unwrap();
    while matches!(outcome.next, Next::Proceed) {
        outcome = other.advance(Vec::new(), &clock()).unwrap();
    }
    assert_eq!(outcome_json(&outcome)["output"], json!({"deployed": false}));
}

#[test]
fn a_run_that_is_not_waiting_refuses_inputs() {
    let g = graph(json!({"a": {"action": {"kind": "tool", "item_id": "t/x"}}}));
    let walk_input = input(g, json!({}));
    let (_, outcome) = Run::start(&walk_input, &clock()).unwrap();
    let error = Run::resume(
        &walk_input,
        stored(&outcome),
        &outcome.cursor,
        "{\"x\": 1}",
        &clock(),
    )
    .err()
    .unwrap();
    assert!(error.contains("not waiting for inputs"), "{error}");
}

#[test]
fn an_error_hook_asks_for_the_node_again_as_often_as_it_says() {
    let tries = std::cell::Cell::new(0);
    let hook = json!([{"event": "error", "condition": {"path": "node", "value": "a"},
                       "action": {"kind": "tool", "item_id": "t/policy", "params": {"error": "${error}"}}}]);
    let answer = |failing_for: u32, most: u32| {
        let tries = &tries;
        move |a: &Action| match a.item_id.as_str() {
            "t/flaky" => {
                tries.set(tries.get() + 1);
                if tries.get() <= failing_for {
                    json!({"status": "error", "error": format!("try {}", tries.get())})
                } else {
                    ok(json!({"ok": tries.get()}))
                }
            }
            "t/policy" => ok(json!({"action": "retry", "max_retries": most})),
            other => panic!("{other}"),
        }
    };
    let mut g = graph(json!({
        "a": {"action": {"kind": "tool", "item_id": "t/flaky"}, "assign": {"ok": "${result.ok}"},
              "on_error": "gave_up", "next": "done"},
        "done": {"type": "return", "output": {"ok": "${state.ok}", "retries": "${state._retries.a}"}},
        "gave_up": {"type": "return", "output": {"error": "${state._last_error.error}"}}
    }));
    g["config"]["hooks"] = hook;
    let (result, asked) = walk(g.clone(), json!({}), answer(2, 3));
    assert_eq!(result["output"], json!({"ok": 3, "retries": 2}));
    assert_eq!(result["steps"], 2, "a retried step is counted once");
    assert_eq!(asked.iter().filter(|a| a.item_id == "t/policy").count(), 2);
    assert_eq!(
        asked
            .iter()
            .find(|a| a.item_id == "t/policy")
            .unwrap()
            .params,
        r#"{"error":"try 1"}"#
    );

    tries.set(0);
    let (result, _) = walk(g.clone(), json!({}), answer(5, 2));
    assert_eq!(
        result["output"],
        json!({"error": "try 3"}),
        "two retries, then on_error"
    );

    // A hook that says nothing of retrying leaves the error as it was.
    tries.set(0);
    let quiet = |a: &Action| match a.item_id.as_str() {
        "t/flaky" => json!({"status": "error", "error": "no"}),
        _ => ok(json!({"noted": true})),
    };
    let (result, _) = walk(g, json!({}), quiet);
    assert_eq!(result["output"], json!({"error": "no"}));
}

#[test]
fn limit_hooks_run_before_a_run_stops_at_max_steps() {
    let mut g = graph(json!({"a": {"type": "gate", "next": "a"}}));
    g["config"]["max_steps"] = json!(4);
    g["config"]["hooks"] = json!([
        {"event": "limit", "action": {"kind": "tool", "item_id": "t/alarm", "params": {"at": "${step_count}", "of": "${max_steps}"}}},
        {"event": "after_step", "condition": {"path": "step_count", "op": "gt", "value": 99},
         "action": {"kind": "tool", "item_id": "t/never"}}
    ]);
    let (result, asked) = walk(g, json!({}), |_| ok(json!({})));
    assert_eq!(result["error"], "Max steps exceeded (4)");
    let names: Vec<(&str, &str)> = asked
        .iter()
        .map(|a| (a.item_id.as_str(), a.params.as_str()))
        .collect();
    assert_eq!(names, [("t/alarm", r#"{"at":4,"of":4}"#)]);
}

#[test]
fn tolerated_failures_bound_a_foreach() {
    let fails = |a: &Action| {
        let params: Value = serde_json::from_str(&a.params).unwrap();
        if params["n"].as_i64().unwrap() % 2 == 0 {
            json!({"status": "error", "error": "even"})
        } else {
            ok(json!({"n": params["n"]}))
        }
    };
    let g = |tolerated: Value, parallel: bool| {
        graph(json!({
            "a": {"type": "foreach", "over": [1, 2, 3, 4, 5, 6], "collect": "xs", "parallel": parallel,
                  "tolerated_failures": tolerated,
                  "action": {"kind": "tool", "item_id": "t/x", "params": {"n": "${item}"}},
                  "on_error": "failed", "next": "done"},
            "done": {"type": "return", "output": {"xs": "${state.xs}"}},
            "failed": {"type": "return", "output": {"error": "${state._last_error.error}", "taken": "${state.xs|length}"}}
        }))
    };
    // In order: the second failure (item 4) is one too many; 5 and 6 are
    // never asked for.
    let (result, asked) = walk(g(json!(1), false), json!({}), fails);
    assert_eq!(asked.len(), 4);
    assert_eq!(
        result["output"],
        json!({"error": "2 of the 6 items of foreach node \"a\" failed, more than the 1 it tolerates", "taken": 4})
    );
    let (result, _) = walk(g(json!(3), false), json!({}), fails);
    assert_eq!(result["output"]["xs"].as_array().unwrap().len(), 6);
    // In parallel: the host is told the bound (50% of 6 is 3).
    let walk_input = input(g(json!("50%"), true), json!({}));
    let (mut run, _) = Run::start(&walk_input, &clock()).unwrap();
    let Next::Dispatch(dispatch) = run.advance(Vec::new(), &clock()).unwrap().next else {
        panic!("no dispatch")
    };
    assert_eq!(dispatch.stop_after_failures, Some(3));
    let (result, _) = walk(g(json!("20%"), true), json!({}), fails);
    assert!(
        result["output"]["error"]
            .as_str()
            .unwrap()
            .contains("more than the 1"),
        "{result}"
    );
    let (result, _) = walk(g(json!("lots"), true), json!({}), fails);
    assert!(
        result["output"]["error"]
            .as_str()
            .unwrap()
            .contains("neither a count nor a percentage"),
        "{result}"
    );
    let report = crate::analyze::analyze(&g(json!("150%"), false));
    assert!(
        report["errors"].to_string().contains("tolerated_failures"),
        "{report}"
    );
}

#[test]
fn single_step_mode_takes_one_node_and_shows_the_state() {
    let g = graph(json!({
        "a": {"type": "gate", "assign": {"n": 1}, "next": "b"},
        "b": {"action": {"kind": "tool", "item_id": "t/x", "params": {"n": "${state.n}"}},
              "assign": {"n": "${result.n}"}, "next": "c"},
        "c": {"type": "return", "output": {}}
    }));
    let (result, asked) = walk(g, json!({"node": "b", "inject_state": {"n": 41}}), |_| {
        ok(json!({"n": 42}))
    });
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].params, r#"{"n":41}"#);
    assert_eq!(result["success"], true);
    assert_eq!(result["executed_node"], "b");
    assert_eq!(result["next_node"], "c");
    assert_eq!(result["step_count"], 1);
    assert_eq!(result["state"]["n"], 42);
    let error = Run::start(
        &input(
            graph(json!({"a": {"type": "return"}})),
            json!({"node": "zz"}),
        ),
        &clock(),
    )
    .err()
    .unwrap();
    assert!(error.contains("\"zz\""), "{error}");
}

#[test]
fn analysis_knows_hooks_and_interrupts() {
    let mut g = graph(json!({"a": {"type": "interrupt", "prompt": "ok?", "required": ["x"]}}));
    g["config"]["hooks"] = json!([{"event": "after_step", "action": {"kind": "tool", "item_id": "t/x"}},
                                  {"event": "whenever", "action": {}}, {"event": "error"}]);
    let report = crate::analyze::analyze(&g);
    let errors = report["errors"].to_string();
    assert!(
        errors.contains("hook 1 runs on \\\"whenever\\\""),
        "{errors}"
    );
    assert!(errors.contains("hook 2 has no action"), "{errors}");
    assert!(!errors.contains("hook 0"), "{errors}");
    assert!(!errors.contains("interrupt"), "{errors}");
    assert_eq!(report["warnings"], json!([]), "{report}");
}
