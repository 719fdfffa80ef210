"""Ray Data on a local Ray instance: bertfn.corpus.FillMask in map_batches gives the single-process results."""

from __future__ import annotations

import json

import pytest
import ray  # the test extra installs ray[data]

from bertfn.corpus import FillMask, run_file


@pytest.fixture(scope="module")
def local_ray():
    """Two CPUs, no dashboard, a small object store: as quick to start as Ray gets."""
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20, log_to_driver=False)
    yield
    ray.shutdown()


def test_map_batches_equals_single_process(local_ray, mlm_checkpoint, tmp_path):
    folder, _ = mlm_checkpoint
    texts = ["the cat sat on the [MASK] .", "i [MASK] you [MASK] well", "paris is the [MASK] of france .",
             "no mask here", "when in rome , do as the [MASK] do .", "[MASK] [MASK] [MASK]"]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": texts[i % len(texts)]}) + "\n" for i in range(1200)),
                   encoding="utf-8")

    # Read first (materialize): on 2 CPUs, two workers of 1 CPU each would leave none for the read tasks.
    ds = ray.data.read_json(str(src)).materialize()
    out = ds.map_batches(FillMask, fn_constructor_kwargs={"model": str(folder), "top_k": 3}, batch_size=256,
                         compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1)
    rows = sorted(out.take_all(), key=lambda r: r["id"])

    single = tmp_path / "single.jsonl"
    run_file(src, single, str(folder), field="text", top_k=3, progress=False)
    expected = [json.loads(line) for line in single.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == list(range(1200))
    for row, want in zip(rows, expected):
        assert row["text"] == want["text"]
        if "error" in want:
            assert row["result"] is None
            assert row["error"] == want["error"].replace(f"line {want['line']}", "the text", 1)
        else:
            assert row["error"] is None
            got = json.loads(row["result"])
            assert _tokens(got) == _tokens(want["result"])
            assert _scores(got) == pytest.approx(_scores(want["result"]), abs=1e-5)


def _tokens(result):
    return [_tokens(r) for r in result] if isinstance(result, list) else (result["token"], result["sequence"])


def _scores(result) -> list[float]:
    return [s for r in result for s in _scores(r)] if isinstance(result, list) else [result["score"]]
