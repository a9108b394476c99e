"""What model tokens cost: token counts per model (facts from the log) priced by a table
(the operator's, over the defaults). Money is a view computed when shown, so a price change
needs no rewrite of anything recorded. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from turnstream.core.events import Usage

MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million tokens of each kind."""

    input: float
    output: float
    cache_write: float
    cache_read: float


@dataclass(frozen=True, slots=True)
class Tokens:
    """Token counts of one model, summed over calls (`Usage`'s four, apart)."""

    input: int = 0
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0

    @classmethod
    def of(cls, usage: Usage) -> Tokens:
        return cls(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_write_tokens,
            usage.cache_read_tokens,
        )

    @classmethod
    def from_list(cls, counts: list[int]) -> Tokens:
        return cls(*counts[:4])

    def as_list(self) -> list[int]:
        return [self.input, self.output, self.cache_write, self.cache_read]

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.input + other.input,
            self.output + other.output,
            self.cache_write + other.cache_write,
            self.cache_read + other.cache_read,
        )

    @property
    def all_input(self) -> int:
        """Every input token the model read, at whatever price."""
        return self.input + self.cache_write + self.cache_read

    @property
    def cache_hit_ratio(self) -> float | None:
        """The share of the input read from the prompt cache; None without input."""
        return self.cache_read / self.all_input if self.all_input else None


class Counts(Protocol):
    """A projection's running token counts (a session's summary, a turn's row)."""

    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int


def count_usage(into: Counts, usage: Usage) -> None:
    """Add one model call's `usage` to `into`'s counts."""
    into.input_tokens += usage.input_tokens
    into.output_tokens += usage.output_tokens
    into.cache_write_tokens += usage.cache_write_tokens
    into.cache_read_tokens += usage.cache_read_tokens


def model_key(provider: str | None, model: str | None) -> str:
    """How token counts are keyed per model: `<provider>/<model>`."""
    return f"{provider or '?'}/{model or '?'}"


PriceTable = Mapping[str, Mapping[str, Price]]
"""`{provider: {model: Price}}`."""


def price_of(table: PriceTable, key: str) -> Price | None:
    """The price of `<provider>/<model>`: the model's own entry, else the longest model name
    the model starts with (a dated release such as `claude-sonnet-4-5-20250929` takes
    `claude-sonnet-4-5`'s); None when the table does not know it."""
    provider, _, model = key.partition("/")
    models = table.get(provider, {})
    if model in models:
        return models[model]
    prefixes = [name for name in models if model.startswith(name)]
    return models[max(prefixes, key=len)] if prefixes else None


def cost(tokens: Tokens, price: Price) -> float:
    """Dollars."""
    return (
        tokens.input * price.input
        + tokens.output * price.output
        + tokens.cache_write * price.cache_write
        + tokens.cache_read * price.cache_read
    ) / MILLION


@dataclass(frozen=True, slots=True)
class Spend:
    """What a turn or a session spent, over all the models it called."""

    tokens: Tokens
    dollars: float | None
    """None when no model it called has a price (tokens only)."""
    unpriced: tuple[str, ...] = ()
    """Models without a price: their tokens are not in `dollars`."""


def spend(per_model: Mapping[str, list[int]] | None, table: PriceTable) -> Spend:
    """Sum `{<provider>/<model>: [input, output, cache write, cache read]}` and price it."""
    total, dollars, unpriced = Tokens(), 0.0, []
    for key, counts in (per_model or {}).items():
        tokens = Tokens.from_list(counts)
        total += tokens
        price = price_of(table, key)
        if price is None:
            unpriced.append(key)
        else:
            dollars += cost(tokens, price)
    priced = len(unpriced) < len(per_model or {})
    return Spend(total, dollars if priced else None, tuple(unpriced))


Spent = tuple[tuple[str, Tokens], ...]
"""Tokens per model (`<provider>/<model>`) as a state keeps them: immutable, in the order
first used (a projection keeps `dict[str, list[int]]`, its JSON)."""


def add_spent(spent: Spent, key: str, used: Tokens) -> Spent:
    """`spent` with `used` added under `key`."""
    found = dict(spent)
    found[key] = found.get(key, Tokens()) + used
    return tuple(found.items())


def add_usage(per_model: dict[str, list[int]], key: str, usage: Usage) -> dict[str, list[int]]:
    """`per_model` with one call's usage added under `key` (in place; returned)."""
    return add_tokens(per_model, key, Tokens.of(usage).as_list())


def add_tokens(
    per_model: dict[str, list[int]], key: str, counts: list[int]
) -> dict[str, list[int]]:
    """`per_model` with `counts` (`Tokens.as_list`) added under `key` (in place; returned)."""
    before = Tokens.from_list(per_model.get(key, [0, 0, 0, 0]))
    per_model[key] = (before + Tokens.from_list(counts)).as_list()
    return per_model


@dataclass(frozen=True)
class Budget:
    """What a turn and its session may spend on the model (None: no limit); checked before
    each call (`core/turn/budget.py`)."""

    turn_tokens: int | None = None
    session_tokens: int | None = None
    turn_usd: float | None = None
    session_usd: float | None = None

    def __bool__(self) -> bool:
        return any(
            v is not None
            for v in (self.turn_tokens, self.session_tokens, self.turn_usd, self.session_usd)
        )
