"""`turnstream agents`: the agent profiles a deployment knows, and the files that are wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from turnstream.cli.common import console, err, settings_of


def register(app: typer.Typer) -> None:
    app.command()(agents)


def agents(
    agents_dir: Annotated[
        Path | None, typer.Option("--dir", help="Profiles folder (TURNSTREAM_AGENTS).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """List the agent profiles (agents/<name>.md); exit 1 if any file is invalid."""
    import orjson
    from rich.table import Table

    from turnstream.agents import load_all

    folder = agents_dir or settings_of().agents
    profiles, invalid = load_all(folder)
    if as_json:
        for p in profiles.values():
            typer.echo(orjson.dumps(p.summary()).decode())
    elif profiles:
        table = Table("agent", "description", "tools", "mode", box=None, pad_edge=False)
        for p in profiles.values():
            tools = ", ".join(p.tools) if p.tools is not None else "all"
            table.add_row(p.name, p.description, tools, p.security_mode or "default")
        console.print(table)
    else:
        console.print(f"no valid agent profiles in {folder} (add <name>.md files; see agents/)")
    for problem in invalid:
        err.print(f"[red]error:[/] {problem}")
    if invalid:
        raise typer.Exit(1)
