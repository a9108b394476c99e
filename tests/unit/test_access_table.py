"""ops/README.md's table of each NATS user's rights says exactly what ops/accounts.conf
grants (issue 23): the events it may append, the other subjects it may publish to, what it
may subscribe to, whether it answers requests, the streams it may use through the
JetStream API, and its stream administration (create/update/purge/delete)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("appends", "publishes", "subscribes", "streams", "admin")
ADMIN = re.compile(r"^\$JS\.API\.STREAM\.(CREATE|UPDATE|PURGE|DELETE)\.")
DURABLE_ADMIN = re.compile(  # a consumer it names (not `*`: an ephemeral of its own)
    r"^\$JS\.API\.CONSUMER\.(DURABLE\.CREATE|DELETE|CREATE(?=\.[\w-]+\.[\w>-]))\.([\w-]+)"
)
NAME = r"([\w>-]+)"
STREAM_OF = (  # what a JetStream API subject lets a user use: a stream, or a bucket's writes
    (re.compile(rf"^\$JS\.API\.(?:DIRECT\.GET|STREAM\.MSG\.GET)\.{NAME}"), "{}"),
    (re.compile(rf"^\$JS\.API\.STREAM\.INFO\.{NAME}"), "{}"),
    (re.compile(rf"^\$JS\.API\.CONSUMER\.(?:DURABLE\.|MSG\.)?\w+\.{NAME}"), "{}"),
    (re.compile(rf"^\$JS\.ACK\.{NAME}\."), "{}"),
    (re.compile(r"^\$KV\.(\w+)\.>$"), "put KV_{}"),
    (re.compile(r"^\$KV\.(\w+\.[\w.>=-]+)$"), "put KV_{}"),  # some keys only
    (re.compile(r"^\$O\.(\w+)\."), "put OBJ_{}"),
)


def rights(accounts: str) -> dict[str, dict[str, set[str]]]:
    """Each user's rights, in the table's columns, read from ops/accounts.conf."""
    found: dict[str, dict[str, set[str]]] = {}
    for block in re.split(r"\n\s*\{ user: ", accounts)[1:]:
        user = block.split(",", 1)[0].strip()
        body = re.sub(r"#[^\n]*", "", block)
        publish_part, _, subscribe_part = body.partition("subscribe:")
        publish = re.findall(r'"([^"]+)"', publish_part.partition("publish:")[2])
        subscribe = re.findall(r'"([^"]+)"', subscribe_part.split("}")[0])
        columns: dict[str, set[str]] = {c: set() for c in COLUMNS}
        columns["subscribes"] = set(subscribe)
        if "allow_responses: true" in body:
            columns["publishes"].add("(responses)")
        for subject in publish:
            if subject.startswith(("ts.log.*.", "ts.log.")) and subject.count(".") == 3:
                columns["appends"].add(subject.rsplit(".", 1)[1])
            elif ADMIN.match(subject):
                columns["admin"].add(subject.removeprefix("$JS.API.STREAM."))
            elif match := DURABLE_ADMIN.match(subject):
                verb = match.group(1).removeprefix("DURABLE.")
                columns["admin"].add(f"CONSUMER.{verb}.{match.group(2)}")
            elif subject.startswith(("$JS.", "$KV.", "$O.")):
                for pattern, name in STREAM_OF:
                    if match := pattern.match(subject):
                        columns["streams"].add(name.format(match.group(1)))
                        break
                else:  # account-wide: INFO, STREAM.LIST, flow control replies
                    columns["streams"].add(subject.removeprefix("$JS.API.").removeprefix("$JS."))
            else:
                columns["publishes"].add(subject)
        found[user] = columns
    return found


def table(readme: str) -> dict[str, dict[str, set[str]]]:
    """The rows of the README's rights table, each cell's `code` items."""
    start = readme.index("| user | appends")
    rows = readme[start:].split("\n\n", 1)[0].splitlines()[2:]
    found = {}
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        user = cells[0].strip("`")
        found[user] = {
            column: set(re.findall(r"`([^`]+)`", cell))
            for column, cell in zip(COLUMNS, cells[1:], strict=True)
        }
    return found


def test_the_readme_table_is_what_accounts_conf_grants() -> None:
    granted = rights((ROOT / "ops" / "accounts.conf").read_text())
    shown = table((ROOT / "ops" / "README.md").read_text())
    assert set(shown) == set(granted)
    for user, columns in granted.items():
        for column in COLUMNS:
            assert shown[user][column] == columns[column], (user, column)


def test_no_user_but_the_operator_administers_a_stream() -> None:
    granted = rights((ROOT / "ops" / "accounts.conf").read_text())
    for user, columns in granted.items():
        if user == "operator":
            assert not any(a.startswith(("PURGE", "DELETE")) for a in columns["admin"])
        else:
            assert columns["admin"] == set(), user


def test_each_user_reads_only_its_own_inbox() -> None:
    granted = rights((ROOT / "ops" / "accounts.conf").read_text())
    for user, columns in granted.items():
        inboxes = {s for s in columns["subscribes"] if s.startswith("_INBOX")}
        assert inboxes == {f"_INBOX.{user}.>"}, user
        assert not any(s.startswith("_INBOX") for s in columns["publishes"]), user
        # a durable push consumer's deliveries are read by its own service alone
        delivered = {s for s in columns["subscribes"] if s.startswith("ts.deliver.")}
        assert delivered <= {f"ts.deliver.{user}"}, user
        assert not any(s in (">", "ts.>", "ts.deliver.>") for s in columns["subscribes"]), user


def test_no_user_but_the_operator_may_name_a_durable_in_a_create() -> None:
    """nats-server lets a create on the bare `$JS.API.CONSUMER.CREATE.<stream>` redefine any
    consumer its body names (tests/security/test_durables.py): on the streams with durables,
    only the operator may use it; every other user names its own consumers in the subject,
    and is denied the durables' names there (`deny: $DURABLES`, every durable of
    bus/durables.py)."""
    from turnstream.bus.durables import every_durable

    text = (ROOT / "ops" / "accounts.conf").read_text()
    listed = text.split("DURABLES: [", 1)[1].split("]", 1)[0]
    denied = set(re.findall(r'"([^"]+)"', listed))
    expected = set()
    for durable in every_durable(10.0):
        stream = "TS_INBOUND" if durable.inbound else "TS_LOG"
        base = f"$JS.API.CONSUMER.CREATE.{stream}.{durable.name}"
        expected |= {base, f"{base}.>"}
    assert denied == expected
    for block in re.split(r"\n\s*\{ user: ", text)[1:]:
        user = block.split(",", 1)[0].strip()
        body = re.sub(r"#[^\n]*", "", block)
        granted = set(re.findall(r'"([^"]+)"', body.partition("publish:")[2].split("deny:")[0]))
        if user == "operator":
            continue
        for stream in ("TS_LOG", "TS_INBOUND"):
            assert f"$JS.API.CONSUMER.CREATE.{stream}" not in granted, (user, stream)
            if f"$JS.API.CONSUMER.CREATE.{stream}.*" in granted:
                assert "deny: $DURABLES" in body, user
