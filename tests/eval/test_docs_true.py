"""Docs that stay true (issue 30, deliver 6): the README's results table and every picture in
the README and docs agree with the committed results they come from (docs/results.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpurag.eval.results_doc import (
    SOURCE_KEY,
    VALUES_KEY,
    figure_values,
    read_png_text,
    read_results,
)

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results.md"
README_COLUMNS = {"Recall@2": "recall@2", "Recall@5": "recall@5", "all-gold@8": "all_gold@8",
                  "MRR": "mrr"}


def _readme_table() -> dict[str, dict[str, dict[str, float]]]:
    """The README's results table: {set: {mode: {column: value}}}."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| set (passages) |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    out: dict[str, dict[str, dict[str, float]]] = {}
    current = None
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        if cells[0]:
            current = cells[0].split(" (")[0]
        out.setdefault(current, {})[cells[1]] = {
            README_COLUMNS[h]: float(v) for h, v in zip(header[2:], cells[2:], strict=True)}
    return out


def _images() -> list[tuple[Path, Path]]:
    """(document, image) for every Markdown image in the README and docs/."""
    docs = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [(doc, (doc.parent / m).resolve()) for doc in docs
            for m in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8"))]


def test_readme_table_equals_docs_results():
    results = read_results(RESULTS)
    table = _readme_table()
    assert table, "the README has a results table"
    for dataset, modes in table.items():
        assert dataset in results, f"README row {dataset!r} is not in docs/results.md"
        for mode, values in modes.items():
            assert results[dataset][mode] | values == results[dataset][mode], (
                f"README {dataset} {mode}: {values} but docs/results.md says "
                f"{ {k: results[dataset][mode][k] for k in values} }")


# Pictures that show no measured numbers (screenshots of a page): exempt from the check.
SCREENSHOTS = {"explain_sample.png"}


def test_every_picture_is_generated_from_a_committed_result_and_agrees_with_it():
    images = _images()
    assert images, "the README shows at least one picture"
    results = read_results(RESULTS)
    checked = 0
    for doc, image in images:
        assert image.is_file(), f"{doc.name} shows {image}, which does not exist"
        if image.name in SCREENSHOTS:
            continue
        checked += 1
        meta = read_png_text(image)
        assert SOURCE_KEY in meta, f"{image.name}: no {SOURCE_KEY} (drawn by hand?)"
        source, _, section = meta[SOURCE_KEY].partition("#")
        assert (REPO / source).resolve() == RESULTS, meta[SOURCE_KEY]
        shown = json.loads(meta[VALUES_KEY])
        assert shown == figure_values(results, section, tuple(shown)), (
            f"{image.name} shows {shown}, docs/results.md says otherwise")
    assert checked, "at least one results picture is checked"


def test_the_readme_figure_is_redrawn_from_docs_results(tmp_path):
    pytest.importorskip("matplotlib")
    from gpurag.eval.results_doc import draw_results_figure

    committed = read_png_text(REPO / "docs" / "img" / "eval_hotpotqa_train100.png")
    section = committed[SOURCE_KEY].partition("#")[2]
    fresh = read_png_text(draw_results_figure(RESULTS, section, tmp_path / "f.png"))
    assert fresh[VALUES_KEY] == committed[VALUES_KEY]
