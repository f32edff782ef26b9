"""Skip the geoms a camera cannot see before MuJoCo draws them: the same image, byte for byte, for less work.

Why: on a machine without a GPU MuJoCo renders through Mesa's llvmpipe, and a LIBERO image costs in proportion to the
triangles it processes, not to its pixels (tools/render_profile.py: 96 px costs ~85% of 256 px). A LIBERO scene draws
~290k mesh triangles (bowls 43k each, the robot's mount 33k, each arm link 12-15k), and `mjr_render` draws every one
twice when a reflective box or plane is in the scene (the stove's base in libero_spatial): once mirrored under a
stencil, once normally. MuJoCo does no frustum culling. A geom whose bounding sphere lies outside the camera's view
frustum, and whose mirror image in the reflecting plane does too, produces no fragment in either pass, so leaving it
out of the scene changes no pixel; the wrist camera sees a small part of the scene.

What is never left out: anything that is not a model geom (decorations), a geom without a bounding radius (planes),
and every plane or box with reflectance (MuJoCo reflects in the first of them only, so dropping one would move the
mirror). The frustum is padded (`PAD`), so the test errs towards drawing. `tests/envs/test_render_cull.py` compares
every image with culling against MuJoCo's own render.

It works by hiding the culled geoms' group for one `mjv_updateScene` (the model's `geom_group`, restored right after),
so MuJoCo builds the scene it always does, less those geoms, in the same order.

The mirrored pass itself is skipped when no mirror (a plane or box with reflectance) is in view (the wrist camera,
most of an episode): MuJoCo draws it through a stencil made of the mirror's own pixels (a box's sides included), so
with the mirror off screen it draws every triangle of the scene a second time for no pixel. The reflection flag is
turned off for that one image.
"""
from __future__ import annotations

import mujoco
import numpy as np

PAD = 1.05  # frustum half-angles widened by 5% (and a near plane moved towards the camera): cull only the certain
_REFLECTIVE_TYPES = (int(mujoco.mjtGeom.mjGEOM_PLANE), int(mujoco.mjtGeom.mjGEOM_BOX))


def _hidden_group(vopt) -> int | None:
    """A geom group the scene option does not draw (robosuite hides 0 and 3-5), or None if every group is drawn."""
    for g in range(len(vopt.geomgroup) - 1, -1, -1):
        if not vopt.geomgroup[g]:
            return g
    return None


