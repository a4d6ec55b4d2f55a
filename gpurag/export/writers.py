"""Write :class:`GraphFrames` as GraphML or GEXF (one file, via networkx) or as Parquet or CSV
(a folder with ``nodes`` and ``edges`` tables, the form cuDF/cuGraph and pandas load directly).
Every file is written to a temporary sibling and renamed into place."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from gpurag.errors import ConfigError
from gpurag.export.frames import GraphFrames

FORMATS = ("graphml", "gexf", "parquet", "csv")


def _atomic_file(path: Path, write: Callable[[Path], None]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create a file in {path.parent} ({exc.strerror})",
                      str(path)) from None
    os.close(fd)
    try:
        write(Path(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; exports are for sharing
        os.replace(tmp, path)
    except OSError as exc:  # name the output asked for, not the temporary file beside it
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def to_networkx(frames: GraphFrames):
    """An undirected ``networkx.Graph``; each node also gets ``label`` = its name (what Gephi
    shows)."""
    import networkx as nx

    graph = nx.Graph()
    nodes = frames.nodes.assign(label=frames.nodes["name"])
    attrs = nodes.drop(columns=["id"]).to_dict("records")
    graph.add_nodes_from(zip(nodes["id"].tolist(), attrs, strict=True))
    edge_attrs = frames.edges.drop(columns=["source", "target"]).to_dict("records")
    graph.add_edges_from(zip(frames.edges["source"].tolist(), frames.edges["target"].tolist(),
                             edge_attrs, strict=True))
    return graph


def _write_tables(frames: GraphFrames, out: Path, fmt: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, table in (("nodes", frames.nodes), ("edges", frames.edges)):
        path = out / f"{name}.{fmt}"
        if fmt == "parquet":
            _atomic_file(path, lambda tmp, t=table: t.to_parquet(tmp, index=False))
        else:
            _atomic_file(path, lambda tmp, t=table: t.to_csv(tmp, index=False))
        written.append(path)
    return written


def export_graph(frames: GraphFrames, out: str | os.PathLike, fmt: str) -> list[Path]:
    """Write ``frames`` to ``out`` in ``fmt``; returns the files written."""
    fmt = fmt.lower()
    out = Path(out)
    if fmt not in FORMATS:
        raise ConfigError(f"export format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt in ("parquet", "csv"):
        return _write_tables(frames, out, fmt)
    try:
        import networkx as nx
    except ImportError as exc:  # pragma: no cover - networkx is a core dependency
        raise ConfigError("GraphML/GEXF export needs networkx (pip install networkx)") from exc
    graph = to_networkx(frames)
    writer = nx.write_graphml if fmt == "graphml" else nx.write_gexf
    _atomic_file(out, lambda tmp: writer(graph, tmp))
    return [out]


def read_tables(folder: str | os.PathLike, fmt: str = "parquet") -> GraphFrames:
    """Read back a Parquet/CSV export (for tests and notebooks)."""
    folder = Path(folder)
    read = pd.read_parquet if fmt == "parquet" else pd.read_csv
    nodes, edges = read(folder / f"nodes.{fmt}"), read(folder / f"edges.{fmt}")
    levels = sum(c.startswith("community_l") for c in nodes.columns)
    return GraphFrames(nodes=nodes, edges=edges, community_levels=levels)
