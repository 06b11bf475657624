"""``modstream models promote`` / ``rollback``: switch the served bundle by swapping a link, atomically,
loading its text model into the running Triton first when it is another one.

The served bundle is a symbolic link (the cache's ``current``, or whatever MODSTREAM_MODEL_DIR
names). A new link is made beside it and renamed over it, so a reader sees the old bundle
or the new one, never neither. Every switch is appended to ``<link>.history.jsonl``, which
is also what ``rollback`` walks back: promotions push, rollbacks pop.

A bundle with another text model is served hot, in three steps, in this order:
1. its text model is written into Triton's repository as a version of its own and loaded
   through Triton's repository API, and the switch waits until that version is ready;
2. the link is swapped;
3. the workers, between batches, load the bundle and ask Triton for its version.
Versions that no bundle in use names (the served one, the shadow's) are retired once no
worker has asked for them for a while: their directory is removed and Triton unloads them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from modstream.loop.champion import load_serving
from modstream.loop.config import Serving
from modstream.serving.triton_repo import add_version, ensure_model, target_of, versions
from workers.adapters.triton import TritonControl, triton_version
from workers.errors import describe
from workers.model_cards import TextModelCard

log = logging.getLogger(__name__)

CONTROL_TIMEOUT_S = 60.0  # at least, for Triton's repository API: loading a text model takes seconds
DRAIN_MAX_S = 60.0  # at least, for a retired text model still asked for to stay loaded


class PromotionError(ValueError):
    """A switch that cannot be made; one line."""


class ModelControl(Protocol):
    """Triton's model-repository API, as far as a promotion needs it (workers/adapters/triton.py)."""

    def load(self, model: str) -> None: ...

    def ready(self, model: str, number: int) -> bool: ...

    def last_inference_ms(self, model: str, number: int) -> int: ...


@dataclass(frozen=True)
class TextServing:
    """Where text models are served: the model directory in Triton's repository (``<repo>/spam_text``),
    which a promotion writes and Triton reads, and Triton's control API."""

    model_root: Path
    control: ModelControl
    ready_timeout_s: float = 120.0
    # A retired version is unloaded once it has been idle this long (the workers' reload interval)...
    idle_s: float = 5.0
    # ...and no sooner than this after the switch, nor later: a version still asked for then stays loaded.
    drain_min_s: float = 10.0
    drain_max_s: float = 60.0
    keep: Sequence[Path] = ()  # other bundles whose text model must stay loaded (the shadow's)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    @property
    def name(self) -> str:
        return self.model_root.name


@dataclass(frozen=True)
class Switch:
    action: str  # promote | rollback
    before: str
    after: str
    decision: str  # the decision model version now served
    text: str
    text_changed: bool  # its text model was loaded into Triton before the link was swapped
    retired: list[str] = field(default_factory=list)  # text models unloaded once no worker asked for them
    still_in_use: list[str] = field(default_factory=list)  # text models left loaded: still asked for

    def line(self) -> str:
        return json.dumps({"at": datetime.now(UTC).isoformat(), **self.__dict__})


def history_file(link: Path) -> Path:
    return link.with_name(link.name + ".history.jsonl")


def _stack(link: Path) -> list[str]:
    """The bundles promoted in turn, the served one last."""
    stack: list[str] = []
    path = history_file(link)
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        if entry["action"] == "promote":
            stack = stack or [entry["before"]] * bool(entry["before"])  # nothing was served before the first
            stack.append(entry["after"])
        elif stack:
            stack.pop()
    return stack


def _text_version(bundle: Path) -> str | None:
    try:
        return TextModelCard.load(bundle / "text").version
    except (OSError, ValueError):  # gone or broken: nothing to compare or keep
        return None


def _serve_text(serving: TextServing, text_dir: Path, version: str) -> None:
    """Unless Triton serves the text model already, write it into the repository and load it; returns
    once Triton serves it."""
    root, number = serving.model_root, triton_version(version)
    try:
        if serving.control.ready(serving.name, number):
            return
    except Exception as exc:
        raise PromotionError(f"Triton does not answer: {describe(exc)}") from None
    try:
        target = target_of((root / "config.pbtxt").read_text())
    except (OSError, ValueError) as exc:
        raise PromotionError(f"{root} is not a Triton model directory of modstream's: {describe(exc)}") from None
    try:
        added = not (root / str(number)).is_dir()
        add_version(target, text_dir, root)
        serving.control.load(serving.name)
        deadline = serving.clock() + serving.ready_timeout_s
        while not serving.control.ready(serving.name, number):
            if serving.clock() > deadline:
                raise TimeoutError(f"not ready after {serving.ready_timeout_s:g}s")
            serving.sleep(0.2)
    except Exception as exc:
        if added:  # leave the repository as it was
            shutil.rmtree(root / str(number), ignore_errors=True)
        raise PromotionError(f"Triton did not load text model {version} (version {number}): {describe(exc)}") from None
    log.info("Triton serves text model %s as %s version %d", version, serving.name, number)


