// The bias-audit page: reads what the server can audit from GET /info, sends POST /diagnose, and
// draws the answer. Plain DOM (no framework, no build step, nothing from a CDN); every text from
// the server or the user goes in through textContent, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);

function headers() {
  const h = { "content-type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h.authorization = "Bearer " + key;
  return h;
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

// The API's own words: "<error>: <detail>" from its JSON error body, else the status line.
async function apiError(response) {
  let text = await response.text();
  try {
    const body = JSON.parse(text);
    if (body && body.detail) text = body.error + ": " + body.detail;
  } catch (e) { /* not JSON: show it as it came */ }
  return "The server answered " + response.status + ". " + (text || response.statusText);
}

async function loadPairs() {
  const r = await fetch("/info", { headers: headers() });
  if (!r.ok) {
    showError(await apiError(r) + (r.status === 401 ? " Enter the API key, then reload the page." : ""));
    return;
  }
  clearError();
  const langs = ((await r.json()).audit || {}).xquad_langs || [];
  const select = $("pair");
  select.replaceChildren();
  for (let i = 0; i < langs.length; i++) {
    for (let j = i + 1; j < langs.length; j++) {
      const pair = langs[i] + "-" + langs[j];
      select.append(new Option(pair, pair, pair === "en-zh", pair === "en-zh"));
    }
  }
  if (!select.options.length) select.append(new Option("(the index holds no two XQuAD languages)", ""));
}

// Labelled queries from the text box: a JSON list, or one JSON object per line.
function parseQueries(text) {
  text = text.trim();
  if (!text) throw new Error("Paste at least one labelled query.");
  if (text.startsWith("[")) {
    try { return JSON.parse(text); } catch (e) { throw new Error("The list is not valid JSON: " + e.message); }
  }
  return text.split("\n").filter((l) => l.trim()).map((line, i) => {
    try { return JSON.parse(line); } catch (e) { throw new Error("Line " + (i + 1) + " is not valid JSON: " + e.message); }
  });
}

function request() {
  const body = {};
  const source = document.querySelector("input[name=source]:checked").value;
  if (source === "dataset") {
    body.dataset = "xquad";
    body.pair = $("pair").value;
    body.split = $("split").value;
  } else if (source === "sample") {
    body.sample = Number($("sample").value);
    body.seed = Number($("seed").value || 0);
  } else {
    body.queries = parseQueries($("queries").value);
  }
  if ($("rerank").value) body.rerank = $("rerank").value === "true";
  if ($("k").value) body.k = Number($("k").value);
  if ($("bias-k").value) body.bias_k = Number($("bias-k").value);
  return body;
}

function cell(row, value, cls) {
  const td = document.createElement("td");
  td.textContent = value;
  if (cls) td.className = cls;
  row.append(td);
  return td;
}

function fmt(x, digits) {
  return x === null || x === undefined ? "n/a" : Number(x).toFixed(digits);
}

// A header row of ``labels`` for table ``t``.
function header(t, labels) {
  const row = t.createTHead().insertRow();
  for (const label of labels) {
    const th = document.createElement("th");
    th.textContent = label;
    row.append(th);
  }
}

function table(el, columns, rows) {
  el.replaceChildren();
  header(el, columns);
  const body = el.createTBody();
  for (const values of rows) {
    const tr = body.insertRow();
    values.forEach((v, i) => cell(tr, v[0], v[1] || (i === 0 ? "text" : "")));
  }
}

function renderPerLang(out) {
  const rows = Object.entries(out.per_query_lang).map(([lang, a]) => [
    [lang, "text"], [String(a.queries)], [fmt(a.mean_max_r, 2)], [fmt(a.max_r_norm, 1)],
    [fmt(a.comp_at_10, 1)], [fmt(a.same_lang_top1, 1)], [String(a.censored)],
  ]);
  table($("per-lang"), ["query language", "queries", "mean Max@R", "Max@R norm (%)", "Comp@10 (%)",
    "top-1 in query language (%)", "censored"], rows);
}

// A language heatmap: a table whose cells are shaded by their share (0% white, 100% full blue); ``first``
// (optional) is a reference row drawn above the others, under its own label.
function heatmap(el, corner, matrix, first) {
  const rows = Object.keys(matrix);
  const cols = [...new Set(rows.flatMap((r) => Object.keys(matrix[r])).concat(
    first ? Object.keys(first.values) : []))].sort();
  const t = document.createElement("table");
  header(t, [corner, ...cols]);
  const body = t.createTBody();
  const line = (label, values, cls) => {
    const tr = body.insertRow();
    if (cls) tr.className = cls;
    const th = document.createElement("th");
    th.textContent = label;
    tr.append(th);
    for (const c of cols) {
      const v = values[c] || 0;
      const td = cell(tr, v.toFixed(1) + "%", "cell");
      td.dataset.value = String(v);
      td.style.background = "rgba(31, 94, 196, " + (v / 100).toFixed(3) + ")";
      td.style.color = v > 55 ? "white" : "inherit";
    }
  };
  if (first) line(first.label, first.values, "reference");
  for (const r of rows) line(r, matrix[r]);
  el.replaceChildren(t);
}

function renderHeatmap(matrix) {
  heatmap($("heatmap"), "query \\ top-1", matrix);
}

function renderBias(bias) {
  $("bias-k-shown").textContent = String(bias.k);
  heatmap($("bias-heatmap"), "query \\ results", bias.result_langs, { label: "index", values: bias.index_langs });
  const rows = Object.keys(bias.result_langs).map((lang) => [
    [lang, "text"], [String(bias.queries[lang])], [fmt(bias.jsd[lang], 3)], [fmt(bias.sees_other[lang], 1)],
  ]);
  table($("bias-lang"), ["query language", "queries", "JSD from the index (bits)",
    "queries seeing another language (%)"], rows);
}

function renderWorst(out) {
  const worst = out.queries.filter((q) => q.censored !== null).sort((a, b) =>
    (b.censored - a.censored) || ((b.max_r ?? 0) - (a.max_r ?? 0))).slice(0, 25);
  const rows = worst.map((q) => [
    [q.query, "text"], [q.lang || "?"], [q.censored ? "> k" : String(q.max_r)],
    [Object.entries(q.ranks).map(([id, r]) => id + ": " + (r ?? "> k")).join(", "), "text"],
    [(q.top1_id || "none") + " (" + (q.top1_lang || "?") + ")", "text"],
  ]);
  table($("worst"), ["query", "lang", "Max@R", "ranks of the relevant versions", "top-1"], rows);
}

function render(out) {
  const a = out.aggregate;
  const c = out.components;
  const b = out.bias;
  $("summary").textContent = out.queries.length + " queries (" + out.labelled + " labelled) over "
    + out.pool_size + " documents; retriever " + c.retriever + ", reranker " + (c.reranker || "none")
    + ", candidates " + c.candidates + ". Top " + b.k + ": mean JSD from the index " + fmt(b.mean_jsd, 3)
    + " bits, " + fmt(b.sees_other_all, 1) + "% of queries see another language."
    + (a ? " Labelled (depth " + out.k + "): mean Max@R " + fmt(a.mean_max_r, 2) + ", Max@R norm "
      + fmt(a.max_r_norm, 1) + "%, Comp@10 " + fmt(a.comp_at_10, 1) + "%." : "");
  renderBias(b);
  renderHeatmap(out.top1_lang_matrix);
  $("labelled").hidden = !a;
  $("worst-section").hidden = !a;
  if (a) {
    renderPerLang(out);
    renderWorst(out);
  }
  $("results").hidden = false;
}

async function run(event) {
  event.preventDefault();
  clearError();
  let body;
  try {
    body = request();
  } catch (e) {
    showError(e.message);
    return;
  }
  $("run").disabled = true;
  $("status").textContent = "Running the audit...";
  try {
    const r = await fetch("/diagnose", { method: "POST", headers: headers(), body: JSON.stringify(body) });
    if (!r.ok) {
      showError(await apiError(r));
      return;
    }
    render(await r.json());
    $("status").textContent = "Done.";
  } catch (e) {
    showError("The request failed: " + e.message);
  } finally {
    $("run").disabled = false;
    if ($("status").textContent !== "Done.") $("status").textContent = "";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("audit-form").addEventListener("submit", run);
  $("api-key").addEventListener("change", loadPairs);
  loadPairs().catch((e) => showError("Could not read GET /info: " + e.message));
});
