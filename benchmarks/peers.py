"""Side-by-side speed benchmark: rlplat against Stable-Baselines3 (with RL-Zoo's tuned
hyperparameters), TorchRL and a CleanRL-style script, on this machine.

    make bench-peers                                    # every row: peers.json, the speed page, the README
    python benchmarks/peers.py --rows ppo collection --repeats 2 --peers-python .venv-peers/bin/python
    python benchmarks/peers.py --rows target --merge     # rerun one row, keep the others of peers.json

Every measurement is a fresh process; the libraries run in turn (A B C A B C ...), each
repetition in the same order, so that a drift of the machine's speed hits all of them; each
figure is the median over the repetitions, and each rlplat/peer ratio the median of the
ratios of the same repetition, with a 95% percentile-bootstrap interval
(``scipy.stats.bootstrap``; with 3 repetitions it spans the pairs' range). Rows:

1. ``ppo``: framework overhead of PPO at identical settings (``settings.PPO_OVERHEAD``):
   frames per second of the training loop.
2. ``sac``: framework overhead of SAC, 256 x 256, one update of batch 256 per frame
   (``settings.SAC_OVERHEAD``), against the arithmetic bound computed from the measured
   matrix-product rate, and against the update's matrix products run alone
   (``rlplat_run.py:sac_products_ms``: what an update would cost with no framework at all);
   and rlplat alone at smaller sizes: 64 x 64 at the same batch and replay ratio, and its
   own SAC preset.
3. ``target``: seconds to the first evaluation at or above the threshold with each
   library's best preset, evaluated every 5,000 frames on 10 episodes: from the command's
   start, and of training alone. rlplat's MLflow store exists before the first timed run
   (an untimed small run creates it), as it does for every run after a user's first: the
   creation of a new store is row 5's.
4. ``collection``: rlplat's collector with PPO's policy in 16 envs against gymnasium's own
   vector env stepped with random actions; and the same with EnvPool as the envs' engine
   (``env.backend=envpool``; EnvPool's own pool stepped with random actions beside it).
5. ``startup``: command to first env step on an existing and on a new store, and the peak
   resident memory of the largest process of a small run; beside them, the time and memory
   of importing torch (``TORCH_IMPORT``) and of importing torch and building one optimizer
   (``TORCH_FLOOR``), and the peak memory of
   Stable-Baselines3's PPO on the same small run.

The peers run in their own virtualenv (``--peers-python``; ``make bench-peers`` creates it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "benchmarks" / "peers"
sys.path.insert(0, str(PEERS))
from settings import EVAL_EPISODES, EVAL_EVERY_FRAMES, PPO_OVERHEAD, SAC_OVERHEAD, TARGETS  # noqa: E402

SPEED_PAGE = ROOT / "docs" / "benchmarks" / "speed.md"
SECTION_START = "<!-- peers: benchmarks/peers.json -->"
SECTION_END = "<!-- end peers -->"
"""The markers of the section of docs/benchmarks/speed.md that :func:`render` writes."""
ENV_NAMES = {"pendulum": "Pendulum", "cartpole": "CartPole"}
"""How the README's headline names the envs of the time-to-threshold rows."""
HEADLINE_START = "<!-- peers-headline: benchmarks/peers.json -->"
HEADLINE_END = "<!-- end peers-headline -->"
"""The markers of the README's lines that :func:`headline` writes."""
SMALL_RUN = ["algo=ppo", "env=cartpole", "trainer.total_frames=1024", "trainer.eval_episodes=2"]
ROWS = ("ppo", "sac", "target", "collection", "startup")
# the collection row's runs: (rlplat_run.py task, the envs' engine)
COLLECTION_RUNS = {
    "rlplat": ("collection", "gymnasium"),
    "raw": ("raw", "gymnasium"),
    "rlplat envpool": ("collection", "envpool"),
    "raw envpool": ("raw", "envpool"),
}
TIANSHOU = {"ppo_cartpole": 6.0, "ppo_pendulum": 16.0, "sac_pendulum": 36.0}
"""Seconds Tianshou's README once reported on an i7 laptop: PPO CartPole to 195, PPO
Pendulum to -250, SAC Pendulum to -250 (thresholds below ours)."""
EXPERIMENT = "bench-peers"
TORCH_IMPORT = "import torch"
"""The floor of any torch program: its time and memory bound row 5 from below."""
TORCH_FLOOR = "import torch; torch.optim.Adam(torch.nn.Linear(2, 2).parameters())"
"""What a plain torch trainer pays before its first step: importing torch and building an
optimizer, whose first param group imports torch._dynamo (as importing tensordict does)."""


