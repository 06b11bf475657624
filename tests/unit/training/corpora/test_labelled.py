"""Labelled-data loaders, MIME text extraction and the deterministic split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from training.corpora.labelled import (
    DataError,
    Example,
    data_hash,
    dedup,
    load_labeled,
    parse_label,
    split,
)
from training.corpora.spamassassin import message_text, own_text

ROWS = [
    {"text": "WIN a free cruise now!!!", "label": "spam"},
    {"text": "Lunch at noon?", "label": "ham"},
    {"text": "Cheap meds, no prescription", "label": "SPAM"},
    {"text": "Minutes of Tuesday's meeting attached", "label": "Ham"},
]
EXPECTED = [
    ("WIN a free cruise now!!!", 1),
    ("Lunch at noon?", 0),
    ("Cheap meds, no prescription", 1),
    ("Minutes of Tuesday's meeting attached", 0),
]


def write(path: Path, rows: list[dict[str, object]]) -> Path:
    frame = pd.DataFrame(rows)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        frame.to_parquet(path)
    return path


# ---------------------------------------------------------------------------- loaders


@pytest.mark.parametrize("ext", ["csv", "jsonl", "parquet"])
def test_formats_load_the_same_examples(tmp_path: Path, ext: str) -> None:
    examples = load_labeled(write(tmp_path / f"data.{ext}", ROWS))
    assert [(e.text, e.label) for e in examples] == EXPECTED
    assert examples[0].id == "data:0"


@pytest.mark.parametrize("ext", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("labels", [(1, 0, 1, 0), ("1", "0", "1", "0"), ("spam", "ham", "Spam", "HAM")])
def test_label_forms(tmp_path: Path, ext: str, labels: tuple[object, ...]) -> None:
    rows = [{"text": r["text"], "label": label} for r, label in zip(ROWS, labels, strict=True)]
    assert [e.label for e in load_labeled(write(tmp_path / f"d.{ext}", rows))] == [1, 0, 1, 0]


def test_id_column_is_kept(tmp_path: Path) -> None:
    rows = [{"id": f"post-{i}", **r} for i, r in enumerate(ROWS)]
    assert [e.id for e in load_labeled(write(tmp_path / "d.jsonl", rows))] == [f"post-{i}" for i in range(4)]


@pytest.mark.parametrize("value", ["maybe", 2, "", True])
def test_parse_label_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="unrecognised label"):
        parse_label(value)


def test_bad_label_names_the_row(tmp_path: Path) -> None:
    rows = [*ROWS[:2], {"text": "hello", "label": "probably-spam"}, *ROWS[2:]]
    with pytest.raises(DataError, match=r"row 3.*probably-spam"):
        load_labeled(write(tmp_path / "d.csv", rows))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file"):
        load_labeled(tmp_path / "nope.csv")


def test_unknown_extension(tmp_path: Path) -> None:
    path = tmp_path / "data.xlsx"
    path.write_text("text,label\nhi,ham\n")
    with pytest.raises(DataError, match=r"unknown extension '\.xlsx'"):
        load_labeled(path)


@pytest.mark.parametrize(("name", "content"), [("e.csv", ""), ("e.jsonl", ""), ("h.csv", "text,label\n")])
def test_empty(tmp_path: Path, name: str, content: str) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(DataError, match=r"empty file|no rows"):
        load_labeled(tmp_path / name)


def test_only_blank_texts(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no non-empty texts"):
        load_labeled(write(tmp_path / "d.jsonl", [{"text": "  ", "label": "spam"}, {"text": "", "label": 0}]))


@pytest.mark.parametrize("ext", ["csv", "jsonl", "parquet"])
def test_missing_columns(tmp_path: Path, ext: str) -> None:
    rows = [{"body": r["text"], "label": r["label"]} for r in ROWS]
    with pytest.raises(DataError, match=r"missing column\(s\) \['text'\]"):
        load_labeled(write(tmp_path / f"d.{ext}", rows))


def test_single_class(tmp_path: Path) -> None:
    rows = [{"text": f"offer {i}", "label": "spam"} for i in range(10)]
    path = write(tmp_path / "d.csv", rows)
    with pytest.raises(DataError, match=r"single-class data \(only spam\)"):
        load_labeled(path)
    assert len(load_labeled(path, min_per_class=0)) == 10  # fine for evaluation


def test_duplicates_only(tmp_path: Path) -> None:
    rows = [{"text": "same spam", "label": "spam"}] * 20 + [{"text": "same ham", "label": "ham"}] * 20
    with pytest.raises(DataError, match="after removing duplicates only 1 spam and 1 ham"):
        load_labeled(write(tmp_path / "d.csv", rows))


def test_dedup_keeps_first_and_drops_conflicting_labels() -> None:
    examples = [Example("a", "x", 1), Example("b", "x", 1), Example("c", "y", 0), Example("d", "y", 1)]
    assert dedup(examples) == [Example("a", "x", 1)]


def test_csv_keeps_na_like_texts(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("text,label\nNA,ham\nNULL,spam\nok,ham\nbuy,spam\n")
    assert [e.text for e in load_labeled(path)] == ["NA", "NULL", "ok", "buy"]


# ---------------------------------------------------------------------------- MIME extraction

PLAIN = """\
From: someone@example.com
To: you@example.com
Subject: Cheap   watches
Received: from mx.example.com by relay.example.com
Content-Type: text/plain; charset=us-ascii

