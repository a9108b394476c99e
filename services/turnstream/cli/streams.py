"""`turnstream streams` and `schemas export`: the stream definitions and the setup step that
applies them, and the JSON Schema of the wire contract."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from turnstream.cli.common import DataDir, NatsUrl, console, err, settings_of


def streams(
    action: Annotated[
        str,
        typer.Argument(
            help="show: print the stream definitions (ops/streams.json is this output); "
            "apply: the setup step, create or update the streams and buckets (as operator); "
            "mapping: the subject mappings a partitioned log (TURNSTREAM_LOG_PARTITIONS > 1) "
            "needs in the account."
        ),
    ] = "show",
    replicas: Annotated[
        int | None, typer.Option(help="Stream replicas (apply: default TURNSTREAM_REPLICAS).")
    ] = None,
    accounts: Annotated[
        Path | None,
        typer.Option(
            help="mapping: print this accounts file (ops/accounts.conf) derived for the "
            "partitions instead: mappings in, every user's log rights per partition."
        ),
    ] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """The streams and buckets: print them, or create them (services only check they exist)."""
    if action not in ("show", "apply", "mapping"):
        err.print(f"[red]error:[/] {action!r}: use `streams show`, `apply` or `mapping`")
        raise typer.Exit(2)
    if action == "mapping":
        from turnstream.bus.mapping import mapping_text

        sys.stdout.write(mapping_text(settings_of().subjects, accounts))
    elif action == "apply":
        _apply(nats_url, data_dir, replicas)
    else:
        _show(replicas)


def _apply(nats_url: str | None, data_dir: Path | None, replicas: int | None) -> None:
    """The setup step: create or update the streams and buckets, as operator."""
    import asyncio

    from turnstream.bus.permissions import PermissionDenied
    from turnstream.cli.common import quiet_refusals
    from turnstream.cli.roles import explain
    from turnstream.runtime import apply_streams

    settings = settings_of(nats_url, data_dir, replicas=replicas)
    quiet_refusals()
    try:
        asyncio.run(apply_streams(settings))
    except PermissionDenied as exc:
        err.print(f"[red]error:[/] {escape(explain(exc))}")
        raise typer.Exit(2) from exc
    except (ConnectionError, RuntimeError, ValueError, PermissionError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    except Exception as exc:  # nats-py's own
        err.print(f"[red]error:[/] the setup step failed: {type(exc).__name__}: {exc}")
        raise typer.Exit(2) from exc
    console.print(f"streams and buckets applied ({settings.replicas} replica(s))")


def _show(replicas: int | None) -> None:
    """The stream definitions as JSON (ops/streams.json is this output)."""
    import orjson

    from turnstream.bus.streams import StreamLimits, describe
    from turnstream.runtime import stream_limits

    limits = stream_limits(settings_of())
    limits = StreamLimits(**{**limits.__dict__, "replicas": replicas or 1})
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    sys.stdout.write(
        orjson.dumps(describe(settings_of().subjects, limits), option=options).decode()
    )
    sys.stdout.write("\n")


def schemas_export(
    out: Annotated[Path, typer.Option(help="Directory to write to.")] = Path("schemas"),
    check: Annotated[
        bool, typer.Option("--check", help="Fail if the files differ instead of writing.")
    ] = False,
) -> None:
    """Write the JSON Schema of inbound commands and log events."""
    from turnstream.core.schemas import exported_schemas

    stale = []
    for name, content in exported_schemas().items():
        path = out / name
        if check:
            if not path.exists() or path.read_bytes() != content:
                stale.append(str(path))
            continue
        out.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        console.print(f"wrote {path}")
    if stale:
        err.print(f"[red]out of date:[/] {', '.join(stale)}; run `turnstream schemas export`")
        raise typer.Exit(1)
