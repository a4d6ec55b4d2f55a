"""Weights of the bundled int8 MiniLM ONNX file as a float32 BERT state dict (no ``onnx`` needed).

The bundled file stores every large matrix as ``NAME_q`` (int8) and ``NAME_scale`` (float32,
one scale per row or column), dequantized in the graph by ``Cast`` + ``Mul``. The encoder's
linear weights are anonymous (``val_49`` ...) and used as ``MatMul(x, W)`` followed by
``Add(_, <layer>.bias)``: the bias name gives the weight its BERT name, and ``W`` is stored
transposed (``(in, out)``). :func:`minilm_state_dict` returns HF-BERT names
(``embeddings.word_embeddings.weight``, ``encoder.layer.0.attention.self.query.weight``, ...)
with torch's ``(out, in)`` layout.

The ONNX protobuf is read with a small wire-format reader (only ``ModelProto.graph``, its
nodes and initializers), so converting needs neither ``onnx`` nor ``protobuf``; the tests check
it against ``onnx.numpy_helper`` where ``onnx`` is installed. :func:`cached_state_dict_path`
writes the converted weights once, as safetensors, under the user cache directory, keyed by
the ONNX file's hash.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpurag.errors import ConfigError

# ONNX TensorProto.DataType -> NumPy dtype
_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64,
           9: np.bool_, 10: np.float16, 11: np.float64}
_PREFIX = "inner."  # the exporter's wrapper module; stripped from initializer names
CONVERTER_VERSION = 1  # bump when the conversion changes: old cache files are then ignored


@dataclass
class OnnxGraph:
    """The parts of an ONNX graph the converter needs."""

    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    nodes: list[tuple[str, list[str], list[str]]] = field(default_factory=list)  # op, in, out


# -- protobuf wire format -----------------------------------------------------------------------
def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf: memoryview):
    """Yield ``(field_number, wire_type, value)``; value is an int or a memoryview."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def _packed_ints(value, wire: int) -> list[int]:
    if wire == 0:
        return [value]
    out, pos = [], 0
    while pos < len(value):
        v, pos = _varint(value, pos)
        out.append(v)
    return out


def _tensor(buf: memoryview) -> tuple[str, np.ndarray]:
    dims: list[int] = []
    dtype = 0
    name = ""
    raw: bytes | None = None
    typed: dict[int, list] = {}
    for number, wire, value in _fields(buf):
        if number == 1:
            dims += _packed_ints(value, wire)
        elif number == 2:
            dtype = value
        elif number == 8:
            name = bytes(value).decode()
        elif number == 9:
            raw = bytes(value)
        elif number == 4:  # float_data (packed)
            typed.setdefault(4, []).append(np.frombuffer(bytes(value), "<f4") if wire == 2
                                           else np.array([value], np.uint32).view("<f4"))
        elif number in (5, 7):  # int32_data / int64_data (varints)
            typed.setdefault(number, []).append(np.array(_packed_ints(value, wire), np.int64))
        elif number == 14 and value == 1:
            raise ConfigError(f"ONNX initializer {name or '?'} uses external data: unsupported")
    if dtype not in _DTYPES:
        raise ConfigError(f"ONNX initializer {name}: unsupported data type {dtype}")
    np_dtype = np.dtype(_DTYPES[dtype]).newbyteorder("<")
    if raw is not None:
        arr = np.frombuffer(raw, dtype=np_dtype)
    elif typed:
        arr = np.concatenate(next(iter(typed.values())))
        arr = arr.view(np.uint16).view(np.float16) if dtype == 10 else arr.astype(np_dtype)
    else:
        arr = np.zeros(0, dtype=np_dtype)
    return name, arr.astype(np_dtype.newbyteorder("="), copy=True).reshape(dims)


def _node(buf: memoryview) -> tuple[str, list[str], list[str]]:
    inputs, outputs, op = [], [], ""
    for number, _, value in _fields(buf):
        if number == 1:
            inputs.append(bytes(value).decode())
        elif number == 2:
            outputs.append(bytes(value).decode())
        elif number == 4:
            op = bytes(value).decode()
    return op, inputs, outputs


