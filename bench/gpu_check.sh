#!/usr/bin/env bash
# bertfn on a GPU, proved in one command (issue 47): bash bench/gpu_check.sh OUT_DIR
#
# Run from the repository root of a checkout on a machine with an NVIDIA GPU. It
#   1. gets a Python whose torch sees the GPU and what the tests need (transformers 4.57, the oracle), one of three ways:
#        wheels: .whl/ holds wheels (bench/gpu_wheels.sh fills it) for a machine with no package index whose python3
#                already has a CUDA torch (and numpy, safetensors, pytest, hypothesis, ...): they go into a folder of
#                their own on PYTHONPATH, over that python's newer transformers, huggingface_hub and tokenizers;
#        venv:   a virtual environment that is active ($VIRTUAL_ENV) or named (BERTFN_GPU_PYTHON=.../bin/python) is
#                used as it is: nothing is installed;
#        index:  otherwise a fresh virtual environment under /tmp gets torch from the package index (PyPI's torch is the
#                CUDA build on Linux; PyTorch's CPU index for BERTFN_TEST_DEVICE=cpu) and then the test extra, whose
#                bounds let pip's first pick of every package fit (docs/development.md);
#      (BERTFN_GPU_MODE=wheels|venv|index chooses one);
#   2. prints the GPU's name, torch's and CUDA's versions;
#   3. runs the tests that take a device on it (BERTFN_TEST_DEVICE, default cuda: tests/conftest.py), slow ones
#      included: the parity of BERT and of every member, fill-mask, score, substitution matrices, embed, trace, a
#      sweep, fp16/bf16 against fp32, the fast path, the segments layout of every member against its padded batches;
#   4. runs bench/gpu_bench.py on it (--quick on the CPU), and bench/embeddings.py's BGE-small-shaped rows beside
#      sentence-transformers;
#   5. writes OUT_DIR/results.md (the GPU, the versions, each test file's counts, the failures and skip reasons,
#      the bench table) and the logs beside it, after every step, so a step that fails or a run cut short still
#      leaves them; it goes on after a failed step and exits 1 at the end if any failed.
# The CPU trial (before a GPU session, so that its first call does not fail on a typo):
#   source .venv/bin/activate && BERTFN_TEST_DEVICE=cpu bash bench/gpu_check.sh /tmp/gpu-check
# docs/development.md ("On a GPU") has the device session's exact call.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bash bench/gpu_check.sh OUT_DIR" >&2; exit 2; }
OUT=$1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export BERTFN_TEST_DEVICE=${BERTFN_TEST_DEVICE:-cuda}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
WORK=${BERTFN_GPU_WORK:-/tmp/bertfn-gpu-check}  # the bench's checkpoint (440 MB), the wheels' folder, a venv
mkdir -p "$WORK"
: >"$WORK/machine.txt"
rm -f "$OUT/results.md" "$WORK/tests.md" "$OUT/tests.xml" "$OUT/bench.md" "$OUT/embeddings.md"  # nothing of an earlier
# run is read as this one's; the tests' table goes to $WORK, into results.md alone: the device tool brings back 8 files
export BERTFN_KERNEL_CACHE="$WORK/kernels.json"  # the CPU kernel choice of this run is no user's cache
if [ "$BERTFN_TEST_DEVICE" = cpu ]; then SLOW=4; else SLOW=1; fi  # the CPU trial: a 2-core machine may take 4x as long
TEST_TIMEOUT=${BERTFN_GPU_TEST_TIMEOUT:-$((300 * SLOW))}
BENCH_TIMEOUT=${BERTFN_GPU_BENCH_TIMEOUT:-$((240 * SLOW))}
TESTS=(tests/test_parity.py tests/test_family.py tests/test_family_modern.py tests/test_fill_mask.py
       tests/test_scoring.py tests/test_mutations.py tests/test_pooling.py tests/test_trace.py tests/test_study.py
       tests/test_numerics.py tests/test_fast_path.py tests/test_layouts.py)
TORCH_PIN=$(grep -o 'torch==[0-9][0-9.]*' README.md | head -1)  # the README's torch, as a user installs it
START=$SECONDS
if COMMIT=$(git rev-parse --short HEAD 2>/dev/null); then
    git diff --quiet HEAD -- 2>/dev/null || COMMIT+=" with uncommitted changes"
else
    COMMIT="unknown (no git history here)"
fi
FAILED=()
STATUS=()

say() { echo "[$(date '+%H:%M:%S') +$((SECONDS - START))s] $*"; }
step_done() {  # step_done NAME RC SECONDS
    STATUS+=("| $1 | $([ "$2" -eq 0 ] && echo ok || echo "FAILED (exit $2)") | $3 s |")
    [ "$2" -eq 0 ] || FAILED+=("$1")
    write_results
}

# --- 1. a Python with torch and the oracle --------------------------------------------------------------------
MODE=${BERTFN_GPU_MODE:-}
if [ -z "$MODE" ]; then
    if compgen -G ".whl/*.whl" >/dev/null; then MODE=wheels
    elif [ -n "${BERTFN_GPU_PYTHON:-}" ] || [ -n "${VIRTUAL_ENV:-}" ]; then MODE=venv
    else MODE=index; fi
