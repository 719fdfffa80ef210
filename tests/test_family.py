"""BERT's family, held to transformers: each member loads as transformers saves it and computes its numbers.

For every member (tests/family_checkpoints.py: RoBERTa, XLM-R, DistilBERT, ELECTRA's generator and
discriminator, ALBERT; random weights, small odd sizes, their own tokenizers) every layer's hidden states and
attention probabilities and the head's logits equal transformers' within 1e-5 in fp32 (1e-4 on a GPU:
BERTFN_TEST_DEVICE, conftest.DEVICE, where both sides run), on padded batches (padding on the right and on the
left) and on each text alone; the fast path and the SDPA path equal the reference; the checkpoint's own names
stay the model's state; hypothesis draws configs. The pipeline-level calls (fill-mask, scores, traces, the
explorer, the CLI) are in tests/test_family_tasks.py.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import DEVICE, ends, fp32_atol, on_device
from family_checkpoints import MEMBERS, member_config, member_tokenizer, save_member
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bertfn
from bertfn.fast.batching import end_to_end
from bertfn.model.members.electra import discriminator_head
from bertfn.model.point_names import point_names

pytestmark = pytest.mark.needs_transformers

TOL = fp32_atol(1e-5)
TEXTS = ["When in Rome, do as the Romans do.", "The cat sat.", "The capital of France is Paris, a big city."]


@pytest.fixture(scope="module", params=MEMBERS)
def member(request, tmp_path_factory):
    """(kind, transformers model, bertfn model, folder) for each member."""
    folder = tmp_path_factory.mktemp(request.param)
    hf = save_member(request.param, folder)
    return request.param, on_device(hf), bertfn.load(folder, device=DEVICE), folder


def logits_of(kind: str, model, h: torch.Tensor) -> torch.Tensor:
    """The member's head on hidden states h: the discriminator's (ELECTRA-D) or the MLM head's."""
    return discriminator_head(model, h) if kind == "electra-discriminator" else bertfn.mlm_head(model, h)


def batch(kind: str, side: str):
    """TEXTS tokenized by the member's own tokenizer (transformers'), padded on ``side``, on DEVICE."""
    tok = member_tokenizer(kind)
    tok.padding_side = side
    try:
        enc = tok(TEXTS, padding=True, return_tensors="pt")
    finally:
        tok.padding_side = "right"
    return on_device((enc["input_ids"], enc["attention_mask"]))


@pytest.mark.parametrize("side", ["right", "left"])
def test_every_layer_and_the_logits_equal_transformers_on_a_padded_batch(member, side):
    kind, hf, model, _ = member
    ids, mask = batch(kind, side)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        out = bertfn.encoder(model, ids, mask, output_hidden_states=True, output_attentions=True)
        logits = logits_of(kind, model, out.last_hidden_state)
    real = mask.bool()
    assert len(out.hidden_states) == len(ref.hidden_states)
    for ours, theirs in zip(out.hidden_states, ref.hidden_states):
        torch.testing.assert_close(ours[real], theirs[real], atol=TOL, rtol=0)
    for ours, theirs in zip(out.attentions, ref.attentions):  # the real queries' rows (padding rows mean nothing)
        torch.testing.assert_close(ours.transpose(1, 2)[real], theirs.transpose(1, 2)[real], atol=TOL, rtol=0)
    torch.testing.assert_close(logits[real], ref.logits[real], atol=TOL, rtol=0)


def test_each_text_alone_equals_its_row(member):
    """Alone, a text gets the numbers of its row in a padded batch: on the right for every member, and on the
    left for RoBERTa and XLM-R too, whose positions count the real tokens only."""
    kind, hf, model, _ = member
    sides = ["right", "left"] if kind in ("roberta", "xlm-roberta", "camembert") else ["right"]
    for side in sides:
        ids, mask = batch(kind, side)
        with torch.no_grad():
            padded = bertfn.encoder(model, ids, mask).last_hidden_state
            for i in range(len(TEXTS)):
                row = ids[i][mask[i].bool()][None]
                alone = bertfn.encoder(model, row).last_hidden_state[0]
                torch.testing.assert_close(padded[i][mask[i].bool()], alone, atol=TOL, rtol=0)


def test_the_sdpa_path_and_the_fast_path_equal_the_reference(member):
    kind, _, model, _ = member
    ids, mask = batch(kind, "right")
    with torch.no_grad():
        eager = bertfn.encoder(model, ids, mask, impl="eager").last_hidden_state
        sdpa = bertfn.encoder(model, ids, mask, impl="sdpa").last_hidden_state
        torch.testing.assert_close(sdpa[mask.bool()], eager[mask.bool()], atol=TOL, rtol=0)
        enc = model.tokenizer(TEXTS)
        lengths = enc.attention_mask.sum(dim=1).tolist()
        rows = [0, 1, 2]
        fast = ends(model.params, *on_device(end_to_end(enc, rows, lengths)), lengths)[0]  # (T, H)
    torch.testing.assert_close(fast, eager[mask.bool()], atol=TOL, rtol=0)


