"""rlplat-record: render a trained agent's episodes to a video.

    rlplat-record <run id | run dir | checkpoint> [episodes=3] [deterministic=true] [fps=30]
                  [out=<path>] [seed=...] [env.id=...] [device=...] [tracking.uri=...]

Rebuilds the agent from the checkpoint (:mod:`rlplat.agent`) and writes its episodes one
after another (episode i reset with seed + 10000 + i, the seeds of the trainer's evaluation)
to an mp4, or to a GIF when no ffmpeg encoder is available, saying so (:mod:`rlplat.video`).
The video goes to ``out``, by default ``<run dir>/videos/<checkpoint name>.mp4``, and is
logged as an artifact of the source run under ``videos/`` when the run is recorded in MLflow.
Bad input is one ``rlplat-record: error:`` line and exit status 2, with nothing written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlplat.cli.args import (
    COMMON_KEYS,
    Key,
    argument_parser,
    default_tracking_uri,
    integer,
    locate_run,
    output_file,
    parse_command,
    reported,
)
from rlplat.command_line import collection_paused, skip_final_collection
from rlplat.tracking.locate import with_source_run

if TYPE_CHECKING:
    from rlplat.tracking.locate import Located

PROG = "rlplat-record"
KEYS = {
    "episodes": Key(integer(1), 3, "episodes to record, one after another"),
    "fps": Key(integer(1), 30, "frames per second of the video"),
    "out": Key(
        output_file(".mp4", ".gif"), None, "video file (.mp4, or .gif); default: <run dir>/videos/<checkpoint name>.mp4"
    ),
    **COMMON_KEYS,
}


def log_video(tracking_uri: str, run_id: str, path: Path) -> None:
    """Upload ``path`` as an artifact of the run ``run_id`` under ``videos/``."""
    from mlflow import MlflowClient

    from rlplat.video import VIDEO_DIR

    MlflowClient(tracking_uri=tracking_uri).log_artifact(run_id, str(path), VIDEO_DIR)


def default_out(located: Located) -> Path:
    """``<run dir>/videos/<checkpoint name>.mp4``; ``./videos/...`` for a checkpoint outside
    a run directory."""
    from rlplat.video import VIDEO_DIR

    folder = located.run_dir if located.run_dir is not None else Path.cwd()
    return folder / VIDEO_DIR / f"{located.checkpoint.stem}.mp4"


def render(located: Located, values: dict[str, Any], env: dict[str, Any]) -> Path:
    """Check that the env can render, rebuild the agent, write the video; returns the file.

    Raises:
        ConfigError: for an env that cannot render, a bad override or a missing imageio.
    """
    from rlplat.agent import restore, restored_env_node
    from rlplat.trainer import EVAL_SEED_OFFSET
    from rlplat.video import record_episodes, render_env_maker, require_imageio

    require_imageio()
    make_env = render_env_maker(restored_env_node(located, env))  # before the build: fails fast
    built = restore(located, env, values["seed"], values["device"])
    try:
        parts = built.parts
        out = values["out"] or default_out(located)
        return record_episodes(
            parts.policy, make_env, parts.transforms, values["episodes"], parts.seed + EVAL_SEED_OFFSET,
            out, values["fps"], values["deterministic"], parts.device,
        )  # fmt: skip
    finally:
        built.parts.close()


@collection_paused()  # a short command: no collections while torch and MLflow import
def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``rlplat-record``; returns 0 (bad input exits with status 2)."""
    skip_final_collection()
    parser = argument_parser(PROG, "Render a trained agent's episodes to a video (mp4, or GIF).", KEYS)
    with reported(PROG, "no video written"):
        run, values, env = parse_command(parser, argv, KEYS)
        located = locate_run(run, values["tracking.uri"] or default_tracking_uri())
        path = render(located, values, env)
    asked_for_gif = values["out"] is not None and values["out"].suffix.lower() == ".gif"
    if path.suffix == ".gif" and not asked_for_gif:
        print(f"{PROG}: no ffmpeg encoder available (pip install imageio-ffmpeg): wrote a GIF instead", file=sys.stderr)
    print(f"Wrote {values['episodes']} episode{'s' if values['episodes'] > 1 else ''} to {path}")
    located, gone = with_source_run(located)
    if gone:
        print(f"{PROG}: {gone}: the video is not logged to MLflow", file=sys.stderr)
    if located.run_id is not None and located.tracking_uri is not None:
        log_video(located.tracking_uri, located.run_id, path)
        print(f"Logged as artifact videos/{path.name} of MLflow run {located.run_id}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