def _retire(serving: TextServing, keep: set[str]) -> tuple[list[str], list[str]]:
    """Unload every text model in the repository not in ``keep``, once no worker asks for it."""
    old = {n: v for n, v in versions(serving.model_root).items() if v not in keep}
    start = serving.clock()
    retired: list[str] = []
    while old:
        now = serving.clock()
        if now - start >= serving.drain_min_s:
            idle_since_ms = (time.time() - serving.idle_s) * 1000
            idle = [n for n in old if serving.control.last_inference_ms(serving.name, n) < idle_since_ms]
            for number in idle:
                shutil.rmtree(serving.model_root / str(number))
            if idle:
                serving.control.load(serving.name)  # removed directories: Triton unloads those versions only
                log.info("retired text models %s: no worker asked for them", [old[n] for n in idle])
                retired += [old.pop(n) for n in idle]
        if not old or now - start >= serving.drain_max_s:
            break
        serving.sleep(0.5)
    return retired, sorted(old.values())


def _swap(link: Path, target: Path, action: str, serving: TextServing | None) -> Switch:
    if link.exists() and not link.is_symlink():
        raise PromotionError(f"{link} is a directory, not a link: point MODSTREAM_MODEL_DIR at a link to switch")
    model, text_version = load_serving(target)  # a bundle that cannot serve is never linked
    before = str(link.resolve()) if link.is_symlink() else ""
    text_changed = bool(before) and _text_version(Path(before)) != text_version
    if serving is not None:
        _serve_text(serving, target / "text", text_version)
    elif text_changed:
        raise PromotionError(
            f"its text model {text_version} is not the one served: name Triton's repository "
            "(MODSTREAM_TRITON_REPO) so that it can be loaded there first"
        )
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.resolve())
    os.replace(tmp, link)  # atomic on POSIX: readers see the old bundle or the new one
    log.info("%s: %s -> %s (decision model %s)", action, before, target.resolve(), model.version)
    retired: list[str] = []
    in_use: list[str] = []
    if text_changed and serving is not None:
        keep = {text_version} | {v for b in serving.keep if (v := _text_version(b)) is not None}
        retired, in_use = _retire(serving, keep)
    switch = Switch(action, before, str(target.resolve()), model.version, text_version, text_changed, retired, in_use)
    with history_file(link).open("a") as f:
        f.write(switch.line() + "\n")
    return switch


def promote(link: Path, bundle: Path, serving: TextServing | None = None) -> Switch:
    if not bundle.is_dir():
        raise PromotionError(f"{bundle} is not a bundle directory (text/ and decision/)")
    return _swap(link, bundle, "promote", serving)


def shadow(link: Path, bundle: Path, serving: TextServing | None = None) -> Switch:
    """Shadow BUNDLE: the challenger's link (MODSTREAM_SHADOW_MODEL_DIR) swapped as the served one's,
    its text model loaded into the challenger's Triton model first."""
    if not bundle.is_dir():
        raise PromotionError(f"{bundle} is not a bundle directory (text/ and decision/)")
    return _swap(link, bundle, "shadow", serving)


def rollback(link: Path, serving: TextServing | None = None) -> Switch:
    stack = _stack(link)
    if len(stack) < 2:
        raise PromotionError(f"nothing to roll back to: {history_file(link)} records no earlier promotion")
    return _swap(link, Path(stack[-2]), "rollback", serving)


def text_serving(settings: Serving, name: str | None = None) -> TextServing | None:
    """Triton's repository and control API for the Triton model ``name`` (default the served one's), for a
    promotion that brings another text model; None when MODSTREAM_TRITON_REPO is unset (then such a
    promotion is refused).

    The drain policy, from the workers' reload interval (MODSTREAM_MODEL_RELOAD_S): a retired text
    model is unloaded once idle for one interval, no sooner than two after the switch (every worker
    has looked for the new bundle by then) and no later than six, or :data:`DRAIN_MAX_S` if longer."""
    if settings.triton_repo is None:
        return None
    reload_s = settings.model_reload_s or TextServing.idle_s  # 0: the workers never look; assume the default
    return TextServing(
        ensure_model(settings.triton_repo, name or settings.triton_model, like=settings.triton_model),
        TritonControl(settings.triton_url, max(settings.triton_timeout_s, CONTROL_TIMEOUT_S)),
        idle_s=reload_s,
        drain_min_s=2 * reload_s,
        drain_max_s=max(DRAIN_MAX_S, 6 * reload_s),
        keep=[settings.shadow_model_dir] if settings.shadow_model_dir else [],
    )


def promote_configured(settings: Serving, bundle: Path) -> Switch:
    """:func:`promote` BUNDLE on the link MODSTREAM_MODEL_DIR names, through the served Triton model."""
    return promote(settings.model_dir, bundle, text_serving(settings))


def shadow_configured(settings: Serving, bundle: Path) -> Switch:
    """:func:`shadow` BUNDLE on the link MODSTREAM_SHADOW_MODEL_DIR names, through the challenger's
    Triton model (MODSTREAM_SHADOW_TRITON_MODEL)."""
    if settings.shadow_model_dir is None:
        raise PromotionError("MODSTREAM_SHADOW_MODEL_DIR is unset: name the challenger's link, the one workers shadow")
    return shadow(settings.shadow_model_dir, bundle, text_serving(settings, settings.shadow_triton_model))


def rollback_configured(settings: Serving) -> Switch:
    """:func:`rollback` the link MODSTREAM_MODEL_DIR names, through the served Triton model."""
    return rollback(settings.model_dir, text_serving(settings))
