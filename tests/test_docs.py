"""The docs state names and numbers of the code: these tests keep each one true, both ways where a page
claims to list everything (every task, every config key, every file name, every command)."""

import argparse
import dataclasses
import inspect
import json
import re
import signal
import typing
from pathlib import Path

import pytest
import torch
from omegaconf import MISSING
from torch.overrides import TorchFunctionMode

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CONFIGS = ROOT / "configs"
RESULTS = ROOT / "results"
PAGES = sorted(DOCS.glob("*.md"))


def page(name: str) -> str:
    return (DOCS / name).read_text()


def sections(text: str) -> dict[str, str]:
    """Heading line (without the #s) -> the text up to the next heading of any level."""
    parts = re.split(r"^#+ (.*)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def tables(text: str) -> list[list[list[str]]]:
    """Every markdown table in `text`: rows of cells, the header row first, the |---| row dropped."""
    found, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r"-+", c) for c in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def table_with(text: str, header: str) -> list[list[str]]:
    """The body of the one table in `text` whose first header cell is `header`."""
    (table,) = [t for t in tables(text) if t[0][0] == header]
    return table[1:]


def code(cell: str) -> str:
    """The text of a cell that is one `code span`."""
    match = re.fullmatch(r"`([^`]+)`", cell)
    assert match, f"expected one `code` span, got {cell!r}"
    return match.group(1)


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def default_text(value: object) -> str:
    """A default as the docs write it (YAML spelling)."""
    if value is inspect.Parameter.empty or value is dataclasses.MISSING or value == MISSING:
        return "required"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


# --- tasks.md -------------------------------------------------------------------------------------


def test_every_task_is_documented_with_its_arguments_and_defaults():
    from loglinear.synthetics.registry import TASKS, task_arguments

    documented = {}
    for heading, body in sections(page("tasks.md")).items():
        for name in code_spans(heading):
            documented[name] = {code(row[0]): row[1] for row in table_with(body, "argument")}
    assert sorted(documented) == sorted(TASKS)
    for name, arguments in documented.items():
        expected = {k: default_text(p.default) for k, p in task_arguments(name).items()}
        assert arguments == expected, name


# --- runs.md --------------------------------------------------------------------------------------


def config_keys(cls: type, prefix: str = "") -> dict[str, str]:
    """Every leaf key of a config dataclass (nested groups flattened with dots) -> its default as text."""
    hints = typing.get_type_hints(cls)
    keys = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            keys.update(config_keys(kind, f"{prefix}{f.name}."))
            continue
        has_factory = f.default_factory is not dataclasses.MISSING
        keys[prefix + f.name] = default_text(f.default_factory() if has_factory else f.default)
    return keys


def test_every_run_config_key_is_documented_with_its_default():
    from loglinear.runs.config import RunConfig

    documented = {}
    for table in tables(page("runs.md")):
        if table[0][0] == "key":
            documented.update({code(row[0]): row[1] for row in table[1:]})
    assert documented == config_keys(RunConfig)


def test_the_mixer_and_lambda_choices_are_the_registries():
    from loglinear.models import LAMBDA_PARAMS, MIXERS

    rows = {}
    for table in tables(page("runs.md")):
        if table[0][0] == "key":
            rows.update({code(row[0]): row[2] for row in table[1:]})
    assert code_spans(rows["model.mixer"]) == list(MIXERS.names())
    assert code_spans(rows["model.lambda_param"]) == list(LAMBDA_PARAMS.names())


def test_run_folder_files_are_the_names_the_code_writes():
    from loglinear.reports import lambda_inspect, lambda_recall
    from loglinear.runs import checkpoints, folder, metrics_rows
    from loglinear.sweeps import manifest

    written = {folder.CONFIG, folder.RESULT, folder.LOCK, folder.LAST, folder.INTERRUPTED,
               checkpoints.CORRUPT_SUFFIX, metrics_rows.METRICS, manifest.LOG, lambda_inspect.LEVELS_CSV,
               lambda_inspect.LEVELS_PNG, lambda_recall.RECALL_CSV, "wandb/"}  # wandb/ is named by wandb itself
    body = sections(page("runs.md"))["The run folder"]
    assert {code(row[0]) for row in table_with(body, "file")} == written


def test_result_statuses_are_the_code_statuses():
    from loglinear.runs.folder import FINISHED, STATUSES

    body = sections(page("runs.md"))["The run folder"]
    rows = table_with(body, "status")
    assert [code(row[0]) for row in rows] == list(STATUSES)
    assert [code(row[0]) for row in rows if row[2] == "yes"] == list(FINISHED)


