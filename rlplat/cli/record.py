"""``rlplat-record RUN [key=value ...]``: render a trained agent's episodes, seeded as the
trainer's evaluations, to an mp4 (a GIF when no ffmpeg encoder is available, saying so), by
default ``<run dir>/videos/<checkpoint name>.mp4``, logged as an artifact of the source run
under ``videos/`` (:func:`rlplat.agent.record_video`). See docs/guides/checkpoints.md.
"""

from __future__ import annotations

import sys

from rlplat.cli.args import Key, default_tracking_uri, integer, output_path, reported, run_command
from rlplat.command_line import collection_paused, skip_final_collection

PROG = "rlplat-record"
KEYS = {
    "episodes": Key(integer(1), 3, "episodes to record, one after another"),
    "fps": Key(integer(1), 30, "frames per second of the video"),
    "out": Key(
        output_path(".mp4", ".gif"), None, "video file (.mp4, or .gif); default: <run dir>/videos/<checkpoint name>.mp4"
    ),
}
COMMAND = run_command(PROG, "Render a trained agent's episodes to a video (mp4, or GIF).", KEYS)


@collection_paused()  # a short command: no collections while torch and MLflow import
def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``rlplat-record``; returns 0 (bad input exits with status 2)."""
    skip_final_collection()
    with reported(PROG, "no video written"):
        [run], values, env = COMMAND.parse(argv)
        from rlplat.tracking.locate import locate_run, with_source_run

        located = locate_run(run, values.pop("tracking.uri") or default_tracking_uri())
        from rlplat.agent import log_video, record_video

        path = record_video(located, env, **values)  # the other keys are its arguments
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
