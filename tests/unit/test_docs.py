"""The documentation a clone gets: it points only inside the repository, and its examples run.

* No tracked file mentions a path outside the repository (a development checkout's
  sibling folders do not exist in a user's clone), and every relative Markdown link
  resolves to a file of the repository, anchors included.
* README's Python example and ``txn_broker``'s docstring example run as written, on the
  embedded default, in an empty directory.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import txn_broker

REPO = Path(__file__).resolve().parents[2]

#: what a path outside the repository looks like in a tracked file
OUTSIDE = re.compile(r"\.\./shared\b|\bSEMANTICS\.md\b|/work/(?:main|shared)\b")
#: [text](target) in Markdown, not images of remote addresses
MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".sql", ".sh", ".cfg", ".ini",
                 ".html", ".js", ".css", ".example", ""}


def tracked_files() -> list[Path]:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    return [REPO / name for name in out.decode().split("\0") if name]


def text_files() -> list[Path]:
    return [p for p in tracked_files() if p.suffix in TEXT_SUFFIXES and p.is_file()]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: Path) -> set[str]:
    in_code = False
    found = set()
    for line in markdown.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def test_no_tracked_file_points_outside_the_repository() -> None:
    this = Path(__file__).resolve()
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}"
        for path in text_files() if path != this
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert offenders == []


def test_markdown_links_resolve_inside_the_repository() -> None:
    problems = []
    for doc in (p for p in tracked_files() if p.suffix == ".md"):
        for target in MD_LINK.findall(doc.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (doc.parent / path_part).resolve() if path_part else doc
            where = f"{doc.relative_to(REPO)} -> {target}"
            if not resolved.is_relative_to(REPO):
                problems.append(f"{where}: outside the repository")
            elif not resolved.exists():
                problems.append(f"{where}: no such file")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                problems.append(f"{where}: no such heading")
    assert problems == []


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    assert OUTSIDE.search("see [the rules](../shared/SEMANTICS.md)")
    doc = tmp_path / "a.md"
    doc.write_text("# The promise in one paragraph\n")
    assert "the-promise-in-one-paragraph" in anchors(doc)


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXN_BROKER_")}
    env["HOME"] = str(tmp_path)
    return env


def readme_python_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


KAFKA_BOOTSTRAP = "127.0.0.1:9092"


def test_readme_python_examples_run(tmp_path: Path) -> None:
    """Each Python example of README.md as a script in an empty directory; the Kafka
    client example against a `txn-broker serve` of the same embedded broker."""
    blocks = readme_python_blocks()
    assert blocks, "README.md has no Python example"
    kafka = [b for b in blocks if KAFKA_BOOTSTRAP in b]
    assert len(kafka) == 1, "README.md's Kafka example (confluent-kafka against serve) is missing"
    for number, block in enumerate(blocks):
        home = tmp_path / f"example_{number}"
        home.mkdir()
        env = {**_clean_env(tmp_path), "TXN_BROKER_HOME": str(home / ".txn_broker")}
        if block in kafka:
            _run_kafka_example(block, home, env)
        else:
            _run(block, home, env)


def _run(block: str, cwd: Path, env: dict[str, str]) -> None:
    script = cwd / "example.py"
    script.write_text(block)
    done = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"README example failed:\n{block}\n{done.stderr[-3000:]}"


def _run_kafka_example(block: str, cwd: Path, env: dict[str, str]) -> None:
    from _kafka_listener import Listener

    topic = re.search(r'produce\("([^"]+)"', block)
    assert topic, block
    broker = txn_broker.connect(database_url=f"sqlite:///{cwd}/.txn_broker/broker.db",
                                storage_url=f"file://{cwd}/.txn_broker/segments")
    broker.create_topic(topic.group(1), partitions=1)  # Kafka's record shape
    listener = Listener(env, cwd / "serve.log")
    try:
        _run(block.replace(KAFKA_BOOTSTRAP, listener.bootstrap), cwd, env)
    finally:
        listener.stop()
    consumer = broker.consumer()  # read_committed
    consumer.subscribe([topic.group(1)])
    assert consumer.poll(timeout_s=5).num_rows >= 1, "the Kafka example's transaction is not committed"
    broker.close()


def test_package_docstring_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("TXN_BROKER_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(txn_broker, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted >= 5
    assert result.failed == 0
