# shellcheck shell=bash
# The training run that `.ci/pgo` and `.ci/link-order` share: the calls an
# agent makes, through `rye serve` — a component tool's execute with a
# ping after each, a tool on another MCP server (Rye itself), search and
# load. Sourced from the repository's root; `set -euo pipefail` is the
# caller's.
#
#   train_project RYE     a project for RYE in $train_dir (made here,
#                         removed on exit), its tool built and signed
#   train_start CMD…      starts CMD, a `rye serve`, in that project, and
#                         initializes the session
#   train_round           one round of calls (below); train_ping,
#                         train_execute, train_remote, train_search and
#                         train_load make one call of each kind
#   train_stop            closes the session and waits for the server,
#                         which writes what it counted as it exits

train_dir=$(mktemp -d)
trap 'rm -rf "$train_dir"' EXIT
train_project="$train_dir/project"

# The training's HOME, caches and keys are its own, in every call.
train_env() {
    env HOME="$train_dir/home" RYE_CACHE_DIR="$train_dir/cache" \
        RYE_CACHE_KEY="$train_dir/cache.key" RYE_LOG=error "$@"
}

train_project() {
    local rye="$1"
    cargo build --release --target wasm32-wasip2 --manifest-path examples/Cargo.toml \
        -p file-search --target-dir target/train-wasm
    mkdir -p "$train_dir/home" "$train_project/.ai/tools/examples" "$train_project/notes" \
        "$train_dir/inner/.ai"
    cp examples/file-search/.ai/tools/examples/file-search.yaml "$train_project/.ai/tools/examples/"
    cp target/train-wasm/wasm32-wasip2/release/file-search.wasm "$train_project/.ai/tools/examples/"
    printf '# Plan\nship the parser\nthen the walker\n' >"$train_project/notes/plan.md"
    (
        cd "$train_project"
        train_env "$rye" keys generate >/dev/null
        train_env "$rye" keys trust >/dev/null
        train_env "$rye" sign tool examples/file-search >/dev/null
        train_env "$rye" mcp add inner --env "RYE_CACHE_DIR=$train_dir/cache" \
            --env "RYE_CACHE_KEY=$train_dir/cache.key" \
            --stdio "$rye" --project "$train_dir/inner" serve >/dev/null
        train_env "$rye" mcp discover inner >/dev/null
    )
}

train_start() {
    coproc SERVE { cd "$train_project" && train_env "$@"; }
    train_id=0
    train_request initialize '{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"train","version":"1"}}'
    printf '{"jsonrpc":"2.0","method":"notifications/initialized"}\n' >&"${SERVE[1]}"
}

# One request, then its reply (lines without its id are notifications); a
# call that fails stops the training, as what it measured would be wrong.
train_request() {
    train_id=$((train_id + 1))
    printf '{"jsonrpc":"2.0","id":%d,"method":"%s","params":%s}\n' "$train_id" "$1" "$2" >&"${SERVE[1]}"
    local reply
    while IFS= read -r reply <&"${SERVE[0]}"; do
        case "$reply" in *"\"id\":$train_id,"* | *"\"id\":$train_id}"*) break ;; esac
    done
    case "$reply" in
    '{"jsonrpc":"2.0","id":'"$train_id"',"error"'* | *'"isError":true'*)
        echo "training call $1 $2 failed: $reply" >&2
        exit 1
        ;;
    esac
}

train_ping() { train_request ping '{}'; }
train_execute() {
    train_request tools/call "{\"name\":\"execute\",\"arguments\":{\"item_type\":\"tool\",\"item_id\":\"examples/file-search\",\"project_path\":\"$train_project\",\"parameters\":{\"query\":\"parser\"}}}"
}
train_remote() {
    train_request tools/call "{\"name\":\"execute\",\"arguments\":{\"item_type\":\"tool\",\"item_id\":\"mcp/inner/search\",\"project_path\":\"$train_project\",\"parameters\":{\"scope\":\"tool\",\"query\":\"bash\",\"project_path\":\"$train_dir/inner\"}}}"
}
train_search() {
    train_request tools/call "{\"name\":\"search\",\"arguments\":{\"scope\":\"tool\",\"query\":\"file search\",\"project_path\":\"$train_project\"}}"
}
train_load() {
    train_request tools/call "{\"name\":\"load\",\"arguments\":{\"item_type\":\"tool\",\"item_id\":\"examples/file-search\",\"project_path\":\"$train_project\"}}"
}

# Five executes, each followed by a ping, a call to the other server, a
# search and a load.
train_round() {
    for _ in 1 2 3 4 5; do
        train_execute
        train_ping
    done
    train_remote
    train_search
    train_load
}

train_stop() {
    exec {SERVE[1]}>&-
    wait "$SERVE_PID"
}
