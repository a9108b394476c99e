"""Budgets: what a turn and its session may spend on the model, in tokens or dollars,
checked before each call. Over budget, the turn ends `budget_exceeded` without the call.

A token budget counts every token the model read (cached or not) and wrote. A dollar
budget prices each model's tokens with the deployment's table (`TurnConfig.prices`); a model
without a price counts nothing there (a token budget still holds). The next call's input is
estimated (characters / 4 of the request) and priced as if nothing of it were cached, so a
budget stops the turn before a call that could take it over, never after."""

from __future__ import annotations

from collections.abc import Iterable

from turnstream.core.costs import Budget, Price, PriceTable, Spent, cost, price_of
from turnstream.core.turn.context import tokens
from turnstream.core.turn.provider import ProviderRequest


def _tokens_of(spent: Spent) -> int:
    return sum(t.all_input + t.output for _, t in spent)


def _dollars_of(spent: Spent, table: PriceTable) -> float:
    priced = [(used, price_of(table, key)) for key, used in spent]
    return sum(cost(used, price) for used, price in priced if price is not None)


def price_table(prices: Iterable[tuple[str, Price]]) -> PriceTable:
    """`TurnConfig.prices` (`(<provider>/<model>, Price)` pairs) as a table."""
    table: dict[str, dict[str, Price]] = {}
    for key, price in prices:
        provider, _, model = key.partition("/")
        table.setdefault(provider, {})[model] = price
    return table


def estimate(request: ProviderRequest) -> int:
    """The request's input tokens, estimated as the budgets count them (characters / 4)."""
    text = [request.system or "", request.volatile or ""]
    text += [m.text + "".join(str(c.arguments) for c in m.tool_calls) for m in request.messages]
    text += [t.description + str(t.parameters) for t in request.tools]
    return sum(tokens(part) for part in text)


def over_budget(
    budget: Budget,
    turn: Spent,
    session: Spent,
    request: ProviderRequest,
    key: str,
    prices: tuple[tuple[str, Price], ...],
) -> tuple[str, str] | None:
    """`(reason, next action)` when the call of `request` to model `key` could take the turn
    or the session over a limit; None when it may go."""
    guess = estimate(request)
    checks: list[tuple[str, str, float | None, float, str]] = [
        ("turn", "tokens", budget.turn_tokens, _tokens_of(turn) + guess, "turn_tokens"),
        ("session", "tokens", budget.session_tokens, _tokens_of(session) + guess, "session_tokens"),
    ]
    if budget.turn_usd is not None or budget.session_usd is not None:
        table = price_table(prices)
        price = price_of(table, key)
        next_call = guess * price.input / 1_000_000 if price is not None else 0.0
        checks += [
            ("turn", "usd", budget.turn_usd, _dollars_of(turn, table) + next_call, "turn_usd"),
            (
                "session",
                "usd",
                budget.session_usd,
                _dollars_of(session, table) + next_call,
                "session_usd",
            ),
        ]
    for scope, unit, limit, would_be, setting in checks:
        if limit is None or would_be <= limit:
            continue
        amount = (
            f"${would_be:.4f} of ${limit:.4f}"
            if unit == "usd"
            else f"{would_be:,} of {limit:,} tokens"
        )
        reason = f"the next model call could take the {scope} over its budget ({amount})"
        action = f"raise {setting} in TURNSTREAM_BUDGET" + (
            "; or start a new session"
            if scope == "session"
            else "; or send a shorter follow-up to continue"
        )
        return reason, action
    return None
