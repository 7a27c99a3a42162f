"""The answer's text as a stream and as a whole: the same cut, whatever the pieces."""

from __future__ import annotations

import pytest

from samelang.core.models.generation import join_answer, until_stop


def first_line(text: str) -> str:
    """The whole text's answer: its first line once leading blanks are dropped, stripped."""
    return text.lstrip().split("\n", 1)[0].strip()


@pytest.mark.parametrize(
    "pieces",
    [
        [" Henry", " Cole", "\n", "Question:"],
        ["\n", "  ", " Henry Cole", " (1857)\nQuestion: who"],
        ["亨利", "·科尔", "。", "\n\n"],
        ["   ", "\n"],
        [],
        ["no stop at all "],
    ],
)
def test_the_stream_makes_the_waited_for_answer(pieces):
    streamed = list(until_stop(pieces))
    assert join_answer(streamed) == first_line("".join(pieces))
    assert all(streamed) and not any("\n" in p for p in streamed)
    if streamed:
        assert not streamed[0][0].isspace()  # what a reader sees first is text, not the model's leading space


def test_the_stream_stops_reading_at_the_stop():
    read = []

    def pieces():
        for p in ["Henry", " Cole\n", "Question: x", "never read"]:
            read.append(p)
            yield p

    assert list(until_stop(pieces())) == ["Henry", " Cole"]
    assert read == ["Henry", " Cole\n"]  # the generator is not asked for more once the answer ended
