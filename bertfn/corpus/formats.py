"""A finished file run's JSON Lines as compact files beside it: ``.npy`` (embeddings) or ``.parquet`` (any task).

JSON Lines is what a run writes, flushes and resumes; once every line is written, :func:`convert`
makes ``out.npy`` (embed: an (N, H) float32 array, row n-1 for input line n, NaN where a line holds an
error: ``np.load("out.npy")``) or ``out.parquet`` (a row per line, its columns the line's keys, vectors
as float32 lists: ``pd.read_parquet("out.parquet")``). ``bertfn embed --input ... --format npy``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy

from ..errors import DependencyError, InputError

FORMATS = ("jsonl", "npy", "parquet")


def _rows(jsonl: Path) -> list[dict]:
    with open(jsonl, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def convert(jsonl: str | Path, fmt: str) -> Path:
    """Write the run output ``jsonl`` as ``fmt`` (``"npy"`` or ``"parquet"``) beside it; returns the new file's path."""
    jsonl = Path(jsonl)
    if fmt not in FORMATS[1:]:
        raise InputError(f"format must be one of {', '.join(map(repr, FORMATS))}, got {fmt!r}")
    path = jsonl.with_suffix("." + fmt)
    rows = _rows(jsonl)
    if fmt == "npy":
        vectors = [r.get("result") for r in rows]
        sizes = {len(v) for v in vectors if isinstance(v, list) and all(isinstance(x, float) for x in v)}
        if len(sizes) != 1 or any(v is not None and not isinstance(v, list) for v in vectors):
            raise InputError(f"--format npy holds one vector per line (bertfn embed); the results of {jsonl} are "
                             "not vectors of one length: use --format parquet")
        out = numpy.full((len(rows), sizes.pop()), numpy.nan, dtype=numpy.float32)
        for i, v in enumerate(vectors):
            if v is not None:
                out[i] = v
        numpy.save(path, out)
        return path
    try:
        import pandas as pd
        import pyarrow as pa
    except ImportError:
        raise DependencyError("--format parquet needs pandas and pyarrow: pip install pandas pyarrow "
                              "(or bertfn[test]); JSON Lines is written either way") from None
    table = pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False)
    if "result" in table.column_names and pa.types.is_list(table.schema.field("result").type) \
            and pa.types.is_floating(table.schema.field("result").type.value_type):
        table = table.set_column(table.column_names.index("result"), "result",
                                 table.column("result").cast(pa.list_(pa.float32())))
    import pyarrow.parquet as pq

    pq.write_table(table, path)
    return path
