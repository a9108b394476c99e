"""The console's files, without a browser: served by the app, modules that resolve, and the
event kinds it listens for equal to the contract's."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import httpx
import orjson

from turnstream.console import STATIC
from turnstream.core.events import Event
from turnstream.http.app import create_app
from turnstream.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def contract_types() -> set[str]:
    union = typing.get_args(typing.get_args(Event)[0])
    return {cls.model_fields["type"].default for cls in union}


def test_the_stream_listens_for_every_event_kind_of_the_contract() -> None:
    source = (STATIC / "api.js").read_text()
    listed = re.findall(r'"([A-Za-z]+)"', source[source.index("EVENT_TYPES = [") :])
    assert set(listed) == contract_types()


def test_every_event_type_of_the_schemas_is_drawn_or_listed_as_shown_raw() -> None:
    exported = orjson.loads((REPO / "schemas" / "event.schema.json").read_bytes())
    types = {ref["$ref"].rsplit("/", 1)[-1] for ref in exported["oneOf"]}
    source = (STATIC / "timeline.js").read_text()
    drawn = set(re.findall(r'case "([A-Za-z]+)":', source))
    notes = source[source.index("const STAGE_NOTE = {") :]
    drawn |= set(re.findall(r"(\w+):", notes[: notes.index("};")]))
    raw_list = source[source.index("SHOWN_RAW = [") :]
    shown_raw = set(re.findall(r'"([A-Za-z]+)"', raw_list[: raw_list.index("];")]))
    assert types - drawn - shown_raw == set(), "not drawn by timeline.js nor in SHOWN_RAW"
    assert drawn & shown_raw == set(), "listed in SHOWN_RAW but drawn: take it off the list"


def test_every_module_import_names_a_file_and_an_export_it_has() -> None:
    for path in STATIC.glob("*.js"):
        for names, target in re.findall(
            r"import \{([^}]+)\} from \"\./([\w.]+)\"", path.read_text()
        ):
            module = (STATIC / target).read_text()
            for name in (n.strip() for n in names.split(",")):
                word = re.escape(name) + r"(?![\w$])"
                exported = re.search(
                    rf"export (?:async )?(?:function|class|const|let) {word}"
                    rf"|export \{{[^}}]*(?<![\w$]){word}",
                    module,
                )
                assert exported, f"{path.name} imports {name} from {target}, which lacks it"


async def test_the_app_serves_the_console_at_the_root() -> None:
    app = create_app(Settings())
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://local") as client:
        page = await client.get("/")
        assert page.status_code == 200
        assert '<script type="module" src="/console/app.js">' in page.text
        for name in ("app.js", "style.css"):
            asset = await client.get(f"/console/{name}")
            assert asset.status_code == 200, name
        assert "javascript" in (await client.get("/console/app.js")).headers["content-type"]
        assert (await client.get("/console/nope.js")).status_code == 404
