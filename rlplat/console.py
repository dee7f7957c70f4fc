"""Console display of a training run: a live progress line, a line per log step and per
evaluation, a table at the end."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


def _elapsed(seconds: float) -> str:
    """``h:mm:ss``."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def returns_text(metrics: Mapping[str, float], prefix: str) -> str:
    """``R 123.4±5.6 [100, 200] len 150``: mean±std [min, max] of the episode returns and
    the mean episode length, from ``<prefix>/return_*`` and ``<prefix>/episode_length``;
    ``R -`` when no episode ended."""
    mean = metrics.get(f"{prefix}/return_mean")
    if mean is None or math.isnan(mean):
        return "R -"
    std = metrics.get(f"{prefix}/return_std", math.nan)
    low, high = metrics.get(f"{prefix}/return_min", math.nan), metrics.get(f"{prefix}/return_max", math.nan)
    length = metrics.get(f"{prefix}/episode_length", math.nan)
    return f"R {mean:.1f}±{std:.1f} [{low:.0f}, {high:.0f}] len {length:.0f}"


def log_line(frames: int, metrics: Mapping[str, float], elapsed: float) -> str:
    """One log step, in at most 80 columns for returns within ±100,000:
    ``   102,400 fr |  2,214 fps | R -160.9±84.2 [-384, -2] len 200 | 0:00:46``."""
    fps = metrics.get("time/fps", math.nan)
    fps_text = "     - fps" if math.isnan(fps) else f"{fps:>6,.0f} fps"
    return f"{frames:>10,} fr | {fps_text} | {returns_text(metrics, 'rollout')} | {_elapsed(elapsed)}"


class TrainingDisplay:
    """What a training run shows on the console.

    On a terminal, a live progress line (title, bar, frames done of the total, frames per
    second, elapsed time) that fits 80 columns. Above it, and alone when output goes to a
    file or pipe: a line per log step (frames, frames/s, training episode returns mean±std
    [min, max], episode length, elapsed), a line per evaluation, and a table at the end.

    Use as a context manager; the trainer calls :meth:`on_log` and :meth:`on_evaluation`;
    :meth:`summary` at the end.

    Args:
        title: Shown left of the bar (e.g. ``ppo / pendulum / seed 0``).
        total_frames: Frames the bar runs to.
        console: Console to draw on; a new one on stdout when None.
    """

    def __init__(self, title: str, total_frames: int, console: Console | None = None) -> None:
        self.console = console or Console()
        self.started = time.perf_counter()
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=16),
            TextColumn("{task.completed:>,.0f}/{task.total:,.0f}"),
            TextColumn("[cyan]{task.fields[fps]:>6} fps"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.console.is_terminal,  # logs and pipes get the printed lines only
        )
        self.task = self.progress.add_task(title, total=total_frames, fps="-")

    def __enter__(self) -> TrainingDisplay:
        self.started = time.perf_counter()
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def say(self, line: str) -> None:
        """Print one line above the bar (e.g. which accelerated paths the run takes)."""
        self.progress.console.print(line, highlight=False, markup=False, soft_wrap=True)

    def update(self, frames: int, metrics: Mapping[str, float]) -> None:
        """Advance the bar to ``frames``; print the log step's line."""
        fps = metrics.get("time/fps", math.nan)
        self.progress.update(self.task, completed=frames, fps="-" if math.isnan(fps) else f"{fps:,.0f}")
        self.progress.console.print(log_line(frames, metrics, time.perf_counter() - self.started), highlight=False)

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """Trainer callback: the bar and a printed line follow each log step."""
        self.update(frames, metrics)

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """Trainer callback: one printed line per evaluation."""
        episodes = int(metrics.get("eval/episodes", 0))
        self.progress.console.print(
            f"{'eval':>10} @ {frames:,} frames, {episodes} episodes: {returns_text(metrics, 'eval')}", highlight=False
        )

    def on_checkpoint(self, path: object, best: bool) -> None:
        """Trainer callback: checkpoints are not shown."""

    def summary(self, rows: Mapping[str, object]) -> None:
        """Print a two-column table of final results."""
        table = Table(show_header=False, box=None, padding=(0, 2))
        for key, value in rows.items():
            table.add_row(str(key), f"{value:.2f}" if isinstance(value, float) else str(value))
        self.console.print(table)
