"""What ``gpurag info`` reports: device, the implementation of each component, versions."""

from __future__ import annotations

import platform
from typing import Any

from gpurag.device import cuda_available, has_module, version_label


def component_plan(runtime: Any) -> dict[str, str]:
    """What each part of ``runtime`` is (:meth:`gpurag.runtime.Runtime.describe`), with the
    libraries that are not parts (the GNN stack, BM25)."""
    torch_v = version_label("torch")
    return {
        **runtime.describe(),
        "gnn": (f"{torch_v} + {version_label('torch-geometric') or 'torch-geometric missing'}"
                if torch_v else "torch not installed (pip install 'gpurag[gnn]')"),
        "bm25": version_label("bm25s") or "missing",
    }


def environment_info(runtime: Any = None) -> dict[str, Any]:
    """The device and what the runtime holds (default: the runtime of the environment; a
    device setting it cannot honour is reported, and the CPU's runtime shown)."""
    from gpurag.runtime import Runtime

    device_error = None
    if runtime is None:
        try:
            runtime = Runtime.create()
        except Exception as exc:
            runtime, device_error = Runtime(device="cpu"), str(exc)
    from gpurag._version import __version__

    info: dict[str, Any] = {
        "gpurag": __version__,
        "python": platform.python_version(),
        "device": runtime.device,
        "cuda_available": cuda_available(),
        "cupy": has_module("cupy"),
        "components": component_plan(runtime),
    }
    if device_error:
        info["device_error"] = device_error
    return info


def manifest_info(m: Any, path: Any) -> dict[str, Any]:
    """The facts of an index's manifest that ``gpurag info`` and ``Index.info`` report;
    ``built_with`` is what the build ran."""
    return {
        "path": str(path),
        "format_version": m.format_version,
        "gpurag_version": m.gpurag_version,
        "created": m.created,
        "counts": m.counts,
        "built_with": m.components,
        # name@version as updates read it back (an index from before the build profile:
        # default@1, or default+custom@1 where a recorded constant differs)
        "build_profile": _build_profile_label(m.config),
        "ingest": m.extra.get("ingest", {}),
        "timings_s": m.extra.get("timings_s", {}),
        "bytes": sum(f["bytes"] for f in m.files.values()),
    }


def _build_profile_label(config: dict[str, Any]) -> str:
    from gpurag.config import stored_plan

    plan = stored_plan(config)
    return f"{plan.profile}@{plan.profile_version}"


def index_info(path: str, verify: bool = False) -> dict[str, Any]:
    """Manifest facts of an index, checked as on open (every file's sha256 with ``verify``)."""
    from gpurag.embed.cache import cache_stats
    from gpurag.store import layout, open_index_dir

    d = open_index_dir(path, verify=verify)
    d.close()
    cache = cache_stats(layout.sibling(d.root, layout.EMBED_CACHE_SUFFIX))
    return {**manifest_info(d.manifest, d.root), "verified_checksums": verify,
            "embed_cache": cache}


def format_info(report: dict[str, Any]) -> str:
    """Human-readable rendering of an info report."""
    env = report["environment"]
    lines = [f"gpurag {env['gpurag']} (python {env['python']})",
             f"device: {env['device']}" + (f"  ({env['device_error']})"
                                           if env.get("device_error") else ""),
             "components:"]
    lines += [f"  {k:<8} {v}" for k, v in env["components"].items()]
    if "index" in report:
        idx = report["index"]
        lines += ["", f"index: {idx['path']}",
                  f"  format {idx['format_version']}, built by gpurag {idx['gpurag_version']} "
                  f"at {idx['created']}, {idx['bytes'] / 1e6:.1f} MB",
                  "  counts: " + ", ".join(f"{k}={v}" for k, v in idx["counts"].items()),
                  "  built with:"]
        lines += [f"    {k:<10} {v}" for k, v in idx["built_with"].items()]
        if idx["timings_s"]:
            lines.append("  stage times: " + ", ".join(
                f"{k}={v:.2f}s" for k, v in idx["timings_s"].items()))
        skipped = idx["ingest"].get("skipped", {})
        if skipped:
            lines.append("  skipped input: " + ", ".join(f"{n} {r}" for r, n in skipped.items()))
        if idx["verified_checksums"]:
            lines.append("  checksums: all files verified")
        cache = idx.get("embed_cache")
        if cache:
            count = f"{cache['vectors']:,} vectors" if cache["vectors"] is not None else "?"
            lines.append(f"  embedding cache: {cache['path']} ({count}, "
                         f"{cache['bytes'] / 1e6:.1f} MB; GPURAG_EMBED_CACHE=off: none)")
    return "\n".join(lines)
