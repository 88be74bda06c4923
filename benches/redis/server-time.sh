#!/usr/bin/env bash
# Server time per call of weir-redis's decision scripts against a bare Lua anchor of
# the same algorithm (anchor-*.lua: the same decisions, clock and expiry, nothing
# else), as Redis itself measures it (`INFO commandstats`, usec_per_call of EVALSHA),
# and decisions per second one call at a time and 64 calls in flight on one
# connection (redis-benchmark -P 64).
#
#   benches/redis/server-time.sh [ROUNDS] [CALLS]      (defaults 7 and 10000)
#
# Starts its own redis-server on a free loopback port. Rounds interleave every
# script, so a loaded machine slows them alike; the report gives the median and the
# minimum over rounds. Keys: 10 000 uniform keys at 100 per second each (mostly
# admitted), and one hot key (mostly denied); the server's clock (`TIME`).
set -euo pipefail
rounds=${1:-7}; calls=${2:-10000}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --pidfile "$work/redis.pid" --logfile "$work/redis.log"
cli() { redis-cli -p "$port" "$@"; }
trap 'cli SHUTDOWN NOSAVE >/dev/null 2>&1 || kill "$(cat "$work/redis.pid")" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do cli PING >/dev/null 2>&1 && break; sleep 0.05; done
python3 "$here/extract.py" "$here/../../crates/weir-redis/src/scripts.rs" "$work"
cp "$here"/anchor-*.lua "$work"
scripts=(weir-gcra anchor-gcra weir-fixed anchor-fixed weir-log anchor-log weir-sliding)
declare -A sha
for s in "${scripts[@]}"; do sha[$s]=$(cli SCRIPT LOAD "$(cat "$work/$s.lua")"); done
args() { # the ARGV after KEYS[1]: server clock, n = 1, then the quota
    case $1 in
        *gcra) echo '"" 1 10000 1000000' ;;          # cost 10 ms, tolerance 1 s (100/s, burst 100)
        *log) echo '"" 1 100 1000000 __rand_int__' ;; # 100 per 1 s, a member tag per call
        *) echo '"" 1 100 1000000' ;;                 # 100 per 1 s
    esac
}
bench() { # bench SCRIPT KEY PIPELINE -> "usec_per_call decisions_per_sec"
    cli CONFIG RESETSTAT >/dev/null
    local rps
    rps=$(eval redis-benchmark -p "$port" -c 1 -P "$3" -n "$calls" -r 10000 -q --csv EVALSHA "${sha[$1]}" 1 "$1:$2" "$(args "$1")" |
        tail -1 | cut -d, -f2 | tr -d '"')
    echo "$(cli INFO commandstats | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p') $rps"
}
declare -A usec serial piped
for keys in uniform hot; do
    key='k:__rand_int__'; [ $keys = hot ] && key=hot
    cli FLUSHALL >/dev/null
    for _ in $(seq "$rounds"); do
        for s in "${scripts[@]}"; do
            read -r u r < <(bench "$s" "$key" 1); usec[$s.$keys]+="$u "; serial[$s.$keys]+="$r "
            read -r _ r < <(bench "$s" "$key" 64); piped[$s.$keys]+="$r "
        done
    done
done
echo "redis-server $(cli INFO server | sed -n 's/^redis_version:\(.*\)\r$/\1/p'), $rounds rounds of $calls calls per script, median (min)"
echo
echo "| script | keys | µs per call (server) | ÷ anchor | serial /s | 64 in flight /s | ÷ serial | ÷ anchor (64) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for keys in uniform hot; do
    for s in "${scripts[@]}"; do
        a="anchor-${s#*-}"; [ -n "${usec[$a.$keys]:-}" ] || a=""
        python3 - "$s" "$keys" "${usec[$s.$keys]}" "${serial[$s.$keys]}" "${piped[$s.$keys]}" \
            "${a:+${usec[$a.$keys]}}" "${a:+${piped[$a.$keys]}}" <<'PY'
import statistics, sys
s, keys, u, r, p, au, ap = sys.argv[1:8]
f = lambda v: [float(x) for x in v.split()]
med = lambda v: statistics.median(f(v))
rel = lambda x, y: f"{x / y:.2f}" if y else ""
keys = "10 000 keys" if keys == "uniform" else "one hot key"
um, ur, pm = med(u), med(r), med(p)
print(f"| {s} | {keys} | {um:.2f} ({min(f(u)):.2f}) | {rel(um, med(au)) if au else ''} | {ur:.0f} | {pm:.0f} | "
      f"{pm / ur:.1f}× | {rel(pm, med(ap)) if ap else ''} |")
PY
    done
done