fi
PY=${BERTFN_GPU_PYTHON:-python3}
[ "$MODE" = venv ] && [ -z "${BERTFN_GPU_PYTHON:-}" ] && [ -n "${VIRTUAL_ENV:-}" ] && PY="$VIRTUAL_ENV/bin/python"

write_results() {  # OUT/results.md from what the steps have left so far
    {
        echo "# bertfn on a GPU: bench/gpu_check.sh"
        echo
        echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); device: BERTFN_TEST_DEVICE=$BERTFN_TEST_DEVICE; mode: $MODE; python: $PY"
        [ -s "$WORK/machine.txt" ] && sed 's/^/- /' "$WORK/machine.txt"
        echo "- commit: $COMMIT"
        echo
        echo "| step | result | time |"
        echo "|---|---|---|"
        printf '%s\n' "${STATUS[@]}"
        echo "| all | $([ ${#FAILED[@]} -eq 0 ] && echo "${DONE:-ok so far}" || echo "FAILED: ${FAILED[*]}") | $((SECONDS - START)) s |"
        [ -s "$WORK/tests.md" ] && { echo; cat "$WORK/tests.md"; }
        [ -s "$OUT/bench.md" ] && { echo; sed 's/^# /## /' "$OUT/bench.md"; }
        [ -s "$OUT/embeddings.md" ] && { echo; sed 's/^# /## /' "$OUT/embeddings.md"; }
    } >"$OUT/results.md"
}

say "bench/gpu_check.sh: device $BERTFN_TEST_DEVICE, mode $MODE, results in $OUT"
T=$SECONDS
case $MODE in
    wheels)
        SITE="$WORK/site"
        rm -rf "$SITE"
        say "installing $(ls .whl/*.whl | wc -l) carried wheels into $SITE: $(cd .whl && ls *.whl | tr '\n' ' ')"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
            >"$OUT/install.log" 2>&1
        RC=$?
        export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the carried wheels first, then this checkout's bertfn
        ;;
    venv)
        say "using $PY as it is (no install)"
        export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's bertfn, installed there or not
        RC=0
        ;;
    index)
        VENV="$WORK/venv"
        if [ "$BERTFN_TEST_DEVICE" = cpu ]; then TORCH=("$TORCH_PIN" --index-url https://download.pytorch.org/whl/cpu)
        else TORCH=("$TORCH_PIN"); fi  # on Linux PyPI's torch is the CUDA build
        say "a fresh venv in $VENV: pip install ${TORCH[*]}, then pip install -e \".[test]\" (log: $OUT/install.log)"
        rm -rf "$VENV"
        { python3 -m venv "$VENV" && "$VENV/bin/pip" install "${TORCH[@]}" && "$VENV/bin/pip" install -e ".[test]"; } \
            >"$OUT/install.log" 2>&1
        RC=$?
        PY="$VENV/bin/python"
        ;;
    *) echo "BERTFN_GPU_MODE=$MODE: use wheels, venv or index" >&2; exit 2 ;;
esac
[ $RC -eq 0 ] || tail -5 "$OUT/install.log"
step_done "install ($MODE)" $RC $((SECONDS - T))

# --- 2. the machine ------------------------------------------------------------------------------------------
T=$SECONDS
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    | sed 's/^/nvidia-smi: /' >"$WORK/machine.txt"
"$PY" - >>"$WORK/machine.txt" 2>&1 <<'EOF'
import os, platform, sys
import torch
device = os.environ["BERTFN_TEST_DEVICE"]
if device.startswith("cuda"):
    name = torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else "NO GPU SEEN BY TORCH"
else:
    name = "the CPU (a trial run)"
print(f"device: {device}, {name}")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}; "
      f"Python {platform.python_version()} ({sys.executable})")
try:
    import transformers, tokenizers, huggingface_hub
    import bertfn
    print(f"transformers {transformers.__version__} ({os.path.dirname(transformers.__file__)}), tokenizers "
          f"{tokenizers.__version__}, huggingface_hub {huggingface_hub.__version__}, bertfn {bertfn.__version__} "
          f"({os.path.dirname(bertfn.__file__)})")
except Exception as e:  # noqa: BLE001 (said in the results; the tests then fail on it too)
    print(f"IMPORT FAILED: {type(e).__name__}: {e}")
EOF
RC=$?
grep -q "NO GPU\|IMPORT FAILED" "$WORK/machine.txt" && RC=1
cat "$WORK/machine.txt"
step_done "machine" $RC $((SECONDS - T))

# --- 3. the tests that take a device ---------------------------------------------------------------------------
T=$SECONDS
say "tests on $BERTFN_TEST_DEVICE (at most $TEST_TIMEOUT s; log: $OUT/tests.log)"
timeout -k 10 "$TEST_TIMEOUT" "$PY" -m pytest -p no:cacheprovider -v -rfEs -m "slow or not slow" \
    --junitxml="$OUT/tests.xml" "${TESTS[@]}" >"$OUT/tests.log" 2>&1
