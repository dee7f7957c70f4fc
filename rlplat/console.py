"""Console display of a training run: one live progress line, a line per evaluation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


class TrainingDisplay:
    """A rich progress bar over frames with fps, episode returns and losses beside it.

    On a terminal the bar redraws in place; when output goes to a file or pipe only the
    evaluation lines and the final summary are printed.

    Use as a context manager; :meth:`update` after each rollout, :meth:`evaluation` after
    each evaluation, :meth:`summary` at the end.

    Args:
        title: Shown left of the bar (e.g. ``ppo / pendulum / seed 0``).
        total_frames: Frames the bar runs to.
        console: Console to draw on; a new one on stdout when None.
    """

    def __init__(self, title: str, total_frames: int, console: Console | None = None) -> None:
        self.console = console or Console()
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("frames"),
            TextColumn("[cyan]{task.fields[fps]:>6} fps"),
            TextColumn("return [green]{task.fields[rollout]}"),
            TextColumn("eval [magenta]{task.fields[eval]}"),
            TextColumn("[dim]{task.fields[losses]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.console.is_terminal,  # logs and pipes get eval lines and the summary
        )
        self.task = self.progress.add_task(title, total=total_frames, fps="-", rollout="-", eval="-", losses="")

    def __enter__(self) -> TrainingDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, frames: int, metrics: Mapping[str, float]) -> None:
        """Advance the bar to ``frames`` and show fps, rollout return and ``loss/*`` terms."""
        fields: dict[str, Any] = {"fps": f"{metrics.get('time/fps', 0.0):.0f}"}  # the task's custom fields
        if "rollout/return_mean" in metrics:
            fields["rollout"] = f"{metrics['rollout/return_mean']:.1f}"
        losses = [f"{k[5:]} {v:.3g}" for k, v in metrics.items() if k.startswith("loss/")]
        fields["losses"] = "  ".join(losses)
        self.progress.update(self.task, completed=frames, **fields)

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """Trainer callback: the bar follows each log step."""
        self.update(frames, metrics)

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """Trainer callback: show the evaluation on the bar and as one printed line."""
        mean, std = metrics["eval/return_mean"], metrics["eval/return_std"]
        self.progress.update(self.task, eval=f"{mean:.1f}")
        self.progress.console.print(
            f"eval @ {frames:>9,} frames: return {mean:9.2f} ± {std:.2f} "
            f"over {int(metrics.get('eval/episodes', 0))} episodes"
        )

    def on_checkpoint(self, path: object, best: bool) -> None:
        """Trainer callback: checkpoints are not shown."""

    def summary(self, rows: Mapping[str, object]) -> None:
        """Print a two-column table of final results."""
        table = Table(show_header=False, box=None, padding=(0, 2))
        for key, value in rows.items():
            table.add_row(str(key), f"{value:.2f}" if isinstance(value, float) else str(value))
        self.console.print(table)
