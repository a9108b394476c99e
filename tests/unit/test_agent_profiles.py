"""Agent profiles: the shipped examples load; each bad file names its file, key and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnstream.agents import AgentInvalid, find, load, load_all

SHIPPED = Path(__file__).parents[2] / "agents"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.md"
    path.write_text(text)
    return path


def test_the_shipped_profiles_load() -> None:
    profiles, invalid = load_all(SHIPPED)
    assert invalid == []
    assert {"researcher", "coordinator"} <= set(profiles)
    researcher = profiles["researcher"]
    assert researcher.tools == ("read_file", "list_dir")
    assert researcher.security_mode == "auto"
    assert researcher.max_iterations == 10
    assert researcher.system_prompt.startswith("You are a careful researcher.")


def test_optional_keys_default_to_the_deployment_and_unknown_keys_are_ignored(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "plain", "---\nname: plain\ndescription: d\ncolour: blue\n---\nHi.\n")
    profile = load(path)
    assert (profile.provider, profile.model, profile.tools) == (None, None, None)
    assert (profile.security_mode, profile.max_iterations) == (None, None)
    assert profile.system_prompt == "Hi."


@pytest.mark.parametrize(
    ("front", "key", "says"),
    [
        ("description: d", "name", "required field missing"),
        ("name: other\ndescription: d", "name", "not the file's name"),
        ("name: bad", "description", "required field missing"),
        ("name: bad\ndescription: d\ntools: read_file", "tools", "must be a list"),
        ("name: bad\ndescription: d\ntools: [1, 2]", "tools", "must be a list"),
        ("name: bad\ndescription: d\nmaxIterations: '5'", "maxIterations", "integer >= 1"),
        ("name: bad\ndescription: d\nmaxIterations: 0", "maxIterations", "integer >= 1"),
        ("name: bad\ndescription: d\nmaxIterations: true", "maxIterations", "integer >= 1"),
        ("name: bad\ndescription: d\nsecurityMode: yolo", "securityMode", "not one of"),
        ("name: bad\ndescription: d\nprovider: gemini", "provider", "not one of"),
        ("name: bad\ndescription: d\nmodel: 7", "model", "must be a model name"),
    ],
)
def test_a_bad_key_names_the_file_the_key_and_the_problem(
    tmp_path: Path, front: str, key: str, says: str
) -> None:
    path = write(tmp_path, "bad", f"---\n{front}\n---\nprompt\n")
    with pytest.raises(AgentInvalid) as caught:
        load(path)
    [problem] = caught.value.problems
    assert (problem.file, problem.field) == ("bad.md", key)
    assert says in problem.message
    assert "bad.md" in str(caught.value) and "fix:" in str(caught.value)


def test_no_frontmatter_and_broken_yaml_are_problems_not_crashes(tmp_path: Path) -> None:
    write(tmp_path, "nofront", "You are an agent.\n")
    write(tmp_path, "broken", "---\nname: [broken\n---\nx\n")
    write(tmp_path, "good", "---\nname: good\ndescription: d\n---\nx\n")
    profiles, invalid = load_all(tmp_path)
    assert list(profiles) == ["good"]
    messages = sorted(str(e) for e in invalid)
    assert "broken.md" in messages[0] and "not valid YAML" in messages[0]
    assert "nofront.md" in messages[1] and "no YAML frontmatter" in messages[1]


def test_find_takes_a_name_never_a_path(tmp_path: Path) -> None:
    write(tmp_path, "good", "---\nname: good\ndescription: d\n---\nx\n")
    assert find(tmp_path, "good") == tmp_path / "good.md"
    with pytest.raises(ValueError, match="not a path"):
        find(tmp_path, "../etc/passwd")
    with pytest.raises(FileNotFoundError, match="known: good"):
        find(tmp_path, "nobody")


def test_a_missing_folder_has_no_profiles(tmp_path: Path) -> None:
    assert load_all(tmp_path / "absent") == ({}, [])


def test_a_profile_may_name_its_fallback_model(tmp_path: Path) -> None:
    from turnstream.core.events import SessionConfiguredData
    from turnstream.core.session.agent import with_agent
    from turnstream.core.turn import TurnConfig
    from turnstream.gateway.intake import configured_data

    head = "---\nname: a\ndescription: d\nprovider: anthropic\nfallbackModel: small\n"
    profile = load(write(tmp_path, "a", head + "---\nbody\n"))
    data = configured_data(profile, "k1")
    assert (data.fallback_model, data.fallback_provider) == ("small", None)
    config = with_agent(TurnConfig(fallback=("openai", "x")), data)
    assert config.fallback == ("anthropic", "small")  # the agent's provider, its model
    plain = SessionConfiguredData(agent="b", idempotency_key="k2")
    assert with_agent(TurnConfig(fallback=("openai", "x")), plain).fallback == ("openai", "x")
    with pytest.raises(AgentInvalid) as caught:
        load(write(tmp_path, "a", head.replace("small", "''") + "fallbackProvider: groq\n---\n"))
    assert {p.field for p in caught.value.problems} == {"fallbackModel", "fallbackProvider"}


def test_a_profiles_budget_replaces_the_deployments_limit_by_limit(tmp_path: Path) -> None:
    from turnstream.core.costs import Budget
    from turnstream.core.session.agent import with_agent
    from turnstream.core.turn import TurnConfig
    from turnstream.gateway.intake import configured_data

    head = "---\nname: a\ndescription: d\nbudget: {turnTokens: 5000, sessionUsd: 2.5}\n---\n"
    data = configured_data(load(write(tmp_path, "a", head + "body\n")), "k1")
    deployment = TurnConfig(budget=Budget(turn_tokens=100, session_tokens=900))
    assert with_agent(deployment, data).budget == Budget(
        turn_tokens=5000, session_tokens=900, session_usd=2.5
    )
    with pytest.raises(AgentInvalid) as caught:
        load(write(tmp_path, "a", head.replace("turnTokens: 5000", "turnTokenz: -1") + "b\n"))
    (problem,) = caught.value.problems
    assert problem.field == "budget" and "turnTokenz" in str(problem)


def test_a_sessions_configuration_follows_its_agent_and_mode_each_decision() -> None:
    """`with_agent` keeps its answers by what it was given: the same deployment config
    and agent record give the same answer, a new agent record or mode a new one."""
    from turnstream.core.approval import ApprovalConfig
    from turnstream.core.events import SessionConfiguredData
    from turnstream.core.session.agent import with_agent
    from turnstream.core.turn import TurnConfig

    deployment = TurnConfig(model="m0", approval=ApprovalConfig(default_mode="ask"))
    first = SessionConfiguredData(agent="a", idempotency_key="k1", model="m1")
    config = with_agent(deployment, first, "auto")
    assert (config.model, config.approval and config.approval.default_mode) == ("m1", "auto")
    assert with_agent(deployment, first, "auto") is config  # nothing copied again
    again = SessionConfiguredData(agent="a", idempotency_key="k2", model="m2")
    assert with_agent(deployment, again, "auto").model == "m2"
    ask = with_agent(deployment, first, "ask")
    assert ask.approval is not None and ask.approval.default_mode == "ask"
    assert with_agent(deployment, None).model == "m0"
