"""bertfn.corpus on GPUs with Ray: where a callable class's model runs on a worker Ray assigned GPUs to.

The quick tests fake Ray's runtime context (no Ray started); the slow ones start a local Ray that declares two GPUs
(``ray.init(num_gpus=2)``) on this machine, which may have none: Ray assigns the ids and sets CUDA_VISIBLE_DEVICES all
the same, and this torch (a CPU build here) decides what comes of it. No run here puts a model on a real GPU.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import pytest
import torch

import bertfn
from bertfn.corpus import FillMask
from bertfn.corpus.registry import worker_device
from bertfn.errors import DependencyError

FIX = "install a CUDA build of torch on the workers"
CPU = "leave num_gpus out of map_batches to run on the CPU"


@pytest.fixture
def assigned(monkeypatch):
    """``assigned(ids, visible=...)``: Ray's module, as a worker to which Ray gave GPUs ``ids`` sees it, stands in for
    ``ray``; CUDA_VISIBLE_DEVICES is ``visible`` (None: unset), as Ray leaves it (by default the ids themselves)."""
    def fake(ids: list[str], visible: str | None = "same", initialized: bool = True) -> None:
        context = SimpleNamespace(get_accelerator_ids=lambda: {"GPU": list(ids), "TPU": []})
        monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(is_initialized=lambda: initialized,
                                                                get_runtime_context=lambda: context))
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(ids) if visible == "same" else visible)
    return fake


def test_the_gpu_ray_assigned_is_the_first_cuda_device(assigned, monkeypatch):
    """Ray gave the worker GPU 1 and set CUDA_VISIBLE_DEVICES=1: torch calls it cuda:0. Two GPUs: the model goes on
    the first. With RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES the variable is the machine's: the GPU's place in it,
    or its id where it is unset."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assigned(["1"])
    assert worker_device(None) == "cuda:0"
    assigned(["2", "3"])
    assert worker_device(None) == "cuda:0"
    assigned(["3"], visible="1,3")
    assert worker_device(None) == "cuda:1"
    assigned(["1"], visible=None)
    assert worker_device(None) == "cuda:1"


def test_no_gpu_assigned_or_no_ray_is_the_cpu(assigned, monkeypatch):
    assigned([])  # a worker without num_gpus, or the driver
    assert worker_device(None) is None
    assigned(["1"], initialized=False)
    assert worker_device(None) is None
    monkeypatch.delitem(sys.modules, "ray")
    assert worker_device(None) is None


def test_the_callers_device_wins(assigned):
    """Even on a worker with a GPU and a torch without CUDA: no error, the caller's device."""
    assigned(["1"])
    assert worker_device("cpu") == "cpu"
    assert worker_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU here")
def test_a_gpu_assigned_to_a_torch_without_cuda_is_one_line_error(assigned, monkeypatch):
    assigned(["1"])
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU build, even where this torch is PyPI's CUDA build
    with pytest.raises(DependencyError) as e:
        worker_device(None)
    message = str(e.value)
    assert "\n" not in message
    assert "GPU 1" in message and f"({torch.__version__})" in message and "built without CUDA" in message
    assert FIX in message and CPU in message
    monkeypatch.setattr(torch.version, "cuda", "12.4")  # a CUDA build on a machine whose GPU it cannot see
    with pytest.raises(DependencyError, match=r"built with CUDA 12\.4 but sees no GPU \(CUDA_VISIBLE_DEVICES='1'\)"):
        worker_device(None)


def test_mapper_runs_where_worker_device_says(assigned, tiny_folder):
    """FillMask reports its model's device: the CPU with no GPU assigned or with the caller's device="cpu"; on a GPU
    assigned to a torch without CUDA, the error at construction, before the model loads."""
    assigned([])
    assert FillMask(str(tiny_folder)).device == torch.device("cpu")
    assigned(["1"])
    assert FillMask(str(tiny_folder), device="cpu").device == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(DependencyError, match="GPU 1"):
            FillMask(str(tiny_folder))


