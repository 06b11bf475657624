"""The new platform's comments: as the data card says, in time order, split without overlap."""

import itertools
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from training.corpora import posts
from training.corpora.janitr import janitr_posts
from training.corpora.platforms import INSTAGRAM, instagram_comments, new_account_event, weeks


def test_the_comments_are_as_the_card_says_and_in_time_order() -> None:
    comments = instagram_comments()
    assert (len(comments), sum(c.spam for c in comments)) == (3444, 1150)
    assert all(a.posted_at <= b.posted_at for a, b in itertools.pairwise(comments))
    assert all(c.text for c in comments)


def test_the_next_week_follows_its_history() -> None:
    comments = instagram_comments()
    history, next_week = weeks(comments, 1600, 400)
    assert (len(history), len(next_week)) == (1600, 400)
    assert next_week[-1] == comments[-1] and history[-1] == comments[-401]
    assert max(p.posted_at for p in history) <= min(p.posted_at for p in next_week)
    with pytest.raises(ValueError, match="asked of 3444"):
        weeks(comments, 3100, 400)


def test_no_default_model_trains_on_it() -> None:
    assert INSTAGRAM.name not in Path(posts.__file__).read_text()


def test_zero_shot_meets_every_comment_whole_then_by_language() -> None:
    from training.experiments.zero_shot import MIN_PART, comments

    whole, *parts = comments(Path())
    assert (whole.name, len(whole.examples), sum(e.label for e in whole.examples)) == ("comments", 3444, 1150)
    assert parts and all(p.name.startswith("comments language ") and len(p.examples) >= MIN_PART for p in parts)
    assert sum(len(p.examples) for p in parts) <= len(whole.examples)  # languages too small to say anything left out
    assert len({e.id for p in parts for e in p.examples}) == sum(len(p.examples) for p in parts)


def test_zero_shot_meets_the_telegram_chat_whole_then_by_language() -> None:
    from training.experiments.zero_shot import telegram

    whole, *parts = telegram(Path())
    assert (whole.name, len(whole.examples), sum(e.label for e in whole.examples)) == ("telegram", 675, 237)
    assert [p.name for p in parts][:2] == ["telegram language ru", "telegram language en"]
    assert not {e.text for e in whole.examples} & {e.text for e in janitr_posts()}  # the committed training posts


def test_zero_shot_reads_a_local_copy_of_the_youtube_collection_whole_then_by_video(tmp_path: Path) -> None:
    from training.experiments.zero_shot import youtube

    head = "COMMENT_ID,AUTHOR,DATE,CONTENT,CLASS\n"
    spam = "".join(f'a{i},x,2014-01-01T00:00:00,"check out my channel {i}",1\n' for i in range(12))
    ham = "".join(f"b{i},y,2014-01-01T00:00:00,great song number {i},0\n" for i in range(12))
    (tmp_path / "Youtube01-Psy.csv").write_text(head + spam + ham, encoding="utf-8-sig")
    (tmp_path / "Youtube02-KatyPerry.csv").write_text(head + spam + "c0,z,2014,  \n", encoding="utf-8")
    whole, *parts = youtube(tmp_path)
    assert (whole.name, len(whole.examples), sum(e.label for e in whole.examples)) == ("youtube", 24, 12)
    assert [p.name for p in parts] == ["youtube video Psy"]  # the copies in the second file count once
    with pytest.raises(SystemExit, match="no Youtube0"):
        youtube(tmp_path / "missing")


def test_zero_shot_reads_a_youtube_copy_whose_label_column_was_renamed_and_names_a_wrong_one(tmp_path: Path) -> None:
    from training.experiments.zero_shot import youtube

    rows = "".join(f"a{i},x,2014,check out my channel {i},1\nb{i},y,2014,great song {i},0\n" for i in range(12))
    (tmp_path / "Youtube01-Psy.csv").write_text("COMMENT_ID,AUTHOR,DATE,CONTENT,label\n" + rows, encoding="utf-8")
    whole, _ = youtube(tmp_path)
    assert (len(whole.examples), sum(e.label for e in whole.examples)) == (24, 12)
    (tmp_path / "Youtube01-Psy.csv").write_text("COMMENT_ID,AUTHOR,DATE,CONTENT,spam\n" + rows, encoding="utf-8")
    with pytest.raises(SystemExit, match=r"Psy\.csv: columns .*, expected COMMENT_ID, CONTENT and one of CLASS"):
        youtube(tmp_path)


def test_a_new_accounts_post_is_typed_at_a_human_pace() -> None:
    text = "check out my channel, new video every friday"
    e = new_account_event("p1", "u1", text, datetime(2026, 1, 1, tzinfo=UTC), random.Random(3))
    compose, submit = (s.offset_ms for s in e.journey[1:])
    assert [s.name for s in e.journey] == ["open_post", "compose", "submit"]
    assert 2_000 <= compose <= 20_000 and 4 <= len(text) / ((submit - compose) / 1000) <= 8  # characters a second
    assert (e.user_id, e.text, e.ip) == ("u1", text, None)  # nothing the platform could know of the account
