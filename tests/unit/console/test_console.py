"""The console display: what each line shows, and that it fits an 80-column terminal."""

from __future__ import annotations

import io

from rich.console import Console

from rlplat.console import TrainingDisplay, log_line

WIDE = {
    "time/fps": 12_345.6,
    "rollout/return_mean": -1234.5,
    "rollout/return_std": 321.9,
    "rollout/return_min": -1999.0,
    "rollout/return_max": -400.2,
    "rollout/episode_length": 200.0,
}


def test_a_log_line_shows_frames_fps_returns_length_and_elapsed():
    line = log_line(102_400, WIDE, 3725.0)
    assert line == "   102,400 fr | 12,346 fps | R -1234.5±321.9 [-1999, -400] len 200 | 1:02:05"
    assert len(line) <= 80
    assert log_line(0, {}, 0.0).endswith("fps | R - | 0:00:00")


def test_the_live_line_and_the_printed_lines_fit_80_columns_without_cutting_frames():
    terminal = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    display = TrainingDisplay("sac / pendulum / seed 12", 100_000_000, console=terminal)
    display.progress.update(display.task, completed=99_999_999, fps="12,346")
    screen = Console(file=io.StringIO(), width=80, record=True, color_system=None)
    screen.print(display.progress.make_tasks_table(display.progress.tasks))
    [live] = [line.rstrip() for line in screen.export_text().splitlines() if line.strip()]
    assert len(live) <= 80 and "99,999,999/100,000,000" in live and "12,346 fps" in live, live

    out = io.StringIO()
    display = TrainingDisplay("sac / pendulum / seed 12", 100_000_000, console=Console(file=out, width=80))
    with display:
        display.on_log(WIDE, 99_999_999)
        display.on_evaluation(
            {"eval/return_mean": -150.25, "eval/return_std": 80.5, "eval/return_min": -390.1,
             "eval/return_max": -1.4, "eval/episode_length": 200, "eval/episodes": 10},
            99_999_999,
        )  # fmt: skip
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0].startswith("99,999,999 fr | 12,346 fps | R -1234.5±321.9 [-1999, -400] len 200 | 0:00:0")
    assert lines[1] == "      eval @ 99,999,999 frames, 10 episodes: R -150.2±80.5 [-390, -1] len 200"


def test_off_a_terminal_only_the_printed_lines_appear():
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    with TrainingDisplay("ppo / cartpole / seed 0", 1000, console=console) as display:
        display.on_log({"time/fps": 100.0}, 500)
    assert out.getvalue().splitlines() == ["       500 fr |    100 fps | R - | 0:00:00"]
