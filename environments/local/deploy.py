"""Deploy the Serve application of a recorded local environment, as a process of its own.

`env up` runs this in a child process: a Ray driver and Serve's client keep per-process state
(the cluster id, a cached controller client) that would go stale in a long-lived caller, such
as a test session that brings environments up and down on the same ports.
Usage: python -m environments.local.deploy STATE_DIR
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from inferchaos.environments.local.env import connect_driver
from inferchaos.environments.local.serve_app import APP_NAME, ReplicaLaunch, build_app
from inferchaos.environments.local.state import LocalEnvState
from inferchaos.errors import InferchaosError

logger = logging.getLogger(__name__)


def replica_launch(state: LocalEnvState) -> ReplicaLaunch:
    """How every replica of ``state``'s environment starts its vLLM server."""
    cfg = state.config
    return ReplicaLaunch(
        model_dir=state.model_dir,
        served_model_name=state.served_model_name,
        max_model_len=cfg.model.max_model_len,
        kv_cache_bytes=cfg.kv_cache_bytes,
        base_port=cfg.replica_base_port,
        state_dir=state.state_dir,
        max_slots=cfg.workers,
        startup_timeout_s=cfg.ready_timeout_s,
        extra_args=cfg.vllm_extra_args,
        env_id=state.env_id,
        memory_budget_bytes=cfg.replica_memory_mib * 1024 * 1024,
        health_check=cfg.health_check,
    )


def deploy(state_dir: Path) -> None:
    """Start Serve (its proxy on the head is the front door) and run the replicas; blocks until RUNNING."""
    import ray
    from ray import serve

    state = LocalEnvState.load(state_dir)
    connect_driver(state)
    # Serve logs its progress at INFO; the parent's progress line says the same.
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    try:
        serve.start(
            proxy_location="HeadOnly",
            http_options={"host": "127.0.0.1", "port": state.config.front_door_port},
        )
        serve.run(build_app(replica_launch(state), state.config.replicas), name=APP_NAME, route_prefix="/")
    finally:
        ray.shutdown()


def main() -> None:
    try:
        deploy(Path(sys.argv[1]))
    except (InferchaosError, RuntimeError) as e:
        # RuntimeError is what Serve raises for a deployment that failed (DEPLOY_FAILED).
        print(f"deploying the vLLM replicas failed: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
