"""Videos of a policy acting: rendered episodes written to an mp4 (or a GIF).

Used by ``rlplat-record`` and, during training, by :class:`VideoRecorder`
(``trainer.record_every_frames``, :func:`video_callbacks`). Frames come from the env's
``render()`` in gymnasium's ``render_mode="rgb_array"``: rlplat builds the env with
``{**env_node, "render_mode": "rgb_array"}``, so the env entry must take a ``render_mode``
keyword (``rlplat/envs/gym.py`` does). Videos are H.264 mp4 files written by imageio's ffmpeg
plugin with the ffmpeg binary shipped in the imageio-ffmpeg wheel (``pip install
'rlplat[video]'``); where no ffmpeg is available the same frames go to a GIF (imageio's
pillow plugin) instead.

The policy acts on observations transformed by the run's transforms, statistics frozen, and
each episode is reset with its own seed, so that episode ``i`` recorded with ``seed`` is the
episode that an evaluation env seeded ``seed + i`` runs. Rendering uses no global random
generator: recording during training leaves the run's results unchanged.
"""

from __future__ import annotations

import functools
import math
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np
import torch

from rlplat.collectors.base import Acting, Policy
from rlplat.envs.base import Episode, render_offscreen
from rlplat.envs.probe import check_renderable, entry_node
from rlplat.envs.vector import VectorEnv
from rlplat.registry import ENVS, ConfigError
from rlplat.trainer import EVAL_SEED_OFFSET
from rlplat.transforms.base import TransformLike

if TYPE_CHECKING:
    from rlplat.build import Build

VIDEO_DIR = "videos"
"""Folder of a run directory, and of its MLflow artifacts, that holds its videos."""
GIF_MAX_SIDE = 320
"""GIF frames are shrunk by an integer factor until no side exceeds this (pixels): a GIF holds
every frame in memory until it is written."""
INSTALL_HINT = "pip install 'rlplat[video]'"


def require_imageio() -> None:
    """Raise ConfigError unless imageio (the video writer) is installed."""
    try:
        import imageio  # noqa: F401
    except ImportError as error:
        raise ConfigError(f"videos need the imageio package, which is not installed: {INSTALL_HINT}") from error


