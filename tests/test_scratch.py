"""A model from its config alone: the bert-base parameter table, and fresh weights as transformers draws them."""

from __future__ import annotations

import pytest
import torch
from conftest import require_transformers
from family_checkpoints import ESM_KINDS, MEMBERS, MODEL_CLASSES, MODERN, kind_params, member_config, member_tokenizer

import bertfn
from bertfn.checkpoint.scratch import init_model, model_shapes, parameter_count


def test_bert_base_parameter_table():
    """The walkthroughs' numbers, from the default config alone (no weights are made)."""
    cfg = bertfn.BertConfig()  # bert-base: H 768, 12 layers, 12 heads, I 3072
    shapes = model_shapes(cfg)
    numel = {k: torch.Size(s).numel() for k, s in shapes.items()}
    dense = numel["bert.encoder.layer.0.attention.output.dense.weight"] + numel["bert.encoder.layer.0.attention.output.dense.bias"]
    assert dense == 768 * 768 + 768 == 590_592  # one 768x768 dense layer with its bias (Q, K, V, output, pooler)
    counts = parameter_count(cfg)
    per_layer_attention, per_layer_ffn = counts["attention"] // 12, counts["feed-forward"] // 12
    assert per_layer_attention == 4 * 590_592 + 2 * 768 == 2_363_904  # Q, K, V, output dense + LayerNorm: 2.36M
    assert per_layer_ffn == (768 * 3072 + 3072) + (3072 * 768 + 768) + 2 * 768 == 4_723_968  # 4.72M
    assert round(per_layer_attention / 1e6, 2) == 2.36 and round(per_layer_ffn / 1e6, 2) == 4.72
    assert counts["pooler"] == 590_592
    assert counts["embeddings"] == (30522 + 512 + 2) * 768 + 2 * 768 == 23_837_184
    assert counts["total"] == 109_482_240 and round(counts["total"] / 1e6) == 109  # "110M": bert-base's 109.5M


@pytest.mark.needs_transformers
@pytest.mark.parametrize("cls_name, parts", [("BertModel", ("pooler",)), ("BertForMaskedLM", ("mlm",)),
                                             ("BertForPreTraining", ("pooler", "mlm", "nsp"))])
def test_parameter_count_equals_transformers(cls_name, parts):
    transformers = require_transformers()
    cfg = transformers.BertConfig()
    with torch.device("meta"):  # shapes only: no memory, no time
        hf = getattr(transformers, cls_name)(cfg)
    assert parameter_count(bertfn.BertConfig.from_dict(cfg.to_dict()), parts)["total"] == hf.num_parameters()


@pytest.mark.needs_transformers
@pytest.mark.parametrize("groups", [1, 2])
def test_albert_counts_its_shared_layers_once_as_transformers(groups):
    """ALBERT's layers read their group's one set of weights: each set counts once (it counted once per layer)."""
    transformers = require_transformers()
    cfg = transformers.AlbertConfig(embedding_size=24, hidden_size=40, num_attention_heads=4, num_hidden_layers=4,
                                    num_hidden_groups=groups, intermediate_size=72, vocab_size=60)
    with torch.device("meta"):
        hf = transformers.AlbertModel(cfg)
    assert parameter_count(bertfn.BertConfig.from_dict(cfg.to_dict()))["total"] == hf.num_parameters()


@pytest.mark.needs_transformers
def test_pruned_and_decoder_configs_count_like_transformers():
    transformers = require_transformers()
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                                  vocab_size=50, is_decoder=True, add_cross_attention=True,
                                  position_embedding_type="relative_key")
    hf = transformers.BertModel(cfg)
    hf.prune_heads({0: [1, 2]})
    ours = bertfn.BertConfig.from_dict(hf.config.to_dict())
    assert ours.pruned_heads == {0: (1, 2)}
    assert parameter_count(ours)["total"] == hf.num_parameters()


