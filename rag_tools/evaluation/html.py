"""A self-contained HTML page of an ``EvalReport``: bar charts (inline SVG), a hit/miss table per
question, the misses with the results that came first. No script, no external file."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from .report import FIGURES, EvalReport, QuestionResult

__all__ = ["render_html"]

_COLOURS = ("#3b6fb6", "#e08a3c", "#4f9d5d", "#b0457a", "#7a6bb8", "#8c8c8c")
_LABELS = {"fact@5": "fact in top 5"}
_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:1100px;padding:0 1rem;color:#222}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2.2rem}table{border-collapse:collapse;margin:.6rem 0}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.hit{background:#d8f0dc}td.near{background:#fbeec5}td.miss{background:#f6d3d3}
.muted{color:#777}.tiles{display:flex;gap:1rem;flex-wrap:wrap}
.tile{border:1px solid #ddd;border-radius:6px;padding:.6rem 1rem;min-width:9rem}
.tile b{display:block;font-size:1.6rem}details{margin:.3rem 0}summary{cursor:pointer}
ol.top li{margin:.3rem 0}li.labelled{background:#d8f0dc}.warn{background:#fbeec5;padding:.5rem}
code{font-size:.9em}
"""


def _bars(groups: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]], title: str) -> str:
    """A grouped bar chart of values between 0 and 1: one group per name, one bar per series."""
    width, height, left, bottom, top = 880, 300, 40, 50, 30
    plot_w, plot_h = width - left - 10, height - bottom - top
    group_w = plot_w / max(1, len(groups))
    bar_w = group_w * 0.8 / max(1, len(series))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + plot_h * (1 - tick)
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{tick:g}</text>')
    for g, name in enumerate(groups):
        x0 = left + g * group_w + group_w * 0.1
        for s, (_, values) in enumerate(series):
            value = values[g]
            if value is None:
                continue
            x, h = x0 + s * bar_w, plot_h * value
            colour = _COLOURS[s % len(_COLOURS)]
            parts.append(
                f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" '
                f'fill="{colour}"><title>{escape(series[s][0])} {escape(name)}: {value:.3f}</title></rect>'
            )
            parts.append(
                f'<text x="{x + (bar_w - 2) / 2:.1f}" y="{top + plot_h - h - 4:.1f}" font-size="10" '
                f'text-anchor="middle">{value:.2f}</text>'
            )
        parts.append(
            f'<text x="{left + g * group_w + group_w / 2:.1f}" y="{top + plot_h + 18}" font-size="12" '
            f'text-anchor="middle">{escape(name)}</text>'
        )
    for s, (label, _) in enumerate(series):
        x = left + s * 110
        parts.append(
            f'<rect x="{x}" y="{height - 16}" width="12" height="12" fill="{_COLOURS[s % len(_COLOURS)]}"/>'
        )
        parts.append(f'<text x="{x + 17}" y="{height - 6}" font-size="12">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _rank_cell(result: QuestionResult) -> str:
    if result.rank == 1:
        return '<td class="n hit">1</td>'
    if result.rank is not None and result.rank <= 5:
        return f'<td class="n near">{result.rank}</td>'
    return f'<td class="n miss">{result.rank or "-"}</td>'


def _flag(value: bool | None) -> str:
    if value is None:
        return '<td class="muted">-</td>'
    return '<td class="hit">yes</td>' if value else '<td class="miss">no</td>'


def _question_table(report: EvalReport) -> str:
    by_mode = [{q.id: q for q in mode.questions} for mode in report.modes]
    answers = {a.id: a for a in report.answers.answers} if report.answers else {}
    head = "".join(f'<th colspan="2">{escape(m.mode)}</th>' for m in report.modes)
    sub = "<th>rank</th><th>fact</th>" * len(report.modes)
    if answers:
        head += '<th colspan="2">answer</th>'
        sub += "<th>fact</th><th>cites</th>"
    rows = [f"<tr><th rowspan='2'>id</th><th rowspan='2'>question</th>{head}</tr><tr>{sub}</tr>"]
    for qid, labelled in report.questions.items():
        cells = "".join(_rank_cell(m[qid]) + _flag(m[qid].fact_in_top5) for m in by_mode)
        if answers:
            cells += _flag(answers[qid].fact_found) + _flag(answers[qid].cites_page)
        rows.append(f"<tr><td>{escape(qid)}</td><td>{escape(str(labelled['question']))}</td>{cells}</tr>")
    return "<table>" + "".join(rows) + "</table>"


def _misses(report: EvalReport) -> str:
    parts = []
    for mode in report.modes:
        misses = [q for q in mode.questions if q.rank != 1 or q.fact_in_top5 is False]
        parts.append(f"<h3>{escape(mode.mode)}: {len(misses)} questions</h3>")
        for q in misses:
            labelled = report.questions[q.id]
            pages = [str(p) for p in labelled["pages"]]  # type: ignore[union-attr]
            where = f"rank {q.rank}" if q.rank else "labelled page not in the results"
            fact = "" if q.fact_in_top5 is not False else "; fact not in the top 5"
            items = "".join(
                f'<li class="{"labelled" if r.uri in pages else ""}"><code>{escape(r.uri)}</code> '
                f'<span class="muted">{escape(r.location)} · {r.score:.3f}</span><br>{escape(r.text)}</li>'
                for r in q.top
            )
            parts.append(
                f"<details><summary><b>{escape(q.id)}</b> ({where}{fact}): "
                f"{escape(str(labelled['question']))}</summary>"
                f"<p>Labelled: {', '.join(f'<code>{escape(p)}</code>' for p in pages)}"
                + (f"; fact: <q>{escape(str(labelled['fact']))}</q>" if labelled.get("fact") else "")
                + f"</p><ol class='top'>{items or '<li>no results</li>'}</ol></details>"
            )
    return "".join(parts)


def _answers(report: EvalReport) -> str:
    a = report.answers
    if a is None:
        return ""
    tiles = [
        ("answer states the fact", "-" if a.fact_rate is None else f"{a.fact_rate:.2f}"),
        ("cites a labelled page", f"{a.citation_rate:.2f}"),
        ("fragments", str(a.fragments)),
        ("escapes", str(a.escapes)),
    ]
    failed = [r for r in a.answers if r.fact_found is False or not r.cites_page or r.fragments or r.escapes]
    details = "".join(
        f"<details><summary><b>{escape(r.id)}</b>: {escape(str(report.questions[r.id]['question']))}</summary>"
        f"<p>{escape(r.answer) or '<i>no answer</i>'}</p>"
        f"<p class='muted'>cited: {escape(', '.join(r.cited) or 'nothing')}"
        + (f"; fragments: {escape(' | '.join(r.fragments))}" if r.fragments else "")
        + "</p></details>"
        for r in failed
    )
    tile_html = "".join(f'<div class="tile">{escape(label)}<b>{value}</b></div>' for label, value in tiles)
    return (
        f"<h2>Answers ({escape(a.model)}, a fresh thread per question)</h2><div class='tiles'>{tile_html}</div>"
        f"<h3>Answers with a miss, a fragment or an escape: {len(failed)}</h3>{details}"
    )


def render_html(report: EvalReport, *, title: str = "ragstream eval") -> str:
    """The report as one HTML page."""
    chart = _bars(
        [_LABELS.get(name, name) for name in FIGURES],
        [(m.mode, [m.figures.get(name) for name in FIGURES]) for m in report.modes],
        "Search, per mode",
    )
    head = "<tr><th>figure</th>" + "".join(f"<th>{escape(m.mode)}</th>" for m in report.modes) + "</tr>"
    rows = "".join(
        f"<tr><td>{escape(_LABELS.get(name, name))}</td>"
        + "".join(
            f'<td class="n">{"-" if m.figures.get(name) is None else format(m.figures[name], ".3f")}</td>'
            for m in report.modes
        )
        + "</tr>"
        for name in FIGURES
    )
    warning = (
        f"<p class='warn'>{len(report.unknown_pages)} labelled pages are not in the knowledge base: "
        f"{escape(', '.join(report.unknown_pages))}</p>"
        if report.unknown_pages
        else ""
    )
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>"
        f"<p class='muted'>{len(report.questions)} questions, {report.documents} documents, "
        f"{report.chunks} chunks, embedder <code>{escape(report.embedder)}</code>; top {report.depth} "
        f"results per question, pages ranked by their first result.</p>{warning}{chart}"
        f"<table>{head}{rows}</table>{_answers(report)}"
        f"<h2>Per question</h2><p class='muted'>Rank of the first labelled page (green: first, yellow: "
        f"top 5, red: lower or absent); whether a top-5 passage states the fact.</p>{_question_table(report)}"
        f"<h2>Misses, with what came first</h2>{_misses(report)}</body></html>"
    )