def _reflector(scn, ngeom: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """The plane MuJoCo's reflection pass mirrors in (mjr_render: the first non-transparent plane or box with
    reflectance, a box by its +z face), as (point, unit normal, the box's 8 corners or None for a plane); None if
    there is none or the camera is behind it."""
    cam = scn.camera[0]
    head = np.asarray(cam.pos, dtype=np.float64)
    for i in range(ngeom):
        g = scn.geoms[i]
        if int(g.type) not in _REFLECTIVE_TYPES or g.reflectance <= 0:
            continue
        mat = np.asarray(g.mat, dtype=np.float64).reshape(3, 3)
        normal = mat[:, 2]
        pos = np.asarray(g.pos, dtype=np.float64)
        behind = float(np.dot(head - pos, normal)) < 0.0
        transparent = g.rgba[3] < 0.995 or (int(g.type) == _REFLECTIVE_TYPES[0] and behind)
        if transparent:
            continue
        corners = None
        if int(g.type) == _REFLECTIVE_TYPES[1]:
            # the stencil the mirrored pass draws through is the whole box as drawn, its sides too, not only the
            # mirroring face: bound it by all 8 corners
            sx, sy, sz = (float(x) for x in g.size[:3])
            corners = np.array([pos + a * sx * mat[:, 0] + b * sy * mat[:, 1] + c * sz * mat[:, 2]
                                for a in (-1.0, 1.0) for b in (-1.0, 1.0) for c in (-1.0, 1.0)])
            pos = pos + sz * normal
            behind = float(np.dot(head - pos, normal)) < 0.0
        return None if behind else (pos, normal, corners)
    return None


def _frame(cam, aspect: float) -> tuple[np.ndarray, np.ndarray, tuple[float, float, float, float]]:
    """The camera's position, its axes (right, up, forward) as rows, and its frustum's slopes (left, right, bottom,
    top: x/z and y/z at the edges, MuJoCo's projection in mjr_render's setView: the width from the viewport)."""
    pos = np.asarray(cam.pos, dtype=np.float64)
    forward = np.asarray(cam.forward, dtype=np.float64)
    up = np.asarray(cam.up, dtype=np.float64)
    axes = np.stack([np.cross(forward, up), up, forward])
    near = float(cam.frustum_near)
    top, bottom, centre = float(cam.frustum_top), float(cam.frustum_bottom), float(cam.frustum_center)
    half_w = 0.5 * (top - bottom) * aspect
    return pos, axes, ((centre - half_w) / near, (centre + half_w) / near, bottom / near, top / near)


def _outside(centres: np.ndarray, radii: np.ndarray, cam, aspect: float,
             window: tuple[float, float, float, float] | None = None) -> np.ndarray:
    """Which spheres lie wholly outside the camera's view frustum (padded), or outside the part of it that
    `window` (slopes left, right, bottom, top, as `_frame` gives) bounds."""
    pos, axes, slopes = _frame(cam, aspect)
    if window is not None:
        slopes = (max(slopes[0], window[0]), min(slopes[1], window[1]), max(slopes[2], window[2]),
                  min(slopes[3], window[3]))
    left, right, bottom, top = slopes
    pad_x, pad_y = (PAD - 1.0) * (right - left) / 2 + 1e-3, (PAD - 1.0) * (top - bottom) / 2 + 1e-3
    v = (centres - pos) @ axes.T
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    near, far = float(cam.frustum_near), float(cam.frustum_far)
    out = (z < near / PAD - radii) | (z > far * PAD + radii)
    # each side plane passes through the eye; inside is coord <= slope * z (right, top) or >= (left, bottom)
    for slope, coord in ((right + pad_x, x), (-(left - pad_x), -x), (top + pad_y, y), (-(bottom - pad_y), -y)):
        out |= (coord - slope * z) / np.sqrt(1.0 + slope * slope) > radii
    return out


def _window(corners: np.ndarray, cam, aspect: float) -> tuple[float, float, float, float] | None:
    """The slopes bounding the reflecting box on screen (the stencil the mirrored pass draws through), or None
    when a corner is not in front of the near plane (then the whole frustum counts)."""
    pos, axes, _ = _frame(cam, aspect)
    v = (corners - pos) @ axes.T
    if np.any(v[:, 2] <= float(cam.frustum_near)):
        return None
    sx, sy = v[:, 0] / v[:, 2], v[:, 1] / v[:, 2]
    return float(sx.min()), float(sx.max()), float(sy.min()), float(sy.max())


def culled_geoms(model, data, vopt, pert, cam, scn, width: int, height: int) -> np.ndarray:
    """Model geom ids that contribute no pixel to this camera's image (see the module docstring). Runs
    `mjv_updateScene` once to read the camera and the scene MuJoCo would draw."""
    return render_plan(model, data, vopt, pert, cam, scn, width, height)[0]


def reflection_unseen(model, scn, width: int, height: int) -> bool:
    """Whether the scene has mirrors (planes and boxes with reflectance: the geoms `mjr_render` reflects in; on
    other geoms reflectance draws nothing) and none of them can give a pixel of this camera's image (each a model
    geom whose bounding sphere lies outside the padded frustum): then the reflection flag changes no pixel. Reads
    the scene `mjv_updateScene` last built."""
    geom_obj = int(mujoco.mjtObj.mjOBJ_GEOM)
    centres, radii = [], []
    for i in range(scn.ngeom):
        g = scn.geoms[i]
        if g.reflectance <= 0 or int(g.type) not in _REFLECTIVE_TYPES:
            continue
        if int(g.objtype) != geom_obj or g.objid < 0 or model.geom_rbound[g.objid] <= 0:
            return False  # a decoration or a plane (no bounding sphere): assume it is seen
        centres.append(np.asarray(g.pos, dtype=np.float64))
        radii.append(float(model.geom_rbound[g.objid]))
    if not centres:
        return False
    return bool(np.all(_outside(np.asarray(centres), np.asarray(radii), scn.camera[0], width / height)))


def render_plan(model, data, vopt, pert, cam, scn, width: int, height: int,
                allow_skip: bool = True) -> tuple[np.ndarray, bool]:
    """What this camera's image can leave out: the model geom ids that contribute no pixel, and whether the
    mirrored pass can be skipped (`reflection_unseen`; the geoms are then culled by their direct image alone). Runs
    `mjv_updateScene` once."""
    mujoco.mjv_updateScene(model, data, vopt, pert, cam, mujoco.mjtCatBit.mjCAT_ALL, scn)
    n = scn.ngeom
    if n == 0:
        return np.zeros(0, dtype=np.int64), False
    mirrored_pass = bool(scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION])
    skip_mirror = allow_skip and mirrored_pass and reflection_unseen(model, scn, width, height)
    geom_obj = int(mujoco.mjtObj.mjOBJ_GEOM)
    ids, centres, keep = [], [], []
    for i in range(n):
        g = scn.geoms[i]
        if int(g.objtype) != geom_obj or g.objid < 0:
            continue
        gid = int(g.objid)
        must = (model.geom_rbound[gid] <= 0 or (int(g.type) in _REFLECTIVE_TYPES and g.reflectance > 0))
        ids.append(gid)
        centres.append(np.asarray(g.pos, dtype=np.float64))
        keep.append(must)
    if not ids:
        return np.zeros(0, dtype=np.int64), skip_mirror
    ids_a = np.asarray(ids, dtype=np.int64)
    centres_a = np.asarray(centres)
    radii = np.asarray(model.geom_rbound[ids_a], dtype=np.float64)
    camera = scn.camera[0]
    hide = _outside(centres_a, radii, camera, width / height) & ~np.asarray(keep)
    if mirrored_pass and not skip_mirror:
        plane = _reflector(scn, n)
        if plane is not None:
            point, normal, corners = plane
            mirrored = centres_a - 2.0 * ((centres_a - point) @ normal)[:, None] * normal[None, :]
            window = _window(corners, camera, width / height) if corners is not None else None
            hide &= _outside(mirrored, radii, camera, width / height, window)
    return ids_a[hide], skip_mirror


