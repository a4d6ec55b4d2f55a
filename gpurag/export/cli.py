"""``gpurag export INDEX --format graphml|gexf|parquet|csv -o OUT [--passages]``."""

from __future__ import annotations

import argparse

from gpurag.export.writers import FORMATS


def cmd_export(args: argparse.Namespace) -> int:
    from gpurag.export import export_graph, graph_frames
    from gpurag.store import open_index_dir

    index = open_index_dir(args.index)
    frames = graph_frames(index, passages=args.passages)
    written = export_graph(frames, args.out, args.format)
    kinds = frames.edges["kind"].value_counts().to_dict()
    print(f"exported {len(frames.nodes)} nodes and {len(frames.edges)} edges "
          f"({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}; "
          f"{frames.community_levels} community levels) to "
          + ", ".join(str(p) for p in written))
    return 0


def add_export_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write the knowledge graph as GraphML, GEXF, Parquet or CSV")
    p.add_argument("index", help="index directory")
    p.add_argument("--format", choices=FORMATS, default="graphml",
                   help="graphml/gexf: one file (Gephi, networkx, igraph); parquet/csv: a folder "
                        "with nodes and edges tables (pandas, cuDF/cuGraph)")
    p.add_argument("-o", "--out", required=True, help="output file (graphml/gexf) or folder")
    p.add_argument("--passages", action="store_true",
                   help="also export passage nodes and entity-passage mention edges")
    p.set_defaults(func=cmd_export)