@pytest.mark.needs_transformers
def test_init_model_is_what_transformers_initialises():
    transformers = require_transformers()
    cfg = bertfn.BertConfig(vocab_size=300, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=512, max_position_embeddings=64)
    model = init_model(cfg, ("pooler", "mlm", "nsp"), generator=torch.Generator().manual_seed(3))
    hf = transformers.BertForPreTraining(transformers.BertConfig(**{k: v for k, v in cfg.to_dict().items()
                                                                    if k != "pruned_heads"}))
    theirs = dict(hf.named_parameters())["bert.encoder.layer.0.intermediate.dense.weight"].std().item()
    assert abs(theirs - cfg.initializer_range) < 0.1 * cfg.initializer_range  # transformers' own init: N(0, 0.02)
    # the same names and shapes: transformers takes the state as it is
    hf.load_state_dict(model.state, strict=True)
    assert hf.num_parameters() == parameter_count(cfg, ("pooler", "mlm", "nsp"))["total"]

    s = model.state
    word = s["bert.embeddings.word_embeddings.weight"]
    assert s["cls.predictions.decoder.weight"] is word and s["cls.predictions.decoder.bias"] is s["cls.predictions.bias"]
    assert not word[cfg.pad_token_id].any()  # the [PAD] row starts at 0
    for key, t in s.items():
        if key.endswith("LayerNorm.weight"):
            assert torch.equal(t, torch.ones_like(t)), key
        elif key.endswith("bias"):
            assert not t.any(), key
        else:  # linear weights and tables: N(0, 0.02)
            assert abs(t.std().item() - cfg.initializer_range) < 0.1 * cfg.initializer_range, key
            assert abs(t.mean().item()) < 0.1 * cfg.initializer_range, key


def test_init_model_is_reproducible_and_trains():
    cfg = bertfn.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=16)
    a = init_model(cfg, generator=torch.Generator().manual_seed(1))
    b = init_model(cfg, generator=torch.Generator().manual_seed(1))
    c = init_model(cfg, generator=torch.Generator().manual_seed(2))
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
    assert not torch.equal(a.state["bert.embeddings.word_embeddings.weight"], c.state["bert.embeddings.word_embeddings.weight"])

    weights = {id(t): t.requires_grad_(True) for t in a.state.values()}  # tied tensors once
    ids = torch.randint(1, 40, (4, 12), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(list(weights.values()), lr=0.5)
    losses = []
    for _ in range(5):  # learn to copy the input: the loss must fall
        h = bertfn.encoder(a.params, ids).last_hidden_state
        loss = torch.nn.functional.cross_entropy(bertfn.mlm_head(a.params, h).flatten(0, 1), ids.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_unknown_part_is_an_input_error():
    with pytest.raises(bertfn.InputError, match="unknown part"):
        parameter_count(bertfn.BertConfig(), ("decoder",))


def test_a_config_dict_and_one_part_by_name_are_taken_and_other_kinds_refused():
    """A config.json's dict (as load(config=) takes it) and one part's name as a string ("mlm", which was read letter
    by letter) work; another kind of config is an InputError, where it was an AttributeError."""
    small = {"model_type": "bert", "vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 1,
             "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 20}
    config = bertfn.BertConfig.from_dict(small)
    assert parameter_count(small, "mlm") == parameter_count(config, ("mlm",))
    assert init_model(small, "mlm").state.keys() == init_model(config, ("mlm",)).state.keys()
    with pytest.raises(bertfn.InputError, match=r"unknown part\(s\) \['mlmx'\]"):
        init_model(config, "mlmx")
    with pytest.raises(bertfn.InputError, match=r"a model is made from its config: a BertConfig .* or a config\.json's "
                                                r"dict, got str"):
        parameter_count("config.json")


@pytest.mark.needs_transformers
@pytest.mark.parametrize("kind", kind_params([k for k in (*MEMBERS, *MODERN) if k != "electra-discriminator"],
                                              quick=("deberta-v2", "esm")))  # BERT's: the test above
def test_every_members_fresh_masked_lm_is_transformers_own(kind, tmp_path):
    """init_model's masked LM of every member is the one transformers builds: the same parameter count as its
    *ForMaskedLM's num_parameters(), and saved, read back with no key missing or left over (DeBERTa-v2's MLM head
    was left out but for its decoder; ESM-2's contact head, which every EsmModel has, was missing)."""
    transformers = require_transformers()
    hf_config = member_config(kind, len(member_tokenizer(kind)))  # its special tokens' ids within the vocabulary
    with torch.device("meta"):
        hf = getattr(transformers, MODEL_CLASSES[kind])(hf_config)
    config = bertfn.BertConfig.from_dict(hf_config.to_dict())
    parts = ("mlm", "contacts") if kind in ESM_KINDS else ("mlm",)
    assert parameter_count(config, parts)["total"] == hf.num_parameters()
    bertfn.save(init_model(config, parts), tmp_path)
    _, info = getattr(transformers, MODEL_CLASSES[kind]).from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == [] and info["unexpected_keys"] == [], info
