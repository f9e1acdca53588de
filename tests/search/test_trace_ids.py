"""Trace ids are what `uuid.uuid4().hex` makes: random version-4 UUIDs, never repeated,
also across a fork (a worker process must not draw its parent's remaining ids)."""

from __future__ import annotations

import os
import uuid

from search.trace_ids import new_trace_id


def test_ids_are_version_4_uuids_and_distinct() -> None:
    ids = [new_trace_id() for _ in range(2000)]  # several blocks
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(hex=text)
        assert parsed.hex == text and parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_a_forked_child_draws_ids_of_its_own() -> None:
    new_trace_id()  # the pool holds ids now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next 10 ids, then leave at once
        os.close(read)
        os.write(write, "".join(new_trace_id() for _ in range(10)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    theirs = {child[i : i + 32] for i in range(0, len(child), 32)}
    ours = {new_trace_id() for _ in range(10)}
    assert len(theirs) == 10 and not theirs & ours
