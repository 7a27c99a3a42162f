"""Answer generators: the embedded GGUF on llama.cpp (CPU default), any OpenAI-compatible
server (vLLM on a GPU host, reached over HTTP, never imported), or none. The embedded model's
file is assembled once by :mod:`.gemma_checkpoint`."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import httpx
from httpx_sse import EventSource

from samelang.core import budget
from samelang.core.models.contracts import Capabilities


class GeneratorUnavailable(RuntimeError):
    """The generator is down, timed out or answered with an error."""


class GeneratorRefused(GeneratorUnavailable):
    """The generator refused this request (a 400, 413 or 422: a prompt longer than its context,
    most often), so retrying it will not help but a smaller request may: ``/answer`` returns a 422
    with the server's own words."""


class NoGenerator:
    name = "none"
    capabilities = Capabilities(generates=False)  # an answer is None, not an empty text

    def generate(self, prompt: str, max_tokens: int) -> str | None:
        return None

    def stream(self, prompt: str, max_tokens: int) -> Iterator[str]:
        return iter(())


# the prompt asks for a one-line answer; base models then go on with another "Question:"
STOP = "\n"
STOPS = (STOP,)


def until_stop(pieces: Iterable[str]) -> Iterator[str]:
    """The answer's pieces as a stream: leading whitespace dropped, ended at the first line break
    (one stop, one character: it cannot span two pieces). Joined and stripped they are the whole
    text's first non-blank line, stripped."""
    started = False
    for piece in pieces:
        if not piece:  # llama.cpp ends its stream with an empty chunk: no event for nothing
            continue
        if not started:
            piece = piece.lstrip()
            if not piece:
                continue
            started = True
        cut = piece.find(STOP)
        if cut >= 0:
            if cut:
                yield piece[:cut]
            return
        yield piece


def join_answer(pieces: Iterable[str]) -> str:
    """The answer a stream of :func:`until_stop` pieces makes."""
    return "".join(pieces).strip()