Buy   now,
limited offer!
"""

ALTERNATIVE = """\
From: a@example.com
Subject: Newsletter
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="XX"

--XX
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: quoted-printable

Caf=C3=A9 opens at nine.
--XX
Content-Type: text/html; charset=utf-8

<html><body><p>HTML VERSION</p></body></html>
--XX--
"""

HTML_ONLY = """\
Subject: =?utf-8?B?R3JlYXQgZGVhbA==?=
Content-Type: text/html; charset=iso-8859-1

<html><head><title>T</title><style>p {color: red}</style><script>alert(1)</script></head>
<body><p>Click&nbsp;<a href="http://x.example">here</a></p><p>to claim</p></body></html>
"""

WITH_ATTACHMENT = """\
Subject: Report
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="B"

--B
Content-Type: text/plain

See attached.
--B
Content-Type: text/plain; name="log.txt"
Content-Disposition: attachment; filename="log.txt"

SECRET LOG CONTENT
--B
Content-Type: application/octet-stream
Content-Transfer-Encoding: base64

AAECAw==
--B--
"""

BROKEN = """\
Subject: Hello
Content-Type: text/plain; charset=x-no-such-charset
Content-Transfer-Encoding: base64

SGVsbG8gd29ybGQ=
"""


def test_plain_message_drops_headers_and_collapses_whitespace() -> None:
    assert message_text(PLAIN) == "Cheap watches Buy now, limited offer!"


def test_plain_preferred_over_html_and_qp_decoded() -> None:
    assert message_text(ALTERNATIVE) == "Newsletter Café opens at nine."


def test_html_only_is_stripped() -> None:
    assert message_text(HTML_ONLY) == "Great deal Click here to claim"


def test_attachments_skipped() -> None:
    assert message_text(WITH_ATTACHMENT) == "Report See attached."


def test_unknown_charset_still_decodes() -> None:
    assert message_text(BROKEN) == "Hello Hello world"


LIST_REPLY = """\
On Tue, Alice wrote:
> is the meeting still on?
Yes, at nine in room 4.
Bring the slides.

--
Bob

