"""rlplat.deferred_dynamo: nothing imports torch._dynamo until something needs it, and once
something does, tensordict's compiler marks and the optimizers' dynamo wrappers are exactly
what they would have been without the deferral. Each case runs in a fresh interpreter (the
deferral is process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import torch
from torch.optim.optimizer import Optimizer

def marks():
    import torch._dynamo
    from torch._dynamo import trace_rules
    import tensordict.base, tensordict.utils
    marked = {
        "add_batch_dim": tensordict.utils._add_batch_dim_c,
        "foreach_copy": tensordict.base._foreach_copy_compiled,
        "lock_warn": tensordict.utils._lock_warn,
    }
    return {
        name: [trace_rules.lookup(fn).__name__ if trace_rules.lookup(fn) else None,
               bool(getattr(fn, "_dynamo_marked_constant", False))]
        for name, fn in marked.items()
    }

def disable_caches():
    return {
        name: getattr(getattr(Optimizer, name).__wrapped__, "__dynamo_disable", None)
        not in (None, getattr(Optimizer, name).__wrapped__)
        for name in ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
    }

deferring = sys.argv[1] == "defer"
if deferring:
    from rlplat.deferred_dynamo import defer_dynamo, deferred_marks
    assert defer_dynamo() and not defer_dynamo()  # a second call does nothing
import tensordict

out = {"after_tensordict": "torch._dynamo" in sys.modules}
net = torch.nn.Linear(3, 2)
optimizer = torch.optim.Adam(net.parameters(), fused=True)
net(torch.randn(4, 3)).sum().backward()
optimizer.zero_grad()
optimizer.load_state_dict(optimizer.state_dict())
out["after_optimizer"] = "torch._dynamo" in sys.modules
if deferring:
    out["deferred"] = sorted({mark for mark, _ in deferred_marks()})
out["marks"] = marks()  # imports torch._dynamo
optimizer.zero_grad()
optimizer.load_state_dict(optimizer.state_dict())
optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
out["disable_caches"] = disable_caches()
out["allow_in_graph_is_torchs"] = torch.compiler.allow_in_graph.__module__ == "torch.compiler"
print(json.dumps(out))
"""


def _probe(mode: str) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_deferred_dynamo_is_not_imported_until_needed_and_then_ends_as_without_deferral():
    plain, deferred = _probe("plain"), _probe("defer")
    assert plain["after_tensordict"]  # what the deferral is for: tensordict imports it
    assert not deferred["after_tensordict"] and not deferred["after_optimizer"]
    assert deferred["deferred"] == ["allow_in_graph", "assume_constant_result"]
    assert deferred["marks"] == plain["marks"]
    assert any(kind for kind, _ in plain["marks"].values()) and any(c for _, c in plain["marks"].values())
    assert deferred["disable_caches"] == plain["disable_caches"] == dict.fromkeys(deferred["disable_caches"], True)
    assert deferred["allow_in_graph_is_torchs"]
