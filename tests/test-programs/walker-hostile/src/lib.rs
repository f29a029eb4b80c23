use rye_guest::serde_json::{Value, json};
use rye_guest::walker::{Action, Clock, Dispatch, GraphWalker, Next, Outcome, WalkInput};

struct Hostile;

fn outcome(next: Next) -> Outcome {
    Outcome {
        changes: Vec::new(),
        cursor: json!({}).to_string(),
        node: Some("a".into()),
        steps: 1,
        events: Vec::new(),
        next,
    }
}

fn action(item_id: &str, params: Value) -> Action {
    Action {
        primary: "execute".into(),
        kind: "tool".into(),
        item_id: item_id.into(),
        params: params.to_string(),
        node: "a".into(),
        cacheable: false,
    }
}

/// What the graph's id (its last segment) asks this walker to do.
fn misbehave(input: &WalkInput) -> Result<Outcome, String> {
    let how = input.graph_id.rsplit('/').next().unwrap_or_default();
    let parameters: Value =
        rye_guest::serde_json::from_str(&input.parameters).unwrap_or(Value::Null);
    match how {
        "loop" => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        "memory" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![7; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        "panic" => panic!("the walker gave up"),
        "garbage" => {
            let mut bad = outcome(Next::Proceed);
            bad.cursor = "{not json".into();
            Ok(bad)
        }
        "flood" => Ok(outcome(Next::Dispatch(Dispatch {
            actions: (0..20_000)
                .map(|_| action("rye/bash/bash", json!({})))
                .collect(),
            concurrency: 1_000_000,
            stop_after_failures: None,
        }))),
        // Asks for the command the caller passed, whatever the graph's
        // permissions say.
        "escalate" => Ok(outcome(Next::Dispatch(Dispatch {
            actions: vec![action(
                "rye/bash/bash",
                json!({"command": parameters["command"]}),
            )],
            concurrency: 1,
            stop_after_failures: None,
        }))),
        other => Err(format!("no misbehaviour called {other:?}")),
    }
}

impl GraphWalker for Hostile {
    fn start(input: WalkInput, _now: Clock) -> Result<Outcome, String> {
        misbehave(&input)
    }

    fn resume(
        input: WalkInput,
        _state: Vec<(String, String)>,
        _cursor: String,
        _inputs: String,
        _now: Clock,
    ) -> Result<Outcome, String> {
        misbehave(&input)
    }

    fn advance(results: Vec<String>, _now: Clock) -> Result<Outcome, String> {
        // Whatever came back is the run's result.
        let result = results.first().cloned().unwrap_or_else(|| "null".into());
        Ok(outcome(Next::Finished(
            json!({"success": true, "status": "completed", "output": rye_guest::serde_json::from_str::<Value>(&result).unwrap_or(Value::Null)}).to_string(),
        )))
    }

    fn analyze(_input: WalkInput) -> String {
        "[not an object]".into()
    }
}

rye_guest::export_walker!(Hostile);