_______________________________________________
Razor-users mailing list
https://lists.sourceforge.net/lists/listinfo/razor-users
"""


def test_own_text_drops_quotes_signature_and_list_footer() -> None:
    assert own_text(LIST_REPLY) == "Yes, at nine in room 4.\nBring the slides."


@pytest.mark.parametrize(
    "trailer",
    [
        "-------------------------------------------------------\nThis sf.net email is sponsored by: ThinkGeek",
        "------------------------ Yahoo! Groups Sponsor ---------------------~-->\nGet a new phone FREE!",
        "-----Original Message-----\nFrom: someone",
    ],
)
def test_own_text_cuts_sponsor_blocks_and_forwards(trailer: str) -> None:
    assert own_text(f"Patch attached.\n{trailer}\nmore") == "Patch attached."


def test_own_text_keeps_dashes_inside_the_text() -> None:
    body = "--<snip>--\nkernel*\n--</snip>--\nCLICK HERE -- now!"
    assert own_text(body) == body


def test_truncation_and_garbage() -> None:
    assert len(message_text(PLAIN.replace("Buy", "Buy " * 3000), max_chars=100)) == 100
    assert message_text("not an email at all") == "not an email at all"
    assert message_text("") == ""


# ---------------------------------------------------------------------------- split and hash


def corpus(n_spam: int = 300, n_ham: int = 700) -> list[Example]:
    return [Example(f"s{i}", f"spam text {i}", 1) for i in range(n_spam)] + [
        Example(f"h{i}", f"ham text {i}", 0) for i in range(n_ham)
    ]


def test_split_sizes_stratified_and_disjoint() -> None:
    examples = corpus()
    parts = split(examples, seed=13)
    assert (len(parts.train), len(parts.val), len(parts.test)) == (800, 100, 100)
    for part in (parts.train, parts.val, parts.test):
        assert sum(e.label for e in part) / len(part) == pytest.approx(0.3)
    ids = [e.id for part in (parts.train, parts.val, parts.test) for e in part]
    assert sorted(ids) == sorted(e.id for e in examples)


def test_split_is_deterministic_and_order_independent() -> None:
    examples = corpus()
    first = split(examples, seed=13)
    again = split(list(reversed(examples)), seed=13)
    assert {e.id for e in first.test} == {e.id for e in again.test}
    assert {e.id for e in first.val} == {e.id for e in again.val}
    assert {e.id for e in split(examples, seed=14).test} != {e.id for e in first.test}


def test_split_is_stable_across_processes() -> None:
    code = (
        "from training.corpora.labelled import Example, split;"
        "ex=[Example(str(i), f't{i}', int(i % 3 == 0)) for i in range(200)];"
        "print(sorted(e.id for e in split(ex, 7).test))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    root = Path(__file__).resolve().parents[4]
    other = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True)
    local = sorted(e.id for e in split([Example(str(i), f"t{i}", int(i % 3 == 0)) for i in range(200)], 7).test)
    assert other.stdout.strip() == str(local)


def test_tiny_classes_still_reach_val_and_test() -> None:
    parts = split(corpus(n_spam=3, n_ham=5), seed=1)
    for part in (parts.val, parts.test):
        assert {e.label for e in part} == {0, 1}


def test_data_hash_ignores_order_and_ids() -> None:
    examples = corpus(5, 5)
    renamed = [Example(f"x{i}", e.text, e.label) for i, e in enumerate(reversed(examples))]
    assert data_hash(examples) == data_hash(renamed)
    assert data_hash(examples) != data_hash([*examples[:-1], Example("h4", "ham text 4", 1)])


def test_group_split_keeps_each_group_on_one_side() -> None:
    examples = [
        Example(f"m{m}#{piece}", f"message {m} piece {piece}", int(m % 3 == 0)) for m in range(90) for piece in range(3)
    ]
    parts = split(examples, seed=5, group=lambda e: e.id.split("#")[0])
    sides = {}
    for name, part in (("train", parts.train), ("val", parts.val), ("test", parts.test)):
        for e in part:
            assert sides.setdefault(e.id.split("#")[0], name) == name
    assert parts.val and parts.test


def test_external_test_file_leaves_no_test_split() -> None:
    parts = split(corpus(), seed=13, test_fraction=0.0)
    assert not parts.test and (len(parts.train), len(parts.val)) == (900, 100)