def test_sweep_folder_files_are_the_names_the_code_writes():
    from loglinear.reports import lambda_plots, recall_levels, report
    from loglinear.sweeps import launchers, manifest, runner, slurm

    written = {manifest.MANIFEST, manifest.RUNS, runner.LOCK, report.CSV, report.PAIRED_CSV, report.PAIRED_LENGTH_CSV,
               report.TABLE, slurm.JOBS_FILE, launchers.SUBMITIT_FOLDER, launchers.WANDB_FILE, lambda_plots.REPORT,
               recall_levels.TABLE}
    body = sections(page("runs.md"))["The sweep folder"]
    assert {code(row[0]) for row in table_with(body, "file")} == written


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")}


def test_commands_and_options_are_the_cli_ones(capsys):
    from loglinear.cli import COMMANDS, data_parser, inspect_main, sweep_parser

    text = sections(page("runs.md"))["Commands and exit status"]
    commands = [code(row[0]).split()[1:] for row in table_with(text, "command")]
    assert sorted({c[0] for c in commands}) == sorted(COMMANDS)
    sweep = subcommands(sweep_parser())
    assert [c[1] for c in commands if c[0] == "sweep"] == list(sweep)

    assert inspect_main(["--help"]) == 0
    inspect_options = set(re.findall(r"(--[a-z][a-z-]*)", capsys.readouterr().out)) - {"--help"}
    data = subcommands(data_parser())
    cli_options = set().union(inspect_options, *(options(p) for p in [*sweep.values(), *data.values()]))
    mentioned = set(re.findall(r"`(--[a-z][a-z-]*)", text))
    assert mentioned - {"--help"} == cli_options


def test_train_exit_statuses_are_the_ones_the_code_returns():
    from loglinear.cli import TRAIN_HELP
    from loglinear.runs.interrupt import Interrupted

    text = sections(page("runs.md"))["Commands and exit status"]
    documented = [int(row[0]) for row in table_with(text, "exit status")]
    said = [int(n) for n in re.findall(r"\b(\d+) (?:finished|failed|bad|interrupted|by)", TRAIN_HELP)]
    assert documented == said == [0, 1, 2, Interrupted(signal.SIGINT).exit_code, Interrupted(signal.SIGTERM).exit_code]


# --- sweeps.md and reports.md ---------------------------------------------------------------------


def test_the_shipped_sweeps_are_the_spec_files_with_their_run_counts():
    from loglinear.sweeps.spec import load_spec, planned_runs

    rows = table_with(sections(page("sweeps.md"))["Specs"], "spec")
    documented = {code(row[0]): int(row[1]) for row in rows}
    shipped = {p.stem: planned_runs(load_spec(p)) for p in (CONFIGS / "sweeps").glob("*.yaml")}
    assert documented == shipped


def test_every_spec_has_a_short_header_naming_its_design():
    """A spec reads as a config: a header of a few lines, the design it names on file (a committed study's in its
    results folder), and every design file named by its spec."""
    named = set()
    for spec in sorted((CONFIGS / "sweeps").glob("*.yaml")):
        lines = spec.read_text().splitlines()
        header = lines[:next(i for i, line in enumerate(lines) if not line.startswith("#"))]
        assert 1 <= len(header) <= 9, f"{spec.name}: a header of {len(header)} lines"
        designs = re.findall(r"(?:results|docs/studies)/[\w/]+\.md", " ".join(header))
        assert all((ROOT / d).is_file() for d in designs), spec.name
        if (RESULTS / spec.stem).is_dir():
            assert designs == [f"results/{spec.stem}/design.md"], spec.name
        named |= set(designs)
    on_file = {str(p.relative_to(ROOT)) for p in [*RESULTS.glob("*/design.md"), *(DOCS / "studies").glob("*.md")]}
    assert on_file == named


def test_the_plots_are_the_ones_the_report_draws():
    from loglinear.reports.plots import PLOTS

    rows = table_with(sections(page("reports.md"))["Plots"], "plot")
    assert [code(row[0]) for row in rows] == list(PLOTS)


# --- operator.md ----------------------------------------------------------------------------------


def test_the_implementations_are_the_registered_ones():
    from loglinear.kernels import IMPLS

    body = sections(page("operator.md"))["Implementations (`impl=`)"]
    assert [code(row[0]) for row in table_with(body, "`impl`")] == [*IMPLS, "auto"]


def test_num_levels_table():
    from loglinear.kernels import num_levels

    body = sections(page("operator.md"))["Fenwick levels"]
    (table,) = tables(body)
    ns, levels = table[0][1:], table[1][1:]
    assert [num_levels(int(n)) for n in ns] == [int(x) for x in levels]


_HOST_READS = {torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
               torch.Tensor.item, torch.Tensor.tolist}


