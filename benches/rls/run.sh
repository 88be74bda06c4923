#!/usr/bin/env bash
# The weir-rls / Limitador comparison: both servers on this machine, in memory and
# on one local redis-server, the three scenarios of `weir_bench::rls`, each server
# started afresh for each run; one CSV line per run on stdout.
#
#   benches/rls/run.sh <weir-rls> <limitador-server> <rls-loadgen> [rls-loadgen options]
#
# Builds nothing. weir-rls: `cargo build --release -p weir-rls` (target/release/weir-rls);
# the load generator: `cargo build --release -p weir-bench --features rls --bin rls-loadgen`
# (target/release/rls-loadgen); Limitador: `cargo build --release --bin limitador-server`
# in its own checkout. redis-server must be on PATH. The load by default: 2 connections
# x 16 calls in flight, 5 s measured after 1 s of warm-up (options: rls-loadgen --help).
# RLS_BACKENDS=memory (or redis) runs one backend, RLS_SCENARIOS="spread hot" some
# scenarios (both default to all). RLS_SERVER_THREADS=N and RLS_LOADGEN_THREADS=N set
# TOKIO_WORKER_THREADS for the servers and for the load generator (tokio's default:
# one worker per core; weir-rls honours it, Limitador's runtime does not).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
weir="$1" limitador="$2" loadgen="$3"
shift 3
extra=("$@")
redis_port=16379 grpc=127.0.0.1:18081
if redis-cli -p "$redis_port" ping >/dev/null 2>&1; then
    echo "port $redis_port is taken: stop what listens there first" >&2
    exit 1
fi
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null || true' EXIT
until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.1; done

header=--csv-header
measure() { # label, then the server's command line
    local label="$1" scenario pid
    shift
    for scenario in ${RLS_SCENARIOS:-spread hot three}; do
        redis-cli -p "$redis_port" flushall >/dev/null
        env ${RLS_SERVER_THREADS:+TOKIO_WORKER_THREADS=$RLS_SERVER_THREADS} "$@" >/dev/null 2>&1 &
        pid=$!
        until (exec 3<>/dev/tcp/127.0.0.1/18081) 2>/dev/null; do sleep 0.1; done
        env ${RLS_LOADGEN_THREADS:+TOKIO_WORKER_THREADS=$RLS_LOADGEN_THREADS} "$loadgen" --target "$grpc" --pid "$pid" --label "$label" --scenario "$scenario" --csv $header "${extra[@]}"
        header=
        kill -TERM "$pid"
        wait "$pid" 2>/dev/null || true
    done
}

weir_args=(--config "$here/weir-rls.yaml" --grpc-addr "$grpc" --http-addr 127.0.0.1:18080 --log warn)
limitador_args=(-b 127.0.0.1 -p 18081 -B 127.0.0.1 -P 18080 "$here/limitador-limits.yaml")
for backend in ${RLS_BACKENDS:-memory redis}; do
    case "$backend" in
    memory)
        measure weir-rls-memory "$weir" "${weir_args[@]}"
        measure limitador-memory "$limitador" "${limitador_args[@]}" memory
        ;;
    redis)
        measure weir-rls-redis "$weir" "${weir_args[@]}" --backend redis --redis-url "redis://127.0.0.1:$redis_port" --redis-timeout 5s
        measure limitador-redis "$limitador" "${limitador_args[@]}" redis "redis://127.0.0.1:$redis_port"
        ;;
    *) echo "RLS_BACKENDS: memory or redis, not $backend" >&2; exit 1 ;;
    esac
done
