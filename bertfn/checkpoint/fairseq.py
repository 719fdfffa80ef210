"""A fairseq RoBERTa masked LM (``checkpoint.pt`` + ``dict.txt``) -> a Hugging Face ``RobertaForMaskedLM`` folder.

``convert_fairseq_roberta(checkpoint, dictionary, out)`` (or ``python -m bertfn.checkpoint.fairseq CHECKPOINT
DICT OUT``) writes ``config.json`` (sizes from the checkpoint's ``args`` or ``cfg["model"]`` and its tensors),
``model.safetensors`` and a tokenizer (``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``)
whose ids are fairseq's: ``<s> <pad> </s> <unk>``, dict.txt's symbols in order, then ``<mask>`` (which fairseq's
masked_lm task appends). It is for one-letter alphabets such as Sapiens' antibody models (``pip download --no-deps
sapiens``): one token per character, spaces optional (``"EVQLV"`` = ``"E V Q L V"``); longer symbols are refused.

The mapping (``P`` = ``encoder.sentence_encoder.``, ``decoder.sentence_encoder.`` in older fairseq;
``L`` = ``P + layers.{i}.``; ``H`` = ``roberta.encoder.layer.{i}.``; ``E`` = ``roberta.embeddings.``;
``D`` = ``encoder.lm_head.`` or ``decoder.lm_head.``; ``*`` = weight and bias):

    ========================================  ===============================================================
    fairseq                                   Hugging Face RobertaForMaskedLM
    ========================================  ===============================================================
    P embed_tokens.weight                     E word_embeddings.weight
    P embed_positions.weight                  E position_embeddings.weight (learned; row 2 is position 0)
    (none)                                    E token_type_embeddings.weight (zeros, 1 x hidden)
    P emb_layer_norm.* | layernorm_embedding  E LayerNorm.*
    L self_attn.{q,k,v}_proj.*                H attention.self.{query,key,value}.* (in_proj_*: thirds q, k, v)
    L self_attn.out_proj.* / L fc1.*          H attention.output.dense.* / H intermediate.dense.*
    L self_attn_layer_norm.*                  H attention.output.LayerNorm.*
    L fc2.*                                   H output.dense.*
    L final_layer_norm.*                      H output.LayerNorm.*
    D dense.* / D layer_norm.*                lm_head.dense.* / lm_head.layer_norm.*
    D weight                                  lm_head.decoder.weight, only if not equal to the word embeddings
    D bias                                    lm_head.bias
    ========================================  ===============================================================

Left aside: ``classification_heads.*``, ``*.version``, ``*._float_tensor``. Other keys are refused, as are what
transformers' RoBERTa cannot run: pre-LN layers, sinusoidal positions, activations but gelu (its LM head's).

Safety: the checkpoint is a pickle. Its bytes are read once, hashed (sha256, kept in config.json under
``bertfn_converted_from`` with the dictionary's) and unpickled from those bytes by
``torch.load(..., map_location="cpu", weights_only=True)`` inside ``safe_globals([argparse.Namespace])``: torch's
restricted unpickler builds tensors, containers and plain values only. ``argparse.Namespace`` (fairseq's
``args``) is the one class added: unpickling it makes an empty object and fills its ``__dict__``, running none of
its code. Any other global (a function, a class with code, omegaconf's DictConfig) is refused unrun with
:class:`~bertfn.errors.CheckpointError`. ``out`` is written in a temporary folder beside it, then renamed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from ..errors import BertfnError, CheckpointError, InputError, require_readable
from .weights import torch_load_reason

SPECIALS, MASK = ("<s>", "<pad>", "</s>", "<unk>"), "<mask>"  # fairseq Dictionary's first ids; masked_lm's mask
IGNORED = re.compile(r"(^|\.)classification_heads\.|\.version$|_float_tensor$")


def read_checkpoint(path: Path) -> tuple[dict, str]:
    """The unpickled checkpoint (plain containers and tensors only) and the sha256 of the bytes read.

    Args:
        path: fairseq's ``checkpoint.pt``.

    Returns:
        checkpoint: the checkpoint's dict (its ``model`` state_dict, ``args`` or ``cfg``).
        sha256: the hex digest of its bytes.

    Raises:
        CheckpointError: a pickle that names a class or function beyond ``argparse.Namespace``, a file
            that is not a PyTorch checkpoint, or one without a ``model`` state_dict.
    """
    require_readable(path)
    data = path.read_bytes()
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            ckpt = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # the restricted unpickler's UnpicklingError; RuntimeError / EOFError for broken files
        reason = torch_load_reason(e)
        if "global" in reason.lower():
            raise CheckpointError(
                f"{path} names a class or function that is not plain data ({reason}); bertfn reads fairseq checkpoints "
                "with torch.load(weights_only=True), allowing argparse.Namespace only, and never runs a pickle's code. "
                "If you trust the file, re-save its model and args with fairseq as plain dicts; else delete it") from e
        raise CheckpointError(f"{path} is not a PyTorch checkpoint ({reason}); download it again") from e
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        raise CheckpointError(f"{path} holds no 'model' state_dict; it is not a fairseq checkpoint, pass one")
    return ckpt, hashlib.sha256(data).hexdigest()


def read_dictionary(path: Path) -> tuple[list[str], str]:
    """fairseq's symbols in id order (its four specials, dict.txt's lines, ``<mask>``) and dict.txt's sha256.

    Args:
        path: fairseq's ``dict.txt`` (``SYMBOL COUNT`` lines).

    Returns:
        symbols: in id order.
        sha256: the hex digest of the file's bytes.

    Raises:
        CheckpointError: not UTF-8, a line that is not ``SYMBOL COUNT``, or a symbol listed twice.
    """
    require_readable(path)
    data, symbols = path.read_bytes(), list(SPECIALS)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path} is not UTF-8 text ({e}); pass fairseq's dict.txt") from e
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.rstrip().removesuffix(" #fairseq:overwrite").rsplit(" ", 1)
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            raise CheckpointError(f"{path} line {n} is {line!r}, not 'SYMBOL COUNT'; pass fairseq's dict.txt")
        if fields[0] in symbols:  # fairseq: an error, or with #fairseq:overwrite a second id for one symbol
            raise CheckpointError(f"{path} lists {fields[0]!r} twice (line {n}); one id per symbol is needed")
        symbols.append(fields[0])
    if MASK not in symbols:  # MaskedLMTask: dictionary.add_symbol("<mask>")
        symbols.append(MASK)
    return symbols, hashlib.sha256(data).hexdigest()


def fairseq_to_hf(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], bool]:
    """HF RoBERTa names for fairseq's tensors (the same tensor objects, q/k/v cut from in_proj).

    Args:
        state: the checkpoint's ``model`` state_dict.

    Returns:
        tensors: ``{HF RobertaForMaskedLM name: tensor}`` (without ``lm_head.decoder.weight`` when tied).
        tied: whether the LM head's decoder is tied to the word embeddings.

    Raises:
        CheckpointError: keys it cannot place (a pre-LN model, a missing tensor, tensors with no place in
            ``RobertaForMaskedLM``).
    """
    roots = [k.removesuffix("sentence_encoder.embed_tokens.weight") for k in state if "sentence_encoder.embed_t" in k]
    if len(roots) != 1:
        raise CheckpointError(f"the checkpoint has {len(roots)} sentence_encoder.embed_tokens; it is not one RoBERTa")
    P, M, state = roots[0] + "sentence_encoder.", roots[0] + "lm_head.", dict(state)
    for k in [k for k in state if ".self_attn.in_proj_" in k]:  # fairseq before 0.9: q, k, v in one (3H, ...) tensor
        for n, t in zip("qkv", state.pop(k).chunk(3)):
            state[k.replace("in_proj_", f"{n}_proj.")] = t
    if P + "layer_norm.weight" in state:
        raise CheckpointError("the checkpoint is pre-LN (it has sentence_encoder.layer_norm); RoBERTa is post-LN")
    out, used = {}, set()

    def put(hf: str, fs: str) -> None:
        if fs not in state:
            raise CheckpointError(f"the checkpoint lacks {fs} (for {hf}); convert a RoBERTa masked_lm checkpoint")
        out[hf] = state[fs]
        used.add(fs)

    E = "roberta.embeddings."
    put(E + "word_embeddings.weight", P + "embed_tokens.weight")
    put(E + "position_embeddings.weight", P + "embed_positions.weight")
    words = out[E + "word_embeddings.weight"]
    out[E + "token_type_embeddings.weight"] = words.new_zeros(1, words.shape[1])  # RoBERTa has no segments
    ln = next((n for n in ("emb_layer_norm", "layernorm_embedding") if P + n + ".weight" in state), "emb_layer_norm")
    n_layers = len({k[len(P):].split(".")[1] for k in state if k.startswith(P + "layers.")})
    parts = {"attention.self.query": "self_attn.q_proj", "attention.self.key": "self_attn.k_proj",
             "attention.self.value": "self_attn.v_proj", "attention.output.dense": "self_attn.out_proj",
             "attention.output.LayerNorm": "self_attn_layer_norm", "intermediate.dense": "fc1",
             "output.dense": "fc2", "output.LayerNorm": "final_layer_norm"}
    for wb in ("weight", "bias"):
        put(f"{E}LayerNorm.{wb}", f"{P}{ln}.{wb}")
        for hf, fs in [("lm_head.dense", "dense"), ("lm_head.layer_norm", "layer_norm")]:
            put(f"{hf}.{wb}", f"{M}{fs}.{wb}")
        for i in range(n_layers):
            H, L = f"roberta.encoder.layer.{i}.", f"{P}layers.{i}."
            for hf, fs in parts.items():
                put(f"{H}{hf}.{wb}", f"{L}{fs}.{wb}")
    put("lm_head.bias", M + "bias")
    put("lm_head.decoder.weight", M + "weight")
    tied = torch.equal(out["lm_head.decoder.weight"], words)
    if tied:  # fairseq's default: the LM head reads the word embeddings; transformers ties them the same way
        del out["lm_head.decoder.weight"]
    left = sorted(k for k in state if k not in used and not IGNORED.search(k))
    if left:
        raise CheckpointError(f"the checkpoint holds {len(left)} tensors with no place in RobertaForMaskedLM "
                              f"({', '.join(left[:4])}, ...); bertfn converts plain fairseq RoBERTa masked LMs only")
    return out, tied


def _tokenizer_files(symbols: list[str], max_length: int) -> dict[str, str]:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json: one residue per token.

    Args:
        symbols: fairseq's symbols in id order.
        max_length: the model's max tokens (``model_max_length``).

    Returns:
        ``{file name: text}``.
    """
    tok = Tokenizer(models.WordLevel({s: i for i, s in enumerate(symbols)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Split(Regex("."), behavior="isolated")])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in (*SPECIALS, MASK)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.decoder = decoders.Fuse()
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
                "pad_token": "<pad>", "cls_token": "<s>", "mask_token": MASK}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **specials, "model_max_length": max_length,
              "clean_up_tokenization_spaces": False, "model_input_names": ["input_ids", "attention_mask"]}
    return {"tokenizer.json": tok.to_str(pretty=True), "tokenizer_config.json": json.dumps(config, indent=2),
            "special_tokens_map.json": json.dumps(specials, indent=2)}


