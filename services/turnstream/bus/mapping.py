"""The server configuration a partitioned log needs (docs/scaling.md §2): the account's
subject mappings (`Subjects.log_mappings`) and, under ops/accounts.conf, every user's rights
on the log spelled for N partition streams.

With one partition there is nothing to add. With N, nats-server checks a publish's rights
on the subject as mapped (`<prefix>.log.<s>.<Type>.<k>`) and names each partition stream in
its JetStream API subjects (`$JS.API.DIRECT.GET.TS_LOG_<k>`), so `partitioned_accounts`
derives the file for N from the shipped one (the shipped file stays the N = 1 one):

- a right on `<prefix>.log.*.<Type>` (or on one session's, `<prefix>.log.<s>.<Type>`) gets
  the partition token, `….<Type>.*`: the mapped subject, which a user still cannot publish
  to directly (the second mapping sends a five-token log subject to `<prefix>.refused.…`,
  allowed to nobody);
- a right naming the stream `TS_LOG` is repeated for `TS_LOG_0` … `TS_LOG_<N-1>`;
- a right on a deliver subject `<prefix>.deliver.<service>` gets `….<service>.*` too (a
  partition stream's consumer delivers to `….<service>.<k>`);
- the mappings go into the account that has JetStream enabled.
"""

from __future__ import annotations

import re
from pathlib import Path

from turnstream.core.subjects import Subjects

_QUOTED = re.compile(r'"([^"\n]*)"')


def mappings_conf(subjects: Subjects, indent: str = "") -> str:
    """The `mappings` block for an account (or the server's global one); "" when the log
    is one stream."""
    if not subjects.partitioned:
        return ""
    lines = [f'{indent}  "{src}": "{dest}"' for src, dest in subjects.log_mappings.items()]
    return f"{indent}mappings: {{\n" + "\n".join(lines) + f"\n{indent}}}\n"


def _rights(subject: str, subjects: Subjects) -> list[str]:
    """What one right of the shipped file becomes for N partitions."""
    p = re.escape(subjects.prefix)
    stream = re.escape(subjects.log_stream)
    if re.fullmatch(rf"{p}\.log\.[A-Za-z0-9_:*-]+\.[A-Za-z0-9_]+", subject):  # a kind
        return [f"{subject}.*"]
    if re.fullmatch(rf"{p}\.deliver\.[A-Za-z0-9_-]+", subject):  # the inbound's stays
        return [subject, f"{subject}.*"]
    token = re.compile(rf"(?<=\.){stream}(?=\.|$)")
    if token.search(subject):
        return [token.sub(name, subject) for name in subjects.log_streams]
    return [subject]


def partitioned_accounts(text: str, subjects: Subjects) -> str:
    """ops/accounts.conf (`text`) for `subjects.log_partitions` partitions; `text` itself
    for one."""
    if not subjects.partitioned:
        return text

    def rewrite(found: re.Match[str]) -> str:
        return ", ".join(f'"{right}"' for right in _rights(found.group(1), subjects))

    out = []
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("#"):
            out.append(line)
            continue
        out.append(_QUOTED.sub(rewrite, line))
        if line.strip() == "jetstream: enabled":
            indent = line[: len(line) - len(line.lstrip())]
            out.append(mappings_conf(subjects, indent))
    derived = "".join(out)
    if "mappings:" not in derived:
        raise ValueError("no account with `jetstream: enabled` to put the log mappings in")
    return (
        f"# derived for TURNSTREAM_LOG_PARTITIONS={subjects.log_partitions} by "
        "`turnstream streams mapping --accounts`; do not edit\n" + derived
    )


def mapping_text(subjects: Subjects, accounts: Path | None = None) -> str:
    """What `turnstream streams mapping` prints: the account's `mappings` block to paste
    into the account of the deployment's users (or, given `accounts`, that file derived
    for the partitions)."""
    if accounts is not None:
        return partitioned_accounts(accounts.read_text(), subjects)
    if not subjects.partitioned:
        return "# TURNSTREAM_LOG_PARTITIONS is 1: one TS_LOG stream, no mapping needed\n"
    return (
        f"# TURNSTREAM_LOG_PARTITIONS={subjects.log_partitions}: paste into the account "
        "of the deployment's users (ops/accounts.conf: TURNSTREAM), next to `jetstream`\n"
        + mappings_conf(subjects)
    )
