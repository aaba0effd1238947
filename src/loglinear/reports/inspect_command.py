"""The work of `loglinear inspect RUN_DIR`: lambda by level of a trained log-linear run, written beside it, and
the command's exit status (0 written, 1 a fault of the machine, 2 not inspectable, 130 interrupted)."""

from __future__ import annotations

import sys

from loglinear.reports.lambda_inspect import summary
from loglinear.reports.lambda_plots import inspect_and_plot
from loglinear.runs.config import ConfigError
from loglinear.runs.folder import fault_line


def inspect_command(run_dir: str, device: str, batches: int | None, probe_sequences: int) -> int:
    """Inspect `run_dir` on `device` (`batches` validation batches, None: all; `probe_sequences` of each length for
    the effective weights), print the summary; its exit status."""
    try:
        inspection = inspect_and_plot(run_dir, device, batches, probe_sequences)
    except ConfigError as e:
        print(f"loglinear inspect: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"loglinear inspect: {fault_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("loglinear inspect: interrupted; its files are whole (the previous ones or none)", file=sys.stderr)
        return 130
    print(summary(inspection))
    print(f"wrote {', '.join(str(p) for p in inspection.written)}", file=sys.stderr)
    return 0
