"""Export an index's knowledge graph in standard formats (GraphML, GEXF, Parquet, CSV).

``graph_frames`` turns an opened index into two tables (nodes, edges); the writers put those
tables into files that Gephi, networkx, igraph and cuGraph/cuDF read directly.
"""

from gpurag.export.frames import GraphFrames, graph_frames
from gpurag.export.writers import FORMATS, export_graph

__all__ = ["FORMATS", "GraphFrames", "export_graph", "graph_frames"]