def convert_fairseq_roberta(checkpoint: str | Path, dictionary: str | Path, out: str | Path) -> Path:
    """A fairseq RoBERTa masked LM written to the new (or empty) folder ``out`` (see the module docstring).

    Both inputs' sha256 go in its ``config.json["bertfn_converted_from"]``.

    Args:
        checkpoint: fairseq's ``checkpoint.pt``.
        dictionary: its ``dict.txt``.
        out: a new or empty folder.

    Returns:
        ``out``, as a Path.

    Raises:
        CheckpointError: an unsafe, unreadable or unfit checkpoint or dictionary.
        InputError: a taken ``out``.
    """
    checkpoint, dictionary, out = Path(checkpoint), Path(dictionary), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out} already exists and is not an empty folder; pass a new folder or delete it")
    (ckpt, ckpt_sha), (symbols, dict_sha) = read_checkpoint(checkpoint), read_dictionary(dictionary)
    tensors, tied = fairseq_to_hf(ckpt["model"])
    args = ckpt.get("args") or (ckpt.get("cfg") or {}).get("model")  # fairseq <= 0.10: args; later: cfg["model"]
    args = dict(vars(args) if isinstance(args, argparse.Namespace) else args or {})
    vocab, hidden = tensors["roberta.embeddings.word_embeddings.weight"].shape
    if vocab != len(symbols):
        raise CheckpointError(f"the checkpoint embeds {vocab} tokens but {dictionary} gives {len(symbols)} (4 "
                              f"specials, {len(symbols) - 5} symbols, <mask>); pass the dict.txt it was trained with")
    if long := [s for s in symbols[4:] if len(s) != 1 and s != MASK]:
        raise CheckpointError(f"{dictionary} holds multi-character symbols ({long[0]!r}, ...); this converter writes a "
                              "one-character-per-token tokenizer (protein or DNA models), not a BPE one")
    if args.get("activation_fn", "gelu") != "gelu" or "encoder_attention_heads" not in args:
        raise CheckpointError(f"the checkpoint's args give activation_fn {args.get('activation_fn')!r} and "
                              f"{args.get('encoder_attention_heads')!r} heads; bertfn converts gelu models (as is the "
                              "LM head of transformers' RoBERTa) whose args give encoder_attention_heads")
    positions = tensors["roberta.embeddings.position_embeddings.weight"].shape[0]
    max_positions = args.get("max_positions") or positions - 2
    if positions != max_positions + 2:  # fairseq's learned positions start at padding_idx + 1 = 2
        raise CheckpointError(f"the checkpoint has {positions} position embeddings, not max_positions "
                              f"{max_positions} + 2; it is not a RoBERTa with padding_idx 1")
    config = {
        "architectures": ["RobertaForMaskedLM"], "model_type": "roberta", "vocab_size": vocab, "hidden_size": hidden,
        "num_hidden_layers": sum(k.endswith("attention.self.query.weight") for k in tensors),
        "num_attention_heads": args["encoder_attention_heads"],
        "intermediate_size": tensors["roberta.encoder.layer.0.intermediate.dense.weight"].shape[0],
        "hidden_act": "gelu", "hidden_dropout_prob": args.get("dropout", 0.1),
        "attention_probs_dropout_prob": args.get("attention_dropout", 0.1), "max_position_embeddings": positions,
        "type_vocab_size": 1, "initializer_range": 0.02, "layer_norm_eps": 1e-5, "position_embedding_type": "absolute",
        "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "tie_word_embeddings": tied,
        "bertfn_converted_from": {  # which bytes these weights came from (read by nothing else: a record)
            "format": "fairseq RoBERTa masked LM", "checkpoint": checkpoint.name, "checkpoint_sha256": ckpt_sha,
            "dictionary": dictionary.name, "dictionary_sha256": dict_sha, "fairseq_arch": args.get("arch"),
            "fairseq_task": args.get("task"), "max_positions": max_positions}}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        save_file({k: v.detach().contiguous().clone() for k, v in tensors.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        files = {"config.json": json.dumps(config, indent=2), **_tokenizer_files(symbols, max_positions)}
        for name, text in files.items():
            (tmp / name).write_text(text + "\n", encoding="utf-8")
        mode = (tmp / "config.json").stat().st_mode & 0o777  # the umask's file mode, for the weights and folder
        (tmp / "model.safetensors").chmod(mode)
        tmp.chmod(mode | (mode & 0o444) >> 2)
        os.rename(tmp, out)  # replaces an empty folder; atomic on one file system
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bertfn.checkpoint.fairseq CHECKPOINT DICT OUT``: convert, print the folder and what it came from.

    A refusal is one line and the error's exit code, as the ``bertfn`` command gives them.

    Args:
        argv: the command's arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0, or the error's.
    """
    parser = argparse.ArgumentParser(prog="python -m bertfn.checkpoint.fairseq", description=__doc__.split("\n")[0])
    for name, text in [("checkpoint", "fairseq checkpoint.pt"), ("dictionary", "its dict.txt"), ("out", "new folder")]:
        parser.add_argument(name, help=text)
    a = parser.parse_args(argv)
    try:
        out = convert_fairseq_roberta(a.checkpoint, a.dictionary, a.out)
    except BertfnError as e:
        print(f"bertfn: error: {e}", file=sys.stderr)  # as the bertfn command says it
        return e.exit_code
    print(f"{out}  {json.loads((out / 'config.json').read_text())['bertfn_converted_from']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
