"""The serving rule over the collection shapes: the best mean of the primary metrics, never a row that a
shape puts more than a point below the base model, ties to the simpler row."""

from __future__ import annotations

from samelang.evaluation import serving_rule as R


def _result(**primary):
    return {s: {R.PRIMARY[s]: {"mean": v}} for s, v in primary.items()}


def test_the_serving_rule_is_the_best_mean_that_no_shape_fools():
    base, hybrid, aligned, fused = (
        R.ShapeRow("base"),
        R.ShapeRow("base", 0.08),
        R.ShapeRow("al"),
        R.ShapeRow("fu", 0.04),
    )
    results = {
        base: _result(parallel=90, partial=40, one=40, mono=95),
        hybrid: _result(parallel=94, partial=30, one=20, mono=97),  # wins parallel, collapses the others
        aligned: _result(parallel=85, partial=75, one=75, mono=90),  # best mean, but 5 points under base on mono
        fused: _result(parallel=92, partial=70, one=70, mono=97),
    }
    chosen, verdict = R.serving_rule(results, base)
    assert chosen == fused
    assert verdict[hybrid]["below_base"] == ["partial", "one"] and verdict[aligned]["below_base"] == [
        "parallel",
        "mono",
    ]
    # a tie within TIE points goes to the simpler row (dense before hybrid)
    results[base] = _result(parallel=92, partial=70, one=70, mono=97 - R.TIE / 2)
    assert R.serving_rule(results, base)[0] == base


def test_a_row_that_shows_readers_another_language_first_is_not_served():
    """Partial translations' reader@1 below :data:`READER_FLOOR` disqualifies a row whatever its mean."""
    base, greedy, kind = R.ShapeRow("base"), R.ShapeRow("fu", 0.04), R.ShapeRow("al", 0.04)

    def result(mean, reader):
        r = _result(parallel=mean, partial=mean, one=mean, mono=mean)
        r["partial"]["reader_at_1"] = {"mean": reader}
        return r

    results = {base: result(90, 97), greedy: result(95, R.READER_FLOOR - 0.1), kind: result(93, R.READER_FLOOR)}
    chosen, verdict = R.serving_rule(results, base)
    assert chosen == kind and verdict[greedy]["reader_below_floor"] and not verdict[kind]["reader_below_floor"]
    assert "reader@1 < floor" in "\n".join(R.primary_table(results, chosen))


def test_a_row_the_reader_waits_too_long_for_is_not_served():
    """A row (a reranker, typically) whose p50 is above :data:`LATENCY_CEILING_MS` is not served,
    whatever its quality; a row whose p50 was not measured is judged on quality alone."""
    base, reranked = R.ShapeRow("base"), R.ShapeRow("base", reranker="lamar")
    results = {base: _result(parallel=90, partial=50, one=50, mono=95),
               reranked: _result(parallel=95, partial=60, one=60, mono=96)}  # fmt: skip
    assert R.serving_rule(results, base)[0] == reranked
    slow = {base: 20.0, reranked: R.LATENCY_CEILING_MS + 1}
    chosen, verdict = R.serving_rule(results, base, latency=slow)
    assert chosen == base and verdict[reranked]["too_slow"] and not verdict[base]["too_slow"]
    assert "p50 > ceiling" in "\n".join(R.primary_table(results, chosen, slow))
    assert reranked.served["reranker"] == "lamar" and reranked.name.endswith(f"-> lamar (top {R.RERANK_K})")


def test_a_reranked_row_carries_its_candidates_and_knows_its_retriever():
    """``rerank_k`` is part of a reranked row (the served setting, its name); :attr:`unreranked` is the
    retriever row it is compared with, whatever its ``k``."""
    retriever = R.ShapeRow("fu", 0.04)
    ten = R.ShapeRow("fu", 0.04, reranker="lamar", rerank_k=10)
    assert ten.served["rerank_k"] == 10 and ten.name.endswith("-> lamar (top 10)")
    assert ten.unreranked == retriever and R.ShapeRow("fu", 0.04, reranker="lamar").unreranked == retriever
    assert ten != R.ShapeRow("fu", 0.04, reranker="lamar")


def test_a_slower_row_must_beat_the_best_unreranked_row_by_the_margin():
    """A reranked row slower than the best row that reranks nothing serves only when its mean is at least
    :data:`SLOWER_MARGIN` points higher; below that the faster row serves (measured p50s only)."""
    base, fused = R.ShapeRow("base"), R.ShapeRow("fu", 0.04)
    reranked = R.ShapeRow("fu", 0.04, reranker="lamar", rerank_k=10)

    def flat(mean):
        return _result(parallel=mean, partial=mean, one=mean, mono=mean)

    latency = {base: 20.0, fused: 28.0, reranked: 270.0}
    small = {base: flat(80), fused: flat(85), reranked: flat(85 + R.SLOWER_MARGIN - 0.1)}
    chosen, verdict = R.serving_rule(small, base, latency=latency)
    assert chosen == fused and verdict[reranked]["slower_not_better"] and not verdict[fused]["slower_not_better"]
    assert "points better" in "\n".join(R.primary_table(small, chosen, latency, verdict))
    enough = {**small, reranked: flat(85 + R.SLOWER_MARGIN)}
    assert R.serving_rule(enough, base, latency=latency)[0] == reranked
    assert R.serving_rule(small, base)[0] == reranked  # no p50 measured: quality alone


def test_the_reader_table_shows_the_bias_beside_what_is_found():
    """``same_language_first`` stands beside found@1 / reader@1 / cross@1 where the results hold it, and a
    result written before it existed still makes a table."""
    row = R.ShapeRow("base")
    res = {s: {R.PRIMARY[s]: {"mean": 80.0}} for s in R.SHAPES}
    res["partial"] |= {m: {"mean": 50.0} for m in ("reader_at_1", "cross_at_1")}
    old = R.reader_table({row: res}, row)
    assert "same_language_first" not in old[0] and "partial cross_at_1" in old[0]
    res["partial"]["same_language_first"] = {"mean": 12.5}
    res["one"]["same_language_first"] = {"mean": 20.0}
    head, _, line = R.reader_table({row: res}, row)
    assert "partial same_language_first" in head and "one same_language_first" in head
    assert "| 12.5 |" in line and "| 20.0 |" in line
