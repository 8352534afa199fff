#!/usr/bin/env bash
# agent_replay.sh [-m MODEL.gguf] [--ft BIN] [--turns N] [--system TOKENS] [--target TOKENS]
#                 [--apis "messages chat"] [--max-tokens N] [-- ft serve options...]
# The scripted agent conversation of agent_replay.py through ft serve with its prefix cache and
# again with --no-prefix-cache (a fresh server each, same options), through each API: prints
# every turn's TTFT both ways and their ratio, and each replay's wall time both ways. Without
# -m, the demo model. The JSON lines of every run go to ${OUT:-/tmp/agent_replay}.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ft=$here/../build/ft model= turns=20 system=12000 target=30000 apis="messages chat" max_tokens=24
while [ $# -gt 0 ]; do
    case $1 in
    -m) model=$2; shift 2 ;;
    --ft) ft=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --system) system=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --apis) apis=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "agent_replay.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
out=${OUT:-/tmp/agent_replay}
mkdir -p "$out"
pid=
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=; fi; }
trap stop EXIT

# runs the replays on a server started with the options given; mode names the files
replay() {
    local mode=$1; shift
    rm -f "$out/ready"
    "$ft" serve ${model:+-m "$model"} --port 0 --ready-file "$out/ready" "$@" >"$out/serve-$mode.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do [ -s "$out/ready" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    [ -s "$out/ready" ] || { echo "ft serve did not start:" >&2; tail -20 "$out/serve-$mode.log" >&2; exit 1; }
    local port; port=$(cat "$out/ready")
    for api in $apis; do
        python3 "$here/agent_replay.py" --port "$port" --api "$api" --turns "$turns" --system "$system" --target "$target" \
            --max-tokens "$max_tokens" --run "$mode-$api" >"$out/$mode-$api.jsonl"
    done
    stop
}

replay cache "$@"
replay nocache --no-prefix-cache "$@"

python3 - "$out" $apis <<'EOF'
import json, sys
out, apis = sys.argv[1], sys.argv[2:]
for api in apis:
    runs = {}
    for mode in ('cache', 'nocache'):
        rows = [json.loads(l) for l in open(f'{out}/{mode}-{api}.jsonl')]
        runs[mode] = ([r for r in rows if not r.get('summary')], [r for r in rows if r.get('summary')][0])
    (c, cs), (n, ns) = runs['cache'], runs['nocache']
    print(f'{api}: turn  prompt  cached  TTFT cache (s)  TTFT without (s)  ratio')
    for a, b in zip(c, n):
        print(f'{api}: {a["turn"]:4d} {a["prompt_tokens"]:7d} {a["cached_tokens"]:7d} {a["ttft_s"]:15.3f} '
              f'{b["ttft_s"]:17.3f} {b["ttft_s"] / a["ttft_s"]:6.1f}x')
    later = sorted(b['ttft_s'] / a['ttft_s'] for a, b in zip(c[1:], n[1:]))
    print(f'{api}: turns 2..{len(c)}: TTFT ratio min {later[0]:.1f}x, median {later[len(later) // 2]:.1f}x; '
          f'replay wall {cs["wall_s"]:.1f} s with the cache, {ns["wall_s"]:.1f} s without: '
          f'{ns["wall_s"] / cs["wall_s"]:.1f}x')
EOF
