"""The pure turn core without I/O: copying state, one whole text turn, one one-tool turn.

    python bench/pure_core.py
    python bench/pure_core.py --against REV   # the one-tool turn here and at git REV

Side by side in one run: `dataclasses.replace` against `with_changes` (the copy every
`evolve` makes), and a complete text turn (16 events) decided as the shell does it now
(the deciders fold as they go and hand over the state: `Decision.state`) and as it did
before (folding the decided events once more), and as the runner's actor drives it now:
one input at a time through the session decider, each decision with its effects.

Then a one-tool turn (a `read_file` call approved by `auto` mode, then a text reply: the
22 events of the runner's 25 it decides itself) driven as the runner's actor drives it
(`turnstream.turn_runner.session.SessionActor.commit`): the facts it reacts to
(`InputAccepted`, `ToolInvocationSucceeded`) and the model's two answers (`ProviderDone`),
each decided at once with a fresh `Context` of the real clock and UUIDv7 ids, 20 turns in a
row in one session. `--against REV` measures it for this tree and for git REV's (exported
to a temporary directory) in alternate subprocesses, round after round, and prints both
and their ratio, then the state copies (`with_changes`) each tree makes per one-tool turn,
by the type copied, and its decider steps (`--copies` prints this tree's alone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import timeit
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# appended: a PYTHONPATH goes first (`--against` measures another tree's core that way)
sys.path.append(str(Path(__file__).parents[1]))
from tests.unit.factories import Ids, accepted, ctx, succeed, success
from turnstream.core.approval import ApprovalConfig
from turnstream.core.events import Event, ToolInvocationRequested
from turnstream.core.immutable import with_changes
from turnstream.core.inputs import Fact, Tick
from turnstream.core.session import SessionState, fold, follow_session
from turnstream.core.session.decider import ProviderDone, decide_session
from turnstream.core.turn import Context, ToolCall, ToolInfo, TurnConfig, on_provider_result
from turnstream.core.turn.state import ActiveTurn
from turnstream.runtime.clock import new_event_id, now

N = 20_000
ONE_TOOL = TurnConfig(
    tools=(ToolInfo("read_file", "read", {"type": "object"}, True, True, 5.0),),
    approval=ApprovalConfig(default_mode="auto"),
)
READ = ToolCall("call_0_0", "read_file", {"path": "bench.txt"})
TURNS_IN_A_ROW = 20


def main() -> None:
    if "--one-tool" in sys.argv:  # one round for `--against`: µs per one-tool turn
        print(one_tool_µs(rounds=5))
        return
    if "--copies-json" in sys.argv:  # for `--against`: copies per one-tool turn, by type
        print(json.dumps(copies_per_turn()))
        return
    if "--copies" in sys.argv:
        print_copies({"this tree": copies_per_turn()})
        return
    if "--against" in sys.argv:
        against(sys.argv[sys.argv.index("--against") + 1])
        return
    turn = ActiveTurn("t", "i", "c", "tr", "k", None, "e", started_at=datetime.now(UTC))
    copies = {
        "dataclasses.replace": timeit.timeit(lambda: replace(turn, iteration=2), number=N),
        "with_changes": timeit.timeit(lambda: with_changes(turn, iteration=2), number=N),
    }
    for name, seconds in copies.items():
        print(f"{name:>20}: {seconds / N * 1e6:6.2f} µs per copy of ActiveTurn")
    ratio = copies["dataclasses.replace"] / copies["with_changes"]
    print(f"{'':>20}  with_changes is {ratio:.1f}× faster")
    state = fold(SessionState.of("s1"), [accepted(1)])
    turns, rounds = 100, 7
    ways = {
        "now": lambda: text_turn(state, False),
        "folding again": lambda: text_turn(state, True),
        "by the session decider": lambda: text_turn_by_inputs(state),
    }
    # the ways take turns, round after round, and each keeps its best round: on a shared
    # machine a slow moment then hurts every way alike instead of whichever ran in it
    spent = dict.fromkeys(ways, float("inf"))
    for _ in range(rounds):
        for name, way in ways.items():
            spent[name] = min(spent[name], timeit.timeit(way, number=turns))
    for name, seconds in spent.items():
        print(f"{'a text turn, ' + name:>36}: {seconds / turns * 1e6:6.0f} µs for its 16 events")
    print(f"{'':>36}  now / folding again: {spent['now'] / spent['folding again']:.2f}")
    by_inputs = spent["by the session decider"] / spent["now"]
    print(f"{'':>36}  by the session decider / now: {by_inputs:.2f}")
    print(f"{'a one-tool turn, as the runner does':>36}: {one_tool_µs(rounds):6.0f} µs for its 22")


def one_tool_µs(rounds: int) -> float:
    """µs per one-tool turn decided as the runner's actor decides it, the best of `rounds`
    sessions of `TURNS_IN_A_ROW` turns each."""
    facts = [
        (accepted(n), succeed("", "file text", f"turn{n}")) for n in range(1, TURNS_IN_A_ROW + 1)
    ]
    # CPU time: on a shared machine a process waiting for a core is not charged for it
    session = lambda: one_tool_session(facts)  # noqa: E731
    best = min(timeit.repeat(session, number=1, repeat=rounds, timer=time.process_time))
    return best / TURNS_IN_A_ROW * 1e6


def one_tool_session(facts: list[tuple[Event, Event]]) -> SessionState:
    """A session's one-tool turns in a row: each input decided as `SessionActor.commit`
    decides it (a new `Context` each time), the next decided from the state it hands over."""
    state = SessionState.of("s1")
    asked = replace(success("", "tool_use"), tool_calls=(READ,))
    for accepted_input, result in facts:
        decision = decide_session(state, Fact(accepted_input), ONE_TOOL, runner_context())
        turn = accepted_input.turn_id
        assert turn is not None and decision.state.chat.active is not None
        decision = decide_session(
            decision.state, ProviderDone(turn, asked), ONE_TOOL, runner_context()
        )
        run = next(e for e in decision.events if isinstance(e, ToolInvocationRequested))
        done = with_changes(
            result, data=with_changes(result.data, invocation_id=run.data.invocation_id)
        )
        decision = decide_session(decision.state, Fact(done), ONE_TOOL, runner_context())
        replied = ProviderDone(turn, success("read file text"))
        decision = decide_session(decision.state, replied, ONE_TOOL, runner_context())
        state = decision.state
        assert (
            state.chat.active is None and state.chat.turns_ended == accepted_input.data.inbound_seq
        )
    return state


STEPS = "decider steps"
"""The row of `copies_per_turn` that counts `next_step` calls, not copies."""


def copies_per_turn() -> dict[str, float]:
    """The `with_changes` copies of one one-tool turn, by the type copied, and its decider
    steps (`next_step` calls, `STEPS`): counted over `TURNS_IN_A_ROW` turns by counting
    stand-ins put wherever a module of the core holds either (not here: the bench's own
    copies are not counted)."""
    import turnstream.core.immutable as immutable
    import turnstream.core.turn.decide as decide

    copy, step, counted = immutable.with_changes, decide.next_step, Counter[str]()

    def counting_copy(obj: Any, **changes: Any) -> Any:
        counted[type(obj).__name__] += 1
        return copy(obj, **changes)

    def counting_step(*args: Any, **kwargs: Any) -> Any:
        counted[STEPS] += 1
        return step(*args, **kwargs)

    facts = [
        (accepted(n), succeed("", "file text", f"turn{n}")) for n in range(1, TURNS_IN_A_ROW + 1)
    ]
    stand_ins = {id(copy): counting_copy, id(step): counting_step}
    held = [
        (module, name, value)
        for module in list(sys.modules.values())
        if getattr(module, "__name__", "").startswith("turnstream")
        for name, value in list(vars(module).items())
        if value is copy or value is step
    ]
    for module, name, value in held:
        setattr(module, name, stand_ins[id(value)])
    try:
        one_tool_session(facts)
    finally:
        for module, name, value in held:
            setattr(module, name, value)
    return {kind: n / TURNS_IN_A_ROW for kind, n in counted.most_common()}


def print_copies(trees: dict[str, dict[str, float]]) -> None:
    kinds = sorted(
        {k for c in trees.values() for k in c if k != STEPS},
        key=lambda k: -max(c.get(k, 0) for c in trees.values()),
    )
    print(f"{'with_changes copies per one-tool turn':>36}: " + "".join(f"{t:>14}" for t in trees))
    for kind in ["all", *kinds]:
        row = [
            sum(n for k, n in c.items() if k != STEPS) if kind == "all" else c.get(kind, 0)
            for c in trees.values()
        ]
        print(f"{kind:>36}: " + "".join(f"{n:14.1f}" for n in row))
    steps = "".join(f"{c.get(STEPS, 0):14.1f}" for c in trees.values())
    print(f"{STEPS + ' per one-tool turn':>36}: " + steps)


def runner_context() -> Context:
    return Context(now=now(), new_id=new_event_id, source="turn-runner/bench-1")


def against(rev: str) -> None:
    """The one-tool turn of this tree and of git `rev`'s, in alternate subprocesses."""
    here = Path(__file__).parents[1]
    rounds = 10
    with tempfile.TemporaryDirectory() as base:
        archive = subprocess.run(
            ["git", "-C", str(here), "archive", rev, "services", "tests"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
        trees = {rev: Path(base), "this tree": here}
        best = dict.fromkeys(trees, float("inf"))
        for _ in range(rounds):
            for name, tree in trees.items():
                best[name] = min(best[name], float(_run_with(tree, "--one-tool")))
        copies = {
            name: json.loads(_run_with(tree, "--copies-json")) for name, tree in trees.items()
        }
    for name, µs in best.items():
        print(f"{'a one-tool turn, ' + name:>36}: {µs:6.0f} µs (best of {rounds} rounds)")
    print(f"{'':>36}  this tree / {rev}: {best['this tree'] / best[rev]:.2f}")
    print_copies(copies)


def _run_with(tree: Path, flag: str) -> str:
    """What this bench prints with `flag`, run on `tree`'s core and tests."""
    path = {"PYTHONPATH": f"{tree / 'services'}{os.pathsep}{tree}"}
    cmd = [sys.executable, __file__, flag]
    done = subprocess.run(
        cmd, check=True, capture_output=True, text=True, env={**os.environ, **path}
    )
    return done.stdout


def text_turn(state: SessionState, fold_again: bool) -> SessionState:
    """Decide a turn from its accepted input to its end, with one model reply."""
    config, c = TurnConfig(), ctx(Ids())
    decided = follow_session(state, config, c)
    state = fold(state, decided) if fold_again else decided.state
    outcome = on_provider_result(state.chat, success(), config, c)
    return fold(state, outcome) if fold_again else outcome.state


def text_turn_by_inputs(state: SessionState) -> SessionState:
    """The same turn as the runner's actor drives it now: inputs in, decisions with their
    effects out (`turnstream.core.session.decider`)."""
    config, c = TurnConfig(), ctx(Ids())
    decided = decide_session(state, Tick(), config, c)
    assert decided.state.chat.active is not None
    done = ProviderDone(decided.state.chat.active.turn_id, success())
    return decide_session(decided.state, done, config, c).state


if __name__ == "__main__":
    main()
