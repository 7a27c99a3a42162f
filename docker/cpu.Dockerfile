# CPU image of the service; the CUDA images come with the GPU-host issue (#7).
FROM python:3.11.9-slim-bookworm
RUN useradd --create-home --uid 10001 samelang
WORKDIR /app
COPY pyproject.toml README.md ./
COPY samelang samelang
COPY indexes indexes
COPY service service
COPY training training
RUN pip install --no-cache-dir '.[cpu,generator]'
USER samelang
ENV SAMELANG_HOME=/data SAMELANG_HOST=0.0.0.0
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')"
CMD ["samelang", "serve"]
