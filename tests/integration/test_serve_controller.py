"""ray.kill_serve_controller on the real local environment: the controller dies, Ray brings it back, the front door serves meanwhile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest
from env_checks import wait_until_whole

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault
from inferchaos.primitives.openai_stream import stream_completion

pytestmark = pytest.mark.integration

NAME = "ray.kill_serve_controller"


def _controllers(env: LocalEnvironment) -> list[Any]:
    """Serve's controller as Ray's state API lists it, read here and not through the fault."""
    from ray.util.state import list_actors

    env.connect_ray()
    return [
        a
        for a in list_actors(filters=[("class_name", "=", "ServeController")], detail=True)
        if a.name == "SERVE_CONTROLLER_ACTOR" and a.ray_namespace == "serve" and a.state != "DEAD"
    ]


def test_kill_serve_controller_keeps_the_front_door_serving_and_serve_brings_it_back(
    local_env: LocalEnvironment, tmp_path: Path
) -> None:
    wait_until_whole(local_env)
    (before,) = _controllers(local_env)
    assert before.state == "ALIVE"
    ledger = Ledger(tmp_path / "ledger")
    fault = get_fault(NAME)
    params = {"recover_timeout_s": 45}

    plan = fault.plan(local_env, params)
    assert plan.targets == [f"ray-actor:ServeController:{before.actor_id}", f"pid:{before.pid}"]
    assert psutil.pid_exists(before.pid), "planning kills nothing"

    handle = fault.inject(local_env, params, ledger)
    assert not ledger.is_empty(), "the kill must be in the ledger while it is live"
    during = fault.evidence(local_env, handle)
    print("serve controller evidence at inject:", during)
    assert during.bit, during.reason
    assert not psutil.pid_exists(before.pid) or psutil.Process(before.pid).status() == psutil.STATUS_ZOMBIE

    fault.revert(local_env, handle, ledger)
    assert ledger.is_empty()
    after = fault.evidence(local_env, handle)
    print("serve controller evidence after revert:", after)
    s = after.symptoms
    assert after.bit and s["controller_back"], after.reason
    print(
        f"serve controller recovery: back {s['back_after_s']} s after the kill (seen by {s['back_seen_by']})"
    )
    assert s["back_seen_by"] == "watcher" and s["back_after_s"] < 45

    (now,) = _controllers(local_env)
    assert now.state == "ALIVE" and now.pid != before.pid
    assert (now.pid, now.actor_id) == (s["controller_pid_after"], s["controller_actor_id_after"])
    # Ray restarts the detached actor under its own id: a new id would be a new controller.
    assert now.actor_id == before.actor_id
    if before.num_restarts is not None and now.num_restarts is not None:
        assert now.num_restarts == before.num_restarts + 1

    sent, served = s["front_door_requests_during_outage"], s["front_door_served_during_outage"]
    print(f"front door during the controller outage: {served}/{sent} served, by {s['front_door_served_by']}")
    assert sent >= 1 and served >= 1, s["front_door_errors"]
    assert served / sent >= 0.8, s["front_door_errors"]

    status = local_env.status()
    again = stream_completion(
        status.front_door.url, status.model.name, "still there?", max_tokens=4, timeout_s=10
    )
    assert again.ok, again.error
    fault.revert(local_env, handle, ledger)  # idempotent
    assert ledger.is_empty()
    wait_until_whole(local_env, timeout_s=60)
