"""The README and the reference pages under docs/ name only what exists, and stay short.

Everything a page names must exist as named: make targets, ``modstream`` commands and their options,
``python -m`` modules, ``MODSTREAM_*`` settings (and the defaults their tables give), repository
paths, and the headings links point at. The journal (docs/journal/) is history and is not checked.
Each mismatch is reported as ``file:line: what``. The loop's and the cascade's real-posts figures are
checked cell by cell against the committed result files the pages name.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import typer.main
from pydantic import SecretStr
from pydantic_settings import BaseSettings

from modstream.cli import app
from modstream.harness.bench import HOPS
from workers.config import Settings
from workers.feedback.settings import FeedbackSettings

ROOT = Path(__file__).resolve().parents[2]
README_LINES, PAGE_LINES = 200, 300
DECISIONS = ("allow", "review", "block")
FLAGGED = ("ham_flagged", "ham_flagged_guarded")  # the chat table's: without and with the language guard
CONFIGURATION = ROOT / "docs" / "CONFIGURATION.md"
# Every settings class (test_every_settings_class_is_listed keeps this whole).
SETTINGS: tuple[type[BaseSettings], ...] = (Settings, FeedbackSettings)
# Read from the environment by workers.config.cache_root, before any settings object exists.
OTHER_VARIABLES = frozenset({"MODSTREAM_CACHE_DIR"})
# Defaults a table gives in words, because the value is computed where the process runs.
PROSE_DEFAULTS = {
    "MODSTREAM_INSTANCE_ID": "the host name",  # socket.gethostname()
    "MODSTREAM_FETCH_STALL_S": "the session timeout",  # None: session_timeout_s
    "MODSTREAM_MAX_TOKENS": "the model card's",  # None: the text card's max_length
    "MODSTREAM_MODEL_DIR": "`~/.cache/modstream/current`",  # follows MODSTREAM_CACHE_DIR when that is set
}
# What counts as a repository path: one under the tree's tracked top-level folders and files (git's
# index). Anything else (out/, build/, .state/, ~/.cache, /tmp, a bundle's text/) is made at run time.
REPO_ROOTS = tuple(
    sorted(
        {
            line.split("/")[0]
            for line in subprocess.run(
                ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.splitlines()
            if not line.startswith(".")
        },
        key=len,
        reverse=True,  # the longest first: the pattern's alternatives match the whole name
    )
)

_FENCE = re.compile(r"^\s*(```|~~~)")
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_URL = re.compile(r"https?://\S+")
_MAKE = re.compile(r"(?<![\w-])make((?:\s+[^\s#;|&]+)+)")
_MODSTREAM = re.compile(r"(?<![\w./-])modstream((?:\s+[a-z][\w-]*(?:\\?\|[a-z][\w-]*)*)+)")
_INVOCATION_END = re.compile(r"\s(?:\|\||&&|;|#)\s|(?<![\w-])modstream\s")
_FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")
_MODULE = re.compile(r"(?<![\w-])python3?\s+-m\s+([A-Za-z_]\w*(?:\.\w+)*)(?![\w<.])")
_VARIABLE = re.compile(r"(?<![\w-])MODSTREAM_[A-Z0-9_]*(\*?)")
_PATH = re.compile(r"(?<![\w./~-])((?:" + "|".join(map(re.escape, REPO_ROOTS)) + r")(?:/[\w.*<>-]*)*)")
_ROW = re.compile(r"^\|\s*`(MODSTREAM_[A-Z0-9_]+)`\s*\|([^|]*)\|")


@dataclass(frozen=True)
class Facts:
    """What exists, read once from the Makefile, the CLI and the settings classes."""

    targets: frozenset[str]
    options: dict[tuple[str, ...], frozenset[str]]  # command path ("models", "promote") -> its options
    defaults: dict[str, str]  # variable -> its default as a table spells it

    def is_group(self, path: tuple[str, ...]) -> bool:
        return any(len(p) > len(path) and p[: len(path)] == path for p in self.options)


@cache
def facts() -> Facts:
    makefile = (ROOT / "Makefile").read_text()
    targets = frozenset(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", makefile, re.MULTILINE))
    options: dict[tuple[str, ...], frozenset[str]] = {}

    def walk(command: object, path: tuple[str, ...]) -> None:
        params = getattr(command, "params", [])
        options[path] = frozenset(o for p in params for o in (*p.opts, *p.secondary_opts) if o.startswith("-"))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    defaults = {
        f"{prefix(kind)}{name.upper()}": spelled(field.get_default(call_default_factory=True))
        for kind in SETTINGS
        for name, field in kind.model_fields.items()
    }
    return Facts(targets, options, defaults)


def prefix(kind: type[BaseSettings]) -> str:
    return kind.model_config.get("env_prefix") or ""


def spelled(value: object) -> str:
    """A default as a configuration table writes it."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def code(text: str) -> Iterator[tuple[int, str]]:
    """``(line, code)`` for every fenced line (backslash continuations joined) and inline code span."""
    prose: list[str] = []
    fenced, pending, start = False, "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            prose.append("")
            continue
        prose.append("" if fenced else line)
        if not fenced:
            continue
        if not pending:
            start = n
        pending += line.rstrip("\\") + " "
        if not line.endswith("\\"):
            yield start, pending
            pending = ""
    joined = "\n".join(prose)
    for m in _SPAN.finditer(joined):
        if "\n\n" not in m.group(2):  # a span never crosses a paragraph
            yield joined.count("\n", 0, m.start()) + 1, m.group(2).replace("\n", " ")


