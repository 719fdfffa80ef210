"""What the benchmark runs on: a bert-base-shaped checkpoint and the sentences it fills.

bert-base-uncased cannot be downloaded here, so :func:`build_checkpoint` writes one with the same
shapes (12 layers, H=768, 12 heads, I=3072, V=30522), random weights from transformers' own
initialiser, and a 30522-entry WordPiece vocabulary laid out like bert-base's ([PAD] 0, [UNK] 100,
[CLS] 101, [SEP] 102, [MASK] 103) whose words are the ones the benchmark sentences use. Timing
does not depend on the weights' values, only on the shapes, so the numbers carry over to the real
model (pass ``--model`` with a real folder to check).

:func:`batch_texts` gives the batch workload: sentences of mixed length, evenly spread over
8..128 tokens ([CLS] and [SEP] included), each with exactly one [MASK]. Every word is chosen to be
one token in the model's vocabulary, so the lengths hold for any BERT vocabulary, not only ours.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROME = "When in Rome, do as the [MASK] do."
"""The single-sentence workload: 12 tokens with [CLS] and [SEP] in bert-base-uncased's vocabulary."""

NOUNS = ("people city river king queen man woman child dog cat house road market song book letter ship "
         "garden bridge church school teacher student doctor farmer soldier village mountain island "
         "storm morning evening winter summer friend family story window door table bread water fire").split()
VERBS = ("saw found built loved made took gave kept left heard watched followed crossed carried painted "
         "visited opened closed sold bought wrote read sang").split()
ADJECTIVES = ("old young small big quiet loud dark bright cold warm long short new ancient great little "
              "red blue green white black happy tired").split()
LINKS = ("and but so then while because after before when").split()
PLACES = ("rome paris london athens venice florence naples vienna madrid lisbon").split()
EXTRA = ("the a an of to in on at as do is was are were be it they we you he she romans".split()
         + list(".,;:!?'-") + list("abcdefghijklmnopqrstuvwxyz0123456789"))

SPECIALS = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
VOCAB_SIZE = 30522


def vocabulary() -> list[str]:
    """30522 entries: bert-base's special-token layout, the sentences' words, then unused fillers."""
    words = list(dict.fromkeys(EXTRA + NOUNS + VERBS + ADJECTIVES + LINKS + PLACES))
    words += [w + "s" for w in NOUNS] + ["##s", "##ing", "##ed", "##er", "##ly"]
    vocab = [SPECIALS.get(i, f"[unused{i}]") for i in range(104)] + words
    vocab += [f"[unused{i}]" for i in range(len(vocab), VOCAB_SIZE)]
    return vocab


def build_checkpoint(folder: Path, seed: int = 0, **config_overrides) -> Path:
    """Write a random-init ``BertForMaskedLM`` (bert-base config unless overridden) as a hub-style folder.

    ``save_pretrained`` (config.json + model.safetensors) plus vocab.txt and tokenizer.json, i.e. the
    files ``bertfn.load`` and ``transformers.pipeline`` both read.
    """
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**config_overrides)).eval()
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "vocab.txt").write_text("\n".join(vocabulary()) + "\n", encoding="utf-8")
    transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    return folder


def random_checkpoint(workdir: Path) -> Path:
    """The benchmarks' bert-base-shaped random checkpoint in ``workdir``, built once by :func:`build_checkpoint`."""
    folder = workdir / "bert-base-random"
    if not (folder / "model.safetensors").is_file():
        print(f"building a bert-base-shaped random checkpoint in {folder} ...", file=sys.stderr)
        build_checkpoint(folder)
    return folder


def batch_texts(tokenizer, max_tokens: int = 128, n: int = 64, seed: int = 0, mask: bool = True) -> list[str]:
    """``n`` sentences of 8..``max_tokens`` tokens (evenly spread, shuffled), one [MASK] each (none with
    ``mask=False``: the same sentences whole, for scoring).

    tokenizer: a ``bertfn.Tokenizer`` (only ``token_to_id`` is used to keep one-token words).
    Sentences chain simple clauses ("the old king crossed the river and ..."), end with a full stop,
    and hide one random word behind [MASK].
    """
    rng = random.Random(seed)
    one = lambda ws: [w for w in ws if tokenizer.token_to_id(w) is not None] or ["the"]  # noqa: E731
    nouns, verbs, adjs, links = one(NOUNS + PLACES), one(VERBS), one(ADJECTIVES), one(LINKS)
    lo = min(8, max_tokens)
    lengths = [lo + round(i * (max_tokens - lo) / (n - 1)) for i in range(n)] if n > 1 else [max_tokens]
    texts = []
    for length in lengths:
        words: list[str] = []
        while len(words) < length - 3:  # room for [CLS], [SEP] and the final "."
            clause = ["the", rng.choice(adjs), rng.choice(nouns), rng.choice(verbs), "the", rng.choice(nouns)]
            words += ([rng.choice(links)] if words else []) + clause
        words = words[: length - 3] + ["."]
        hidden = rng.randrange(len(words) - 1)
        if mask:
            words[hidden] = "[MASK]"
        texts.append(" ".join(words))
    rng.shuffle(texts)
    return texts
