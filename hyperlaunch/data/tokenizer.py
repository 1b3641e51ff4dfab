"""The tokenizer of a run, loaded one way for `hyperlaunch prepare-data` and the trainer: the
offline one shipped with the built-in corpus, a local directory, or a hub name.

A named tokenizer that cannot be loaded is an error, never a silent fallback to another one:
token ids from two tokenizers mean different text, and a job whose ranks (or whose restarts)
tokenize differently trains on garbage without a sign. With no fallback the choice is the
same wherever the same files are found; the trainer still checks that every rank loaded the
same contents (nodes may see different Hugging Face caches).

Torch-free: `tokenizers` (and `transformers` for a directory or hub name) are imported only
when a tokenizer is loaded; a CLI without the `train` extra says so in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from hyperlaunch.core.errors import InvalidInput, ModelUnavailable

if TYPE_CHECKING:
    from tokenizers import Tokenizer

OFFLINE = "offline"
"""The byte-level BPE tokenizer shipped in hyperlaunch/data/assets (512 tokens, no download)."""

OFFLINE_TOKENIZER_FILE = Path(__file__).resolve().parent / "assets" / "tokenizer.json"
"""Where the offline tokenizer is shipped (python -m hyperlaunch.data.offline_assets rewrites it)."""

EOS_TOKEN = "<|endoftext|>"
"""The offline tokenizer's end-of-sequence token: joins documents."""

PAD_TOKEN = "<|pad|>"
"""The offline tokenizer's padding token."""

DATA_EXTRA_HINT = "pip install 'hyperlaunch[data]'"
"""Tokenizing needs tokenizers and numpy (and transformers for a Hugging Face tokenizer), not torch:
the `data` extra has them, for a login node that prepares data without the trainer's libraries."""


