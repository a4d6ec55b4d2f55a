"""`gpurag eval --plot`: a real PNG of the expected size, and clear errors on bad results."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from gpurag.cli import main
from gpurag.eval.plot import DPI, EVAL_FIGSIZE, PlotError, plot_eval

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"
EXPECTED = (int(EVAL_FIGSIZE[0] * DPI), int(EVAL_FIGSIZE[1] * DPI))
# Builds read the session's embedding cache (no test here counts the embedder's calls).
pytestmark = pytest.mark.usefixtures("shared_embeddings")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header (after checking the signature and IHDR chunk)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def assert_drawn(path: Path, size: tuple[int, int]) -> None:
    """A decodable PNG of ``size`` pixels with actual drawing on it (not one flat colour)."""
    from matplotlib.image import imread

    assert path.stat().st_size > 10_000
    assert png_size(path) == size
    pixels = imread(path)
    assert pixels.shape[:2] == (size[1], size[0])
    assert pixels[..., :3].std() > 0.05  # bars, text and axes, not a blank canvas


def fake_result() -> dict:
    def row(r2: float) -> dict:
        part = {"n": 3, "recall@2": r2, "recall@5": r2 + 0.1, "all_gold@8": r2, "mrr": r2}
        return {"recall@2": r2, "recall@5": r2 + 0.1, "all_gold@8": r2, "mrr": r2,
                "by_hops": {"2": part, "3": part}, "by_type": {"bridge": part}}

    return {"dataset": "toy", "n_questions": 6, "index": {"counts": {"documents": 9}},
            "modes": {"bm25": row(0.3), "graph": row(0.6)}, "unavailable": {}}


def test_eval_cli_writes_the_plot(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GPURAG_PROGRESS", "0")
    out = tmp_path / "plots" / "eval.png"
    rc = main(["-q", "eval", str(SAMPLE), "--modes", "bm25,dense,graph",
               "--index", str(tmp_path / "idx"), "--plot", str(out)])
    assert rc == 0
    assert str(out) in capsys.readouterr().out
    assert_drawn(out, EXPECTED)
    assert not [p for p in out.parent.iterdir() if p != out]  # no temporary file left
    reference = tmp_path / "plots" / "reference"
    reference.write_bytes(b"")
    assert out.stat().st_mode == reference.stat().st_mode  # usual permissions, not 0600
    reference.unlink()

    # Nothing to plot (every mode unavailable): a clear error, exit status 2, no file.
    empty = tmp_path / "empty.png"
    rc = main(["-q", "eval", str(SAMPLE), "--modes", "nonsense",
               "--index", str(tmp_path / "idx"), "--plot", str(empty)])
    assert rc == 2
    assert "cannot plot: no mode was evaluated (unavailable: nonsense)" in capsys.readouterr().err
    assert not empty.exists()


def test_plot_of_a_result_dict(tmp_path):
    out = plot_eval(fake_result(), tmp_path / "r.png")
    assert_drawn(out, EXPECTED)


@pytest.mark.parametrize("result, message", [
    ({}, "no 'modes' object"),
    ([1, 2], "not a JSON object"),
    ({"modes": {}, "unavailable": {"graph": "no graph"}},
     "no mode was evaluated (unavailable: graph)"),
    ({"modes": {"bm25": {"recall@2": 0.5}}}, "mode 'bm25' has no numeric 'recall@5'"),
    ({"modes": {"bm25": {"recall@2": 1, "recall@5": 1, "all_gold@8": "x"}}}, "'all_gold@8'"),
    ({"modes": {"bm25": "oops"}}, "mode 'bm25' is not an object"),
])
def test_bad_results_give_a_clear_error_and_no_file(tmp_path, result, message):
    out = tmp_path / "bad.png"
    with pytest.raises(PlotError, match=r"res\.json: cannot plot") as err:
        plot_eval(result, out, source="res.json")
    assert message in str(err.value)
    assert not out.exists()


def test_missing_matplotlib_is_refused_before_the_eval(tmp_path, capsys, monkeypatch):
    for name in ("matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    rc = main(["-q", "eval", str(SAMPLE), "--index", str(tmp_path / "idx"),
               "--plot", str(tmp_path / "p.png")])
    assert rc == 2
    assert "pip install 'gpurag[viz]'" in capsys.readouterr().err
    assert not (tmp_path / "idx").exists()  # nothing was built
