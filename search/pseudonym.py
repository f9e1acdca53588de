"""Pseudonymisation of query texts: a keyed hash (HMAC-SHA256) with a secret per trace store.

An unkeyed digest of a household's queries is reversed by hashing a list of likely
phrases ("unlock the front door") and comparing. With a key nobody outside the machine
has, the same text still maps to the same pseudonym (so the exact text finds its traces
and equal queries group together), but guessing needs the key.

The key lives beside the database (`traces.db` -> `traces.db.key`), mode 0600, 32 random
bytes as hex. It is created once, atomically (written to a private temporary file, then
linked into place: two processes opening a new store at once agree on one key), and
reused while it exists. Deleting it unlinks every stored pseudonym from its text for good.

Imports nothing heavy: the trace writer process uses it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

PREFIX = "hmac-sha256:"
LEGACY_PREFIX = "sha256:"  # unkeyed digests written by stores before schema 3
KEY_BYTES = 32


def key_path(db_path: str | os.PathLike[str]) -> Path:
    path = Path(db_path)
    return path.with_name(path.name + ".key")


def read_key(path: Path) -> bytes | None:
    """The key at `path`, or None when there is none (or it is unreadable or malformed)."""
    try:
        text = path.read_text(encoding="ascii").strip()
        key = bytes.fromhex(text)
    except (OSError, ValueError):
        return None
    return key if len(key) >= 16 else None


def load_or_create_key(path: Path) -> bytes:
    """The store's key: read when present, else created 0600 and linked into place."""
    existing = read_key(path)
    if existing is not None:
        _private(path)
        return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (secrets.token_hex(KEY_BYTES) + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, path)  # fails if another process linked its key first
    except FileExistsError:
        pass
    finally:
        os.unlink(temporary)
    key = read_key(path)
    if key is None:
        raise OSError(f"{path}: not a valid trace store key (delete it to start a new one)")
    return key


def _private(path: Path) -> None:
    try:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
    except OSError:
        pass


class Pseudonymizer:
    """Text -> 'hmac-sha256:<hex>' under one key."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def __call__(self, text: str) -> str:
        mac = hmac.new(self._key, text.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return PREFIX + mac.hexdigest()

    def legacy(self, text: str) -> str:
        """What an unkeyed digest of `text` became when its store was upgraded."""
        return self(legacy_digest(text))

    def __repr__(self) -> str:
        return "Pseudonymizer(<key>)"  # never the key itself


def legacy_digest(text: str) -> str:
    return LEGACY_PREFIX + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def ephemeral() -> Pseudonymizer:
    """A pseudonymizer under a random key of this process only (no store to share one)."""
    return Pseudonymizer(secrets.token_bytes(KEY_BYTES))
