"""bench/plot.py: a PNG of the expected size next to each result JSON; clear errors otherwise."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from gpurag.eval.plot import DPI, PlotError
from tests.eval.test_plot import EXPECTED as EVAL_SIZE
from tests.eval.test_plot import assert_drawn, fake_result

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_plot", REPO / "bench" / "plot.py")
bench_plot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_plot)


def size_of(kind: str) -> tuple[int, int]:
    w, h = bench_plot.SIZES[kind]
    return int(w * DPI), int(h * DPI)


def ppr_rows(scale: float) -> list[dict]:
    return [{"q": q, "p50_ms": scale * q, "p95_ms": 2 * scale * q, "min_ms": scale, "runs": 3,
             "per_query_p50_ms": scale / q ** 0.3, "queries_per_s": q / scale}
            for q in (1, 64, 1024)]


def scale_result() -> dict:
    """The shape bench/scale.py writes (two corpus sizes, two graphs, one failed case each)."""
    def build(n: int) -> dict:
        return {"prefix": n, "passages": n, "text_bytes": 345 * n, "wall_s": n / 3.4,
                "passages_per_s": 3.4, "peak_rss_bytes": 2_000_000 * n + 2**30,
                "index_bytes": 20_000 * n, "index_over_text": 60.0,
                "stages": {"chunk_embed": {"s": n / 5.8, "passages_per_s": 5.8},
                           "extract": {"s": n / 1200, "passages_per_s": 1200.0}}}

    def graph(edges: int) -> dict:
        return {"edges_requested": edges, "edges": edges, "nodes": edges // 10,
                "ppr_backend": "scipy", "ppr": ppr_rows(edges / 1e4),
                "knn": [{**r, "n": edges // 10, "dim": 384, "k": 10} for r in ppr_rows(50)],
                "peak_rss_bytes": 2**31}

    return {"date": "2026-11-30T13:16:26+00:00", "device": "cpu",
            "machine": {"cpu": "Intel Xeon", "cpu_count": 2},
            "build": [build(1000), build(10000), {"prefix": 100000, "error": "exit code 1"}],
            "graph": [graph(10**6), graph(10**7), {"edges_requested": 10**8,
                                                    "skipped": "over the budget"}]}


def llm_clients_result() -> dict:
    row = {"requests": 8, "ok": 8, "errors": {}, "wall_s": 1.5, "requests_per_s": 5.3,
           "client_cpu_s": 0.1, "client_cpu_ms_per_request": 12.0}
    return {"date": "2026-11-30", "versions": {"openai": "3"}, "args": {"inflight": 256},
            "scenarios": {name: {"gpurag": dict(row), "openai": dict(row)}
                          for name in ("llama_cpp", "fake_ok", "http500", "timeout")}}


def write(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind, make", [("scale", scale_result),
                                        ("llm_clients", llm_clients_result)])
def test_png_next_to_the_json(tmp_path, kind, make):
    src = write(tmp_path / f"{kind}_2026-11-30_cpu.json", make())
    out = bench_plot.plot_file(src)
    assert out == src.with_suffix(".png")
    assert_drawn(out, size_of(kind))


def test_folder_sweep(tmp_path, capsys):
    """Every known result in a folder is drawn (the committed serve_load result, an eval
    result); other JSON is skipped with a note; a truncated result is an error (status 1)."""
    shutil.copy(REPO / "bench" / "results" / "serve_load_2026-11-30_cpu.json", tmp_path)
    write(tmp_path / "eval.json", {**fake_result(), "questions": []})
    write(tmp_path / "notes.json", {"what": "something else"})
    (tmp_path / "scale_cut.json").write_text('{"build": [{"passages": 1', encoding="utf-8")
    assert bench_plot.main([str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert_drawn(tmp_path / "serve_load_2026-11-30_cpu.png", size_of("serve_load"))
    assert_drawn(tmp_path / "eval.png", EVAL_SIZE)
    assert "skipped" in out and "notes.json: not a result of a known benchmark" in out
    assert not (tmp_path / "notes.png").exists()
    assert "scale_cut.json: cannot plot: not readable JSON" in err
    assert not (tmp_path / "scale_cut.png").exists()


def failed_scale() -> dict:
    data = scale_result()
    data["build"] = [{"prefix": 1000, "error": "exit code 1"}]
    data["graph"] = [{"edges_requested": 10**6, "skipped": "over the budget"}]
    return data


def scale_without(key: str) -> dict:
    data = scale_result()
    data[key] = None
    return data


def llm_missing_openai() -> dict:
    data = copy.deepcopy(llm_clients_result())
    del data["scenarios"]["http500"]["openai"]
    return data


@pytest.mark.parametrize("make, message", [
    (failed_scale, "no build or graph case finished"),
    (lambda: scale_without("graph"), "'graph' is not a list"),
    (lambda: {"scenarios": {}, "versions": {}}, "no scenario"),
    (llm_missing_openai, "scenario 'http500' lacks gpurag/openai rows"),
    (lambda: {"runs": [], "throughput_ratio_on_off": 1.0}, "no finished run"),
    (lambda: {"hello": 1}, "not a result of a known benchmark"),
    (lambda: [], "not a result of a known benchmark"),
])
def test_bad_results_name_the_file_and_write_nothing(tmp_path, capsys, make, message):
    src = write(tmp_path / "r.json", make())
    with pytest.raises(PlotError, match="cannot plot") as err:
        bench_plot.plot_file(src)
    assert str(src) in str(err.value) and message in str(err.value)
    assert bench_plot.main([str(src)]) == 1  # a file named on the command line: an error
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [src]


def test_serve_load_titles_state_their_conditions():
    """Two runs with opposite conclusions must not share one title: the title carries the
    ratio and the conditions (threads, load) it was measured under."""
    serve_load_title = bench_plot.serve_load_title
    titles = {}
    for name in ("serve_load_2026-11-30_cpu.json", "serve_load_2026-11-30_cpu_threads1.json"):
        titles[name] = serve_load_title(json.loads((REPO / "bench" / "results" / name)
                                                   .read_text(encoding="utf-8")))
    assert len(set(titles.values())) == 2
    assert "x0.80" in titles["serve_load_2026-11-30_cpu.json"]
    assert "embedder threads: all cores" in titles["serve_load_2026-11-30_cpu.json"]
    assert "embedder threads 1" in titles["serve_load_2026-11-30_cpu_threads1.json"]
    assert "load avg 13.8->15.2" in titles["serve_load_2026-11-30_cpu_threads1.json"]
