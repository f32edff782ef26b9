"""Where one LIBERO camera image's time goes on this machine, and what each render setting costs and changes. Not in CI.

`baseline` is LiberoEnv's default render (geoms no camera sees culled, and the mirrored pass skipped when no mirror
is in view, envs/render_cull.py); `no-cull` is robosuite's own; `no-mirror-skip` culls geoms but always draws the
mirrored pass. The others change one setting each on top of the baseline (those joined with + several).

    python tools/render_profile.py                          # libero_spatial task 0, both cameras, every variant
    python tools/render_profile.py --task 4 --rounds 5 --variants baseline,no-reflection
    python tools/render_profile.py --lp-threads 0,1,2       # the same in one child process per LP_NUM_THREADS value

The env is built, reset to init state 0 and stepped 5 seeded random actions; then every variant renders both cameras
of that one state `--repeats` times per round, rounds interleaved (so all variants see the same machine load). Per
image it reports wall ms and CPU ms (this process's CPU time, which counts Mesa llvmpipe's worker threads: steadier
than wall time on a shared machine), whether the bytes equal the baseline's, and the mean absolute pixel difference
after the resize the shipped policy applies (`resize_with_pad` to 96 px, uint8, as openpi's client). A first section
splits one robosuite render into its calls (GL context switch, `mjv_updateScene`, `mjr_render`, `mjr_readPixels`,
robosuite's flip and ours) and one env step into physics, the non-camera observables and the cameras.

llvmpipe defers drawing until something reads the framebuffer, so `mjr_render` times the draw calls' set-up and
`mjr_readPixels` the rasterisation (and the multisample resolve); only their sum is the image's cost.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

CAMERAS = ("agentview", "robot0_eye_in_hand")
VARIANTS = ("baseline", "no-cull", "no-mirror-skip", "buffer-256", "no-skybox", "no-haze", "no-shadow-flag", "no-reflection", "no-msaa",
            "px-128",
            "px-96", "no-msaa+no-reflection", "no-msaa+px-96", "no-msaa+no-reflection+px-96")


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class Renderer:
    """Renders one camera of a robosuite sim the way robosuite does (`MjSim.render`), with settings switched per
    variant: render flags on the scene, the offscreen buffer's size and multisampling (those rebuild MuJoCo's
    context), culling on or off."""

    def __init__(self, sim) -> None:
        import mujoco

        self.mujoco, self.sim = mujoco, sim
        self.ctx = sim._render_context_offscreen
        self.model = sim.model._model
        self.default = (self.model.vis.global_.offwidth, self.model.vis.global_.offheight,
                        self.model.vis.quality.offsamples)
        self.current = self.default
        self.flags0 = [int(x) for x in self.ctx.scn.flags]
        self.culling = getattr(self.ctx.__dict__.get("render"), "__self__", None)  # envs/render_cull.py, if on

    def configure(self, variant: str, size: int) -> int:
        """Apply `variant`; returns the render size it uses."""
        F = self.mujoco.mjtRndFlag
        parts = set(variant.split("+"))
        off = {"no-skybox": F.mjRND_SKYBOX, "no-haze": F.mjRND_HAZE, "no-shadow-flag": F.mjRND_SHADOW,
               "no-reflection": F.mjRND_REFLECTION}
        if self.culling is not None:
            self.culling.enabled = "no-cull" not in parts
            self.culling.skip_mirror = "no-mirror-skip" not in parts
        for i, v in enumerate(self.flags0):
            self.ctx.scn.flags[i] = v
        for p in parts & set(off):
            self.ctx.scn.flags[off[p]] = 0
        w, h, samples = self.default
        if "buffer-256" in parts:
            w, h = size, size
        if "no-msaa" in parts:
            samples = 0
        if (w, h, samples) != self.current:
            self.model.vis.global_.offwidth, self.model.vis.global_.offheight = w, h
            self.model.vis.quality.offsamples = samples
            self.ctx.gl_ctx.make_current()
            self.ctx.con.free()
            self.ctx._set_mujoco_context_and_buffers()
            self.current = (w, h, samples)
        return 128 if "px-128" in parts else 96 if "px-96" in parts else size

    def image(self, camera: str, size: int):
        """One image as LiberoEnv returns it (robosuite's render, its vertical flip, our 180-degree rotation)."""
        import numpy as np

        raw = self.sim.render(camera_name=camera, width=size, height=size)
        return np.ascontiguousarray(raw[::-1][::-1, ::-1])

    def parts(self, camera: str, size: int) -> dict[str, float]:
        """Wall ms of each call robosuite's `MjSim.render` makes for one image, plus the two flips."""
        import numpy as np

        mj, ctx = self.mujoco, self.ctx
        t = [time.perf_counter()]
        ctx.gl_ctx.make_current()
        t.append(time.perf_counter())
        ctx.cam.type, ctx.cam.fixedcamid = mj.mjtCamera.mjCAMERA_FIXED, self.sim.model.camera_name2id(camera)
        mj.mjv_updateScene(self.model, self.sim.data._data, ctx.vopt, ctx.pert, ctx.cam, mj.mjtCatBit.mjCAT_ALL,
                           ctx.scn)
        t.append(time.perf_counter())
        viewport = mj.MjrRect(0, 0, size, size)
        mj.mjr_render(viewport, ctx.scn, ctx.con)
        t.append(time.perf_counter())
        rgb = np.empty((size, size, 3), np.uint8)
        mj.mjr_readPixels(rgb, None, viewport, ctx.con)
        t.append(time.perf_counter())
        np.ascontiguousarray(rgb[::-1][::-1, ::-1])
        t.append(time.perf_counter())
        names = ("make_current", "mjv_updateScene", "mjr_render", "mjr_readPixels", "flips")
        return {n: (b - a) * 1e3 for n, a, b in zip(names, t, t[1:])}


def _step_split(env, steps: int) -> dict[str, float]:
    """Median ms of one env step with the cameras rendered and without, and of the non-camera observables."""
    import numpy as np

    inner = env.libero_env.env
    obs_s: list[float] = []
    original = inner._update_observables

    def timed(force=False):
        gate = env.camera_gate
        t0, r0 = time.perf_counter(), gate.render_s
        original(force)
        obs_s.append(time.perf_counter() - t0 - (gate.render_s - r0))

    inner._update_observables = timed
    rng = np.random.default_rng(1)
    out: dict[str, list[float]] = {"step, cameras rendered": [], "step, cameras closed": []}
    per_step_obs: list[float] = []
    for i in range(2 * steps):
        rendered = i % 2 == 0
        if rendered:
            env.request_render()
        n0 = len(obs_s)
        t0 = time.perf_counter()
        env.step(rng.uniform(-0.2, 0.2, 7).astype(np.float32))
        out["step, cameras rendered" if rendered else "step, cameras closed"].append((time.perf_counter() - t0) * 1e3)
        per_step_obs.append(sum(obs_s[n0:]) * 1e3)
    inner._update_observables = original
    res = {k: statistics.median(v) for k, v in out.items()}
    res["non-camera observables per step"] = statistics.median(per_step_obs)
    return res


def profile(args) -> dict:
    import numpy as np

    from oxygen_gym.envs.libero import LiberoEnv
    from oxygen_gym.model.pi05.prompt import resize_with_pad

    env = LiberoEnv(args.suite, args.task, protocol="openpi", camera_size=args.camera_size, render_on_request=True)
    obs, _ = env.reset(seed=env.protocol.seed, options={"init_state": 0})
    size = env.camera_size[0]
    if args.expert_steps is None:
        rng = np.random.default_rng(0)
        for _ in range(5):
            env.step(rng.uniform(-0.2, 0.2, 7).astype(np.float32))
    else:  # a state on the way to success: the state expert's collection settings (Makefile SUITE_COLLECT)
        from oxygen_gym.envs.state_expert import StatePickPlaceExpert

        expert = StatePickPlaceExpert(env.libero_env.env, 0.025, 0.5, None)
        for _ in range(args.expert_steps):
            obs = env.step(expert(obs["state"]))[0]
    sim = env.libero_env.sim
    r = Renderer(sim)
    model = r.model
    scene = {"ngeom_model": int(model.ngeom), "ngeom_drawn": None, "nlight": int(model.nlight),
             "lights_casting_shadows": int(sum(int(model.light_castshadow[i]) for i in range(model.nlight))),
             "reflective_geoms": None, "offscreen_buffer": list(r.default[:2]), "offsamples": int(r.default[2]),
             "LP_NUM_THREADS": os.environ.get("LP_NUM_THREADS"), "load_before": [round(x, 2) for x in os.getloadavg()]}
    parts = {c: [] for c in CAMERAS}
    for _ in range(args.repeats * 2):
        for c in CAMERAS:
            parts[c].append(r.parts(c, size))
    scene["ngeom_drawn"] = int(r.ctx.scn.ngeom)
    scene["reflective_geoms"] = int(sum(r.ctx.scn.geoms[i].reflectance > 0 for i in range(r.ctx.scn.ngeom)))
    breakdown = {c: {k: statistics.median(p[k] for p in parts[c]) for k in parts[c][0]} for c in CAMERAS}

    variants = [v.strip() for v in args.variants.split(",")] if args.variants else list(VARIANTS)
    ref = {c: r.image(c, size) for c in CAMERAS}
    ref96 = {c: resize_with_pad(ref[c], 96, 96) for c in CAMERAS}
    times: dict[str, dict[str, list]] = {v: {"wall": [], "cpu": [], **{c: [] for c in CAMERAS}} for v in variants}
    images: dict[str, dict] = {}
    for _ in range(args.rounds):
        for v in variants:
            px = r.configure(v, size)
            for _ in range(args.repeats):
                for c in CAMERAS:
                    (w0, c0) = _clock()
                    img = r.image(c, px)
                    (w1, c1) = _clock()
                    times[v]["wall"].append((w1 - w0) * 1e3)
                    times[v]["cpu"].append((c1 - c0) * 1e3)
                    times[v][c].append((c1 - c0) * 1e3)
                    images.setdefault(v, {})[c] = img
    r.configure("baseline", size)
    rows = {}
    for v in variants:
        row = {"wall_ms": statistics.median(times[v]["wall"]), "cpu_ms": statistics.median(times[v]["cpu"]),
               "min_wall_ms": min(times[v]["wall"])}
        for c in CAMERAS:
            img = images[v][c]
            row[f"{c}_same_bytes"] = bool(img.shape == ref[c].shape and np.array_equal(img, ref[c]))
            row[f"{c}_diff96"] = float(np.abs(resize_with_pad(img, 96, 96).astype(np.int16)
                                              - ref96[c].astype(np.int16)).mean())
            row[f"{c}_sha"] = hashlib.sha1(img.tobytes()).hexdigest()[:12]
            row[f"{c}_cpu_ms"] = statistics.median(times[v][c])
        rows[v] = row
    steps = _step_split(env, args.steps)
    scene["load_after"] = [round(x, 2) for x in os.getloadavg()]
    env.close()
    return {"scene": scene, "render_breakdown_ms": breakdown, "step_ms": steps, "variants": rows,
            "size": size, "task": args.task, "suite": args.suite}


def _print(res: dict) -> None:
    print(json.dumps(res["scene"]))
    for c, b in res["render_breakdown_ms"].items():
        print(f"{c}: " + ", ".join(f"{k} {v:.2f}" for k, v in b.items()) + " ms")
    print("step: " + ", ".join(f"{k} {v:.1f} ms" for k, v in res["step_ms"].items()))
    print("| variant | wall ms/image (p50) | min | CPU ms/image (p50) | CPU ms (base, wrist) | "
          "same bytes (base, wrist) | mean abs diff at 96 px (base, wrist) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for v, row in res["variants"].items():
        same = ", ".join("yes" if row[f"{c}_same_bytes"] else "no" for c in CAMERAS)
        diff = ", ".join(f"{row[f'{c}_diff96']:.2f}" for c in CAMERAS)
        per = ", ".join(f"{row[f'{c}_cpu_ms']:.0f}" for c in CAMERAS)
        print(f"| {v} | {row['wall_ms']:.0f} | {row['min_wall_ms']:.0f} | {row['cpu_ms']:.0f} | {per} | {same} "
              f"| {diff} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="libero_spatial")
    p.add_argument("--task", type=int, default=0)
    p.add_argument("--camera-size", type=int, default=None, help="render size (default: the openpi protocol's)")
    p.add_argument("--variants", default=None, help=f"comma separated (default all: {','.join(VARIANTS)})")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the variants (default 3)")
    p.add_argument("--repeats", type=int, default=2, help="images per camera per variant per round (default 2)")
    p.add_argument("--expert-steps", type=int, default=None, metavar="N",
                   help="profile the state the state expert reaches after N steps (default: 5 small random steps)")
    p.add_argument("--steps", type=int, default=6, help="env steps timed each way in the step split (default 6)")
    p.add_argument("--lp-threads", default=None,
                   help="comma separated LP_NUM_THREADS values: one child process each, variants as given")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    args = p.parse_args(argv)
    for name in ("rounds", "repeats", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.variants:
        bad = [v for v in args.variants.split(",") if not set(v.strip().split("+")) <= set(
            x for y in VARIANTS for x in y.split("+"))]
        if bad:
            p.error(f"--variants: unknown {bad}; expected names from {', '.join(VARIANTS)} (joined with +)")
    if args.lp_threads:
        given = list(argv if argv is not None else sys.argv[1:])
        child = []
        for i, a in enumerate(given):
            if a.startswith("--lp-threads") or (i > 0 and given[i - 1] == "--lp-threads"):
                continue
            child.append(a)
        for n in args.lp_threads.split(","):
            env = {**os.environ, "LP_NUM_THREADS": n.strip()}
            print(f"## LP_NUM_THREADS={n.strip()}", flush=True)
            subprocess.run([sys.executable, __file__, *child], env=env, check=True)
        return 0
    res = profile(args)
    if args.json:
        print(json.dumps(res), flush=True)
    else:
        _print(res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
