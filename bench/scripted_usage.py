"""What the scripted provider's billed usage costs a call, beside the made-up usage it
replaced (messages in, chunks out), in one run.

    .venv/bin/python bench/scripted_usage.py

A one-tool turn's second call (history of three messages, the three test tools) with a
short system prompt and with a ~1,500-token one.
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.providers.test_prompt_cache import request
from turnstream.core.events import Usage
from turnstream.core.turn import ProviderRequest
from turnstream.providers.scripted import ScriptedProvider, load_script


def main() -> None:
    provider = ScriptedProvider(load_script(None))
    number = 20_000
    for label, system in (
        ("short system prompt", "You are helpful."),
        ("~1,500 tokens", "x" * 6000),
    ):
        req = request(2, system=system)

        def billed(req: ProviderRequest = req) -> Usage:
            return provider._usage(req, "echo: hi", [])

        def made_up(req: ProviderRequest = req) -> Usage:
            return Usage(input_tokens=len(req.messages), output_tokens=2)

        runs = [
            (min(timeit.repeat(f, number=number, repeat=5)) / number * 1e6)
            for f in (made_up, billed)
        ]
        print(f"{label:>20}: made-up {runs[0]:6.2f} us  billed {runs[1]:6.2f} us a call")


if __name__ == "__main__":
    main()