class CullingRender:
    """Wraps a robosuite 1.4 `MjRenderContext.render` so each image leaves out the geoms `culled_geoms` finds.

    `install(ctx)` replaces the context's `render` on that instance only; `enabled` turns culling off without
    uninstalling (then the render is robosuite's own, untouched)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.original = ctx.render
        self.enabled = True
        self.group = _hidden_group(ctx.vopt)
        self.skip_mirror = True  # False: always draw the mirrored pass (the culling before it was skipped; profiling)
        self.mirror_skips = 0  # images drawn without the mirrored pass (no reflecting surface in view)

    @classmethod
    def install(cls, ctx) -> CullingRender:
        current = ctx.__dict__.get("render")
        if isinstance(getattr(current, "__self__", None), CullingRender):
            return current.__self__
        culling = cls(ctx)
        ctx.render = culling.render
        return culling

    def render(self, width, height, camera_id=None, segmentation=False):
        ctx = self.ctx
        if not self.enabled or segmentation or self.group is None or camera_id is None:
            return self.original(width, height, camera_id=camera_id, segmentation=segmentation)
        model = ctx.model._model
        if width > ctx.con.offWidth or height > ctx.con.offHeight:  # robosuite grows the buffer first; let it
            return self.original(width, height, camera_id=camera_id, segmentation=segmentation)
        ctx.cam.type = mujoco.mjtCamera.mjCAMERA_FREE if camera_id == -1 else mujoco.mjtCamera.mjCAMERA_FIXED
        ctx.cam.fixedcamid = camera_id
        hide, skip_mirror = render_plan(model, ctx.data._data, ctx.vopt, ctx.pert, ctx.cam, ctx.scn, width, height,
                                        self.skip_mirror)
        self.mirror_skips += skip_mirror
        if hide.size == 0 and not skip_mirror:
            return self.original(width, height, camera_id=camera_id, segmentation=segmentation)
        saved = model.geom_group[hide].copy()
        model.geom_group[hide] = self.group
        if skip_mirror:
            ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        try:
            return self.original(width, height, camera_id=camera_id, segmentation=segmentation)
        finally:
            model.geom_group[hide] = saved
            if skip_mirror:
                ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 1
