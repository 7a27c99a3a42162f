"""Answer generators: the embedded GGUF on llama.cpp (CPU default), any OpenAI-compatible
server (vLLM on a GPU host, reached over HTTP, never imported), or none. The embedded model's
file is assembled once by :mod:`.gemma_checkpoint`."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx

from .. import work


class GeneratorUnavailable(RuntimeError):
    """The generator is down, timed out or answered with an error."""


class NoGenerator:
    name = "none"

    def generate(self, prompt: str, max_tokens: int) -> str | None:
        return None


def _cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    text = text.lstrip()
    cut = min((i for s in stops if (i := text.find(s)) >= 0), default=len(text))
    return text[:cut].strip()


# the prompt asks for a one-line answer; base models then go on with another "Question:"
STOPS = ("\n",)


class LlamaCppGenerator:
    """The embedded generator: the shipped Q4_K_M GGUF run by llama.cpp (``llama-cpp-python``).

    Why llama.cpp: the 4-bit weights stay 4-bit (memory-mapped, 253 MB) and its kernels use them as
    they are, so the server holds ~0.5 GB for the generator instead of 1.6 GB with torch, and answers
    faster; greedy decoding keeps answers deterministic (README "Memory" has both measured).

    One context, one answer at a time (llama.cpp contexts are not thread-safe): a second ``/answer``
    waits for the lock and stays cancellable. The request's budget is checked after every token.
    The prompt must fit ``n_ctx`` with ``max_tokens`` to spare: :meth:`fits` says whether it does,
    and the pipeline drops or cuts passages until it does (:meth:`Pipeline.answer`).
    """

    def __init__(self, path: str | Path, threads: int | None = None, n_ctx: int = 4096):
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise RuntimeError(
                "the embedded generator runs on llama-cpp-python: pip install -e '.[generator]' (README has the "
                "CMAKE_ARGS for a portable build), or serve with --generator none|openai"
            ) from e
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(
                f"no generator GGUF at {self.path}: run `samelang models prepare --generator`, "
                "or serve with --generator none|openai"
            )
        self.n_ctx = n_ctx
        self.llm = Llama(
            model_path=str(self.path), n_ctx=n_ctx, n_threads=threads or os.cpu_count() or 1, n_batch=512,
            use_mmap=True, verbose=False,
        )  # fmt: skip
        self.name = f"llama.cpp:{self.path.parent.name}"
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=True))

    def fits(self, prompt: str, max_tokens: int) -> bool:
        return self.count_tokens(prompt) + max_tokens <= self.n_ctx

    def truncate(self, text: str, n_tokens: int) -> str:
        """``text`` cut to its first ``n_tokens`` tokens (whole characters kept)."""
        ids = self.llm.tokenize(text.encode("utf-8"), add_bos=False)[: max(0, n_tokens)]
        return self.llm.detokenize(ids).decode("utf-8", errors="ignore")

    def generate(self, prompt: str, max_tokens: int) -> str:
        while not self._lock.acquire(timeout=0.1):  # queued behind another answer: still cancellable
            work.check()
        try:
            work.check()
            pieces = []
            stream = self.llm.create_completion(
                prompt, max_tokens=max_tokens, temperature=0.0, top_k=1, repeat_penalty=1.0, stop=list(STOPS),
                stream=True,
            )  # fmt: skip
            try:
                for chunk in stream:
                    pieces.append(chunk["choices"][0]["text"])
                    work.check()  # over budget or cancelled: the request is over, not answered with a cut-off text
            finally:
                stream.close()
        finally:
            self._lock.release()
        return _cut_at_stop("".join(pieces), STOPS)


class OpenAIGenerator:
    """Client of an OpenAI-compatible ``/v1/completions`` endpoint, with timeout and retries.

    Completions (not chat) keep the same prompt format for base and instruct
    models; connection errors, timeouts and 5xx answers are retried with
    exponential back-off, then raise :class:`GeneratorUnavailable`.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.retries = retries
        self.backoff = backoff
        self.name = f"openai:{model}"
        self.timeout = timeout
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers, transport=transport)

    def generate(self, prompt: str, max_tokens: int) -> str:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                work.check()
                r = self._client.post("/v1/completions", json=body, timeout=work.remaining(self.timeout))
                if r.status_code >= 500:
                    raise GeneratorUnavailable(f"{self.base_url} answered {r.status_code}: {r.text[:200]}")
                if r.status_code >= 400:  # our request is wrong: retrying will not help
                    raise GeneratorUnavailable(f"{self.base_url} refused the request ({r.status_code}): {r.text[:200]}")
                return _cut_at_stop(r.json()["choices"][0]["text"], STOPS)
            except GeneratorUnavailable as e:
                last = e
                if "refused the request" in str(e):
                    break
            except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
                last = e
            if attempt < self.retries:
                time.sleep(min(self.backoff * 2**attempt, work.remaining(self.backoff * 2**attempt)))
        raise GeneratorUnavailable(
            f"generator at {self.base_url} unavailable after {self.retries + 1} attempts: {last}"
        ) from last

    def close(self) -> None:
        self._client.close()
