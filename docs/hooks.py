"""MkDocs hooks: pages generated at build time from their single sources.

* ``specs/*.md`` become the pages ``specs/<name>.md`` (read from ``specs/``, never copied into
  ``docs/``), listed in the navigation's "Specifications" section after an index of them;
* ``cli.md`` is rendered from the argparse parser of ``sarek.cli``: each subcommand's
  ``--help``, exactly as ``sarek <command> --help`` prints it.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.sarek")

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
SPECS_SECTION = "Specifications"
EXPORTS_PAGE = "reference/sarek.md"  # must name every name of sarek.__all__
HELP_COLUMNS = "100"  # argparse wraps --help at $COLUMNS: fixed, so the page does not vary


def _specs() -> list[Path]:
    return sorted(SPECS.glob("*.md"))


def _title(text: str, fallback: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return fallback


def _summary(text: str) -> str:
    """The spec's first paragraph after its title ("Normative text for ...")."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    body = [p for p in paragraphs if not p.startswith("#")]
    return " ".join(body[0].split()) if body else ""


def _specs_index() -> str:
    lines = [
        "# Specifications",
        "",
        "The normative texts: what each part of sarek promises. Where a text and the code "
        "disagree, one of them has a bug. These pages are the files of `specs/` in the "
        "repository, included as they are when the site is built.",
        "",
    ]
    for path in _specs():
        text = path.read_text(encoding="utf-8")
        lines.append(f"- [{_title(text, path.stem)}]({path.name}) (`specs/{path.name}`): "
                     f"{_summary(text)}")
    return "\n".join(lines) + "\n"


def _help(argv: list[str]) -> str:
    """What ``sarek ARGV`` prints (``--help`` exits through SystemExit)."""
    from sarek import cli

    out, err = io.StringIO(), io.StringIO()
    with (contextlib.redirect_stdout(out), contextlib.redirect_stderr(err),
          contextlib.suppress(SystemExit)):
        cli.main(argv)
    if not out.getvalue().strip():  # the command failed: the page would lose its section
        log.warning("sarek %s printed no help: %s", " ".join(argv), err.getvalue().strip())
    return out.getvalue().rstrip()


def _cli_page() -> str:
    import argparse

    from sarek import cli

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parser = cli.parser()
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        helps = {c.dest: c.help or "" for c in subs._choices_actions}
        lines = [
            "# Command line",
            "",
            "`sarek COMMAND ...`, also `python -m sarek COMMAND ...`. This page is generated "
            "from the argument parser of `sarek/cli.py` when the site is built: each section is "
            "what `sarek COMMAND --help` prints.",
            "",
            "| command | what it does |",
            "| --- | --- |",
        ]
        lines += [f"| [`{name}`](#{_anchor(name)}) | {helps.get(name, '')} |"
                  for name in subs.choices]
        lines += ["", "```text", _help(["--help"]), "```", "",
                  "**Exit status.** " + " ".join((inspect.getdoc(cli.main) or "").split()), ""]
        for name in subs.choices:
            lines += [f"## `sarek {name}`", "", helps.get(name, ""), "", "```text",
                      _help([name, "--help"]), "```", ""]
        return "\n".join(lines)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def _anchor(command: str) -> str:
    """The heading id that the toc extension gives ``## `sarek NAME```."""
    return "sarek-" + command.lower().replace("_", "-")


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Fills the navigation's (empty) specifications section with every spec."""
    pages: list[Any] = ["specs/index.md", *(f"specs/{p.name}" for p in _specs())]
    for item in config.nav or []:
        if isinstance(item, dict) and SPECS_SECTION in item:
            item[SPECS_SECTION] = pages
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Adds the specs, their index and the CLI reference as generated pages."""
    for path in _specs():
        files.append(File.generated(config, f"specs/{path.name}", abs_src_path=str(path)))
    files.append(File.generated(config, "specs/index.md", content=_specs_index()))
    files.append(File.generated(config, "cli.md", content=_cli_page()))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Warns (an error under --strict) when the page of the package's exports misses a name
    that ``sarek.__all__`` exports: the reference cannot fall behind the package."""
    if page.file.src_uri == EXPORTS_PAGE:
        import sarek

        missing = [name for name in sarek.__all__
                   if not re.search(rf"\bsarek\.{re.escape(name)}\b", markdown)]
        if missing:
            log.warning("%s does not document sarek.%s (exported by sarek.__all__)",
                        EXPORTS_PAGE, ", sarek.".join(missing))
    return markdown


def on_serve(server: Any, config: MkDocsConfig, builder: Any) -> Any:
    """``mkdocs serve`` rebuilds when a spec or the CLI changes."""
    server.watch(str(SPECS))
    server.watch(str(ROOT / "sarek" / "cli.py"))
    return server
