"""Start and stop a fleet: Ray (local, or a running cluster), Serve's HTTP proxy on --host/--port, the replicas.

`FleetOptions` holds what the single server does not have: replica count (or an autoscaling floor and ceiling with a
target of robots per replica), each replica's CPUs and GPUs, and how long a stopping replica waits for its robots to
leave (Serve's graceful shutdown: a replica being replaced or scaled down drops out of the router's candidates, so it
takes no new robot, and keeps its live ones until they leave or the drain timeout ends; only then does Serve stop it,
and its remaining robots get 1012 from the proxy (proxy_close.py) and reconnect elsewhere).
"""
from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from ..server import ServeConfig
from .proxy_close import CALLBACK, CALLBACK_ENV
from .replica import BOARD_NAMESPACE, FleetBoard, FleetReplica

log = logging.getLogger("oxygen_gym.serve.fleet")

ROUTER = "oxygen_gym.serve.fleet.router.SeatRouter"
HTTP_HEADROOM = 8  # requests a replica takes beyond its robots: /healthz, /stats, handshakes it will refuse with 503
_FORWARDED_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OXYGEN_GYM_API_KEY")
# how often Serve's proxies and replicas report ongoing requests to its autoscaler (Serve's default: 10 s)
_SERVE_ENV = ("RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S")


def serve_env_vars() -> dict[str, str]:
    """Environment for Serve's controller and so its proxies: the middleware that closes a lost replica's robots
    with 1012 (proxy_close.py; a callback of your own in RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH is kept, and
    then yours decides) and the autoscaling report periods when set here."""
    env = {k: os.environ[k] for k in _SERVE_ENV if k in os.environ}
    env[CALLBACK_ENV] = os.environ.get(CALLBACK_ENV, CALLBACK)
    return env


def ray_env_vars() -> dict[str, str]:
    """Environment for every Ray process of a fleet this process starts: the thread settings and the API key the
    replicas read, and `serve_env_vars()`."""
    return {**{k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}, **serve_env_vars()}


@dataclass
class FleetOptions:
    replicas: int = 2  # fixed count, or the autoscaling floor with max_replicas
    max_replicas: int | None = None  # autoscaling ceiling (None: a fixed count)
    robots_per_replica: float | None = None  # autoscaling target (default: half of --max-robots)
    replica_cpus: float = 1.0
    replica_gpus: float = 0.0
    drain_timeout_s: float = 600.0
    scale_up_delay_s: float = 30.0  # autoscaling: how long robots must stay above the target before a replica is added
    scale_down_delay_s: float = 600.0  # ... and below it before one is removed (Serve's own defaults)
    scale_look_back_s: float = 30.0  # the window Serve averages robots per replica over
    threads: int | None = None  # torch threads per replica
    stats_push_s: float = 1.0
    routing_stats_period_s: float = 1.0

    def check(self, max_robots: int) -> "FleetOptions":
        if not 1 <= self.replicas <= 1024:
            raise ValueError(f"--replicas must be in [1, 1024], got {self.replicas}")
        if self.max_replicas is not None and not self.replicas <= self.max_replicas <= 1024:
            raise ValueError(f"--max-replicas must be in [--replicas, 1024], got {self.max_replicas} with --replicas {self.replicas}")
        if self.robots_per_replica is not None and not 0 < self.robots_per_replica <= max_robots:
            raise ValueError(f"--robots-per-replica must be in (0, --max-robots={max_robots}], got {self.robots_per_replica}")
        if self.replica_cpus < 0 or self.replica_gpus < 0:
            raise ValueError(f"--replica-cpus and --replica-gpus must be >= 0, got {self.replica_cpus}, {self.replica_gpus}")
        if self.drain_timeout_s < 0:
            raise ValueError(f"--drain-timeout-s must be >= 0, got {self.drain_timeout_s}")
        if self.scale_up_delay_s < 0 or self.scale_down_delay_s < 0:
            raise ValueError(f"--scale-up-delay-s and --scale-down-delay-s must be >= 0, got {self.scale_up_delay_s}, "
                             f"{self.scale_down_delay_s}")
        if self.scale_look_back_s <= 0:
            raise ValueError(f"scale_look_back_s must be > 0, got {self.scale_look_back_s}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {self.threads}")
        return self


