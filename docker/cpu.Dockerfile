# CPU image of the service (no GPU needed): `docker build -f docker/cpu.Dockerfile -t samelang-cpu .`
# The GPU-host images (service with CUDA torch + faiss-gpu, and training) are in docker/Dockerfile.
FROM python:3.11.9-slim-bookworm
# a C++ toolchain for llama-cpp-python (the embedded generator ships as an sdist); portable AVX2 build
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
RUN useradd --create-home --uid 10001 samelang
WORKDIR /app
COPY pyproject.toml README.md ./
COPY samelang samelang
COPY models models
# editable: the service finds the shipped models/ next to its package folder in /app
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
    && pip install --no-cache-dir -e '.[cpu,generator]'
USER 10001
ENV SAMELANG_HOME=/data SAMELANG_HOST=0.0.0.0
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')"]
CMD ["samelang", "serve"]
