"""Who calls an A2A method and what they may do: the caller the route put in the call's
context, its key's scopes and sessions glob checked per method (as on the REST routes),
and the HTTP face's problems said as A2A errors."""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, InvalidRequestError

from turnstream.http.auth import Principal, Scope
from turnstream.http.problems import Problem

PRINCIPAL = "turnstream.principal"
"""Where the route puts the caller (`ServerCallContext.state`)."""


def who(context: ServerCallContext) -> Principal:
    """The caller of this A2A call (the route always sets it)."""
    caller = context.state.get(PRINCIPAL)
    if not isinstance(caller, Principal):
        raise InvalidRequestError(message="unauthenticated")
    return caller


def require(caller: Principal, scope: Scope, session: str) -> None:
    """`forbidden` unless the caller's key has `scope` on `session`."""
    if not caller.allows(scope, session):
        raise InvalidRequestError(
            message=f"forbidden: key {caller.name!r} may not {scope} in context {session!r}",
            data={"status": 403},
        )


def a2a_error(problem: Problem) -> A2AError:
    """The HTTP face's `problem` as the A2A error a client reads: a timeout is an internal
    error that says what was stored and what did not answer; the rest are bad params."""
    data = {"status": problem.status, "type": problem.slug, **problem.extra}
    if problem.status == 504:
        return InternalError(message=problem.detail, data=data)
    return InvalidParamsError(message=problem.detail, data=data)
