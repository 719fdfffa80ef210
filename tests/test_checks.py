"""bertfn/checkpoint/checks.py: the option checks every pipeline makes, and the refusal of a text too long, each message
written once."""

import pytest

import bertfn
from bertfn.errors import SURFACE
from bertfn.checkpoint.checks import count, flag, one_of, too_long, truncate


@pytest.mark.parametrize("value", [1, 7, 10**9])
def test_count_takes_positive_integers(value):
    count("batch_size", value)


@pytest.mark.parametrize("value", [0, -1, 1.0, "3", True, False, None])
def test_count_refuses_anything_else_bools_and_none_included(value):
    with pytest.raises(bertfn.InputError, match=rf"^batch_size must be a positive integer, got {value!r}$"):
        count("batch_size", value)


def test_count_none_and_zero_where_allowed_and_said():
    count("top_k", None, none="every label")
    count("stride", 0, least=0)
    with pytest.raises(bertfn.InputError, match=r"^top_k must be a positive integer or None \(every label\), got 0$"):
        count("top_k", 0, none="every label")
    with pytest.raises(bertfn.InputError, match=r"^stride must be a non-negative integer, got -1$"):
        count("stride", -1, least=0)
    with pytest.raises(bertfn.InputError, match=r"^gap must be a positive integer \(pairs this far apart\), got 0$"):
        count("gap", 0, why="pairs this far apart")


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_flag_takes_bools_alone(value):
    flag("joint", True)
    flag("joint", False)
    with pytest.raises(bertfn.InputError, match=rf"^joint must be True or False, got {value!r}$"):
        flag("joint", value)


def test_one_of_lists_the_choices_in_their_order():
    one_of("method", "pll", ("masked_marginal", "pll"))
    one_of("activation", None, ("sigmoid",), none="the model's own")
    with pytest.raises(bertfn.InputError, match=r"^method must be one of 'masked_marginal', 'pll', got 'l2r'$"):
        one_of("method", "l2r", ("masked_marginal", "pll"))
    with pytest.raises(bertfn.InputError, match=r"^method must be one of 'pll', got None$"):
        one_of("method", None, ("pll",))
    with pytest.raises(bertfn.InputError, match=r"^activation must be one of 'sigmoid' or None \(the model's own\), "
                                                r"got 'tanh'$"):
        one_of("activation", "tanh", ("sigmoid",), none="the model's own")
    with pytest.raises(bertfn.InputError, match="got \\['pll'\\]"):  # unhashable: refused, not a TypeError
        one_of("method", ["pll"], ("pll",))


def test_too_long_says_the_text_its_tokens_the_limit_and_what_to_do():
    e = too_long("text 3", 70, 64)
    assert isinstance(e, bertfn.InputError)
    assert str(e) == "text 3 is 70 tokens long but the model reads at most 64; shorten it"
    assert str(too_long("text 1", 65, 64, paired=True)).startswith("text 1 is 65 tokens long with its pair but")


def test_truncate_spells_the_option_as_the_caller_writes_it():
    assert truncate("to cut it") == "shorten it, or pass truncation=True to cut it"
    token = SURFACE.set("cli")
    try:
        assert truncate("to cut it") == "shorten it, or pass --truncation to cut it"
    finally:
        SURFACE.reset(token)


def test_refuse_long_names_the_first_text_over_the_limit():
    from bertfn.checkpoint.checks import refuse_long

    refuse_long([3, 64, 10], 64)
    with pytest.raises(bertfn.InputError, match=r"^text 1 is 70 tokens long but the model reads at most 64; shorten it$"):
        refuse_long([3, 70, 80], 64)
    with pytest.raises(bertfn.InputError, match=r"^text 7 with choice 0 is 65 tokens long with its pair but .* 64; cut$"):
        refuse_long([65], 64, "cut", named=lambda r: "text 7 with choice 0", paired=True)
