"""The table engine: pandas on every device (no GPU dataframe library is used by any stage,
so none is reported)."""

from __future__ import annotations

from typing import Any

from gpurag.device import package_version


class PandasTables:
    """pandas: the frames every stage reads and writes (Parquet through pyarrow)."""

    def __init__(self) -> None:
        self.implementation = "pandas " + (package_version("pandas") or "?")

    @staticmethod
    def read_parquet(path: Any, columns: list[str] | None = None) -> Any:
        import pandas as pd

        return pd.read_parquet(path, columns=columns)


def tables_part(device: str) -> PandasTables:
    """The table engine on ``device`` (pandas)."""
    return PandasTables()