def _timed(code: str) -> str:
    """``code`` followed by a RESULT line with the seconds since the command started."""
    return (
        f"import json, os, time; {code}; "
        "print('RESULT ' + json.dumps({'seconds': time.time() - float(os.environ['BENCH_T0'])}))"
    )


@dataclass
class Completed:
    """A finished process: its result line, output, and what the OS measured."""

    result: dict[str, Any]
    stderr: str
    started: float  # time.time() just before the process was started
    seconds: float
    max_rss_mb: float  # peak resident memory of the process or any child it waited for


def run(argv: Sequence[str], timeout_s: float = 1800.0, cwd: Path = ROOT) -> Completed:
    """Run ``argv`` as a fresh process (``BENCH_T0`` set to its start time) and parse its
    ``RESULT {json}`` line, if any.

    Raises:
        RuntimeError: when it fails or times out, with the end of its stderr.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.time()
        process = subprocess.Popen(
            list(argv), cwd=cwd, stdout=out, stderr=err, env={**os.environ, "BENCH_T0": repr(started)}
        )
        timer = threading.Timer(timeout_s, process.kill)
        timer.start()
        _, status, usage = os.wait4(process.pid, 0)
        timer.cancel()
        seconds = time.time() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {process.returncode}:\n{stderr[-3000:]}")
    lines = [line[len("RESULT ") :] for line in stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(lines[-1]) if lines else {}
    return Completed(result, stderr, started, seconds, usage.ru_maxrss / 1024)


class Rlplat:
    """Runs ``rlplat-train`` into a store of its own and reads the run back from MLflow."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.uri = f"sqlite:///{folder / 'mlflow.db'}"
        self.script = shutil.which("rlplat-train") or str(Path(sys.executable).parent / "rlplat-train")

    def train(self, overrides: Sequence[str], uri: str | None = None) -> dict[str, Any]:
        """Run the command; return its metrics (last values), the run's timestamps and the
        process's measurements."""
        from mlflow import MlflowClient

        uri = uri or self.uri
        args = [*overrides, f"tracking.uri={uri}", f"tracking.experiment={EXPERIMENT}", "hydra.run.dir=outputs/run"]
        with tempfile.TemporaryDirectory(dir=self.folder) as cwd:
            completed = run([self.script, *args], cwd=Path(cwd))
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(EXPERIMENT)
        [latest] = client.search_runs(
            [experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=1
        )
        result = {key: value for key, value in latest.data.metrics.items()}
        if "time/to_target_s" in result:
            [hit] = client.get_metric_history(latest.info.run_id, "time/to_target_s")
            result["hit_seconds"] = hit.timestamp / 1000 - completed.started  # from the command's start
            result["hit_frames"] = hit.step
        result["wall_seconds"] = completed.seconds
        result["max_rss_mb"] = completed.max_rss_mb
        return result


def ratio_summary(ours: Sequence[float], theirs: Sequence[float], higher_is_better: bool = True) -> dict[str, Any]:
    """Median and 95% bootstrap interval of the per-repetition ratios ours/theirs."""
    from scipy import stats

    pairs = np.array([a / b for a, b in zip(ours, theirs)], dtype=np.float64)
    if len(pairs) < 2 or np.ptp(pairs) == 0:
        low = high = float(np.median(pairs))
    else:
        interval = stats.bootstrap(
            (pairs,), np.median, confidence_level=0.95, method="percentile", random_state=0, n_resamples=2000
        ).confidence_interval
        low, high = float(interval.low), float(interval.high)
    return {"pairs": pairs.tolist(), "median": float(np.median(pairs)), "low": low, "high": high}


def ppo_overrides(s: dict[str, Any]) -> list[str]:
    """``rlplat-train`` overrides of the keys every PPO settings dict has (``settings.PPO_*``):
    rollout shape, epochs, minibatch, GAE, clip, learning rate (constant), gradient clip and
    length, with one closing evaluation of one episode and no periodic checkpoint."""
    return [
        f"collector.num_envs={s['num_envs']}",
        f"collector.steps_per_env={s['steps_per_env']}",
        f"buffer.epochs={s['epochs']}",
        f"buffer.minibatch_size={s['minibatch_size']}",
        f"loss.gamma={s['gamma']}",
        f"loss.gae_lambda={s['gae_lambda']}",
        f"loss.clip_epsilon={s['clip_epsilon']}",
        f"optim.lr={s['lr']}",
        f"optim.max_grad_norm={s['max_grad_norm']}",
        "trainer.lr_schedule=constant",
        f"trainer.total_frames={s['frames']}",
        "trainer.eval_every_frames=0",
        "trainer.eval_episodes=1",
        "checkpoint.every_frames=0",
    ]


def _ppo_overrides() -> list[str]:
    s = PPO_OVERHEAD
    return [
        "algo=ppo",
        "env=pendulum",
        "~transforms.obs_norm",  # the peers' runs do not normalise observations
        f"network.hidden_sizes=[{s['hidden'][0]}]",
        f"loss.features={s['hidden'][1]}",
        *ppo_overrides(s),
    ]


def _sac_overrides() -> list[str]:
    s = SAC_OVERHEAD
    return [
        "algo=sac",
        "env=pendulum",
        "~tuned",  # the 256 x 256 preset of conf/algo/sac.yaml
        f"network.hidden_sizes=[{s['hidden'][0]}]",
        f"loss.features={s['hidden'][1]}",
        f"buffer.batch_size={s['batch_size']}",
        f"buffer.capacity={s['buffer_size']}",
        f"buffer.learning_starts={s['learning_starts']}",
        f"loss.warmup_frames={s['learning_starts']}",
        f"loss.gamma={s['gamma']}",
        f"loss.tau={s['tau']}",
        f"optim.lr={s['lr']}",
        f"trainer.total_frames={s['frames']}",
        "trainer.eval_every_frames=0",
        "trainer.eval_episodes=1",
        "checkpoint.every_frames=0",
    ]


SAC_PRESET = ["algo=sac", "env=pendulum", "trainer.total_frames=10000", "trainer.eval_every_frames=0"]
SAC_64 = [*_sac_overrides(), "network.hidden_sizes=[64]", "loss.features=64"]  # 64 x 64, otherwise row 2's settings


def sac_update_mflop(obs_dim: int = 3, act_dim: int = 1) -> float:
    """MFLOP of one SAC update at SAC_OVERHEAD's sizes: 4 actor passes' worth (next-action
    forward, forward, backward of weights and inputs) and 12 critic passes' worth (2 target
    and 2 online critics forward, their backward, 2 critics forward on the new actions and
    their input gradients), a pass of a Linear(i, o) on N rows being 2 N i o FLOP."""
    n, (h1, h2) = SAC_OVERHEAD["batch_size"], SAC_OVERHEAD["hidden"]
    actor = 2 * n * (obs_dim * h1 + h1 * h2 + h2 * 2 * act_dim)
    critic = 2 * n * ((obs_dim + act_dim) * h1 + h1 * h2 + h2)
    return (4 * actor + 12 * critic) / 1e6


def measure_rows(rows: Sequence[str], repeats: int, peers_python: str, folder: Path) -> dict[str, Any]:
    """Run the rows; returns what they measured, run by run."""
    rlplat = Rlplat(folder)
    here = sys.executable
    out: dict[str, Any] = {}

    def peer(script: str, *args: str) -> dict[str, Any]:
        return run([peers_python, str(PEERS / script), *args]).result

    if "ppo" in rows:
        runs: dict[str, list[float]] = {"rlplat": [], "rlplat compiled": [], "sb3": [], "torchrl": [], "cleanrl": []}
        for rep in range(repeats):
            runs["rlplat"].append(rlplat.train([*_ppo_overrides(), f"seed={rep}"])["time/fps"])
            compiled = [*_ppo_overrides(), f"seed={rep}", "trainer.compile=true"]
            runs["rlplat compiled"].append(rlplat.train(compiled)["time/fps"])
            runs["sb3"].append(peer("sb3_run.py", "ppo_overhead", "--seed", str(rep))["fps"])
            runs["torchrl"].append(peer("torchrl_run.py", "ppo_overhead", "--seed", str(rep))["fps"])
            runs["cleanrl"].append(peer("cleanrl_style.py", "ppo_overhead", "--seed", str(rep))["fps"])
            print(f"ppo {rep}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in runs.items()), flush=True)
        out["ppo"] = {"settings": PPO_OVERHEAD, "fps": runs}

    if "sac" in rows:
        runs = {
            "rlplat": [],
            "rlplat compiled": [],
            "sb3": [],
            "torchrl": [],
            "cleanrl": [],
            "rlplat 64x64": [],
            "rlplat 64x64 compiled": [],
            "rlplat preset": [],
        }
        gflops, products_ms = [], []
        for rep in range(repeats):
            rates = run([here, str(PEERS / "rlplat_run.py"), "matmul"]).result
            if abs(rates["sac_products_mflop"] - sac_update_mflop()) > 1e-6:
                raise RuntimeError(
                    f"rlplat_run.py's SAC products are {rates['sac_products_mflop']} MFLOP, "
                    f"sac_update_mflop counts {sac_update_mflop()}: the two accountings differ"
                )
            gflops.append(rates["gflops"])
            products_ms.append(rates["sac_products_ms"])
            seed = f"seed={rep}"
            runs["rlplat"].append(rlplat.train([*_sac_overrides(), seed])["time/fps"])
            runs["rlplat compiled"].append(rlplat.train([*_sac_overrides(), seed, "trainer.compile=true"])["time/fps"])
            runs["sb3"].append(peer("sb3_run.py", "sac_overhead", "--seed", str(rep))["fps"])
            runs["torchrl"].append(peer("torchrl_run.py", "sac_overhead", "--seed", str(rep))["fps"])
            runs["cleanrl"].append(peer("cleanrl_style.py", "sac_overhead", "--seed", str(rep))["fps"])
            runs["rlplat 64x64"].append(rlplat.train([*SAC_64, seed])["time/fps"])
            runs["rlplat 64x64 compiled"].append(rlplat.train([*SAC_64, seed, "trainer.compile=true"])["time/fps"])
            runs["rlplat preset"].append(rlplat.train([*SAC_PRESET, seed])["time/fps"])
            print(f"sac {rep}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in runs.items()), flush=True)
        out["sac"] = {
            "settings": SAC_OVERHEAD,
            "fps": runs,
            "matmul_gflops": gflops,
            "update_mflop": sac_update_mflop(),
            "products_ms": products_ms,
        }

    if "target" in rows:
        rlplat.train(SMALL_RUN)  # the store exists, as for every run after a user's first (row 5 times a new one)
        targets: dict[str, Any] = {}
        for name, (algo, _, env, threshold) in TARGETS.items():
            runs_t: dict[str, list[dict[str, Any]]] = {"rlplat": [], "sb3": []}
            for seed in range(repeats):
                result = rlplat.train(
                    [
                        f"algo={algo}",
                        f"env={env}",
                        f"seed={seed}",
                        f"trainer.target_return={threshold}",
                        f"trainer.eval_every_frames={EVAL_EVERY_FRAMES}",
                        f"trainer.eval_episodes={EVAL_EPISODES}",
                    ]
                )
                reached = "hit_seconds" in result
                runs_t["rlplat"].append(
                    {
                        "reached": reached,
                        "seconds": result["hit_seconds"] if reached else result["wall_seconds"],
                        "train_seconds": result.get("time/to_target_s", float("inf")),
                        "frames": result.get("hit_frames"),
                    }
                )
                runs_t["sb3"].append(peer("sb3_run.py", f"target:{name}", "--seed", str(seed)))
                print(f"{name} seed {seed}: rlplat {runs_t['rlplat'][-1]}, sb3 {runs_t['sb3'][-1]}", flush=True)
            targets[name] = {"threshold": threshold, "runs": runs_t}
        out["target"] = targets

    if "collection" in rows:
        collection: dict[str, Any] = {}
        for env in ("pendulum", "cartpole"):
            runs: dict[str, list[float]] = {key: [] for key in COLLECTION_RUNS}
            for _ in range(repeats):
                for key, (task, backend) in COLLECTION_RUNS.items():
                    command = [here, str(PEERS / "rlplat_run.py"), task, "--env", env, "--backend", backend]
                    runs[key].append(run(command).result["fps"])
            print(f"collection {env}: {runs}", flush=True)
            collection[env] = {"num_envs": 16, "fps": runs}
        out["collection"] = collection

    if "startup" in rows:
        rlplat.train(SMALL_RUN)  # the existing store
        existing, new, rss = [], [], []
        for rep in range(repeats):
            result = rlplat.train(SMALL_RUN)
            existing.append(result["time/startup_s"])
            rss.append(result["max_rss_mb"])
            fresh = folder / f"new-{rep}.db"
            new.append(rlplat.train(SMALL_RUN, uri=f"sqlite:///{fresh}")["time/startup_s"])
        sb3_import = [run([peers_python, "-c", "import stable_baselines3"]).seconds for _ in range(repeats)]
        floor = [run([here, "-c", _timed(TORCH_FLOOR)]) for _ in range(repeats)]  # command to optimizer built
        torch_import = [run([here, "-c", _timed(TORCH_IMPORT)]) for _ in range(repeats)]
        sb3_small = [run([peers_python, str(PEERS / "sb3_run.py"), "small"]).max_rss_mb for _ in range(repeats)]
        out["startup"] = {
            "existing_store_s": existing,
            "new_store_s": new,
            "peak_rss_mb": rss,
            "sb3_import_s": sb3_import,
            "torch_floor_s": [c.result["seconds"] for c in floor],
            "torch_floor_rss_mb": [c.max_rss_mb for c in floor],
            "torch_import_s": [c.result["seconds"] for c in torch_import],
            "torch_import_rss_mb": [c.max_rss_mb for c in torch_import],
            "sb3_small_rss_mb": sb3_small,
        }
        print(f"startup: {out['startup']}", flush=True)
    return out


def machine(peers_python: str) -> dict[str, Any]:
    """What the figures were measured on."""
    import torch

    model = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if "model name" in line]
        model = names[0] if names else model
    versions = run(
        [
            peers_python,
            "-c",
            "import json, importlib.metadata as m; print('RESULT ' + json.dumps({p: m.version(p) for p in "
            "('stable-baselines3', 'rl_zoo3', 'torchrl', 'tensordict', 'torch', 'gymnasium')}))",
        ]
    ).result
    from importlib.metadata import version

    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "system": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": 1,
        "rlplat": version("rlplat"),
        "gymnasium": version("gymnasium"),
        "peers": versions,
        "date": time.strftime("%Y-%m-%d"),
    }


def summarize(measured: dict[str, Any]) -> dict[str, Any]:
    """Medians and ratios of what :func:`measure_rows` measured."""
    summary: dict[str, Any] = {}
    for row in ("ppo", "sac"):
        if row not in measured:
            continue
        fps = measured[row]["fps"]
        summary[row] = {
            "median_fps": {lib: statistics.median(values) for lib, values in fps.items()},
            "ratios": {
                lib: ratio_summary(fps["rlplat"], values) for lib, values in fps.items() if not lib.startswith("rlplat")
            },
        }
        summary[row]["compiled_ratios"] = {
            lib: ratio_summary(fps["rlplat compiled"], values)
            for lib, values in fps.items()
            if not lib.startswith("rlplat")
        }
    if "sac" in measured:
        gflops = statistics.median(measured["sac"]["matmul_gflops"])
        bound = gflops * 1e3 / measured["sac"]["update_mflop"]
        summary["sac"]["bound_fps"] = bound
        summary["sac"]["fraction_of_bound"] = summary["sac"]["median_fps"]["rlplat"] / bound
        summary["sac"]["compiled_fraction_of_bound"] = summary["sac"]["median_fps"]["rlplat compiled"] / bound
        summary["sac"]["matmul_gflops"] = gflops
        products = 1e3 / statistics.median(measured["sac"]["products_ms"])
        summary["sac"]["products_fps"] = products
        summary["sac"]["fraction_of_products"] = summary["sac"]["median_fps"]["rlplat"] / products
        summary["sac"]["compiled_fraction_of_products"] = summary["sac"]["median_fps"]["rlplat compiled"] / products
    if "target" in measured:
        summary["target"] = {}
        for name, entry in measured["target"].items():
            ours, theirs = entry["runs"]["rlplat"], entry["runs"]["sb3"]
            both = [(a, b) for a, b in zip(ours, theirs) if a["reached"] and b["reached"]]
            summary["target"][name] = {
                "threshold": entry["threshold"],
                "reached": {"rlplat": sum(r["reached"] for r in ours), "sb3": sum(r["reached"] for r in theirs)},
                "seeds": len(ours),
                "median_seconds": {
                    "rlplat": statistics.median(r["seconds"] for r in ours),
                    "sb3": statistics.median(r["seconds"] for r in theirs),
                },
                "median_train_seconds": {
                    "rlplat": statistics.median(r["train_seconds"] for r in ours),
                    "sb3": statistics.median(r["train_seconds"] for r in theirs),
                },
                "ratio": ratio_summary([a["seconds"] for a, _ in both], [b["seconds"] for _, b in both])
                if both
                else None,
                "train_ratio": ratio_summary(
                    [a["train_seconds"] for a, _ in both], [b["train_seconds"] for _, b in both]
                )
                if both
                else None,
                "tianshou_seconds": TIANSHOU.get(name),
            }
    if "collection" in measured:
        summary["collection"] = {
            env: {
                "median_fps": {k: statistics.median(v) for k, v in entry["fps"].items()},
                "ratio": ratio_summary(entry["fps"]["rlplat"], entry["fps"]["raw"]),
                "envpool_ratio": ratio_summary(entry["fps"]["rlplat envpool"], entry["fps"]["raw"]),
            }
            for env, entry in measured["collection"].items()
        }
    if "startup" in measured:
        summary["startup"] = {key: statistics.median(values) for key, values in measured["startup"].items()}
    return summary


def _interval(ratio: dict[str, Any] | None, digits: int = 2) -> str:
    if ratio is None:
        return "-"
    return f"{ratio['median']:.{digits}f} [{ratio['low']:.{digits}f}, {ratio['high']:.{digits}f}]"


def render(results: dict[str, Any]) -> str:
    """The speed page's section for ``results`` (the content of benchmarks/peers.json)."""
    m, s = results["machine"], results["summary"]
    peers = m["peers"]
    lines = [
        f"Measured by `make bench-peers` on {m['date']}: {_machine(m)}; Stable-Baselines3 "
        f"{peers['stable-baselines3']} with RL-Zoo {peers['rl_zoo3']}, TorchRL {peers['torchrl']}. "
        f"{results['repeats']} repetitions, interleaved; medians, and ratios rlplat/peer as the median of the "
        "repetitions' ratios with a 95% bootstrap interval. The numbers are in `benchmarks/peers.json`.",
        "",
    ]
    earlier = {row: machine for row, machine in results.get("row_machines", {}).items() if machine != m}
    for machine in {json.dumps(machine, sort_keys=True): machine for machine in earlier.values()}.values():
        rows = " and ".join(row for row in ROWS if earlier.get(row) == machine)
        lines[0] += (
            f" The rows {rows} are those of an earlier run (`--merge`), on {machine['date']}: {_machine(machine)}."
        )
    if "ppo" in s:
        fps = s["ppo"]["median_fps"]
        lines += [
            "| PPO, identical settings (Pendulum, 4 envs x 1024 steps, 10 epochs of 64, 64x64 tanh), frames/s "
            "| median | rlplat / this | rlplat `trainer.compile=true` / this |",
            "|---|---:|---:|---:|",
            f"| rlplat | {fps['rlplat']:,.0f} | | |",
            f"| rlplat, `trainer.compile=true` | {fps['rlplat compiled']:,.0f} | | |",
        ]
        for lib, label in (("sb3", "Stable-Baselines3"), ("torchrl", "TorchRL"), ("cleanrl", "CleanRL-style script")):
            lines.append(
                f"| {label} | {fps[lib]:,.0f} | {_interval(s['ppo']['ratios'][lib])} "
                f"| {_interval(s['ppo']['compiled_ratios'][lib])} |"
            )
        lines.append("")
    if "sac" in s:
        fps = s["sac"]["median_fps"]
        lines += [
            "| SAC, Pendulum, 256x256, batch 256, one update per frame, frames/s | median | rlplat / this "
            "| rlplat `trainer.compile=true` / this |",
            "|---|---:|---:|---:|",
            f"| rlplat | {fps['rlplat']:,.1f} | | |",
            f"| rlplat, `trainer.compile=true` | {fps['rlplat compiled']:,.1f} | | |",
        ]
        for lib, label in (("sb3", "Stable-Baselines3"), ("torchrl", "TorchRL"), ("cleanrl", "CleanRL-style script")):
            lines.append(
                f"| {label} | {fps[lib]:,.1f} | {_interval(s['sac']['ratios'][lib])} "
                f"| {_interval(s['sac']['compiled_ratios'][lib])} |"
            )
        lines += [
            f"| arithmetic bound ({s['sac']['matmul_gflops']:.0f} GFLOP/s measured on 256-wide products, "
            f"{results['measured']['sac']['update_mflop']:.0f} MFLOP per update) | {s['sac']['bound_fps']:,.1f} "
            f"| {s['sac']['fraction_of_bound']:.2f} | {s['sac']['compiled_fraction_of_bound']:.2f} |",
            f"| the update's matrix products alone, in a loop of their own (torch, one thread: "
            f"{s['sac']['products_fps'] / s['sac']['bound_fps']:.2f} of the bound) | {s['sac']['products_fps']:,.1f} "
            f"| {s['sac']['fraction_of_products']:.2f} | {s['sac']['compiled_fraction_of_products']:.2f} |",
            "",
            "| SAC, Pendulum, rlplat at smaller sizes, 10,000 frames, frames/s | median |",
            "|---|---:|",
            f"| 64x64, batch 256, one update per frame | {fps['rlplat 64x64']:,.0f} |",
            f"| 64x64, batch 256, one update per frame, `trainer.compile=true` | {fps['rlplat 64x64 compiled']:,.0f} |",
            "| rlplat's SAC preset (`algo=sac env=pendulum`: 32x32, batch 64, an update every other frame) "
            f"| {fps['rlplat preset']:,.0f} |",
            "",
        ]
    if "target" in s:
        lines += [
            "| time to threshold, best presets, eval every 5k frames (10 episodes) | threshold | rlplat s "
            "(training s) | SB3 + RL-Zoo s (training s) | rlplat / SB3 | training: rlplat / SB3 | seeds reached "
            "(rlplat, SB3) | Tianshou's README |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, t in s["target"].items():
            tianshou = f"{t['tianshou_seconds']:g} s" if t["tianshou_seconds"] else "-"
            lines.append(
                f"| {name.replace('_', ' ')} | {t['threshold']:g} | {t['median_seconds']['rlplat']:.1f} "
                f"({t['median_train_seconds']['rlplat']:.1f}) | {t['median_seconds']['sb3']:.1f} "
                f"({t['median_train_seconds']['sb3']:.1f}) | {_interval(t['ratio'])} | {_interval(t['train_ratio'])} "
                f"| {t['reached']['rlplat']}/{t['seeds']}, {t['reached']['sb3']}/{t['seeds']} | {tianshou} |"
            )
        lines.append("")
    if "collection" in s:
        lines += [
            "| collection, 16 envs, frames/s | rlplat's collector, PPO's policy | gymnasium, random actions "
            "| rlplat / gymnasium | rlplat's collector, `env.backend=envpool` | EnvPool, random actions "
            "| rlplat `env.backend=envpool` / gymnasium |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for env, c in s["collection"].items():
            fps = c["median_fps"]
            lines.append(
                f"| {env} | {fps['rlplat']:,.0f} | {fps['raw']:,.0f} | {_interval(c['ratio'])} "
                f"| {fps['rlplat envpool']:,.0f} | {fps['raw envpool']:,.0f} | {_interval(c['envpool_ratio'])} |"
            )
        lines.append("")
    if "startup" in s:
        st = s["startup"]
        lines += [
            "| start-up (`rlplat-train algo=ppo env=cartpole`, command to first env step) | median |",
            "|---|---:|",
            f"| existing store | {st['existing_store_s']:.2f} s |",
            f"| new store | {st['new_store_s']:.2f} s |",
            f"| peak resident memory of the largest process of that run | {st['peak_rss_mb']:.0f} MB |",
            f"| for reference: `import stable_baselines3` | {st['sb3_import_s']:.2f} s |",
            f"| for reference: Stable-Baselines3's PPO, the same small run (CartPole, 8 envs x 128 steps), "
            f"peak resident memory | {st['sb3_small_rss_mb']:.0f} MB |",
            f"| for reference: `{TORCH_IMPORT}`, the floor of any torch program "
            f"| {st['torch_import_s']:.2f} s, {st['torch_import_rss_mb']:.0f} MB |",
            f"| for reference: `{TORCH_FLOOR}` (its first param group imports torch._dynamo, as "
            f"tensordict's import does) | {st['torch_floor_s']:.2f} s, {st['torch_floor_rss_mb']:.0f} MB |",
            "",
        ]
    return "\n".join(lines)


def _machine(m: dict[str, Any]) -> str:
    return (
        f"{m['cpu']}, {m['cores']} cores, {m['system']}, Python {m['python']}, torch {m['torch']} "
        f"on {m['torch_threads']} thread for every library"
    )


def headline(results: dict[str, Any]) -> str:
    """The README's lines on speed: rlplat against Stable-Baselines3 on identical settings."""
    s = results["summary"]
    lines = [
        f"| `make bench-peers` on {results['machine']['date']}, one CPU thread each | rlplat / Stable-Baselines3 |",
        "|---|---:|",
        f"| PPO, identical settings (Pendulum, 64x64), frames/s | {_interval(s['ppo']['ratios']['sb3'])} |",
        f"| SAC, identical settings (Pendulum, 256x256, batch 256), frames/s "
        f"| {_interval(s['sac']['ratios']['sb3'])} |",
    ]
    for name, t in s["target"].items():
        algo, env = name.split("_", 1)
        label = f"{algo.upper()} on {ENV_NAMES.get(env, env)}"
        lines.append(
            f"| {label}: seconds to {t['threshold']:g}, each library's tuned preset | {_interval(t['ratio'])} |"
        )
    return "\n".join(lines) + "\n"


def write_section(section: str, page: Path, start: str, end: str) -> None:
    """Replace the text between the markers ``start`` and ``end`` of ``page``."""
    text = page.read_text()
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{start}\n{section}{end}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="*", choices=ROWS, default=list(ROWS))
    parser.add_argument("--repeats", type=int, default=3, help="repetitions (seeds, for the time to threshold)")
    parser.add_argument("--peers-python", default=str(ROOT / ".venv-peers" / "bin" / "python"))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "peers.json")
    parser.add_argument("--no-readme", action="store_true", help="do not rewrite the speed page and the README")
    parser.add_argument("--merge", action="store_true", help="keep --out's other rows; rerun only --rows")
    args = parser.parse_args()
    if not Path(args.peers_python).is_file():
        parser.error(f"--peers-python {args.peers_python}: no such interpreter (make bench-peers creates it)")
    measured: dict[str, Any] = {}
    row_machines: dict[str, Any] = {}  # the machine and date of each row: a merge keeps older rows
    if args.merge:
        if not args.out.is_file():
            parser.error(f"--merge: {args.out} does not exist")
        kept = json.loads(args.out.read_text())
        if kept["repeats"] != args.repeats:
            parser.error(f"--merge: {args.out} has {kept['repeats']} repetitions, --repeats is {args.repeats}")
        measured = {row: value for row, value in kept["measured"].items() if row not in args.rows}
        row_machines = {row: kept.get("row_machines", {}).get(row, kept["machine"]) for row in measured}
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as folder:
        measured.update(measure_rows(args.rows, args.repeats, args.peers_python, Path(folder)))
    measured = {row: measured[row] for row in ROWS if row in measured}
    now = machine(args.peers_python)
    row_machines.update({row: now for row in args.rows})
    row_machines = {row: row_machines[row] for row in measured}
    results = {"machine": now, "row_machines": row_machines, "repeats": args.repeats, "measured": measured}
    results["summary"] = summarize(measured)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    section = render(results)
    print(section)
    if not args.no_readme and set(measured) == set(ROWS):
        write_section(section, SPEED_PAGE, SECTION_START, SECTION_END)
        write_section(headline(results), ROOT / "README.md", HEADLINE_START, HEADLINE_END)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
