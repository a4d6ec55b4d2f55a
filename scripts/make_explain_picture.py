"""Redraw docs/img/explain_sample.png, the README's picture of the explain page: the sample
corpus's first question, its gold passages outlined, screenshotted in headless Chromium.

Usage: python scripts/make_explain_picture.py [--out docs/img/explain_sample.png]
       [--work DIR] (the sample index is built there; default a temporary folder)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "sample"
SIZE = "1200,440"  # what the README shows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(REPO / "docs" / "img" / "explain_sample.png"))
    ap.add_argument("--work")
    args = ap.parse_args()
    chromium = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                     if shutil.which(n)), None)
    if chromium is None:
        print("make_explain_picture: no headless Chromium (chromium, chromium-browser or "
              "google-chrome) on PATH", file=sys.stderr)
        return 1
    sys.path.insert(0, str(REPO))
    from gpurag import Index
    from gpurag.export.chain_page import write_page

    first = json.loads((SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[0])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        index_dir = work / "sample.index"
        index = (Index.open(index_dir) if (index_dir / "manifest.json").exists()
                 else Index.build(SAMPLE / "corpus.jsonl", index_dir, show_progress=False))
        result = index.query(first["question"], k=5)
        page = write_page(result, work / "explain.html", gold=set(first["gold_ids"]))
        out = Path(args.out).resolve()
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--user-data-dir={work / 'chrome'}",
                        f"--window-size={SIZE}", f"--screenshot={out}", page.as_uri()],
                       check=True, capture_output=True, timeout=180)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