# --- a local Ray that declares two GPUs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_with_gpus():
    """Two CPUs and two GPUs declared (there need be none), no dashboard, a small object store; this module's classes
    go to the workers by value (their sys.path lacks tests/)."""
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, object_store_memory=80 * 2**20, log_to_driver=False)
    yield ray
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


class Where:
    """For map_batches: each row gets the GPU ids Ray gave its worker, CUDA_VISIBLE_DEVICES there, and
    :func:`worker_device`'s choice with torch.cuda.is_available() made True for the choice alone."""

    def __init__(self) -> None:
        import ray

        self.ids = ",".join(ray.get_runtime_context().get_accelerator_ids()["GPU"])
        self.visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        real, torch.cuda.is_available = torch.cuda.is_available, lambda: True
        try:
            self.device = worker_device(None)
        finally:
            torch.cuda.is_available = real

    def __call__(self, batch: dict) -> dict:
        n = len(batch["id"])
        return {"id": batch["id"], "ids": [self.ids] * n, "visible": [self.visible] * n, "device": [self.device] * n}


class FillMaskWhere(FillMask):
    """FillMask with a ``device`` column: where the worker's model is."""

    def __call__(self, batch: dict) -> dict:
        out = super().__call__(batch)
        out["device"] = [str(self.device)] * len(out["result"])
        return out


@pytest.mark.slow
def test_each_ray_worker_takes_its_gpu_as_cuda_0(ray_with_gpus):
    """num_gpus=1, two workers: Ray gives them GPUs 0 and 1 and sets CUDA_VISIBLE_DEVICES to each one's id, so each
    chooses cuda:0 (the check of what worker_device reads of Ray, on a real Ray)."""
    ds = ray_with_gpus.data.from_items([{"id": i} for i in range(40)])
    rows = ds.map_batches(Where, batch_size=4, num_gpus=1, concurrency=2).take_all()
    assert {(r["ids"], r["visible"], r["device"]) for r in rows} == {("0", "0", "cuda:0"), ("1", "1", "cuda:0")}


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU here")
def test_fill_mask_on_ray_gpus_with_a_cpu_torch_stops_at_construction(ray_with_gpus, tiny_folder):
    """FillMask with num_gpus=1 on workers whose torch has no CUDA: the run stops with the workers' one-line error,
    raised building the class, naming the GPU Ray assigned and the fix."""
    ds = ray_with_gpus.data.from_items([{"id": i, "text": "the cat sat on the [MASK] ."} for i in range(16)])
    out = ds.map_batches(FillMask, fn_constructor_kwargs={"model": str(tiny_folder)}, batch_size=4, num_gpus=1,
                         concurrency=2)
    with pytest.raises(ray_with_gpus.exceptions.RayActorError) as e:
        out.take_all()
    message = str(e.value)
    assert ".__init__()" in message  # the creation task
    line = next(line for line in message.splitlines() if line.startswith("bertfn.errors.DependencyError: "))
    assert "Ray assigned this worker GPU " in line and FIX in line and CPU in line
    assert line.split("GPU ")[1].split(" ")[0] in ("0", "1")


@pytest.mark.slow
def test_fill_mask_on_ray_gpus_with_the_callers_device(ray_with_gpus, tiny_folder):
    """device="cpu" given: the workers Ray gave a GPU each run the model on the CPU, and the rows are fill_mask's."""
    texts = ["the cat sat on the [MASK] .", "no mask here"] * 8
    ds = ray_with_gpus.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    rows = ds.map_batches(FillMaskWhere, fn_constructor_kwargs={"model": str(tiny_folder), "device": "cpu", "top_k": 2},
                          batch_size=4, num_gpus=1, concurrency=2).take_all()
    assert {r["device"] for r in rows} == {"cpu"}
    want = bertfn.fill_mask(texts[0], bertfn.load(tiny_folder), top_k=2)
    for row in rows:
        if "[MASK]" in row["text"]:
            assert row["error"] is None
            assert [a["token_str"] for a in json.loads(row["result"])] == [a["token_str"] for a in want]
        else:
            assert row["result"] is None and "has no [MASK]" in row["error"]