class LlamaCppGenerator:
    """The embedded generator: the shipped Q4_K_M GGUF run by llama.cpp (``llama-cpp-python``).

    Why llama.cpp: the 4-bit weights stay 4-bit (memory-mapped, 253 MB) and its kernels use them as
    they are, so the server holds ~0.5 GB for the generator instead of 1.6 GB with torch, and answers
    faster; greedy decoding keeps answers deterministic (docs/performance.md, "Memory", has both measured).

    One context, one answer at a time (llama.cpp contexts are not thread-safe): a second ``/answer``
    waits for the lock and stays cancellable. The request's budget is checked after every token.
    The prompt must fit ``n_ctx`` with ``max_tokens`` to spare: :meth:`fits` says whether it does,
    and the pipeline drops or cuts passages until it does (:meth:`Pipeline.answer`).
    """

    capabilities = Capabilities(checks_fit=True)

    def __init__(self, path: str | Path, threads: int | None = None, n_ctx: int = 4096):
        try:
            from llama_cpp import Llama  # deferred: keeps llama_cpp out of start-up
        except ImportError as e:
            raise RuntimeError(
                "the embedded generator runs on llama-cpp-python: bash scripts/install.sh (a portable build of "
                "pip install -e '.[generator]'), or serve with --generator none|openai"
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
        # every token covers at least one byte of text (SentencePiece's byte fallback), so a prompt of B UTF-8
        # bytes is at most B + 2 tokens (BOS, the leading-space marker): under that bound there is nothing to
        # count. Counting two passages takes ~2.5 ms, which a streamed answer's first event would wait for.
        if len(prompt.encode("utf-8", "surrogatepass")) + 2 + max_tokens <= self.n_ctx:
            return True
        return self.count_tokens(prompt) + max_tokens <= self.n_ctx

    def truncate(self, text: str, n_tokens: int) -> str:
        """``text`` cut to its first ``n_tokens`` tokens (whole characters kept)."""
        ids = self.llm.tokenize(text.encode("utf-8"), add_bos=False)[: max(0, n_tokens)]
        return self.llm.detokenize(ids).decode("utf-8", errors="ignore")

    def generate(self, prompt: str, max_tokens: int) -> str:
        return join_answer(self.stream(prompt, max_tokens))

    def stream(self, prompt: str, max_tokens: int) -> Iterator[str]:
        """The answer's text pieces as llama.cpp decodes them (greedy); the context is held until the
        stream ends or is closed."""
        while not self._lock.acquire(timeout=0.1):  # queued behind another answer: still cancellable
            budget.check()
        try:
            budget.check()
            # every answer evaluates its whole prompt: llama.cpp would reuse the previous request's cache for
            # a shared prefix and evaluate the rest alone, and those logits differ enough from a whole-prompt
            # pass to flip greedy choices (7 of 36 XQuAD answers changed when a prompt came twice in a row).
            # The same request must get the same answer, whatever was asked before it.
            self.llm.reset()
            chunks = self.llm.create_completion(
                prompt, max_tokens=max_tokens, temperature=0.0, top_k=1, repeat_penalty=1.0, stop=list(STOPS),
                stream=True,
            )  # fmt: skip
            try:
                for piece in until_stop(c["choices"][0]["text"] for c in chunks):
                    yield piece
                    budget.check()  # over budget or cancelled: the request is over, not answered with a cut-off text
            finally:
                chunks.close()
        finally:
            self._lock.release()


class OpenAIGenerator:
    """Client of an OpenAI-compatible ``/v1/completions`` endpoint, with timeout and retries.

    Completions (not chat) keep the same prompt format for base and instruct
    models; connection errors, timeouts and 5xx answers are retried with
    exponential back-off, then raise :class:`GeneratorUnavailable`. Answers are always
    streamed from the server (:meth:`stream`), waited for or not.
    """

    capabilities = Capabilities()  # a remote server checks its own context

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

    def probe(self, timeout: float = 2.0) -> str | None:
        """Why this server cannot answer yet (not up, or not serving :attr:`model`), or ``None``: one
        ``GET /v1/models``, asked once at start so that the log says it before a reader does. A vLLM
        still loading its model does not listen yet (a refused connection)."""
        try:
            r = self._client.get("/v1/models", timeout=timeout)
        except httpx.HTTPError as e:
            return f"nothing answers at {self.base_url} yet ({type(e).__name__}: {e})"
        if r.status_code >= 400:
            return f"GET {self.base_url}/v1/models answered {r.status_code}: {_server_message(r, 200)}"
        try:
            served = [m["id"] for m in r.json()["data"]]
        except (ValueError, KeyError, TypeError):
            return None  # not a list we can read: the first answer will tell
        if self.model not in served:
            return f"{self.base_url} serves {served}, not {self.model!r} (--openai-model)"
        return None

    def generate(self, prompt: str, max_tokens: int) -> str:
        """The whole answer: :meth:`stream` joined. One request path for both, so that a streamed answer
        and a waited-for one are the same text; and streaming lets the client hang up at the stop, which
        a server given no stop sequence would otherwise generate past until ``max_tokens``. Nobody has
        seen the pieces yet, so a stream that breaks off is retried from the start."""
        pieces: list[str] = []
        for piece in self._pieces(prompt, max_tokens, restart=pieces.clear):
            pieces.append(piece)
        return join_answer(pieces)

    def stream(self, prompt: str, max_tokens: int) -> Iterator[str]:
        """The answer's text pieces as the server streams them (``stream: true``: server-sent events,
        as vLLM and OpenAI send them). A failure before the first piece is retried; after it, retrying
        would repeat text the reader already has, so it raises."""
        return self._pieces(prompt, max_tokens, restart=None)

    def _pieces(self, prompt: str, max_tokens: int, restart: Callable[[], None] | None) -> Iterator[str]:
        """The pieces, with retries; ``restart`` (or ``None``: raise) when a started stream breaks off."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True}
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            started = False
            try:
                budget.check()
                with self._client.stream("POST", "/v1/completions", json=body,
                                         timeout=budget.remaining(self.timeout)) as r:  # fmt: skip
                    for piece in until_stop(self._texts(r)):
                        started = True
                        yield piece
                        budget.check()
                return
            except GeneratorRefused:
                raise  # the same request would be refused again
            except GeneratorUnavailable as e:
                last = e
            except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
                if started:
                    if restart is None:
                        raise GeneratorUnavailable(f"the stream from {self.base_url} broke off: {e}") from e
                    restart()
                last = e
            if attempt < self.retries:
                time.sleep(min(self.backoff * 2**attempt, budget.remaining(self.backoff * 2**attempt)))
        raise GeneratorUnavailable(
            f"generator at {self.base_url} unavailable after {self.retries + 1} attempts: {last}"
        ) from last

    def _texts(self, r: httpx.Response) -> Iterator[str]:
        """The completion's text as it arrives: server-sent events, or one JSON body from a server
        that does not stream."""

        if r.status_code >= 400:
            r.read()
            said = _server_message(r)
            if r.status_code in (400, 413, 422):
                raise GeneratorRefused(f"the generator at {self.base_url} refused the prompt ({r.status_code}): {said}")
            key = " (check --openai-api-key)"
            hint = {401: key, 403: key, 404: f" (does it serve {self.model!r}? check --openai-model, --openai-url)"}
            why = hint.get(r.status_code, "")
            raise GeneratorUnavailable(f"{self.base_url} answered {r.status_code}{why}: {said}")
        if r.headers.get("content-type", "").startswith("application/json"):
            r.read()
            yield r.json()["choices"][0]["text"]
            return
        for e in EventSource(r).iter_sse():
            if e.data == "[DONE]":
                return
            yield e.json()["choices"][0]["text"]

    def close(self) -> None:
        self._client.close()


def _server_message(r: httpx.Response, limit: int = 500) -> str:
    """What an OpenAI-compatible server said: ``error.message`` of its JSON error body (vLLM's and
    OpenAI's shape), else the body's text; at most ``limit`` characters."""
    try:
        body = r.json()
        said = body["error"]["message"] if isinstance(body.get("error"), dict) else body.get("message") or r.text
    except (ValueError, AttributeError, KeyError, TypeError):
        said = r.text
    said = " ".join(str(said).split())
    return said if len(said) <= limit else said[: limit - 3] + "..."