class _CountHostReads(TorchFunctionMode):
    """Counts the tensor methods that bring a value to the host (each one a sync on an accelerator)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += func in _HOST_READS
        return func(*args, **(kwargs or {}))


def _reads(checks: bool, delta: bool, final_state: bool, initial_state: bool) -> int:
    from loglinear.kernels import log_linear_attn, num_levels, value_checks

    generator = torch.Generator().manual_seed(0)
    B, T, H, K = 2, 40, 2, 8
    q, k, v = (torch.randn(B, T, H, K, generator=generator) for _ in range(3))
    g = -torch.rand(B, T, H, generator=generator)
    lam = torch.rand(B, T, H, num_levels(2 * T), generator=generator)
    beta = torch.rand(B, T, H, generator=generator) if delta else None
    state = None
    if initial_state:
        _, state = log_linear_attn(q, k, v, g, lam, beta, output_final_state=True, impl="chunk")
    with value_checks(checks), _CountHostReads() as counter:
        log_linear_attn(q, k, v, g, lam, beta, initial_state=state, output_final_state=final_state, impl="chunk")
    return counter.count


def test_host_reads_of_the_chunk_path():
    body = sections(page("operator.md"))["Value checks and host synchronisation"]
    rows = {row[0]: int(row[1]) for row in table_with(body, "reads per call")}
    layout = _reads(checks=False, delta=False, final_state=False, initial_state=False)
    assert layout == rows["layout, `output_final_state=False`"]
    assert _reads(checks=False, delta=True, final_state=False, initial_state=False) == layout
    with_final = _reads(checks=False, delta=False, final_state=True, initial_state=False)
    assert with_final == rows["layout, `output_final_state=True`"]
    assert _reads(checks=True, delta=False, final_state=True, initial_state=False) - with_final == \
        rows["value checks, `beta=None`"]
    assert _reads(checks=True, delta=True, final_state=True, initial_state=False) - with_final == \
        rows["value checks, with `beta`"]
    assert _reads(checks=False, delta=True, final_state=True, initial_state=True) - with_final == \
        rows["with an `initial_state`, in addition"]


# --- links ----------------------------------------------------------------------------------------


def anchors(text: str) -> set[str]:
    """GitHub's anchors of the headings in `text`: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.*)$", re.sub(r"```.*?```", "", text, flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


LINKED_PAGES = [ROOT / "README.md", *PAGES, RESULTS / "README.md", ROOT / "records" / "README.md"]


@pytest.mark.parametrize("path", LINKED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_and_headings(path):
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file) if file else path
        assert linked.exists(), f"{path.name} links to missing {target}"
        if anchor:
            assert anchor in anchors(linked.read_text()), f"{path.name} links to a missing heading: {target}"


def test_the_index_lists_every_page_and_the_readme_links_it_at_the_top():
    linked = set(re.findall(r"\]\(([^)]+\.md)\)", page("README.md")))
    assert linked >= {p.name for p in PAGES if p.name != "README.md"} | {"../results/README.md"}
    top = (ROOT / "README.md").read_text().split("\n## ")[0]
    assert "(docs/README.md)" in top and "(results/README.md)" in top


def test_the_readme_is_short_and_keeps_its_sections():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.split()) <= 1500
    assert list(sections(readme)) == ["loglinear", "What the committed studies found", "Quick start",
                                      "The operator: `loglinear.kernels`", "Commands",
                                      "Layout", "How to cite"]
    for cited in ("https://arxiv.org/abs/2506.04761", "(CITATION.cff)", "(LICENSE)"):
        assert cited in readme
    (findings,) = tables(sections(readme)["What the committed studies found"])
    assert findings[0] == ["question", "verdict", "study"], "one line per question: its verdict and its study"
    assert len({row[0] for row in findings[1:]}) == len(findings) - 1
    assert all(re.match(r"\[\w+\]\(results/\w+/\)", row[2]) for row in findings[1:])


def test_every_committed_result_is_described_and_linked():
    text = (RESULTS / "README.md").read_text()
    folders = {p.name for p in RESULTS.iterdir() if p.is_dir()}
    linked = {target.split("/")[0] for target in re.findall(r"\]\(([^)\s]+)\)", text) if "/" in target}
    assert folders <= linked
    for folder in folders:
        assert f"configs/sweeps/{folder}.yaml" in text, f"the command that recreates results/{folder}"


def test_the_runs_page_lists_every_train_and_logger_key():
    from loglinear.runs.config import LoggerConfig, TrainConfig

    text = sections(page("runs.md"))["Training one run"]
    for group, cls in (("train", TrainConfig), ("logger", LoggerConfig)):
        match = re.search(rf"`{group}`\s+\(`{cls.__name__}`, `[^`]+`: (.*?)\)", text, re.S)
        assert match, f"the runs page's list of {group} keys"
        assert code_spans(match.group(1)) == list(config_keys(cls)), group


def test_the_presets_are_the_preset_files():
    rows = table_with(sections(page("runs.md"))["Training one run"], "preset")
    assert sorted(code(row[0]) for row in rows) == sorted(f"configs/{p.name}" for p in CONFIGS.glob("*.yaml"))
