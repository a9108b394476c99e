"""Tokens per model, priced by a table: the defaults, the operator's file over them, a dated
model under its family's price, an unknown model shown as tokens only. No I/O but files."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnstream.core.costs import Price, Tokens, add_usage, cost, model_key, price_of, spend
from turnstream.core.events import Usage
from turnstream.prices import PriceFileError, load_prices

SONNET = Price(input=3.0, output=15.0, cache_write=3.75, cache_read=0.30)


def test_each_kind_of_token_is_priced_apart() -> None:
    tokens = Tokens(input=1_000, output=2_000, cache_write=10_000, cache_read=100_000)
    # 0.003 + 0.030 + 0.0375 + 0.030
    assert cost(tokens, SONNET) == pytest.approx(0.1005)
    assert tokens.all_input == 111_000
    assert tokens.cache_hit_ratio == pytest.approx(100_000 / 111_000)


def test_usage_sums_per_model_and_an_unknown_model_is_tokens_only() -> None:
    per_model: dict[str, list[int]] = {}
    add_usage(
        per_model,
        model_key("anthropic", "claude-sonnet-4-5-20250929"),
        Usage(input_tokens=1_000_000, output_tokens=0, cache_read_tokens=1_000_000),
    )
    add_usage(per_model, "anthropic/claude-sonnet-4-5-20250929", Usage(output_tokens=1_000_000))
    add_usage(per_model, model_key("scripted", "demo"), Usage(input_tokens=7))
    table = load_prices()
    s = spend(per_model, table)
    assert s.tokens == Tokens(input=1_000_007, output=1_000_000, cache_read=1_000_000)
    assert s.dollars == pytest.approx(3.0 + 15.0 + 0.30)  # the dated model: its family's price
    assert s.unpriced == ("scripted/demo",)
    assert spend({"scripted/demo": [5, 1, 0, 0]}, table).dollars is None  # said, not $0
    assert spend(None, table).tokens == Tokens()


def test_the_operators_file_wins_model_by_model(tmp_path: Path) -> None:
    mine = tmp_path / "prices.yaml"
    mine.write_text(
        "anthropic:\n"
        "  claude-sonnet-4-5: {input: 1, output: 2, cache_write: 3, cache_read: 4}\n"
        "local:\n"
        "  llama3.1: {input: 0, output: 0, cache_write: 0, cache_read: 0}\n"
    )
    table = load_prices(mine)
    assert price_of(table, "anthropic/claude-sonnet-4-5") == Price(1, 2, 3, 4)
    assert (
        price_of(table, "anthropic/claude-haiku-4-5")
        == load_prices()["anthropic"]["claude-haiku-4-5"]
    )  # the defaults it does not name stay
    assert price_of(table, "local/llama3.1") == Price(0, 0, 0, 0)


def test_a_bad_price_file_names_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "prices.yaml"
    bad.write_text("openai:\n  gpt-5: {input: 1.25, output: ten}\n")
    with pytest.raises(PriceFileError, match="openai/gpt-5: needs input, output, cache_write"):
        load_prices(bad)
    with pytest.raises(PriceFileError, match="No such file"):
        load_prices(tmp_path / "missing.yaml")