@functools.cache
def ffmpeg_available() -> bool:
    """Whether imageio-ffmpeg is installed and its ffmpeg binary (the wheel's own, or the one
    named by ``IMAGEIO_FFMPEG_EXE``) runs and has the H.264 encoder (libx264). Asked once
    per process."""
    try:
        import imageio_ffmpeg

        executable = imageio_ffmpeg.get_ffmpeg_exe()  # RuntimeError: no binary found
        listed = subprocess.run([executable, "-hide_banner", "-encoders"], capture_output=True, text=True, timeout=30)
    except (ImportError, RuntimeError, OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "libx264" in listed.stdout


def render_env_maker(env_node: Mapping[str, Any]) -> Callable[[], gymnasium.Env]:
    """A factory of one env as ``env_node`` configures it, rendering ``rgb_array`` frames.

    Raises:
        ConfigError: when the env entry takes no ``render_mode`` (see :func:`rlplat.envs.probe.check_renderable`).
    """
    check_renderable(env_node)
    node = {**entry_node(env_node), "render_mode": "rgb_array"}
    render_offscreen()
    return lambda: ENVS.build("env", node)


class VideoWriter:
    """Appends ``[H, W, 3]`` uint8 frames to an mp4 file, or to a GIF where that is asked for
    (a ``.gif`` path) or no ffmpeg is available.

    The file is opened at the first frame; mp4 frames are padded to even sides (H.264 with
    4:2:0 chroma needs them), GIF frames shrunk to at most :data:`GIF_MAX_SIDE` pixels a side.

    Args:
        path: File to write; its suffix becomes ``.gif`` for a GIF (see :attr:`path`).
        fps: Frames per second of the video.

    Raises:
        ConfigError: when imageio is not installed, or ``fps`` < 1.
    """

    def __init__(self, path: Path, fps: int) -> None:
        require_imageio()
        if isinstance(fps, bool) or not isinstance(fps, int) or fps < 1:
            raise ConfigError(f"fps={fps!r}: must be an integer >= 1")
        self.fps = fps
        self.gif = Path(path).suffix.lower() == ".gif" or not ffmpeg_available()
        self.path = Path(path).with_suffix(".gif") if self.gif else Path(path)
        """The file written, ``path``, or ``path`` with suffix ``.gif`` for a GIF."""
        self.frames = 0
        self._writer: Any = None

    def append(self, frame: np.ndarray) -> None:
        """Add one ``[H, W, 3]`` uint8 frame."""
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = self._open_gif() if self.gif else self._open_mp4()
        if self.gif:
            step = math.ceil(max(frame.shape[:2]) / GIF_MAX_SIDE)
            self._writer.write(np.ascontiguousarray(frame[::step, ::step]), duration=1000 / self.fps, loop=0)
        else:
            height, width = frame.shape[:2]
            self._writer.append_data(np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge"))
        self.frames += 1

    def _open_mp4(self) -> Any:
        import imageio.v2 as imageio

        # only what stops ffmpeg is printed: a frame cut short by Ctrl-C (its video is then
        # removed) would otherwise print ffmpeg's complaint beside rlplat's one line
        return imageio.get_writer(
            self.path, format="FFMPEG", mode="I", fps=self.fps, codec="libx264", pixelformat="yuv420p",
            macro_block_size=1, ffmpeg_log_level="fatal",
        )  # fmt: skip

    def _open_gif(self) -> Any:
        import imageio.v3 as imageio

        return imageio.imopen(self.path, "w", plugin="pillow", extension=".gif")

    def close(self) -> None:
        """Finish the file (a GIF is written only now). Nothing is written without frames."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def render(env: VectorEnv) -> np.ndarray:
    """The frame of the only env of ``env``: ``[H, W, 3]`` uint8.

    Raises:
        ConfigError: when rendering needs a package that is not installed (e.g. pygame for
            gymnasium's classic-control envs), or the env returns no RGB frame.
    """
    try:
        frames = env.env.render()  # one frame per env of the vector env
    except gymnasium.error.DependencyNotInstalled as error:
        raise ConfigError(
            f"rendering the env needs a package that is not installed ({error}): {INSTALL_HINT}"
        ) from None
    frame = frames[0] if frames else None
    array = np.asarray(frame) if frame is not None else None
    if array is None or array.ndim != 3 or array.shape[-1] not in (3, 4):
        shape = None if array is None else array.shape
        raise ConfigError(f"the env rendered {shape} in render_mode='rgb_array', not an [H, W, 3] RGB frame")
    return np.ascontiguousarray(array[..., :3], dtype=np.uint8)


def play_episode(
    policy: Policy, env: VectorEnv, writer: VideoWriter, seed: int, deterministic: bool, device: torch.device
) -> Episode:
    """Run one episode on the one env of ``env`` (reset with ``seed``), writing a frame after
    the reset and after each step but the last (the env has then reset itself already)."""
    observation = env.reset(seed=seed)
    env.pop_finished()
    writer.append(render(env))
    act = Acting(policy, 1, deterministic).act_function()  # a recurrent policy's state carried
    while True:
        action, _ = act(observation.to(device))
        observation = env.step(action).observation
        finished = env.pop_finished()
        if finished:
            return finished[0]
        writer.append(render(env))


@torch.inference_mode()
def record_episodes(
    policy: Policy,
    make_env: Callable[[], gymnasium.Env],
    transforms: Sequence[TransformLike],
    episodes: int,
    seed: int,
    path: Path,
    fps: int = 30,
    deterministic: bool = True,
    device: torch.device | str = "cpu",
) -> Path:
    """Render ``episodes`` episodes of ``policy`` into one video file.

    Args:
        policy: Acts on ``[1, *obs_shape]`` observations (a loss's ``policy``).
        make_env: Returns one env rendering ``rgb_array`` frames (:func:`render_env_maker`).
        transforms: The run's transforms; their statistics are not updated.
        episodes: Episodes to record, one after another (>= 1).
        seed: Episode ``i`` is reset with ``seed + i``.
        path: The video file (``.mp4``; ``.gif`` for a GIF).
        fps: Frames per second of the video.
        deterministic: Act with the policy's mode instead of sampling.
        device: Device of the policy.

    Returns:
        The file written, ``path``, or ``path`` with suffix ``.gif`` when no ffmpeg encoder is
        available or a GIF was asked for.

    Raises:
        ConfigError: for ``episodes`` or ``fps`` < 1, without imageio, or when the env cannot
            render. Whatever stops the recording before its last episode (an error, Ctrl-C)
            leaves no video: the file begun is removed.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError(f"episodes={episodes!r}: must be an integer >= 1")
    writer = VideoWriter(path, fps)
    env = VectorEnv(make_env, 1, list(transforms), update_transforms=False)
    finished = False
    try:
        for i in range(episodes):
            play_episode(policy, env, writer, seed + i, deterministic, torch.device(device))
        finished = True
    finally:
        env.close()
        writer.close()
        if not finished and writer.frames:  # begun by this writer: a video cut short
            writer.path.unlink(missing_ok=True)
    return writer.path


class VideoRecorder:
    """Trainer callback: every ``every_frames`` frames, a video of one deterministic episode
    (``trainer.record_every_frames``), saved as ``<run_dir>/videos/frames_<frames>.mp4`` and
    handed to ``log`` (which uploads it as an MLflow artifact).

    Videos are made at log steps (:meth:`on_log`), so at the first log step at or after each
    multiple of ``every_frames``. Recording draws from no global random generator: the run's
    results are the same with and without videos.

    Args:
        policy: The policy being trained (``parts.policy``).
        env_node: The run's ``env`` node; the env is built from it with ``render_mode``.
        transforms: The run's transforms (statistics frozen while recording).
        every_frames: Frames between videos (>= 1).
        run_dir: The run directory; videos go to its ``videos/``.
        seed: Seed of each video's episode (the run's evaluation seed, ``seed + 10000``).
        device: Device of the policy.
        log: Called with each video file once written; None keeps the files only.
        fps: Frames per second of the videos.
        start_frames: Frames already trained (a resumed run): the first video is due at the
            next multiple of ``every_frames`` after them.

    Raises:
        ConfigError: when the env entry takes no ``render_mode``, imageio is missing, or
            ``every_frames`` < 1; raised at construction, before a run starts.
    """

    def __init__(
        self, policy: Policy, env_node: Mapping[str, Any], transforms: Sequence[TransformLike], *,
        every_frames: int, run_dir: Path, seed: int, device: torch.device, log: Callable[[Path], None] | None = None,
        fps: int = 30, start_frames: int = 0,
    ) -> None:  # fmt: skip
        if isinstance(every_frames, bool) or not isinstance(every_frames, int) or every_frames < 1:
            raise ConfigError(f"trainer.record_every_frames={every_frames!r}: must be an integer >= 1 (0: no videos)")
        require_imageio()
        self.make_env = render_env_maker(env_node)
        self.policy, self.transforms, self.device = policy, tuple(transforms), device
        self.every_frames, self.seed, self.fps, self.log = every_frames, seed, fps, log
        self.folder = Path(run_dir) / VIDEO_DIR
        self.next_frames = (start_frames // every_frames + 1) * every_frames

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """Record a video when ``frames`` reached the next multiple of ``every_frames``."""
        if frames < self.next_frames:
            return
        self.next_frames = (frames // self.every_frames + 1) * self.every_frames
        path = self.folder / f"frames_{frames:012d}.mp4"
        written = record_episodes(
            self.policy, self.make_env, self.transforms, 1, self.seed, path, self.fps, True, self.device
        )
        if self.log is not None:
            self.log(written)

    def upload_with(self, tracker: Any) -> None:
        """Hand each video written from now on to ``tracker.log_artifact`` (folder ``videos``):
        the run's tracker, which uploads it to its MLflow run (created or not yet)."""
        self.log = functools.partial(tracker.log_artifact, artifact_path=VIDEO_DIR)

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """Nothing: videos follow their own schedule."""

    def on_checkpoint(self, path: Path, best: bool) -> None:
        """Nothing: videos follow their own schedule."""


def video_callbacks(built: Build, run_dir: Path, start_frames: int = 0) -> list[VideoRecorder]:
    """The trainer callbacks of a run's ``trainer.record_every_frames``: none when it is 0,
    else a :class:`VideoRecorder` of the built policy writing
    ``<run_dir>/videos/frames_<frames>.mp4``, each episode seeded as the run's evaluations
    (``seed + 10000``). A recorded run hands each video to its tracker
    (:meth:`VideoRecorder.upload_with`).

    Args:
        built: The run's parts and settings (:func:`rlplat.build.build`).
        run_dir: The run directory.
        start_frames: The frames a resumed run has already trained.

    Raises:
        ConfigError: when the env entry takes no ``render_mode`` or imageio is not installed,
            before any run starts.
    """
    every = built.trainer.record_every_frames
    if every == 0:
        return []
    parts = built.parts
    recorder = VideoRecorder(
        parts.policy, built.env.node, parts.transforms, every_frames=every, run_dir=run_dir,
        seed=parts.seed + EVAL_SEED_OFFSET, device=parts.device, start_frames=start_frames,
    )  # fmt: skip
    return [recorder]