RC=$?
tail -1 "$OUT/tests.log"
"$PY" - "$OUT/tests.xml" "$OUT/tests.log" >"$WORK/tests.md" <<'EOF'
import collections, re, sys, xml.etree.ElementTree as ET
WHAT = {"test_parity": "BERT against transformers", "test_family": "RoBERTa, XLM-R, DistilBERT, ELECTRA, ALBERT",
        "test_family_modern": "ESM-2, ModernBERT", "test_fill_mask": "fill-mask against the pipeline",
        "test_scoring": "score (PLL), joint filling", "test_mutations": "substitution matrices",
        "test_pooling": "embed", "test_trace": "trace", "test_study": "a sweep, gradients",
        "test_numerics": "fp16 and bf16 against fp32", "test_fast_path": "the fast path"}
counts = collections.defaultdict(collections.Counter)
failed, reasons = [], collections.Counter()
try:
    cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
except (OSError, ET.ParseError) as e:  # cut short: count what the log says was done (pytest -v's lines)
    cases = []
    print(f"## Tests\n\nCUT SHORT (no {sys.argv[1]}: {e}); the counts below are those of the log's lines, up to where "
          "it stopped\n")
    for m in re.finditer(r"^tests/(\w+)\.py::(.+?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", open(sys.argv[2]).read(), re.M):
        outcome = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped"}.get(m[3], "passed")
        counts[m[1]][outcome] += 1
        if outcome in ("failed", "errors"):
            failed.append(f"{m[1]}::{m[2]} (tests.log has the traceback, if it got that far)")
else:
    print("## Tests\n")
for case in cases:
    name = case.get("classname", "").split(".")[-1]
    outcome = "passed"
    for child in case:
        if child.tag in ("failure", "error"):
            outcome = "failed" if child.tag == "failure" else "errors"
            failed.append(f"{name}::{case.get('name')}: {(child.get('message') or '').splitlines()[0][:300] if child.get('message') else ''}")
        elif child.tag == "skipped":
            outcome = "skipped"
            reasons[(child.get("message") or "").replace("\n", " ")[:200]] += 1
    counts[name][outcome] += 1
print("| file | what | passed | failed | errors | skipped |\n|---|---|---|---|---|---|")
for name in sorted(counts, key=lambda n: list(WHAT).index(n) if n in WHAT else 99):
    c = counts[name]
    print(f"| {name} | {WHAT.get(name, '')} | {c['passed']} | {c['failed']} | {c['errors']} | {c['skipped']} |")
total = sum(counts.values(), collections.Counter())
print(f"| all | | {total['passed']} | {total['failed']} | {total['errors']} | {total['skipped']} |")
if failed:
    print("\nFailed:\n" + "\n".join(f"- {f}" for f in failed))
if reasons:
    print("\nSkipped, and why:\n" + "\n".join(f"- {n} x {r}" for r, n in reasons.most_common()))
EOF
step_done "tests" $RC $((SECONDS - T))

# --- 4. the benchmark's quick GPU rows --------------------------------------------------------------------------
T=$SECONDS
QUICK=()
[ "$BERTFN_TEST_DEVICE" = cpu ] && QUICK=(--quick)
say "bench/gpu_bench.py --device $BERTFN_TEST_DEVICE ${QUICK[*]} (at most $BENCH_TIMEOUT s; log: $OUT/bench.log)"
timeout -k 10 "$BENCH_TIMEOUT" "$PY" bench/gpu_bench.py --device "$BERTFN_TEST_DEVICE" "${QUICK[@]}" \
    --workdir "$WORK/bench" --out "$OUT/bench.md" >"$OUT/bench.log" 2>&1
RC=$?
[ $RC -eq 0 ] || tail -5 "$OUT/bench.log"
step_done "bench" $RC $((SECONDS - T))

# --- 5. the embeddings' rows beside sentence-transformers (issue 54) -------------------------------------------------
T=$SECONDS
VOCAB=()
[ -f .whl/bert-vocab.txt ] && VOCAB=(--vocab .whl/bert-vocab.txt)  # no all-MiniLM-L6-v2 installed there
say "bench/embeddings.py --shapes bge --device $BERTFN_TEST_DEVICE ${QUICK[*]} (at most $BENCH_TIMEOUT s; log: $OUT/embeddings.log)"
timeout -k 10 "$BENCH_TIMEOUT" "$PY" bench/embeddings.py --shapes bge --device "$BERTFN_TEST_DEVICE" "${QUICK[@]}" \
    "${VOCAB[@]}" --workdir "$WORK/embeddings" --out "$OUT/embeddings.md" >"$OUT/embeddings.log" 2>&1
RC=$?
[ $RC -eq 0 ] || tail -5 "$OUT/embeddings.log"
step_done "embeddings bench" $RC $((SECONDS - T))

DONE=ok
write_results
say "done: ${#FAILED[@]} step(s) failed${FAILED[*]:+: ${FAILED[*]}}; $OUT/results.md"
cat "$OUT/results.md"
[ ${#FAILED[@]} -eq 0 ]
