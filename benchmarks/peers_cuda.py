"""The GPU rows of the side-by-side speed benchmark: rlplat with ``trainer.device=cuda``
beside Stable-Baselines3 with ``device="cuda"``, on a machine with an NVIDIA GPU.

    make bench-peers-cuda                       # writes benchmarks/peers_cuda.json and its section of the speed page
    python benchmarks/peers_cuda.py --peers-python python3 --repeats 3
    python benchmarks/peers_cuda.py --render-only  # the speed page's section from the results file

Runs as ``benchmarks/peers.py`` runs its rows (fresh processes, the libraries in turn,
medians, ratios of the same repetition with a 95% bootstrap interval), rewriting the
results file after each repetition, so that a run cut short keeps the repetitions it
completed (``--render-only`` then writes the speed page's section from them). Rows:

1. ``ppo``: row 1's identical settings (``settings.PPO_OVERHEAD``), ``CUDA_FRAMES["ppo"]``
   frames: rlplat on the GPU and on one CPU thread of the same machine, Stable-Baselines3 on
   the GPU.
2. ``sac``: row 2's identical settings (256 x 256, batch 256, one update per frame),
   ``CUDA_FRAMES["sac"]`` frames: the same three.
3. ``atari``: CNN PPO on Pong (``settings.PPO_ATARI``: 8 envs x 128 steps, 4 epochs of 256,
   Mnih et al.'s CNN shared by policy and value): rlplat and Stable-Baselines3 on the GPU.

TorchRL and the CleanRL-style script are left out here: TorchRL's wheels are built for one
torch version, and the GPU machine's torch is the one its CUDA build ships.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import peers  # noqa: E402
from peers import PEERS, Rlplat, _interval, _ppo_overrides, _sac_overrides, ppo_overrides, ratio_summary, run  # noqa: E402
from settings import CUDA_FRAMES, PPO_ATARI  # noqa: E402

SECTION_START = "<!-- peers-cuda: benchmarks/peers_cuda.json -->"
SECTION_END = "<!-- end peers-cuda -->"
ROWS = ("ppo", "sac", "atari")


def atari_overrides() -> list[str]:
    """``rlplat-train`` at ``settings.PPO_ATARI`` (tuned/ppo_pong.yaml's values, named)."""
    s = PPO_ATARI
    return [
        "algo=ppo",
        "env=pong",
        f"env.kwargs={{max_num_frames_per_episode:{s['max_emulator_frames']}}}",
        "loss.value_clip=null",  # Stable-Baselines3's default: no value clipping
        f"loss.entropy_coef={s['entropy_coef']}",
        f"loss.features={s['features']}",
        *ppo_overrides(s),
    ]


def measure(rows: tuple[str, ...], repeats: int, peers_python: str, folder: Path) -> Iterator[dict[str, Any]]:
    """Run the rows; yields frames per second, run by run, after each repetition."""
    rlplat = Rlplat(folder)

    def sb3(task: str, rep: int, frames: int) -> float:
        args = [task, "--seed", str(rep), "--device", "cuda", "--frames", str(frames)]
        return run([peers_python, str(PEERS / "sb3_run.py"), *args]).result["fps"]

    runs_of: dict[str, dict[str, list[float]]] = {
        "ppo": {"rlplat cuda": [], "rlplat cpu": [], "sb3 cuda": []},
        "sac": {"rlplat cuda": [], "rlplat cpu": [], "sb3 cuda": []},
        "atari": {"rlplat cuda": [], "sb3 cuda": []},
    }
    base = {
        "ppo": [*_ppo_overrides(), f"trainer.total_frames={CUDA_FRAMES['ppo']}"],
        "sac": [*_sac_overrides(), f"trainer.total_frames={CUDA_FRAMES['sac']}"],
        "atari": atari_overrides(),
    }
    task = {"ppo": "ppo_overhead", "sac": "sac_overhead", "atari": "ppo_atari"}
    for rep in range(repeats):
        for row in rows:
            runs = runs_of[row]
            overrides = [*base[row], f"seed={rep}"]
            runs["rlplat cuda"].append(rlplat.train([*overrides, "trainer.device=cuda"])["time/fps"])
            if "rlplat cpu" in runs:
                runs["rlplat cpu"].append(rlplat.train([*overrides, "trainer.device=cpu"])["time/fps"])
            runs["sb3 cuda"].append(sb3(task[row], rep, CUDA_FRAMES[row]))
            print(f"{row} {rep}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in runs.items()), flush=True)
        yield {row: {"frames": CUDA_FRAMES[row], "fps": runs_of[row]} for row in rows}


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import torch

    names = [
        line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in line
    ]
    gpu = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "gpu": gpu,
        "cpu": names[0] if names else "unknown",
        "cores": len(names),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": 1,
        "stable-baselines3": importlib.metadata.version("stable-baselines3"),
        "date": time.strftime("%Y-%m-%d"),
    }


def summarize(measured: dict[str, Any]) -> dict[str, Any]:
    """Medians and the ratios of rlplat's runs to Stable-Baselines3's on the GPU."""
    summary: dict[str, Any] = {}
    for row, entry in measured.items():
        fps = entry["fps"]
        summary[row] = {
            "median_fps": {lib: statistics.median(values) for lib, values in fps.items()},
            "ratios": {lib: ratio_summary(values, fps["sb3 cuda"]) for lib, values in fps.items() if lib != "sb3 cuda"},
        }
    return summary


LABELS = {
    "rlplat cuda": "rlplat, `trainer.device=cuda`",
    "rlplat cpu": "rlplat, `trainer.device=cpu` (one thread of the same machine)",
    "sb3 cuda": 'Stable-Baselines3, `device="cuda"`',
}
TITLES = {
    "ppo": "PPO, row 1's identical settings (Pendulum, 4 envs x 1024 steps, 10 epochs of 64, 64x64 tanh)",
    "sac": "SAC, row 2's identical settings (Pendulum, 256x256, batch 256, one update per frame)",
    "atari": "CNN PPO, Pong (8 envs x 128 steps, 4 epochs of 256, Nature CNN shared by policy and value)",
}


def render(results: dict[str, Any]) -> str:
    """The speed page's section for ``results`` (the content of benchmarks/peers_cuda.json)."""
    m, s = results["machine"], results["summary"]
    lines = [
        f"Measured by `benchmarks/peers_cuda.py` (`make bench-peers-cuda`) on {m['date']}: {m['gpu']}, "
        f"{m['cpu']} ({m['cores']} cores), "
        f"Python {m['python']}, torch {m['torch']} on {m['torch_threads']} CPU thread, Stable-Baselines3 "
        f"{m['stable-baselines3']}. {results['repeats']} repetitions, interleaved; medians, and ratios to "
        "Stable-Baselines3 on the GPU as the median of the repetitions' ratios with a 95% bootstrap interval. "
        "The numbers are in `benchmarks/peers_cuda.json`.",
        "",
    ]
    for row in ROWS:
        if row not in s:
            continue
        frames = results["measured"][row]["frames"]
        lines += [
            f"| {TITLES[row]}, {frames:,} frames, frames/s | median | / Stable-Baselines3 on the GPU |",
            "|---|---:|---:|",
        ]
        for lib, fps in s[row]["median_fps"].items():
            ratio = _interval(s[row]["ratios"].get(lib)) if lib != "sb3 cuda" else ""
            lines.append(f"| {LABELS[lib]} | {fps:,.0f} | {ratio} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="*", choices=ROWS, default=list(ROWS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peers-python", default=str(ROOT / ".venv-peers" / "bin" / "python"))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "peers_cuda.json")
    parser.add_argument("--no-readme", action="store_true", help="do not rewrite the speed page's section")
    parser.add_argument(
        "--render-only", action="store_true", help="measure nothing: the speed page's section from --out"
    )
    args = parser.parse_args()
    if not args.render_only:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device here: these rows need an NVIDIA GPU and a CUDA build of torch")
        results: dict[str, Any] = {"machine": machine()}
        with tempfile.TemporaryDirectory(prefix="bench-peers-cuda-") as folder:
            for done, measured in enumerate(measure(tuple(args.rows), args.repeats, args.peers_python, Path(folder))):
                results.update(repeats=done + 1, measured=measured, summary=summarize(measured))
                args.out.write_text(json.dumps(results, indent=1) + "\n")  # a run cut short keeps what it measured
        print(f"wrote {args.out}")
    section = render(json.loads(args.out.read_text()))
    print(section)
    if not args.no_readme:
        peers.write_section(section, peers.SPEED_PAGE, SECTION_START, SECTION_END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
