#!/usr/bin/env bash
# The GPU loop in one script (see CONTRIBUTING.md, "GPU loop").
#
#   tools/gpu_check.sh prepare
#       Here, where Rust is installed: build the abi3 _rust module into .carry/
#       (git-ignored), to be carried to a GPU machine that has no Rust toolchain.
#
#   tools/gpu_check.sh run LOGDIR [--bench "BENCH ARGS"] [-- PYTEST ARGS]
#       On the GPU machine (CMake, g++, Python headers, pybind11, nvidia-cuda-* wheels):
#       build _native and the cubins against the carried _rust, print
#       `python -m pygpukit info`, run the whole test suite with the GPU required
#       (gpu-marked tests included), and optionally the benchmark. Logs go to LOGDIR.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

prepare() {
    export PATH="$HOME/.cargo/bin:$PATH"
    cargo build --release --locked -p pygpukit-python || exit 1
    mkdir -p .carry
    cp target/release/lib_rust.so .carry/_rust.abi3.so
    echo "built .carry/_rust.abi3.so; carry .carry to the GPU machine"
}

run() {
    local logdir=$1; shift
    local bench="" pytest_args=()
    while [ $# -gt 0 ]; do
        case $1 in
            --bench) bench=$2; shift 2 ;;
            --) shift; pytest_args=("$@"); break ;;
            *) echo "unknown argument $1" >&2; exit 2 ;;
        esac
    done
    mkdir -p "$logdir"
    local archs=${PYGPUKIT_CUDA_ARCHS:-90a}
    echo "== build (archs $archs)"
    if ! python3 tools/dev_build.py --archs "$archs" --prebuilt-rust .carry/_rust.abi3.so \
            --build-dir /tmp/pygpukit-build >"$logdir/build.log" 2>&1; then
        tail -40 "$logdir/build.log"; echo "BUILD FAILED"; exit 1
    fi
    local path="" p
    for p in packages/*/src; do path="$path${path:+:}$ROOT/$p"; done
    export PYTHONPATH="$path${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    # No installed metadata here, so the ops package's suites are named explicitly.
    export PYGPUKIT_BENCHMARK_PLUGINS=${PYGPUKIT_BENCHMARK_PLUGINS:-pygpukit.ops.benchmarks:suites}
    echo "== info"
    python3 -m pygpukit info 2>&1 | tee "$logdir/info.txt"
    echo "== tests"
    local timeout_opt=()
    python3 -c "import pytest_timeout" 2>/dev/null && timeout_opt=(--timeout 300)
    PYGPUKIT_REQUIRE_GPU=1 python3 -m pytest tests -q -rfEs "${timeout_opt[@]}" "${pytest_args[@]}" \
        2>&1 | tee "$logdir/tests.log"
    local rc=${PIPESTATUS[0]}
    if [ -n "$bench" ]; then
        echo "== benchmark: $bench"
        # shellcheck disable=SC2086  # bench is a list of arguments
        python3 -m pygpukit.benchmark $bench --save "$logdir/bench.json" --markdown 2>&1 \
            | tee "$logdir/bench.md"
    fi
    return "$rc"
}

case ${1:-} in
    prepare) prepare ;;
    run) shift; [ $# -ge 1 ] || { echo "usage: $0 run LOGDIR [...]" >&2; exit 2; }; run "$@" ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
esac
