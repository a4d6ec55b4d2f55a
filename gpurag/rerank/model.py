"""A query-conditioned graph attention network that scores candidate subgraphs.

Input per node: the scalar features of :mod:`gpurag.rerank.features` and the node's embedding,
met by the question through a learned low-rank interaction ``(P e) * (P q)`` (``Q`` apart from
``P`` with ``tied=False``). Every layer sees the question again: its input is ``[h, W_l q]``
before a GATv2 convolution (Brody, Alon & Yahav, "How Attentive are Graph Attention
Networks?", ICLR 2022; or GAT, Velickovic et al., ICLR 2018) with edge features, followed by a
residual connection and layer norm.

Outputs: a relevance logit per node (node level) and per subgraph (subgraph level: the root's
state, an attention-pooled summary of the subgraph and the question, plus a linear skip on
the root's scalar features, so a learned blend of the dense and PPR signals is always there).
Plain torch + torch_geometric; no optional extension package is needed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch_geometric.nn import GATConv, GATv2Conv
from torch_geometric.utils import scatter, softmax

from gpurag.rerank.features import EDGE_FEATURES, NODE_FEATURES


@dataclass(frozen=True)
class GATConfig:
    """Shape of the network (stored in checkpoints)."""

    emb_dim: int = 384
    n_features: int = len(NODE_FEATURES)
    edge_dim: int = len(EDGE_FEATURES)
    hidden: int = 16
    layers: int = 2
    heads: int = 2
    dropout: float = 0.3
    conv: str = "gatv2"  # or "gat"
    tied: bool = True  # one projection for nodes and question: a low-rank similarity

    def to_dict(self) -> dict:
        return asdict(self)


class QueryGAT(nn.Module):
    """Scores a PyG ``Batch`` of candidate subgraphs (see ``features.build_batch``)."""

    def __init__(self, cfg: GATConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg = cfg or GATConfig()
        h = cfg.hidden
        if cfg.conv not in ("gat", "gatv2"):
            raise ValueError(f"conv must be 'gat' or 'gatv2', not {cfg.conv!r}")
        conv_cls = GATv2Conv if cfg.conv == "gatv2" else GATConv
        self.node_proj = nn.Linear(cfg.emb_dim, h, bias=False)
        self.query_proj = (self.node_proj if cfg.tied
                           else nn.Linear(cfg.emb_dim, h, bias=False))
        self.inp = nn.Linear(cfg.n_features + h, h)
        self.query_layers = nn.ModuleList(nn.Linear(cfg.emb_dim, h) for _ in range(cfg.layers))
        self.convs = nn.ModuleList(
            conv_cls(2 * h, h, heads=cfg.heads, concat=False, edge_dim=cfg.edge_dim,
                     add_self_loops=True, fill_value="mean", dropout=cfg.dropout)
            for _ in range(cfg.layers))
        self.norms = nn.ModuleList(nn.LayerNorm(h) for _ in range(cfg.layers))
        self.node_head = nn.Linear(h, 1)
        self.pool_gate = nn.Linear(h, 1)
        self.query_out = nn.Linear(cfg.emb_dim, h)
        self.readout = nn.Sequential(nn.Linear(3 * h, h), nn.ELU(), nn.Linear(h, 1))
        self.skip = nn.Linear(cfg.n_features, 1)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """``(node_logits (N,), subgraph_logits (S,))`` for a batch of subgraphs."""
        q_of_node = batch.question[batch.batch]
        e = self.node_proj(batch.emb)[batch.emb_index]
        qv = batch.qvec
        inter = self.drop(e * self.query_proj(qv)[q_of_node])
        # a checkpoint trained with fewer features reads the first ones (new ones are appended)
        x = batch.x[:, :self.cfg.n_features]
        h = nn.functional.elu(self.inp(torch.cat([x, inter], dim=1)))
        for conv, norm, ql in zip(self.convs, self.norms, self.query_layers, strict=True):
            z = torch.cat([h, ql(qv)[q_of_node]], dim=1)
            h = norm(h + nn.functional.elu(conv(self.drop(z), batch.edge_index, batch.edge_attr)))
        node_logits = self.node_head(h).squeeze(-1)
        n_sub = batch.ptr.numel() - 1
        gate = softmax(self.pool_gate(h).squeeze(-1), batch.batch, num_nodes=n_sub)
        pooled = scatter(h * gate.unsqueeze(-1), batch.batch, dim=0, dim_size=n_sub,
                         reduce="sum")
        roots = batch.ptr[:-1]
        q_last = self.query_out(qv)[batch.question]
        sub_logits = (self.readout(torch.cat([h[roots], pooled, q_last], dim=1)).squeeze(-1)
                      + self.skip(x[roots]).squeeze(-1))
        return node_logits, sub_logits


FORMAT = "gpurag-gat/1"


@dataclass(frozen=True)
class ScorerSettings:
    """How candidate subgraphs are extracted for the network (stored in checkpoints)."""

    fanout: tuple[int, ...] = (5, 2)
    max_nodes: int = 16

    def to_dict(self) -> dict:
        return {"fanout": list(self.fanout), "max_nodes": self.max_nodes}

    @classmethod
    def from_dict(cls, d: dict) -> ScorerSettings:
        return cls(tuple(int(f) for f in d.get("fanout", (5, 2))), int(d.get("max_nodes", 16)))


def save_checkpoint(path, model: QueryGAT, settings: ScorerSettings) -> None:
    """Write the weights as safetensors, with the network and extraction settings inside."""
    import json

    from safetensors.torch import save_file

    from gpurag._version import __version__

    tensors = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    meta = {"format": FORMAT, "config": json.dumps(model.cfg.to_dict()),
            "settings": json.dumps(settings.to_dict()), "gpurag_version": __version__}
    save_file(tensors, str(path), metadata=meta)


def load_checkpoint(path, device: str = "cpu") -> tuple[QueryGAT, ScorerSettings]:
    """The network (in eval mode, on ``device``) and settings stored in a safetensors file."""
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path} is not a gpurag GAT checkpoint (format {meta.get('format')!r})")
    cfg = GATConfig(**json.loads(meta["config"]))
    model = QueryGAT(cfg)
    model.load_state_dict(load_file(str(path), device="cpu"))
    model.to(device).eval()
    return model, ScorerSettings.from_dict(json.loads(meta.get("settings", "{}")))