@dataclass(frozen=True)
class LoadedTokenizer:
    """A fast tokenizer and what the data and the checks need to know about it."""

    name: str
    """As asked for: 'offline', a hub name, or a local directory (made absolute)."""
    backend: Tokenizer = field(repr=False)
    """The `tokenizers` object that encodes (the same one inside a transformers tokenizer)."""
    eos_id: int
    vocab_size: int
    """Token ids are below this (added tokens included)."""
    sha256: str
    """Hash of what decides the token ids and the EOS id (see content_sha256)."""
    wrapper: Any = field(default=None, repr=False)
    """The transformers tokenizer it came from (saved with the exported model); None offline."""

    @property
    def identity(self) -> dict[str, object]:
        """What a prepared folder's manifest records, and what a job compares it with."""
        return {"name": self.name, "sha256": self.sha256, "vocab_size": self.vocab_size, "eos_id": self.eos_id}

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, no special tokens added (documents are joined with EOS)."""
        return [enc.ids for enc in self.backend.encode_batch_fast(texts, add_special_tokens=False)]

    def save(self, directory: Path) -> None:
        """Into a model folder, loadable with AutoTokenizer.from_pretrained."""
        wrapper = self.wrapper
        if wrapper is None:
            from transformers import PreTrainedTokenizerFast

            wrapper = PreTrainedTokenizerFast(tokenizer_object=self.backend, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)
        wrapper.save_pretrained(str(directory))


def content_sha256(backend: Tokenizer, eos_id: int) -> str:
    """A hash of the vocabulary, merges, added tokens and the EOS id that joins documents:
    the same for the same tokenizer whatever folder, cache or library version it is loaded
    from (the file layout and the serialised options change between versions; the ids do not)."""
    spec = json.loads(backend.to_str())
    model = spec.get("model") or {}
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    added = sorted((t["id"], t["content"], bool(t.get("special"))) for t in spec.get("added_tokens") or [])
    canonical = {"type": model.get("type"), "vocab": model.get("vocab"), "merges": merges, "added": added, "eos": eos_id}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def load_tokenizer(choice: str) -> LoadedTokenizer:
    """'offline', a local directory, or a hub name (the local Hugging Face cache first, then
    the hub when it answers). One that cannot be loaded raises ModelUnavailable with a hint."""
    _require_tokenizers()
    if choice == OFFLINE:
        return _offline()
    path = Path(choice).expanduser()
    if path.exists() or choice.startswith((".", "/", "~")):
        if not path.is_dir():
            raise ModelUnavailable(f"--tokenizer {choice}: no such directory")
        try:
            return _wrap(str(path.resolve()), _auto_tokenizer(str(path), local_files_only=True))
        except (OSError, ValueError) as err:
            raise ModelUnavailable(f"--tokenizer {choice}: cannot load a tokenizer there ({_short(err)})") from None
    # The local cache needs no network; ask the hub only when it answers at all: its client
    # retries for half a minute on a cluster with no internet, on every rank and every restart.
    error: Exception | None = None
    try:
        return _wrap(choice, _auto_tokenizer(choice, local_files_only=True))
    except InvalidInput:
        raise
    except Exception:  # noqa: BLE001 - not in the cache (or broken there): the hub may have it
        pass
    reachable = _hub_reachable()
    if reachable:
        try:
            return _wrap(choice, _auto_tokenizer(choice))
        except InvalidInput:
            raise
        except Exception as err:  # noqa: BLE001 - any hub failure is reported below, with the hint
            error = err
    where = "not in the local Hugging Face cache" + ("" if reachable else " and the hub is not reachable")
    raise ModelUnavailable(
        f"--tokenizer {choice} cannot be loaded: {where}" + (f" ({_short(error)})" if reachable and error else ""),
        hint=f"download it to a folder the nodes share and pass that folder (hf download {choice} --local-dir DIR), "
        "point HF_HOME at a cache that holds it, set HF_TOKEN for a gated model, or use --tokenizer offline",
    )


def tokenizer_for_model(model: str) -> str:
    """The tokenizer a job training `model` on its own data uses by default (as
    hyperlaunch.core.recommend decides it): a model directory's own, else the preset's."""
    from hyperlaunch.core.checkpoints import checkpoint_name, is_model_directory
    from hyperlaunch.core.models import get_preset, spec_from_model_directory

    if not is_model_directory(model):
        return get_preset(model).tokenizer
    directory = Path(model)
    if (directory / "tokenizer_config.json").exists():
        return str(directory.resolve())
    return spec_from_model_directory(directory, checkpoint_name(model)).tokenizer


def _require_tokenizers() -> None:
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        raise InvalidInput("tokenizing needs tokenizers (and transformers for a Hugging Face tokenizer)", hint=DATA_EXTRA_HINT) from None


def _offline() -> LoadedTokenizer:
    from tokenizers import Tokenizer

    backend = Tokenizer.from_file(str(OFFLINE_TOKENIZER_FILE))
    eos = int(cast(int, backend.token_to_id(EOS_TOKEN)))  # the shipped file has it
    return LoadedTokenizer(
        name=OFFLINE, backend=backend, eos_id=eos, vocab_size=int(backend.get_vocab_size(with_added_tokens=True)),
        sha256=content_sha256(backend, eos),
    )


def _auto_tokenizer(name: str, **kwargs: Any) -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise InvalidInput("loading a Hugging Face tokenizer needs transformers", hint=DATA_EXTRA_HINT) from None
    return AutoTokenizer.from_pretrained(name, **kwargs)


def _wrap(name: str, tok: Any) -> LoadedTokenizer:
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise ModelUnavailable(f"--tokenizer {name}: not a fast tokenizer (no tokenizer.json); convert it with transformers first")
    eos = getattr(tok, "eos_token_id", None)
    if eos is None:
        raise ModelUnavailable(f"--tokenizer {name}: the tokenizer has no end-of-sequence token")
    return LoadedTokenizer(
        name=name, backend=backend, eos_id=int(eos), vocab_size=max(len(tok), int(backend.get_vocab_size(True))),
        sha256=content_sha256(backend, int(eos)), wrapper=tok,
    )


def _short(err: BaseException | None) -> str:
    text = " ".join(str(err).split()) if err is not None else ""
    return f"{type(err).__name__}: {text[:200]}" if err is not None else ""


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout_s).close()
    except OSError:
        return False
    return True
