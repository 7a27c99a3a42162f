"""``samelang eval pipeline --shapes``: the collection-shape judge's command (:mod:`.collection_shapes` owns the
constructions, metrics and rows; :mod:`.serving_rule` the rule and tables).

What chooses: the questions of the dev articles (:data:`DEV_ARTICLES`), over the train-article
shapes' pools. Every trainer here holds those articles out, so no compared model has seen them
(the other train questions are in-sample for every trained model: a choice there once picked a
row that lost on the test articles). Two passes: the rule chooses among the retriever rows,
then the shipped cross-encoders rerank that retriever, and the rule decides between it and its
reranked rows on the reranked rows' own questions (the same questions for all, paired). The
test-article shapes report every row; the chosen one is also measured through a real HTTP server."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from importlib.resources import files
from pathlib import Path

import httpx
from tqdm.auto import tqdm

from samelang.core.catalogue import (
    BASE,
    REPO_MODELS,
    SERVED_DEFAULTS,
    served_defaults,
    shipped_biencoders,
    shipped_cross_encoders,
)
from samelang.core.model_folder import replace_section
from samelang.core.runtime.precision import cpu_summary
from samelang.corpora import dev_articles
from samelang.corpora.store import CorpusMissing
from samelang.evaluation.collection_shapes import ShapeJudge, summarise
from samelang.evaluation.common import Report
from samelang.evaluation.ood import OutOfDomain, ood_summary, ood_table
from samelang.evaluation.pipeline import NO_RERANKER
from samelang.evaluation.serving_rule import (
    ShapeRow,
    markdown,
    primary_table,
    reader_table,
    serving_rule,
    to_json,
    write_serving,
)
from samelang.primitives.atomic import atomic_write_text
from samelang.service.components import Components, load_components
from samelang.service.config import ServiceSettings

DEV_ARTICLES = 3  # the trainers' default --dev-n-articles: the train articles no model here trains on
# the tuned grids, as data beside the command that chose each one and what it found (grids.json)
GRIDS = json.loads(files("samelang.evaluation").joinpath("grids.json").read_text(encoding="utf-8"))
HYBRID_WEIGHTS = tuple(GRIDS["hybrid_weights"]["value"])  # BM25 weights of the bi-encoders' hybrid rows
RERANK_KS = tuple(GRIDS["rerank_ks"]["value"])  # candidates a reranked row's cross-encoder scores
RERANK_FUSIONS = tuple(GRIDS["rerank_fusions"]["value"])  # the retriever's weights beside a reranker's


def served_over_http(judge: ShapeJudge, row: ShapeRow, shipped: bool = False) -> dict:
    """The served row as a client gets it: the app ``samelang serve`` builds (``create_app``) over
    each shape's index, a real uvicorn server, ``POST /search`` for every query (the shape's
    language filter for mono); metrics as for the rows. ``shipped``: the components are loaded as
    ``samelang serve`` loads them with no flag but ``--index`` (``models/serving.json``'s defaults),
    and checked to be ``row``'s. The model outputs come from the same memo as the rows'."""

    from samelang.service.api.app import create_app  # deferred: brings fastapi, starlette only when this runs
    from samelang.service.api.server import serve_in_thread  # deferred: brings fastapi only when this runs

    out = {}
    for shape in judge.shapes:
        pipe = judge.pipeline(row, shape)
        cfg = ServiceSettings(home=judge.home, index=pipe.index.path, generator="none", micro_batching=False,
                              index_reload_s=0)  # fmt: skip
        if shipped:
            loaded = load_components(cfg).pipeline
            got = (loaded.encoder.fingerprint, loaded.defaults.lexical_weight, loaded.defaults.group_candidates,
                   loaded.defaults.rerank and loaded.reranker.fingerprint)  # fmt: skip
            want = (pipe.encoder.fingerprint, row.lexical, row.candidates == "groups",
                    row.reranked and pipe.reranker.fingerprint)  # fmt: skip
            if got != want:
                raise RuntimeError(f"samelang serve loads {got}, not {row.name}")
            pipe.index.close()
            pipe = loaded.replace(encoder=pipe.encoder, reranker=pipe.reranker)  # the memo: the same model's outputs
        app = create_app(cfg, Components(pipe))
        lists = []
        which = judge.row_questions(row)
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=600) as client:
            for i in tqdm(which, desc=f"HTTP /search: {shape}", unit="q", leave=False):
                q = judge.queries[i]
                body = {"query": q.query, "k": 10, **({"langs": [q.lang]} if shape == "mono" else {})}
                hits = client.post("/search", json=body).raise_for_status().json()["hits"]
                lists.append([h["id"] for h in hits])
        out[shape] = summarise(judge.scores(shape, lists, which), judge.qlang)
        pipe.index.close()
    return out


# ----------------------------------------------------------------------------- the command
def default_rows(lexical: dict[str, float]) -> list[ShapeRow]:
    """The rows judged: the base model dense (the rule's floor), the base model's hybrid at its
    tuned weight, every shipped bi-encoder (seed 000's, :func:`shipped_biencoders`) dense and hybrid
    at each of :data:`HYBRID_WEIGHTS` (the train-article shapes choose among them, as they choose
    the row), and every fused retriever with the BM25 weight it was tuned with."""

    rows = [ShapeRow(BASE), ShapeRow(BASE, lexical.get(BASE, 0.08))]
    for folder in shipped_biencoders():
        rows += [ShapeRow(folder.name), *(ShapeRow(folder.name, w) for w in HYBRID_WEIGHTS)]
    for folder in sorted(REPO_MODELS.glob("*/fused.json")):
        rows.append(ShapeRow(folder.parent.name, fused_weight(folder.parent.name)))
    return rows


def judged_rows(options, lexical: dict[str, float]) -> list[ShapeRow]:
    """:func:`default_rows`, or with ``--retriever NAME`` (repeatable) the base model's two rows and
    the named retrievers' rows only (with ``--card`` also the served retriever's, so that a narrower
    judge never replaces the served row by one it did not beat)."""
    rows = default_rows(lexical)
    if not options.retriever:
        return rows
    keep = {name.partition("=")[0] for name in options.retriever} | {BASE}
    if options.card:
        keep.add(served_defaults().retriever)
    unknown = keep - {r.retriever for r in rows}
    if unknown:
        raise ValueError(f"--retriever {sorted(unknown)}: not a judged row (a shipped bi-encoder or fused retriever "
                         f"in models/: {sorted({r.retriever for r in rows})})")  # fmt: skip
    return [r for r in rows if r.retriever in keep]


def reranked_rows(
    retriever: ShapeRow, names: list[str] | None = None, ks=RERANK_KS, fusions=RERANK_FUSIONS
) -> list[ShapeRow]:
    """``retriever`` reranked by each cross-encoder of ``names`` (``--cross-encoder``: a models/ folder
    name or a path; default: every shipped one, :func:`shipped_cross_encoders`), over its first
    :data:`RERANK_KS` candidates, alone and fused with the retriever's score at each of
    :data:`RERANK_FUSIONS` (``rerank_k`` is a lever of speed, the fusion one of quality; a row with
    fewer candidates or another weight costs no new scores: its pairs are the first row's)."""
    names = names or [p.name for p in shipped_cross_encoders()]
    return [replace(retriever, reranker=n, rerank_k=k, fusion=w) for n in names for k in ks for w in fusions]


def reranked_table(judge: ShapeJudge, results: dict) -> str:
    """Each reranked row beside its retriever on the same questions (the reranked rows' own)."""
    pairs = {}
    for row in (r for r in results if r.reranked):
        twin = row.unreranked
        if twin in judge.per_query:
            pairs[twin] = judge.same_questions(twin, row)
            pairs[row] = results[row]
    if not pairs:
        return ""
    n = int(judge.reranked_questions.sum())
    return (f"Reranked rows beside their retriever on the same {n} questions:\n\n"
            + "\n".join(reader_table(pairs, None)) + "\n\n")  # fmt: skip


def choose(judge: ShapeJudge, results: dict, base: ShapeRow, retriever: ShapeRow) -> tuple[ShapeRow, dict]:
    """The served row: ``retriever`` (the rule's choice among the retriever rows) unless the rule,
    on the reranked rows' questions only (the same for all: paired), prefers one of its reranked
    rows. Returns the row and every row's verdict (the retriever rows' on all their questions)."""
    verdict = serving_rule(results, base, latency=judge.latency)[1]
    reranked = [r for r in results if r.reranked and r.unreranked == retriever]
    if not reranked:
        return retriever, verdict
    same = {r: judge.same_questions(r, reranked[0]) for r in (base, retriever)} | {r: results[r] for r in reranked}
    chosen, paired = serving_rule(same, base, latency=judge.latency)
    verdict |= {r: paired[r] for r in reranked}
    return (chosen if chosen in reranked else retriever), verdict


def judged_rerankers(options, retriever: ShapeRow) -> list[ShapeRow]:
    """The reranked rows of a run: ``--cross-encoder``'s (else every shipped one; none for ``none``) over ``retriever``;
    a tiny run takes one k, the reranker alone and fused (each row costs its p50's real searches)."""
    if options.cross_encoder == [NO_RERANKER]:  # the retrievers judged alone: an hour less on 2 cores
        return []
    ks = tuple(options.rerank_k) or RERANK_KS  # --rerank-k (each k once): fewer rows, fewer scored pairs
    levers = dict(ks=ks[:1], fusions=(0.0, RERANK_FUSIONS[-1])) if options.tiny else dict(ks=ks)
    return reranked_rows(retriever, [c.partition("=")[2] or c for c in options.cross_encoder], **levers)


def judge_command(options) -> str:
    """The command line of this run, as the report and the cards name it: every flag that changes the rows
    (a narrower judge's card must say it was one)."""
    flags = [
        " --tiny" * options.tiny,
        " --card" * options.card,
        " --no-ood" * (not options.ood),
        *(f" --retriever {r}" for r in options.retriever),
        *(f" --cross-encoder {c}" for c in options.cross_encoder),
        *(f" --rerank-k {k}" for k in options.rerank_k),
    ]
    return "samelang eval pipeline --shapes" + "".join(flags)


def fused_weight(name: str) -> float | None:
    """The BM25 weight a fused retriever (``models/<name>/fused.json``) was tuned with and is served
    with; ``None`` for any other retriever."""
    cfg = REPO_MODELS / name / "fused.json"
    return float(json.loads(cfg.read_text()).get("lexical_weight", 0.0)) if cfg.exists() else None


def run_shapes(options, doc: Path | None = None, log=print):
    """``samelang eval pipeline --shapes``: every retriever row on the train-article shapes, then the
    shipped cross-encoders reranking the retriever the rule chose there (the rule chooses on the
    dev articles' questions, :meth:`ShapeJudge.held_out`, among all rows), then every row on the
    test-article shapes (the report), the chosen row also through HTTP; ``--card`` writes
    ``models/serving.json`` and ``docs/evaluation.md``'s section; ``--tiny``: a few paragraphs
    and questions of each shape, nothing written but the report (seconds)."""
    from samelang.evaluation.fusion import tuned_weights  # deferred: keeps torch out of start-up

    home = options.home
    t0 = time.perf_counter()
    # a tiny run times each row on 3 searches (a reranked one costs ~1 s each on 2 cores)
    tiny = dict(max_paragraphs=3, max_questions=2, memo=False, latency_per_lang=1, latency_langs=("en", "de", "zh"))
    tiny = tiny if options.tiny else {}  # fmt: skip
    rows = judged_rows(options, tuned_weights())
    dev = None if options.tiny else dev_articles(DEV_ARTICLES)  # a tiny run's few paragraphs hold no dev question
    train = ShapeJudge(home, split="train", articles=dev, log=log, **tiny)
    log(f"dev articles {dev}: {len(train.queries)} train-article questions choose the row")
    train_res = train.run(rows)
    retriever = serving_rule(train_res, rows[0], latency=train.latency)[0]
    rows += judged_rerankers(options, retriever)
    log(f"reranking {retriever.name} ({int(train.reranked_questions.sum())} questions)")
    train_res |= train.run(rows[len(train_res) :])
    chosen, verdict = choose(train, train_res, rows[0], retriever)
    log(f"chosen: {chosen.name}")
    test = ShapeJudge(home, split="test", log=log, encoders=train.encoders if options.tiny else {},
                      rerankers=train.rerankers, **tiny)  # fmt: skip
    log(f"test-article shapes ({len(test.queries)} questions): the report")
    test_res = test.run(rows)
    ood = options.ood and not options.tiny
    ood_text, ood_json = out_of_domain(options, test, rows, chosen, log) if ood else ("", None)
    command = judge_command(options)
    card = options.card and not options.tiny
    if card:  # written before the HTTP check, which then loads what `samelang serve` loads
        write_serving(SERVED_DEFAULTS, chosen, train_res, test_res, verdict, command, ood_summary(ood_json))
    http = served_over_http(test, chosen, shipped=card) if options.http else None
    minutes = (time.perf_counter() - t0) / 60
    how = (f"Questions: {len(test.queries)} test-article questions in 12 languages ({len(train.queries)} questions of "
           f"the dev articles chose the row); reranked rows: {int(test.reranked_questions.sum())} fixed test questions "
           f"({int(train.reranked_questions.sum())} of the dev articles'); 10 hits per search; p50: one search at a "
           f"time, real models, on {cpu_summary()}. Command: `{command}` ({minutes:.0f} min).")  # fmt: skip
    dev_tables = reranked_table(train, train_res) + markdown(train_res, chosen, "dev", None, train.latency, verdict)
    table = ("### Chosen on the dev articles' questions (train-article shapes)\n\n" + dev_tables
             + "\n\n### Reported on the test-article shapes\n\n" + reranked_table(test, test_res)
             + markdown(test_res, chosen, "test", http, test.latency) + "\n\n" + ood_text + how)  # fmt: skip
    data = {"chosen": chosen.name, "served": chosen.served, "train": to_json(train_res), "test": to_json(test_res),
            "dev_articles": dev, "http": http, "ood": ood_json,
            "verdict": {r.name: v for r, v in verdict.items()},
            "p50_ms": {"train": {r.name: v for r, v in train.latency.items()},
                       "test": {r.name: v for r, v in test.latency.items()}},
            "minutes": round(minutes, 1), "command": command}  # fmt: skip
    report = Report(table, data)
    report.write(options.out / ("shapes-tiny" if options.tiny else "shapes"))
    if card:
        if doc is not None:
            replace_section(doc, SHAPES_SECTION, table + "\n")
        write_cards(rows, test, test_res, chosen, how)
        log(f"served defaults -> {SERVED_DEFAULTS}")
    return report


def out_of_domain(options, judge: ShapeJudge, rows: list[ShapeRow], chosen: ShapeRow, log=print) -> tuple[str, dict]:
    """Every row on the held-out corpus source (:mod:`.ood`): its table (with a blank line after) and
    JSON; when the corpus store lacks the source, a line that says so and how to import it."""
    try:
        ood = OutOfDomain(judge, options.store())
    except CorpusMissing as e:
        log(f"out-of-domain shape skipped: {e}")
        return f"Out of domain: not run ({e}).\n\n", {"skipped": str(e)}
    log(f"out-of-domain shape: {len(ood.documents)} {ood.source} passages, {len(ood.queries)} questions")
    results = {}
    for row in rows:
        results[row] = ood.evaluate(row)
        log(f"{row.name}: ood found@1 {results[row]['found_at_1']['mean']:.1f}")
    table = ood_table(results, chosen, rows[0], ood.source)
    return table + "\n\n", {"source": ood.source, "rows": {r.name: v for r, v in results.items()}}


OOD_PARAGRAPH = re.compile(r"^(Out of domain: not run|\*\*out of domain\*\*).*?(?=^Questions: )", re.M | re.S)


def run_ood_only(options, doc: Path | None = None, log=print) -> Report:
    """``--shapes --ood-only``: the out-of-domain shape alone, for the rows the last judge judged
    (``models/serving.json``: its served row's retriever, reranked as ``--cross-encoder`` says) and
    its chosen row; with ``--card`` the table replaces the out-of-domain paragraph of
    ``docs/evaluation.md``'s shapes section and lands in ``serving.json`` (``ood``). Why apart: the
    XQuAD shapes take an hour on 2 cores and their numbers do not change with this shape's."""
    from samelang.evaluation.fusion import tuned_weights  # deferred: keeps torch out of start-up

    t0 = time.perf_counter()
    if not SERVED_DEFAULTS.exists():
        raise SystemExit(f"no {SERVED_DEFAULTS}: run `samelang eval pipeline --shapes --card` first")
    served = json.loads(SERVED_DEFAULTS.read_text())
    rows = default_rows(tuned_weights())
    want = served["served"]
    retriever = next((r for r in rows if r.retriever == want["retriever"] and r.candidates == want["candidates"]
                      and abs(r.lexical - want["lexical_weight"]) < 1e-9), None)  # fmt: skip
    if retriever is None:
        raise SystemExit(f"{want['retriever']} is not among the judged rows: run `samelang eval pipeline --shapes`")
    rows += judged_rerankers(options, retriever)
    chosen = next((r for r in rows if r.name == served["chosen"]), None)
    judge = ShapeJudge(options.home, split="test", log=log)
    text, data = out_of_domain(options, judge, rows, chosen, log)
    minutes = (time.perf_counter() - t0) / 60
    text += (f"Out-of-domain p50 is not measured (the XQuAD shapes' is); rows as the last judge's. Command: "
             f"`{judge_command(options)} --ood-only` ({minutes:.0f} min).\n\n")  # fmt: skip
    report = Report(text, {"chosen": served["chosen"], "ood": data, "minutes": round(minutes, 1)})
    report.write(options.out / "shapes-ood")
    if options.card and "skipped" not in data:
        served["ood"] = ood_summary(data)
        atomic_write_text(SERVED_DEFAULTS, json.dumps(served, indent=2) + "\n")
        if doc is not None:
            replace_ood_paragraph(doc, text)
        log(f"out-of-domain table -> {doc}, {SERVED_DEFAULTS}")
    return report


def replace_ood_paragraph(doc: Path, text: str) -> None:
    """Swap the out-of-domain paragraph of the shapes section (the judge writes it before its
    ``Questions:`` line) for ``text``; a section without one is an error, not a silent append."""
    body = doc.read_text()
    new, n = OOD_PARAGRAPH.subn(lambda _: text, body, count=1)
    if n != 1:
        raise SystemExit(f"{doc} has no out-of-domain paragraph: run `samelang eval pipeline --shapes --card` first")
    atomic_write_text(doc, new)


def write_cards(rows: list[ShapeRow], judge: ShapeJudge, results: dict, chosen: ShapeRow, how: str) -> None:
    """Every judged model's own card (retrievers and cross-encoders) gets the test-article table."""
    rule = primary_table(results, chosen, judge.latency)
    judged = [r.retriever for r in rows] + [r.reranker for r in rows if r.reranked]
    for name in dict.fromkeys(judged):
        card = REPO_MODELS / name / "README.md"
        if card.exists():
            body = "\n".join(["On the test-article shapes (`samelang eval pipeline --shapes`).", "",
                               *reader_table(results, chosen, name), "", *rule, "", how])  # fmt: skip
            replace_section(card, SHAPES_SECTION, body + "\n")


SHAPES_SECTION = "## What the reader gets, per collection shape"