def deployment_options(config: ServeConfig, fleet: FleetOptions) -> dict:
    """`serve.deployment` options of the replicas (separate so a reader sees every knob Serve gets in one place)."""
    from ray.serve.config import RequestRouterConfig

    options: dict = {
        "name": "PolicyReplica",
        "ray_actor_options": {"num_cpus": fleet.replica_cpus, "num_gpus": fleet.replica_gpus},
        # a websocket is one ongoing request for its whole life: robots + the few short HTTP requests
        "max_ongoing_requests": config.max_robots + HTTP_HEADROOM,
        # the drain: a stopping replica waits while it has ongoing requests (its robots' websockets), checking every
        # second, and is force-stopped after the timeout (its robots then get 1012 from the proxy, proxy_close.py)
        "graceful_shutdown_timeout_s": fleet.drain_timeout_s,
        "graceful_shutdown_wait_loop_s": 1.0,
        "request_router_config": RequestRouterConfig(
            request_router_class=ROUTER, request_router_kwargs={"max_robots": config.max_robots},
            request_routing_stats_period_s=fleet.routing_stats_period_s,
            request_routing_stats_timeout_s=max(10.0, 5 * fleet.routing_stats_period_s),
        ),
    }
    if fleet.max_replicas is None:
        options["num_replicas"] = fleet.replicas
    else:
        # Serve's default policy scales on ongoing requests per replica, which here are the connected robots (a
        # websocket is one request for its whole life; /healthz and /stats add a moment each). Scale-down picks the
        # newest replica, not the emptiest: it drains like any stopping replica, so no live robot moves
        options["autoscaling_config"] = {
            "min_replicas": fleet.replicas, "initial_replicas": fleet.replicas, "max_replicas": fleet.max_replicas,
            "target_ongoing_requests": fleet.robots_per_replica or max(1.0, config.max_robots / 2),
            "upscale_delay_s": fleet.scale_up_delay_s, "downscale_delay_s": fleet.scale_down_delay_s,
            "look_back_period_s": fleet.scale_look_back_s,
        }
    return options


@dataclass
class Fleet:
    """A running fleet application (stop() takes it down; Ray itself too when this process started it)."""

    app_name: str
    host: str
    port: int
    route_prefix: str
    board: object
    started_ray: bool
    stats_push_s: float = 1.0
    app: object = None  # the bound Serve application (restart() deploys it again)

    @property
    def uri(self) -> str:
        prefix = "" if self.route_prefix == "/" else self.route_prefix
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}{prefix}"

    def restart(self, wait: bool = False) -> None:
        """A rolling restart: deploy the same application again (Serve gives each deploy from Python a new code
        version, so it replaces every replica). New replicas start while the old ones drain: the router stops
        sending them robots, and each stops once its robots have left, or at the drain timeout (its robots then get
        1012). `wait`: return only when every old replica has stopped (up to the drain timeout)."""
        from ray import serve
        from ray.serve.api import RunTarget

        serve.run_many([RunTarget(self.app, name=self.app_name, route_prefix=self.route_prefix)],
                       wait_for_applications_running=wait)

    def stop(self) -> None:
        """Close every robot's session (1001; replicas see the board's flag at their next stats push), then delete
        the application (Serve's drain then finds no robot to wait for)."""
        import time

        import ray
        from ray import serve

        try:
            ray.get(self.board.stop.remote(), timeout=30)
            time.sleep(2 * self.stats_push_s + 1)
        except Exception:  # noqa: BLE001 - no board: the drain timeout applies
            pass
        try:
            serve.delete(self.app_name)
        finally:
            try:
                ray.kill(self.board, no_restart=True)
            except Exception:  # noqa: BLE001 - gone already
                pass
            if self.started_ray:
                serve.shutdown()
                ray.shutdown()


def start_fleet(policy_factory: Callable[[], object], config: ServeConfig, fleet: FleetOptions, *,
                address: str | None = None, app_name: str = "oxygen-gym", route_prefix: str = "/") -> Fleet:
    """Deploy the fleet and wait until every replica is up. `address`: None or "local" starts a local Ray when none
    is running in this process; "auto" or "ray://host:10001" joins a cluster (every node needs oxygen-gym installed).
    `config.host`/`config.port` are where Serve's HTTP proxy listens (one proxy per node)."""
    import ray
    from ray import serve

    config.check()
    fleet.check(config.max_robots)
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address=None if address in (None, "local") else address, include_dashboard=False,
                 runtime_env={"env_vars": ray_env_vars()})
    cluster = ray.get_runtime_context().gcs_address
    if _serve_running() and cluster not in _SERVE_STARTED_HERE:
        log.warning("Ray Serve was already running in this cluster: its HTTP proxies keep the settings they started "
                    "with, so unless they were started with %s=%s, a robot whose replica dies sees its socket dropped "
                    "(1006) instead of 1012 with what it lost", CALLBACK_ENV, CALLBACK)
    # the proxies are the Serve controller's actors and take its environment
    serve.start(http_options={"host": config.host, "port": config.port},
                controller_options={"runtime_env": {"env_vars": serve_env_vars()}})
    _SERVE_STARTED_HERE.add(cluster)
    board_name = f"fleet-board-{app_name}-{secrets.token_hex(3)}"
    board = ray.remote(num_cpus=0)(FleetBoard).options(name=board_name, namespace=BOARD_NAMESPACE).remote()
    deployment = serve.deployment(**deployment_options(config, fleet))(serve.ingress()(FleetReplica))
    app = deployment.bind(policy_factory, config, board_name, fleet.stats_push_s, fleet.threads)
    try:
        serve.run(app, name=app_name, route_prefix=route_prefix, blocking=False)
    except BaseException:
        ray.kill(board, no_restart=True)
        if started_ray:
            serve.shutdown()
            ray.shutdown()
        raise
    return Fleet(app_name, config.host, config.port, route_prefix, board, started_ray, fleet.stats_push_s, app)


_SERVE_STARTED_HERE: set[str] = set()  # clusters whose Serve this process started (with the proxy middleware)


def _serve_running() -> bool:
    """Whether a Serve controller already runs in this Ray cluster (its proxies then ignore our options)."""
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    try:
        ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        return True
    except ValueError:
        return False