def test_the_state_is_the_checkpoint_under_its_own_names(member):
    """model.state holds the file's keys as transformers names them (a tied decoder under its second name too,
    as transformers' state_dict shows it): nothing is renamed, no tensor copied."""
    kind, hf, model, folder = member
    from safetensors.torch import load_file

    stored = set(load_file(str(folder / "model.safetensors")))
    theirs = {k for k in hf.state_dict() if not k.endswith(("position_ids", "token_type_ids"))}
    assert stored <= set(model.state) <= theirs | stored
    own = ("bert.",) if kind == "deberta-v2" else ("bert.", "cls.")  # DeBERTa's legacy MLM head is its own cls.*
    assert not any(k.startswith(own) for k in model.state)
    for k in model.state:
        torch.testing.assert_close(model.state[k], hf.state_dict()[k], atol=0, rtol=0)


def test_the_model_says_what_it_is(member):
    kind, _, model, _ = member
    names = {"roberta": "RoBERTa", "xlm-roberta": "XLM-RoBERTa", "distilbert": "DistilBERT", "electra": "ELECTRA",
             "electra-discriminator": "ELECTRA", "albert": "ALBERT", "camembert": "CamemBERT", "mpnet": "MPNet",
             "deberta-v2": "DeBERTa-v2"}
    assert model.family.name == names[kind]
    assert f": {names[kind]}, " in repr(model)
    assert ("discriminator head" in repr(model)) == (kind == "electra-discriminator")
    assert ("MLM head" in repr(model)) == (kind != "electra-discriminator")


def test_point_names_follow_each_members_embeddings(member):
    kind, _, model, _ = member
    names = point_names(model.config)
    assert ("embeddings.token_type" in names) == (kind not in ("distilbert", "mpnet", "deberta-v2"))
    assert ("embeddings.projected" in names) == (kind in ("electra", "electra-discriminator", "albert"))
    rec = bertfn.Trace()
    ids, mask = batch(kind, "right")
    with torch.no_grad():
        bertfn.encoder(model, ids, mask, impl="eager", trace=rec)
    assert [n for n in rec.store] == [n for n in names if n in rec.store]
    heads = {"pooler", "mlm.transform", "mlm.logits", "discriminator.transform", "discriminator.logits"}  # after it
    assert set(names) - set(rec.store) <= heads | {"embeddings.position"} | {n for n in names if n.endswith("relative_scores")}


def test_albert_shares_one_layers_weights_but_an_edit_changes_one_layer(tmp_path):
    hf = save_member("albert", tmp_path)
    model = bertfn.load(tmp_path, device=DEVICE)
    p = model.params
    assert p.layer(0)["attention.self.query.weight"] is p.layer(2)["attention.self.query.weight"]
    ids, mask = batch("albert", "right")
    plain, edited = bertfn.Trace(), bertfn.Trace()
    with torch.no_grad():
        bertfn.encoder(model, ids, mask, impl="eager", trace=plain)
        bertfn.encoder(model, ids, mask, impl="eager", trace=edited,
                       edits=bertfn.interventions.zero_heads({1: [0, 2]}))
    for name in plain.store:  # nothing before layer 1 changes, everything from its output on does
        layer = bertfn.model.point_names.layer_of(name)
        if layer is None and name.startswith("embeddings.") or layer == 0:
            assert torch.equal(plain.store[name], edited.store[name]), name
        elif layer is not None and (layer > 1 or name == "layer.1.output"):
            assert not torch.equal(plain.store[name], edited.store[name]), name
    silenced = edited.store["layer.1.attention.context"][:, [0, 2]]  # (B, 2, S, hd)
    assert not silenced.any()  # the edited layer's heads 0 and 2 are silent ...
    for layer in (0, 2):  # ... and the layers that read the same weights keep theirs
        assert edited.store[f"layer.{layer}.attention.context"][:, [0, 2]].abs().sum() > 0
    with pytest.raises(bertfn.InputError, match="shares its weights"):
        bertfn.prune_heads(model, {1: [0]})
    del hf


@pytest.mark.parametrize("kind", ["roberta", "distilbert"])
def test_pruning_a_members_heads_equals_transformers(kind, tmp_path):
    hf = on_device(save_member(kind, tmp_path))
    model = bertfn.prune_heads(bertfn.load(tmp_path, device=DEVICE), {0: [1, 3], 1: [0]})
    hf.prune_heads({0: [1, 3], 1: [0]})
    ids, mask = batch(kind, "right")
    with torch.no_grad():
        ours = bertfn.mlm_head(model, bertfn.encoder(model, ids, mask).last_hidden_state)
        torch.testing.assert_close(ours[mask.bool()], hf(input_ids=ids, attention_mask=mask).logits[mask.bool()],
                                   atol=TOL, rtol=0)