def read_onnx(path: str | os.PathLike) -> OnnxGraph:
    """Initializers (as NumPy arrays) and nodes of the ONNX model at ``path``."""
    data = memoryview(Path(path).read_bytes())
    graph = OnnxGraph()
    try:
        for number, _, value in _fields(data):
            if number != 7:  # ModelProto.graph
                continue
            for g_number, _, g_value in _fields(value):
                if g_number == 1:
                    graph.nodes.append(_node(g_value))
                elif g_number == 5:
                    name, arr = _tensor(g_value)
                    graph.initializers[name] = arr
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the ONNX model {path}: {exc}") from exc
    if not graph.initializers:
        raise ConfigError(f"no weights found in the ONNX model {path}")
    return graph


# -- conversion ---------------------------------------------------------------------------------
def _dequantized(graph: OnnxGraph) -> dict[str, np.ndarray]:
    """Every initializer with the ``_q``/``_scale`` pairs folded into float32 ``NAME``."""
    init = graph.initializers
    out: dict[str, np.ndarray] = {}
    for name, arr in init.items():
        if name.endswith("_q") and name[:-2] + "_scale" in init:
            scale = init[name[:-2] + "_scale"].astype(np.float32)
            out[name[:-2]] = arr.astype(np.float32) * scale
        elif not name.endswith("_scale") or name[:-6] + "_q" not in init:
            out[name] = arr
    return out


def minilm_state_dict(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """HF-BERT-named float32 weights (``(out, in)`` linears) of the MiniLM ONNX file."""
    graph = read_onnx(path)
    weights = _dequantized(graph)
    state: dict[str, np.ndarray] = {}
    for name, arr in weights.items():
        if name.startswith(_PREFIX) and arr.dtype == np.float32:
            state[name[len(_PREFIX) :]] = arr
    # MatMul(x, W) -> Add(_, bias): name W after the bias.
    consumers: dict[str, tuple[str, list[str]]] = {}
    for op, inputs, _ in graph.nodes:
        for i in inputs:
            consumers.setdefault(i, (op, inputs))
    for op, inputs, outputs in graph.nodes:
        if op != "MatMul" or len(inputs) != 2 or inputs[1] not in weights:
            continue
        add = consumers.get(outputs[0])
        if add is None or add[0] != "Add":
            continue
        bias = next((i for i in add[1] if i.startswith(_PREFIX) and i.endswith(".bias")), None)
        if bias is None:
            continue
        state[bias[len(_PREFIX) : -len(".bias")] + ".weight"] = np.ascontiguousarray(
            weights[inputs[1]].T)
    missing = [k for k in _expected_keys(state) if k not in state]
    if missing:
        raise ConfigError(f"{path} is not a MiniLM/BERT export: missing {missing[:3]}")
    return state


def _expected_keys(state: dict[str, np.ndarray]) -> list[str]:
    layers = 1 + max((int(k.split(".")[2]) for k in state if k.startswith("encoder.layer.")),
                     default=-1)
    keys = [f"embeddings.{e}.weight" for e in
            ("word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm")]
    for i in range(max(layers, 1)):
        p = f"encoder.layer.{i}."
        keys += [p + s + ".weight" for s in (
            "attention.self.query", "attention.self.key", "attention.self.value",
            "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
            "output.dense", "output.LayerNorm")]
    return keys


def default_cache_root() -> Path:
    """``$GPURAG_CACHE_DIR/models``, else ``$XDG_CACHE_HOME/gpurag/models`` (``~/.cache``)."""
    from gpurag.settings import current

    return current().cache_root("models")


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cached_state_dict_path(onnx_path: str | os.PathLike,
                           cache_root: str | os.PathLike | None = None) -> Path | None:
    """The converted safetensors file of ``onnx_path`` (written on first use, atomically), or
    None when safetensors is missing or the cache directory is not writable."""
    try:
        from safetensors.numpy import save_file
    except ImportError:
        return None
    root = Path(cache_root) if cache_root else default_cache_root()
    target = root / f"minilm-{file_digest(onnx_path)[:24]}-v{CONVERTER_VERSION}.safetensors"
    if target.is_file():
        return target
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".tmp")
        os.close(fd)
        try:
            save_file(minilm_state_dict(onnx_path), tmp,
                      metadata={"source": str(onnx_path), "converter": str(CONVERTER_VERSION)})
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:
        return None
    return target
