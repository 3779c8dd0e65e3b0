"""``ragstream eval`` as a team runs it on its own labelled questions, over the sample corpus."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from rag_tools.evaluation import contains_fact, fragments, ranking_figures
from ragstream.cli import main

BAKERY = "harbor-street-bakery.html"
QUESTIONS = [
    # its page ranks first in every mode, and a top-5 passage states the fact
    {
        "id": "fridge",
        "question": "How cold do the bakery's fridges and cold room have to be?",
        "pages": [BAKERY],
        "fact": "0 to 5 °C",
    },
    # labelled with the wrong page: a miss, though the fact is found (on the page that ranks first)
    {
        "id": "wrong",
        "question": "How cold do the bakery's fridges and cold room have to be?",
        "pages": ["lumen-bikes.html"],
        "fact": "0 to 5 °C",
    },
    # the right page, a fact no passage states
    {
        "id": "port",
        "question": "Which port does the Kiteline server listen on by default since version 3?",
        "pages": ["release-notes.txt"],
        "fact": "listens on port 9999",
    },
    # a page the knowledge base does not hold, and no fact
    {
        "id": "ghost",
        "question": "How long is a Lumen carbon frame under warranty?",
        "pages": ["no-such-page.html"],
        "tags": ["extra keys are ignored"],
    },
]


@pytest.fixture
def data(corpus_kb_template: Path, tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    return data


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def _eval(data: Path, *args: str) -> int:
    return main(["eval", *args, "--data-dir", str(data)])


def test_figures_per_mode_misses_and_the_report(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = _write(tmp_path / "questions.jsonl", [QUESTIONS[0], "", *QUESTIONS[1:]])
    out, report = tmp_path / "out.json", tmp_path / "report.html"
    assert _eval(data, str(questions), "--json", str(out), "--report", str(report)) == 0
    printed = capsys.readouterr()
    assert "evaluating" in printed.err and "12/12" in printed.err  # the progress bar: 4 questions x 3 modes
    found = json.loads(out.read_text())
    assert [m["mode"] for m in found["modes"]] == ["hybrid", "vector", "text"]
    assert found["unknown_pages"] == ["no-such-page.html"]
    for mode in found["modes"]:
        by_id = {q["id"]: q for q in mode["questions"]}
        fridge, wrong, port, ghost = (by_id[i] for i in ("fridge", "wrong", "port", "ghost"))
        assert fridge["rank"] == 1 and fridge["top"][0]["uri"] == BAKERY
        assert fridge["figures"] == {
            "recall@1": 1.0,
            "recall@5": 1.0,
            "recall@10": 1.0,
            "MRR@10": 1.0,
            "nDCG@10": 1.0,
        }
        assert fridge["fact_in_top5"] is True
        assert wrong["rank"] != 1 and wrong["figures"]["recall@1"] == 0.0
        assert wrong["fact_in_top5"] is True  # the fact is on the bakery's page, which ranks first
        assert port["fact_in_top5"] is False
        assert ghost["rank"] is None and ghost["fact_in_top5"] is None
        assert ghost["figures"] == dict.fromkeys(fridge["figures"], 0.0)
        if wrong["rank"] is not None:
            assert wrong["figures"]["MRR@10"] == pytest.approx(1 / wrong["rank"])
        # the mode's figures are the means over the questions; fact@5 over those with a fact
        for name in fridge["figures"]:
            assert mode["figures"][name] == pytest.approx(sum(q["figures"][name] for q in by_id.values()) / 4)
        assert mode["figures"]["fact@5"] == pytest.approx(2 / 3)
    assert found["answers"] is None
    text = printed.out
    assert "| figure | hybrid | vector | text |" in text
    assert "| fact in top 5 | 0.667 | 0.667 | 0.667 |" in text
    assert (
        "warning: 1 labelled pages are not in the knowledge base (their questions miss): no-such-page.html"
        in text
    )
    assert f"  ghost (not in the results): first {found['modes'][0]['questions'][3]['top'][0]['uri']}" in text
    assert "Fact not in the top 5, hybrid: port" in text
    misses = text.split("Misses, hybrid")[1].split("Fact not in the top 5")[0]
    assert re.search(r"wrong \((rank \d+|not in the results)\)", misses), misses
    assert f"first {BAKERY}" in misses and "fridge" not in misses
    page = report.read_text()
    assert (
        page.startswith("<!doctype html>") and "<script" not in page and "http" not in page.split("<body>")[0]
    )
    assert page.count("<svg") == 1 and page.count("<rect") >= 3 * 6  # a bar per mode and figure
    assert "<summary><b>wrong</b> (rank" in page and "Labelled: <code>lumen-bikes.html</code>" in page
    assert '<li class="labelled"><code>release-notes.txt</code>' in page  # the port question's page is marked


def test_answers_with_the_offline_model(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = _write(tmp_path / "q.jsonl", QUESTIONS[:3])
    out = tmp_path / "out.json"
    assert (
        _eval(data, str(questions), "--modes", "hybrid", "--answers", "--no-progress", "--json", str(out))
        == 0
    )
    printed = capsys.readouterr()
    assert "evaluating" not in printed.err
    found = json.loads(out.read_text())
    assert [m["mode"] for m in found["modes"]] == ["hybrid"]
    answers = found["answers"]
    assert answers["model"] == "offline extractive model"
    by_id = {a["id"]: a for a in answers["answers"]}
    assert "0 to 5 °C" in by_id["fridge"]["answer"] and by_id["fridge"]["fact_found"] is True
    assert by_id["fridge"]["cites_page"] is True and BAKERY in by_id["fridge"]["cited"]
    assert by_id["wrong"]["cites_page"] is False  # it cites the bakery, not the page labelled
    assert by_id["port"]["fact_found"] is False and by_id["port"]["cites_page"] is True
    assert answers["fact_rate"] == pytest.approx(2 / 3)
    assert answers["citation_rate"] == pytest.approx(2 / 3)
    assert answers["fragments"] == sum(len(a["fragments"]) for a in by_id.values())
    assert "| answer states the fact | answer cites a labelled page | fragments | escapes |" in printed.out
    assert "| 0.667 | 0.667 |" in printed.out
    assert "no labelled page cited: wrong" in printed.out


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        (
            ['{"id": "a", "question": "q?", "pages": ["x.md"]}', '{"id": "b", "question": "q?"'],
            "line 2: not JSON (Expecting ',' delimiter at column 29)",
        ),
        (['{"id": "a", "question": "q?"}'], "line 1: field 'pages' is missing"),
        (
            ['{"id": "a", "question": "q?", "pages": []}'],
            "line 1: field 'pages': list should have at least 1 item",
        ),
        (
            ['{"id": "a", "question": "", "pages": ["x.md"]}'],
            "line 1: field 'question': string should have at least 1 character",
        ),
        (
            ['{"id": "a", "question": "q?", "pages": "x.md"}'],
            "line 1: field 'pages': input should be a valid list",
        ),
        (
            ['{"id": "a", "question": "q?", "pages": ["x.md"], "fact": 3}'],
            "line 1: field 'fact': input should be a valid string",
        ),
        (['["a", "q?"]'], "line 1: not a JSON object"),
        (
            [
                '{"id": "a", "question": "q?", "pages": ["x.md"]}',
                "",
                '{"id": "a", "question": "r?", "pages": ["y.md"]}',
            ],
            "line 3: field 'id': 'a' is the id of line 1 too",
        ),
        (["", "  "], "no questions in the file"),
    ],
)
def test_a_malformed_questions_file_is_one_line_naming_the_line_and_field(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str], says: str
) -> None:
    path = _write(tmp_path / "bad.jsonl", lines)
    assert _eval(data, str(path)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ragstream: {path}{' ' if 'line' in says else ': '}{says}"), err
    assert "\n" not in err


def test_a_missing_file_an_empty_knowledge_base_and_a_missing_extra(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _eval(data, str(tmp_path / "nope.jsonl")) == 2
    assert capsys.readouterr().err.strip() == f"ragstream: {tmp_path / 'nope.jsonl'}: no such file"
    questions = _write(tmp_path / "q.jsonl", QUESTIONS[:1])
    empty = tmp_path / "empty"
    assert _eval(empty, str(questions)) == 2
    assert capsys.readouterr().err.strip() == (
        f"ragstream: the knowledge base at {empty / 'kb'} holds no documents; ingest some first (ragstream ingest PATH)"
    )
    with pytest.raises(SystemExit) as exc:
        _eval(data, str(questions), "--modes", "hybrid,fuzzy")
    assert exc.value.code == 2
    assert "unknown search mode 'fuzzy'; use hybrid, vector, text" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ir_measures", None)  # not installed
    assert _eval(data, str(questions)) == 2
    assert capsys.readouterr().err.strip() == (
        "ragstream: ragstream eval (recall, MRR and nDCG by ir-measures) needs the 'eval' extra: "
        "pip install 'ragstream[eval]' (module 'ir_measures' is not installed)"
    )


def test_ranking_figures_count_a_labelled_page_at_its_rank() -> None:
    figures = ranking_figures(
        {"first": ["a"], "third": ["a"], "either": ["a", "b"], "absent": ["a"], "none": ["a"]},
        {"first": ["a", "x"], "third": ["x", "y", "a"], "either": ["x", "b"], "absent": ["x"], "none": []},
    )
    assert figures["first"] == {
        "recall@1": 1.0,
        "recall@5": 1.0,
        "recall@10": 1.0,
        "MRR@10": 1.0,
        "nDCG@10": 1.0,
    }
    assert figures["third"]["recall@1"] == 0.0 and figures["third"]["recall@5"] == 1.0
    assert figures["third"]["MRR@10"] == pytest.approx(1 / 3)
    assert figures["either"]["recall@5"] == 1.0  # any labelled page answers
    assert figures["either"]["MRR@10"] == pytest.approx(0.5)
    assert figures["absent"] == figures["none"] == dict.fromkeys(figures["first"], 0.0)


def test_facts_are_matched_without_case_whitespace_or_markdown_marks() -> None:
    assert contains_fact(
        "Use `pg\\_checksums`  to\nenable **checksums**.", "pg_checksums to enable Checksums"
    )
    assert contains_fact("bigint | 8 bytes | large-range integer", "bigint | 8 bytes")
    assert not contains_fact("eight bytes", "8 bytes")


def test_fragments_are_answer_sentences_starting_mid_phrase() -> None:
    answer = (
        "Plain VACUUM (without FULL) simply reclaims space [1]. more than a plain VACUUM would [2]. "
        "pg_dump writes a script [3]. os.path.join() joins paths. , and then it stops.\n- the list item"
    )
    assert fragments(answer) == ["more than a plain VACUUM would.", ", and then it stops.", "- the list item"]
    # a sentence end inside inline code or after "i.e." is not one: what follows is no fragment
    quoted = (
        "Use a `try: ... finally:` suite [1]. A monotonic clock, i.e. a clock that cannot go backwards [2]."
    )
    assert fragments(quoted) == []
