"""What the bus raises, by the names the services catch it by: the one place outside
which no module needs `nats` (an import-linter contract says so).

These are nats-py's own classes, not wrappers: a `KeyMissing` caught here is the
`KeyNotFoundError` nats-py raised, so nothing is translated on the hot path.
"""

from __future__ import annotations

from nats.errors import Error as BusError
from nats.errors import NoRespondersError as NoResponders
from nats.errors import TimeoutError as BusTimeout
from nats.js.errors import APIError as JetStreamError
from nats.js.errors import BadRequestError as BadRequest
from nats.js.errors import BucketNotFoundError as BucketMissing
from nats.js.errors import KeyNotFoundError as KeyMissing
from nats.js.errors import KeyWrongLastSequenceError as KeyChanged
from nats.js.errors import NoKeysError as NoKeys
from nats.js.errors import NotFoundError as NotFound
from nats.js.errors import ObjectNotFoundError as ObjectMissing

__all__ = [
    "BadRequest",
    "BucketMissing",
    "BusError",
    "BusTimeout",
    "JetStreamError",
    "KeyChanged",
    "KeyMissing",
    "NoKeys",
    "NoResponders",
    "NotFound",
    "ObjectMissing",
]
"""`BusError`: anything nats-py raises (the connection, a request, the object store).
`BusTimeout`: a request not answered in time (a subclass of the builtin `TimeoutError`).
`NoResponders`: nobody subscribes to the subject asked (a service not running).
`JetStreamError`: JetStream's API answered with an error (`err_code` says which);
`BadRequest` (400), `NotFound` (404) are two of them. `KeyMissing`, `KeyChanged` (a
create or an update that expected another revision), `NoKeys`, `BucketMissing`,
`ObjectMissing`: the KV and object stores'."""
