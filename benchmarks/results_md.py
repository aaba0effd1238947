"""Write one benchmark's figures into benchmarks/RESULTS.md, replacing that benchmark's old section.

Every section records the machine, the date and the exact command, so figures are never read
without knowing where they came from.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import shlex
import sys
from pathlib import Path

import torch

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = "# Benchmark results\n\nEach section is rewritten by the script named in it.\n"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    desc = f"{cpu}, {os.cpu_count()} cores visible, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    if torch.cuda.is_available():
        desc += f", GPU {torch.cuda.get_device_name()}"
    return desc


def command() -> str:
    """This process's command as run from the repository root: `python -m benchmarks.NAME ARGS`."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    program = ["-m", spec.name] if spec is not None else sys.argv[:1]
    return "python " + " ".join(shlex.quote(a) for a in [*program, *sys.argv[1:]])


def write_section(name: str, body: str) -> Path:
    """Replace (or append) section `name` of RESULTS.md with `body`, stamped with machine/date/command."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    section = (
        f"<!-- begin:{name} -->\n## {name}\n\n"
        f"- machine: {machine()}\n- date: {stamp}\n- command: `{command()}`\n\n"
        f"{body.rstrip()}\n<!-- end:{name} -->\n"
    )
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    pattern = re.compile(rf"<!-- begin:{re.escape(name)} -->.*?<!-- end:{re.escape(name)} -->\n", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section
    RESULTS.write_text(text)
    return RESULTS


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
