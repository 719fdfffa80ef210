"""TransformerLens's side of bench/patching.py: the same sweep over heads, run in TransformerLens's own environment.

TransformerLens 4 needs transformers >= 5.9 while bertfn's oracle is pinned to 4.57, so this side runs
in a virtual environment of its own, as a child process of bench/patching.py (``--transformer-lens
PYTHON``); it imports nothing of bertfn's and reads the workload from bench/patching.py's arguments.

    python -m venv bench/.work/tl-venv
    bench/.work/tl-venv/bin/pip install torch==2.13.0 transformer_lens "transformers>=5.9"

What it runs, as TransformerLens's docs write activation patching: ``TransformerBridge.boot_transformers``
over the same checkpoint folder (BertForMaskedLM, TransformerLens 4's replacement for ``HookedEncoder``),
``run_with_cache`` on the clean text, then ``transformer_lens.patching.get_act_patch_attn_head_out_all_pos``
on the corrupted tokens: for each of the L x nh heads one forward pass with that head's ``hook_z`` (its
context, before the output projection) taken from the clean cache. Its patching helpers call the model
with tokens only (no attention mask, no token types): right for two unpadded texts of equal length.

Prints one JSON object: TransformerLens's version, the seconds of each timed sweep, and the (L, nh) map.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")  # the helper's per-head progress bar, 144 lines of it
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: nothing to fetch


def main() -> None:
    folder, clean, corrupted, right, wrong, threads, rounds = sys.argv[1:8]
    import torch
    import transformer_lens
    from transformer_lens import patching
    from transformer_lens.model_bridge import TransformerBridge

    torch.set_num_threads(int(threads))
    torch.set_grad_enabled(False)
    model = TransformerBridge.boot_transformers(folder, device="cpu")
    tok = model.tokenizer
    clean_ids = tok(clean, return_tensors="pt").input_ids  # (1, S)
    corrupted_ids = tok(corrupted, return_tensors="pt").input_ids  # (1, S)
    mask = corrupted_ids[0].tolist().index(tok.mask_token_id)
    right_id, wrong_id = tok.convert_tokens_to_ids(right), tok.convert_tokens_to_ids(wrong)

    def metric(logits: torch.Tensor) -> torch.Tensor:  # logits (1, S, V)
        return logits[0, mask, right_id] - logits[0, mask, wrong_id]

    def sweep() -> torch.Tensor:  # (L, nh)
        _, cache = model.run_with_cache(clean_ids)
        return patching.get_act_patch_attn_head_out_all_pos(model, corrupted_ids, cache, metric)

    times, values = [], None
    for _ in range(int(rounds)):
        start = time.perf_counter()
        values = sweep()
        times.append(time.perf_counter() - start)
    version = getattr(transformer_lens, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("transformer_lens")
    print(json.dumps({"version": version, "times": times, "map": values.tolist()}))


if __name__ == "__main__":
    main()
