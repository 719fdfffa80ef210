"""TransformerLens's side of bench/study.py: the same study of every head over a batch of pairs, in TransformerLens's own environment.

TransformerLens 4 needs transformers >= 5.9 while bertfn's oracle is pinned to 4.57, so this side runs
in a virtual environment of its own (bench/patching_tl.py says how to make it), as a child process of
bench/study.py (``--transformer-lens PYTHON``); it imports nothing of bertfn's and reads the workload
as one JSON object on stdin: folder, cleans, corrupteds, right, wrong, threads, rounds.

What it runs, as TransformerLens's docs write activation patching: ``TransformerBridge.boot_transformers``
over the checkpoint folder, ``run_with_cache`` on the batch of clean texts, then
``transformer_lens.patching.get_act_patch_attn_head_out_all_pos`` on the batch of corrupted tokens: for
each of the L x nh heads one forward of the whole batch with that head's ``hook_z`` taken from the clean
cache. Its helpers take a metric returning a scalar by default (``reduce="scalar"``); a metric returning
the (batch,) per-example values with ``reduce="none"`` keeps them, at no extra forward (its result, a
``PatchingResult``, has ``values`` laid out (L, nh, batch)). The helpers call the model with tokens only
(no attention mask, no token types): right for unpadded texts of one length, as the study's are.

Prints one JSON object: TransformerLens's version, the seconds of each timed study, and the
(pairs, L, nh) per-example map.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")  # the helper's per-head progress bar
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: nothing to fetch


def main() -> None:
    job = json.loads(sys.stdin.read())
    import torch
    import transformer_lens
    from transformer_lens import patching
    from transformer_lens.model_bridge import TransformerBridge

    torch.set_num_threads(int(job["threads"]))
    torch.set_grad_enabled(False)
    model = TransformerBridge.boot_transformers(job["folder"], device="cpu")
    tok = model.tokenizer
    clean_ids = tok(job["cleans"], return_tensors="pt").input_ids  # (pairs, S): one length, no padding
    corrupted_ids = tok(job["corrupteds"], return_tensors="pt").input_ids  # (pairs, S)
    mask = corrupted_ids[0].tolist().index(tok.mask_token_id)  # at one place in every text
    right_id, wrong_id = tok.convert_tokens_to_ids(job["right"]), tok.convert_tokens_to_ids(job["wrong"])

    def metric(logits: torch.Tensor) -> torch.Tensor:  # logits (pairs, S, V) -> (pairs,)
        return logits[:, mask, right_id] - logits[:, mask, wrong_id]

    def study() -> torch.Tensor:  # (pairs, L, nh)
        _, cache = model.run_with_cache(clean_ids)
        result = patching.get_act_patch_attn_head_out_all_pos(model, corrupted_ids, cache, metric, reduce="none")
        return result.values.permute(2, 0, 1)  # (L, nh, pairs) -> (pairs, L, nh)

    times, values = [], None
    for _ in range(int(job["rounds"])):
        start = time.perf_counter()
        values = study()
        times.append(time.perf_counter() - start)
    version = getattr(transformer_lens, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("transformer_lens")
    print(json.dumps({"version": version, "times": times, "per_example": values.tolist()}))


if __name__ == "__main__":
    main()