def headings(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    anchors: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            anchor, i = slug, 0
            while anchor in anchors:
                i += 1
                anchor = f"{slug}-{i}"
            anchors.add(anchor)
    return anchors


def module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def repo_path_exists(path: str) -> bool:
    """Whether a path exists in the tree: up to a ``<placeholder>``, or as a glob."""
    if "<" in path:
        base = path.split("<", 1)[0]
        return (ROOT / base).is_dir() if base.endswith("/") else (ROOT / base).parent.is_dir()
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def check(page: str, text: str, folder: Path = ROOT) -> list[str]:
    """Every name in ``text`` that does not exist, as ``page:line: what``; ``folder`` is where its
    relative links start."""
    found: list[str] = []
    for n, snippet in code(text):
        found += [f"{page}:{n}: {what}" for what in mismatched_code(snippet)]
    for n, line in enumerate(text.splitlines(), 1):
        found += [f"{page}:{n}: {what}" for what in mismatched_line(line, text, folder)]
    return found


def mismatched_code(snippet: str) -> Iterator[str]:
    known = facts()
    for m in _MAKE.finditer(snippet):
        for word in m.group(1).split():
            if "=" in word:
                continue  # a variable: make demo POSTS=500
            if not re.fullmatch(r"[a-z][\w-]*", word):
                break
            if word not in known.targets:
                yield f"`make {word}`: no such Makefile target"
    for m in _MODSTREAM.finditer(snippet):
        command, missing = resolved(m.group(1).split())
        yield from (f"`modstream {name}`: no such command" for name in missing)
        if command and not missing:
            invocation = m.group(1) + _INVOCATION_END.split(snippet[m.end() :])[0]
            for flag in _FLAG.findall(invocation):
                if flag not in known.options[command]:
                    yield f"`modstream {' '.join(command)} {flag}`: no such option"
    for module in _MODULE.findall(snippet):
        if not module_exists(module):
            yield f"`python -m {module}`: no such module"


def resolved(words: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """The command the words after ``modstream`` name, and those of them that name no command."""
    known = facts()
    command: tuple[str, ...] = ()
    for word in words:
        if command and not known.is_group(command):
            break  # the words after a command are its arguments
        names = re.split(r"\\?\|", word)  # stack up|down|status
        missing = [" ".join((*command, name)) for name in names if (*command, name) not in known.options]
        if missing:
            return command, missing
        command = (*command, names[0])
    return command, []


def mismatched_line(line: str, text: str, folder: Path) -> Iterator[str]:
    known = facts()
    variables = known.defaults.keys() | OTHER_VARIABLES
    for m in _VARIABLE.finditer(line):
        name, wildcard = m.group(0).rstrip("*"), m.group(1)
        if not (any(v.startswith(name) for v in variables) if wildcard else name in variables):
            yield f"{m.group(0)}: no such setting"
    if (row := _ROW.match(line)) and row.group(1) in known.defaults:
        yield from mismatched_default(row.group(1), row.group(2).strip())
    bare = _URL.sub("", line)
    for target in _LINK.findall(bare):
        yield from broken_link(target, text, folder)
    for path in _PATH.findall(_LINK.sub("", bare)):
        if not repo_path_exists(path.rstrip(".")):
            yield f"{path}: no such path in the repository"


def mismatched_default(name: str, cell: str) -> Iterator[str]:
    """A table row's default against the setting's: a value in backticks or `unset`, else agreed prose."""
    if name in PROSE_DEFAULTS:
        if cell != PROSE_DEFAULTS[name]:
            yield f"{name}'s default reads {cell!r}, not {PROSE_DEFAULTS[name]!r}"
        return
    if not (cell.startswith("`") or cell == "unset"):
        yield f"{name}'s default {cell!r} is no value: write it in backticks, or in PROSE_DEFAULTS"
        return
    written, expected = cell.strip("`").replace(",", ""), facts().defaults[name]
    same = written == expected
    with contextlib.suppress(ValueError):  # 0.50 is 0.5
        same = same or float(written) == float(expected)
    if not same:
        yield f"{name}'s default is {expected!r}, the table says {written!r}"


def broken_link(target: str, text: str, folder: Path) -> Iterator[str]:
    """A link's file must exist, and its anchor must be a heading there (in ``text`` for the page itself)."""
    file, _, anchor = target.partition("#")
    path = folder / file
    if file and not path.exists():
        yield f"link {target}: no such file"
    elif anchor and (not file or path.suffix == ".md") and anchor not in headings(path.read_text() if file else text):
        yield f"link {target}: no such heading"


def test_every_name_in_the_readme_and_docs_exists() -> None:
    found = [m for p in pages() for m in check(str(p.relative_to(ROOT)), p.read_text(), p.parent)]
    assert not found, "\n".join(found)


def test_the_front_door_and_the_reference_pages_are_short() -> None:
    long = [
        f"{p.relative_to(ROOT)}: {n} lines, at most {limit}"
        for p in pages()
        if (n := len(p.read_text().splitlines())) > (limit := README_LINES if p.name == "README.md" else PAGE_LINES)
    ]
    assert not long, "\n".join(long)


def test_the_checker_reports_each_mismatch_with_its_line() -> None:
    page = "Run `modstream bench --posts 10`.\n\nThen `modstream bench --no-such-flag`\nand see `docs/NO_SUCH.md`.\n"
    assert check("page.md", page) == [
        "page.md:3: `modstream bench --no-such-flag`: no such option",
        "page.md:4: docs/NO_SUCH.md: no such path in the repository",
    ]
    fenced = "```sh\nmake no-such-target\nMODSTREAM_NO_SUCH=1 modstream models promot\n```\n"
    assert check("page.md", fenced) == [
        "page.md:2: `make no-such-target`: no such Makefile target",
        "page.md:3: `modstream models promot`: no such command",
        "page.md:3: MODSTREAM_NO_SUCH: no such setting",
    ]
    assert check("page.md", "| `MODSTREAM_BATCH_MAX_SIZE` | `256` | |\n[x](README.md#no-such-heading)\n") == [
        "page.md:1: MODSTREAM_BATCH_MAX_SIZE's default is '512', the table says '256'",
        "page.md:2: link README.md#no-such-heading: no such heading",
    ]


def test_every_setting_is_in_the_configuration_table() -> None:
    rows = {m.group(1) for line in CONFIGURATION.read_text().splitlines() if (m := _ROW.match(line))}
    assert rows == {f"MODSTREAM_{name.upper()}" for name in Settings.model_fields}


def test_every_settings_class_is_listed() -> None:
    declared = {
        prefix
        for package in ("workers", "modstream")
        for source in (ROOT / package).rglob("*.py")
        for prefix in re.findall(r'env_prefix="([A-Z_]+)"', source.read_text())
    }
    assert declared == {prefix(kind) for kind in SETTINGS}


def table_row(page: Path, label: str) -> list[str]:
    """The cells of the table row on ``page`` whose first cell starts with ``label``, bold marks dropped."""
    for line in page.read_text().splitlines():
        cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith(label):
            return cells[1:]
    raise AssertionError(f"{page.relative_to(ROOT)}: no table row starting {label!r}")


def table(page: Path, header: str) -> dict[str, list[str]]:
    """The rows of the table on ``page`` whose header's first cell is ``header``, by their first cell."""
    rows: dict[str, list[str]] = {}
    inside = False
    for line in page.read_text().splitlines():
        cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            if inside:
                return rows
        elif cells[0] == header:
            inside = True
        elif inside and not cells[0].startswith("---"):
            rows[cells[0]] = cells[1:]
    assert inside, f"{page.relative_to(ROOT)}: no table headed {header!r}"
    return rows


def test_the_gpu_pages_figures_are_its_run_files() -> None:
    """GPU.md's two tables, row by row, as the lent machines' outputs under docs/perf/gpu/ hold them."""
    page, runs = ROOT / "docs" / "GPU.md", ROOT / "docs" / "perf" / "gpu"
    host, again, cluster = (
        json.loads((runs / f"{n}.json").read_text()) for n in ("gpu_host", "gpu_host_5000", "gpu_host_cluster")
    )
    nodes = re.search(r"cluster of (\d+)", cluster["redis"])
    assert nodes
    labelled = [(str(r["workers"]), r, "") for r in host["runs"]]
    labelled += [(f"{r['workers']} (again)", r, "") for r in again["runs"]]
    labelled += [(f"{r['workers']}, Redis Cluster", r, f" ({nodes.group(1)} nodes)") for r in cluster["runs"]]
    want = {
        label: [
            f"{r['posts']:,}",
            f"{r['posts_per_s']:,.1f}",
            f"{r['degraded_share']:.1%}" if r["degraded_share"] else "0",
            f"{r['cores']['worker']:.2f}",
            f"{r['cores']['redis']:.2f}{suffix}",
            f"{r['cores']['kafka']:.2f}",
            f"{r['cores']['stand-in']:.2f}",
            f"{r['cores']['load (producer, collector)']:.2f}",
            f"{r['gpu_busy_share']:.0%}",
            f"{r['rows_per_call']:.0f}",
        ]
        for label, r, suffix in labelled
    }
    assert table(page, "worker processes") == want
    text = " ".join(page.read_text().split())
    for latency in (again["latency"], host["latency_at_half"], cluster["latency"]):
        ms = latency["latency_ms"]
        assert f"p50 {ms['p50']}" in text and f"p99 {ms['p99']}" in text, f"paced latency {ms}"
    grid = json.loads((runs / "gpu.json").read_text())["grid"]
    columns = [("fp32/eager", "32"), ("fp16/eager", "32"), *(("fp16/graph", seq) for seq in ("16", "32", "64", "128"))]
    alone = table(page, "batch")
    assert alone == {
        batch: [f"{grid[kind][seq][batch]['seq_per_s']:,.0f}" for kind, seq in columns] for batch in alone
    }, "the model alone"
    assert list(alone) == ["1", "16", "64", "256", "512"]


def test_the_waves_pages_figures_are_its_test_files() -> None:
    """WAVES.md's crowd tables, cell by cell, as the crowd tests wrote them (``pytest --figures
    docs/waves``): a row names its wave in backticks, a column its seed (else the named crowds' one
    column); the page's models are the ones the files were served by."""
    page, runs = ROOT / "docs" / "WAVES.md", ROOT / "docs" / "waves"
    files = {p.stem: json.loads(p.read_text()) for p in runs.glob("*.json")}

    def cells(counts: dict[str, int]) -> str:
        return f"{counts['allow']} / {counts['review']} / {counts['block']}"

    for header, file in (
        ("wave (60 posts each)", "any-host-{}"),
        ("wave on a stream with five weeks of history", "history-{}"),
    ):
        seeds = [c.removeprefix("seed ") for c in header_cells(page, header)[1:] if c.startswith("seed ")]
        for label, row in table(page, header).items():
            wave = named_in(label)
            got = row[: len(seeds)]
            assert got == [cells(files[file.format(s)]["waves"][wave]) for s in seeds], f"{wave}: {got}"
    named = {**files["named-crowds"]["waves"], **files["named-waves"]["waves"]}
    rows = {named_in(label): row[0] for label, row in table(page, "named crowd").items()}
    assert rows == {wave: cells(counts) for wave, counts in named.items()}
    card = json.loads((ROOT / "docs" / "decision" / "card.json").read_text())
    for label, row in table(page, "kind (40 waves each)").items():
        w = card["waves"][named_in(label)]
        counted = [
            f"{w[d]:,}" if d == "allow" or not w[d] else f"{w[d]:,} ({w[f'{d}_text_reads_spam']:,})" for d in DECISIONS
        ]
        assert row == [f"{sum(w[d] for d in DECISIONS):,}", *counted], label
    served = {f["models"]["text"] for f in files.values()} | {f["models"]["decision"] for f in files.values()}
    assert card["version"] in served, "the card's waves are the bundle's the crowd tests were served by"
    assert all(f"`{model}`" in page.read_text() for model in served) and len(served) == 2, served
    assert all(f["date"] in page.read_text() for f in files.values()), "the page gives the runs' date"


def header_cells(page: Path, header: str) -> list[str]:
    return next(
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in page.read_text().splitlines()
        if line.startswith(f"| {header} |")
    )


def named_in(label: str) -> str:
    """What a row's first cell names in backticks (its last span): a wave, a set of a run."""
    spans = re.findall(r"`([^`]+)`", label)
    assert spans, f"row {label!r} names nothing in backticks"
    return spans[-1]


def metric_cells(m: dict[str, float]) -> list[str]:
    return [*(f"{m[k]:.4f}" for k in ("f1", "precision", "recall", "roc_auc")), f"{m['ece']:.3f}"]


def signal_cells(run: dict[str, Any]) -> list[str]:
    """ROC-AUC / F1 / ECE of each text signal on a set of ``zero_shot.json``; "–" where it has one class."""

    def cell(x: float | None) -> str:
        return "–" if x is None else f"{x:.3f}"

    return [
        " / ".join((cell(run[s]["roc_auc"]), cell(run[s]["f1"]) if run["spam"] else "–", cell(run[s]["ece"])))
        for s in ("transformer", "ngram", "fused")
    ]


def flagged(run: dict[str, Any]) -> str:
    """The share of a set's ham the fusion flags, with the count where the ham is a handful."""
    ham, share = run["n"] - run["spam"], run["fused"]["ham_flagged"]
    return f"{share:.1%}" + (f" ({round(share * ham)} of {ham})" if ham < 20 else "")


def test_the_text_pages_figures_are_their_card_and_runs() -> None:
    """TEXT_MODEL.md's and TEXT_EVALUATION.md's tables, cell by cell, as the committed outputs under
    docs/text/ hold them: the default's card, and its zero-shot, day-one and SMS runs."""
    text, model, evaluation = (
        ROOT / "docs" / "text",
        ROOT / "docs" / "TEXT_MODEL.md",
        ROOT / "docs" / "TEXT_EVALUATION.md",
    )
    card, sms = (json.loads((text / f"{n}.json").read_text()) for n in ("card", "sms_card"))
    runs = {r["set"]: r for r in json.loads((text / "zero_shot.json").read_text())}
    for page, c in ((model, card), (evaluation, sms)):
        signals = {
            "transformer, static int8": c["metrics"]["int8"]["test"],
            "transformer, fp32": c["metrics"]["fp32"]["test"],
            "char n-gram": c["ngram"]["metrics"]["test"],
            "fused": c["fusion"]["metrics"]["test"],
        }
        rows = table(page, "signal")
        assert len(rows) == len(signals), page.name
        for label, row in rows.items():
            want = next(m for name, m in signals.items() if label.startswith(name))
            assert row == metric_cells(want), f"{page.name}: {label}"
        assert c["version"] in page.read_text(), f"{page.name} names the model's version"
    for label, row in table(model, "test posts").items():
        run = runs[named_in(label)]
        assert row == [f"{run['n']:,}", f"{run['spam']:,}", *signal_cells(run), flagged(run)], label
    for label, row in table(model, "language").items():
        run, fused = runs[named_in(label)], runs[named_in(label)]["fused"]
        assert row == [f"{run['n']:,}", f"{run['withheld']:.1%}", *(f"{fused[k]:.1%}" for k in FLAGGED)], label
    for label, row in table(evaluation, "set").items():
        run = runs[named_in(label)]
        assert row == [f"{run['n']:,}", f"{run['spam']:,}", f"{run['withheld']:.1%}", *signal_cells(run), flagged(run)]
    day_one = {r["set"]: r for r in json.loads((text / "day_one.json").read_text())}
    for label, row in table(evaluation, "new accounts' posts").items():
        r = day_one[named_in(label)]
        ham, allowed = r["n"] - r["spam"], r["spam"] - r["spam_blocked"] - r["spam_review"]
        assert row == [
            f"{r['n']:,} ({r['spam']:,})",
            f"{r['spam_blocked']} / {r['spam_review']} / {allowed}",
            f"{r['ham_blocked']} / {r['ham_review']} of {ham:,} ({r['ham_blocked'] / ham:.2%})",
            f"{r['block_f1']:.3f}",
            f"{r['roc_auc']:.3f}",
        ], label
        assert r["bundle"] in evaluation.read_text()


def test_the_loop_pages_figures_are_its_trial_files() -> None:
    """LOOP.md's today's figures, cell by cell, as the committed trial outputs it names hold them
    (spam allowed is not in trial.json: it is read from the run's next_week.jsonl)."""
    page = ROOT / "docs" / "LOOP.md"
    trial = {
        share: json.loads((ROOT / "docs" / "loop" / f"trial-r23{share}.json").read_text()) for share in ("", "-50")
    }
    rows = {
        "day one": (trial[""]["before"], None),
        f"after a retrain on {trial['']['history_spam']} spam": (trial[""]["after"], trial[""]),
        f"after a retrain on {trial['-50']['history_spam']} spam": (trial["-50"]["after"], trial["-50"]),
    }
    for label, (side, run) in rows.items():
        f1, pr, ham, review, _, gate, seconds = table_row(page, label)
        assert f1 == f"{side['block_f1']:.3f}", label
        assert pr == f"{side['block_precision']:.3f} / {side['block_recall']:.3f}", label
        assert ham == f"{side['ham_blocked']} of {side['ham']}" and review == f"{side['review_share']:.1%}", label
        if run is not None:
            assert gate == run["gate"] and seconds == f"{run['retrain_s']:.0f} s", label


def test_the_cascades_real_posts_figures_are_its_bench_files() -> None:
    page = ROOT / "docs" / "PERFORMANCE.md"
    perf = ROOT / "docs" / "perf" / "r23"
    for label, file in (("cut on the full model's score", "bench-before.json"), ("cut on the decisions", "bench.json")):
        real = json.loads((perf / file).read_text())["details"]["cascade"]["real"]
        cascade, full, _, _ = table_row(page, label)
        for cell, j in ((cascade, real["cascade"]), (full, real["full"])):
            figures = f"{j['block_f1']:.4f}, {j['ham_blocked']}, {j['spam_allowed']}, {j['review_share']:.1%}"
            assert cell == figures, f"{label}: {cell!r}, the bench file says {figures!r}"


TODAY = ROOT / "docs" / "perf" / "r39" / "bench.json"  # PERFORMANCE.md's today's figures
PROCESSES = ("worker", "triton", "redis", "kafka")


def judged(j: dict[str, Any]) -> str:
    return f"{j['block_f1']:.4f}, {j['ham_blocked']}, {j['spam_allowed']}, {j['review_share']:.1%}"


def otherwise(flips: dict[str, dict[str, int]]) -> int:
    """How many posts a flip matrix (cascade's decision → full's) has off its diagonal."""
    return sum(n for was, to in flips.items() for now, n in to.items() if now != was)


def performance_tables(bench: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """PERFORMANCE.md's today's tables as ``bench.json`` gives them: by the header's first cell, each
    row's cells after its label (the phases' table: its "today" column)."""
    d, cascade = bench["details"], bench["details"]["cascade"]
    runs = d["pipeline_runs"]
    ratios, best = d["ratios"], d["model_only_best"]
    social, heavy = cascade["social"], cascade["spam_heavy"]
    short_circuit_us = d["short_circuit_cpu_s"]["worker"] / (5 * bench["posts"]) * 1e6
    phases = {
        "model only": f"{bench['model_only_posts_per_s']:,.1f} posts/s ({best['layout']}, batch {best['batch']})",
        "Triton only": f"{d['triton_in_flight_8']:,.1f} posts/s ({d['triton_in_flight_1']:,.1f})",
        "pipeline (cascade)": f"{bench['pipeline_posts_per_s']:,.1f} posts/s (runs "
        + ", ".join(f"{r['posts_per_s']:,.1f}" for r in runs)
        + f"); {d['pipeline_first_stage_share']:.2%} decided in the first stage",
        "cascade vs full pipeline": f"{social['cascade_posts_per_s']:,.1f} against {social['full_posts_per_s']:,.1f} "
        f"posts/s; spam-heavy {heavy['cascade_posts_per_s']:,.1f} against {heavy['full_posts_per_s']:,.1f}",
        "pipeline with shadow": f"{d['pipeline_with_shadow_posts_per_s']:,.1f} posts/s",
        "exactly-once": f"{d['exactly_once_posts_per_s']:,.1f} posts/s",
        "hot swap": f"{d['hot_swap_posts_per_s']:,.1f} posts/s",
        "naive": f"{bench['naive_posts_per_s']:,.1f} posts/s (int8: {d['naive_int8_posts_per_s']:,.1f})",
        "short-circuit": f"{bench['short_circuit_posts_per_s']:,.1f} posts/s "
        f"({short_circuit_us:.0f} µs of worker CPU a post)",
        "latency": f"p50 {bench['p50_ms']:,.1f} ms, p99 {bench['p99_ms']:,.1f} ms "
        f"at {d['latency_offered_posts_per_s']:,.1f} posts/s (p99 of the runs: "
        + ", ".join(f"{r['p99_ms']:,.1f}" for r in d["latency_runs"])
        + ")",
        "latency, exactly-once": f"p50 {d['exactly_once_p50_ms']:,.1f} ms, p99 {d['exactly_once_p99_ms']:,.1f} ms",
        "latency with a promotion": f"p99 {d['hot_swap_p99_ms']:,.1f} ms",
    }
    median = sorted(runs, key=lambda r: r["ratio"])[1]["ratio"]
    ratio_rows = {
        "pipeline ÷ model only, paired, median of three": f"{median:.3f} ("
        + ", ".join(f"{r['ratio']:.3f}" for r in runs)
        + ")",
        "pipeline with shadow ÷ model only, paired": f"{ratios['pipeline_with_shadow_over_model_only']:.3f}",
        "hot swap ÷ model only, paired": f"{ratios['hot_swap_over_model_only']:.3f}",
        "pipeline ÷ naive": f"{ratios['pipeline_over_naive']:.1f}",
        "cascade ÷ full pipeline, social mix": f"{social['cascade_posts_per_s'] / social['full_posts_per_s']:.2f}",
    }
    mixes = {"social": social, "spam-heavy": heavy, "real posts from new accounts": cascade["real"]}
    by_mix = {
        label: [
            f"{m['cascade_posts_per_s']:,.1f} posts/s",
            f"{m['full_posts_per_s']:,.1f}",
            f"{m['transformer_share']:.1%}",
            f"{judged(m['same_rows_cascade'])} / {judged(m['same_rows_full'])}",
            f"{otherwise(m['same_rows_flips'])} of {m['posts']:,}",
        ]
        for label, m in mixes.items()
    }
    posts = social["posts"]
    cpu = {
        p: [
            f"{social[f'{run}_cpu_s'][p]:.2f} s" if i == 0 else f"{social[f'{run}_cpu_s'][p] / posts * 1e3:.2f} ms"
            for run in ("cascade", "full")
            for i in (0, 1)
        ]
        for p in PROCESSES
    }
    hops = {
        label: [f"{d[key][hop]['p50_ms']:.1f} / {d[key][hop]['p99_ms']:.1f}" for hop in HOPS]
        for label, key in (
            ("at-least-once, by hop", "latency_by_hop"),
            ("exactly-once, by hop", "exactly_once_latency_by_hop"),
        )
    }
    sig, ngram = d["signals"], d["ngram_posts_per_s_one_core"]
    figures = {
        "model only on e-mails (SpamAssassin: nearly every text fills the 64 tokens)": (
            f"{d['model_only_email_posts_per_s']:,.1f} posts/s"
        ),
        "the worker-side n-gram model alone, one core": f"{ngram:,.1f} posts/s ({1e6 / ngram:.0f} µs a post)",
        "stream signals, batches of 512: enrichment round trip, profiles only → with the signal script": (
            f"{sig['enrich_profiles_only_us_per_post']:.1f} → {sig['enrich_with_signals_us_per_post']:.1f} µs a post"
        ),
        "stream signals: worker CPU to plan them; Redis CPU for the script": (
            f"{sig['planning_us_per_post']:.1f} µs; {sig['redis_cpu_us_per_post']:.1f} µs a post"
        ),
        "verdict without → with the logged feature row: size; encoding": (
            f"{sig['verdict_bytes_without_features']:.1f} → {sig['verdict_bytes']:.1f} B; "
            f"{sig['verdict_encode_us_without_features']:.1f} → {sig['verdict_encode_us']:.1f} µs"
        ),
    }
    return {
        "figure": {label: [cell] for label, cell in figures.items()},
        "phase": {label: [cell] for label, cell in phases.items()},
        "ratio": {label: [cell] for label, cell in ratio_rows.items()},
        "mix": by_mix,
        "process": cpu,
        "guarantee": hops,
    }


def test_the_performance_pages_figures_are_its_bench_file() -> None:
    """PERFORMANCE.md's today's tables, cell by cell, as its bench file holds them (the phases'
    table: the "today" column; the others whole), and the page names the run's models."""
    page, bench = ROOT / "docs" / "PERFORMANCE.md", json.loads(TODAY.read_text())
    columns = {"phase": slice(-1, None), "ratio": slice(0, 1)}  # "today": after "what", before "goal"
    for header, want in performance_tables(bench).items():
        cells = {label: row[columns.get(header, slice(None))] for label, row in table(page, header).items()}
        assert cells == want, f"{header}: the bench file says {want}"
    served = {v for run in bench["details"]["hot_swap_verdicts_by_text"] for v in run if not v.endswith("-swap")}
    assert all(f"`{v}`" in page.read_text() for v in served), f"the page names the text model served: {served}"