def test_a_bare_base_model_and_a_bare_state_dict_read_as_the_member(tmp_path):
    """A RobertaModel's keys (embeddings.*, encoder.*) get the member's prefix, as BertModel's get bert.; a
    state_dict passed with its config reads through the same names."""
    import transformers

    hf = on_device(save_member("roberta", tmp_path / "mlm"))
    base = hf.roberta
    base.save_pretrained(tmp_path / "base")
    model = bertfn.load(tmp_path / "base", tokenizer=tmp_path / "mlm", device=DEVICE)
    assert "roberta.encoder.layer.0.attention.self.query.weight" in model.state
    ids, mask = batch("roberta", "left")
    with torch.no_grad():
        ours = bertfn.encoder(model, ids, mask).last_hidden_state
        bare = bertfn.encoder(hf.state_dict(), ids, mask, config=hf.config.to_dict()).last_hidden_state
        theirs = base(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], atol=TOL, rtol=0)
    torch.testing.assert_close(bare[mask.bool()], theirs[mask.bool()], atol=TOL, rtol=0)
    assert isinstance(transformers.AutoConfig.from_pretrained(tmp_path / "base"), transformers.RobertaConfig)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(MEMBERS), heads=st.integers(1, 4), head_dim=st.integers(3, 9),
       layers=st.integers(1, 3), intermediate=st.integers(5, 40), embedding=st.integers(4, 30),
       seed=st.integers(0, 2**16), act=st.sampled_from(["gelu", "relu", "gelu_new", "silu"]))
def test_any_config_equals_transformers(tmp_path_factory, kind, heads, head_dim, layers, intermediate, embedding,
                                        seed, act):
    """Hypothesis over each member's sizes and activation: the logits equal transformers' on a padded batch."""
    import transformers

    from family_checkpoints import MODEL_CLASSES

    H = heads * head_dim
    sizes = dict(num_attention_heads=heads, hidden_size=H, num_hidden_layers=layers, intermediate_size=intermediate,
                 hidden_act=act)
    if kind == "distilbert":
        sizes = dict(n_heads=heads, dim=H, n_layers=layers, hidden_dim=intermediate, activation=act)
    if kind in ("electra", "electra-discriminator", "albert"):
        sizes["embedding_size"] = embedding
    config = member_config(kind, len(member_tokenizer(kind)), **sizes)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    hf = getattr(transformers, MODEL_CLASSES[kind])(config).eval()
    folder = tmp_path_factory.mktemp("drawn")
    hf.save_pretrained(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no tokenizer in the folder: ids only
        model = bertfn.load(folder, device=DEVICE)
    hf = on_device(hf)
    ids, mask = batch(kind, "left" if kind in ("roberta", "xlm-roberta", "camembert", "mpnet") else "right")
    with torch.no_grad():
        ours = logits_of(kind, model, bertfn.encoder(model, ids, mask).last_hidden_state)
        theirs = hf(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], atol=TOL, rtol=0)


def test_a_members_hub_id_loads_from_the_cache_offline(tmp_path, monkeypatch):
    """The layout huggingface_hub writes (models--org--name/refs/main -> snapshots/<sha>/files), offline."""
    import shutil

    from huggingface_hub import constants

    save_member("roberta", tmp_path / "folder")
    cache, sha = tmp_path / "hf-cache", "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--some-org--some-roberta"
    shutil.copytree(tmp_path / "folder", repo / "snapshots" / sha)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached, local = bertfn.load("some-org/some-roberta"), bertfn.load(tmp_path / "folder")
    assert cached.family.name == "RoBERTa" and cached.state.keys() == local.state.keys()
    assert bertfn.fill_mask("The <mask> sat.", cached) == bertfn.fill_mask("The <mask> sat.", local)


@pytest.mark.parametrize("cls, model_type", [("GPT2LMHeadModel", "gpt2"), ("DebertaForMaskedLM", "deberta"),
                                             ("T5ForConditionalGeneration", "t5")])
def test_another_architecture_is_refused_in_one_line(tmp_path, capsys, cls, model_type):
    """Not a list of missing BERT keys: one line naming the model_type and the ones bertfn reads, exit 4 (the CLI in
    this process: a process of its own ends the same way, test_errors' test_cli_subprocess_* shows)."""
    import transformers

    from bertfn.cli import main

    configs = {"gpt2": dict(n_layer=1, n_embd=16, n_head=2, vocab_size=50),
               "deberta": dict(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=20,
                                  vocab_size=50),
               "t5": dict(num_layers=1, d_model=16, d_kv=8, num_heads=2, d_ff=20, vocab_size=50)}
    config = transformers.AutoConfig.for_model(model_type, **configs[model_type])
    getattr(transformers, cls)(config).save_pretrained(tmp_path)
    with pytest.raises(bertfn.CheckpointError, match=f"model_type '{model_type}' is not a model bertfn reads; it reads "
                                                     "BERT and its family: albert, bert, "):
        bertfn.load(tmp_path)
    assert main(["fill-mask", "a [MASK]", "--model", str(tmp_path)]) == 4
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and f"model_type '{model_type}'" in err and "missing" not in err
