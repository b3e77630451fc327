"""Status writes that land on the object they were made for or nowhere.

A late write for an object deleted and created again under its name must not land on the new
one. A merge patch cannot say so: the status subresource ignores the metadata in it (a
`metadata.uid` in a /status merge patch is not checked). A JSON patch can: its first op tests
`/metadata/uid`, and the API server refuses the whole patch (422) when it fails.

The fields are written as a merge patch would write them, with one difference: a value replaces
the field whole (a merge patch merges a nested object into the one there). A None removes the
field, whether or not it is there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.runtime.client import ApiError, KubeClient


async def write_status(
    client: KubeClient,
    path: str,
    uid: str,
    fields: Mapping[str, Any],
    *,
    whole: bool = False,
) -> bool:
    """Write `fields` into the status of the object at `path` (its API path, without /status)
    if its uid is `uid`; False when that object is gone (deleted, or replaced under its name).

    Each field is replaced on its own (None: removed), so fields other writers own stay. `whole` (the object has
    no status yet: the fields have no parent to go into) adds the status as one object, only
    where there is none: `add` replaces a member that exists, and another writer may have given
    the object a status since it was read (the events operator's delivery fields), or an earlier
    try of this write landed without an answer. A refusal is told apart by one read, only then:
    the object gone or another one; or the status there when written whole (then field by field)
    or missing when written field by field (then whole), written once more that other way. Any
    other refusal is raised."""
    try:
        await client.json_patch(f"{path}/status", _ops(uid, fields, whole))
    except ApiError as err:
        if err.not_found:
            return False
        if err.status != 422:
            raise
        try:
            current = await client.get(path)
        except ApiError as again:
            if again.not_found:
                return False
            raise err from again
        if (current.get("metadata") or {}).get("uid") != uid:
            return False
        if whole == (current.get("status") is None):
            raise  # refused for what it says (a status the schema does not take)
        try:
            await client.json_patch(f"{path}/status", _ops(uid, fields, not whole))
        except ApiError as again:
            if again.not_found:
                return False
            raise
    return True


def _ops(uid: str, fields: Mapping[str, Any], whole: bool) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
    if whole:
        # A `test` for null passes where the member is missing (the API server's JSON patch).
        ops.append({"op": "test", "path": "/status", "value": None})
        value = {k: v for k, v in fields.items() if v is not None}
        ops.append({"op": "add", "path": "/status", "value": value})
        return ops
    for key, value in fields.items():
        path = f"/status/{_token(key)}"
        if value is None:
            # `remove` of a missing member fails the whole patch, and a null the schema does
            # not allow may be refused: the member is made to exist, then removed. The patch
            # is validated as a whole, after its last op.
            ops.append({"op": "add", "path": path, "value": None})
            ops.append({"op": "remove", "path": path})
        else:
            ops.append({"op": "add", "path": path, "value": value})
    return ops


def _token(key: str) -> str:
    """A key as a JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
