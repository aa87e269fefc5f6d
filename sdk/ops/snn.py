"""Spiking ops (domain ``snn``), following the primitives of NIR.

Every tensor is time-major, ``[T, B, *F]``: ``T`` time steps, ``B`` batch
items, ``F`` the per-item (NIR) shape. Parameters are per-neuron inputs that
broadcast to ``F``. Nothing is implied: ``dt`` (seconds), the integration
``method`` and the ``reset`` rule are attributes every node states.

**Input.** The input ``X[t]`` of a neuron is a current held constant over step
``t`` (a spike of weight ``w`` through a Linear therefore moves an LIF by
``dt * r * w / tau`` under ``euler``).

**One time step**, for ``t = 0 .. T-1``, with all state starting at 0:

1. integrate: ``euler`` is one forward-Euler step of the ODE, ``exact`` its
   closed-form solution over ``dt`` with ``X[t]`` held;
2. threshold: ``Z[t] = V > v_threshold`` (strictly greater, as NIR);
3. reset where ``Z[t]``: ``reset="v_reset"`` sets ``V = v_reset`` (NIR),
   ``reset="subtract"`` sets ``V = V - v_threshold``;
4. the node's outputs at ``t`` are ``Z[t]`` and the state after the reset.

Nodes downstream see ``Z[t]`` in the same step ``t``: a feed-forward chain has
no implied delay (``snn.Delay`` adds one explicitly). This is the order
brian2's schedule runs when each layer's state update, thresholder, reset and
outgoing synapses are ordered before the next layer's (what the ``neuro``
adapter does).

Linear ops (``Linear``, ``Affine``, ``Scale``, ``Conv1d``, ``Conv2d``,
``SumPool2d``, ``Flatten``) apply to every time step independently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polyhal.errors import ExecutionError, VerificationError
from polyhal.ir import dims as D
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext
from polyhal.ops.registry import (
    REQUIRED,
    Attr,
    AttrKind,
    Input,
    OpDef,
    Output,
    get_op,
    register,
)

FLOATS = frozenset({DType.FLOAT32, DType.FLOAT64})
METHODS = ("euler", "exact")
RESETS = ("v_reset", "subtract")

_DT = Attr("dt", AttrKind.FLOAT, REQUIRED, "Time step in seconds (> 0).")
_METHOD = Attr("method", AttrKind.STRING, REQUIRED,
               "Integration: 'euler' (forward Euler) or 'exact' (closed form over dt).")
_RESET = Attr("reset", AttrKind.STRING, REQUIRED,
              "After a spike: 'v_reset' (V = v_reset, NIR) or 'subtract' (V -= v_threshold).")

Kernel = Callable[..., Any]


# --------------------------------------------------------------------------- inference


def _sequence(ctx: InferContext) -> TensorType:
    x = ctx.input(0)
    if x.rank < 2:
        raise ctx.error(f"input {ctx.op.inputs[0].name} must be time-major [T, B, ...], "
                        f"got {x}")
    return x


def _check_dt(ctx: InferContext) -> None:
    dt = ctx.attrs["dt"]
    if not (isinstance(dt, int | float) and dt > 0 and math.isfinite(dt)):
        raise ctx.error(f"attribute dt={dt!r} must be a finite number > 0")


def _check_params(ctx: InferContext, features: tuple[D.Dim, ...], first: int,
                  positive: Sequence[str] = ()) -> None:
    """Inputs ``first..`` must broadcast to ``features``; ``positive`` ones must be > 0."""
    x = ctx.input(0)
    for index in range(first, len(ctx.inputs)):
        if not ctx.has_input(index):
            continue
        t, name = ctx.input(index), ctx.op.input_spec(index).name
        if t.dtype != x.dtype:
            raise ctx.error(f"input {index} ({name}) is {t.dtype.value}, expected "
                            f"{x.dtype.value} like {ctx.op.inputs[0].name}")
        tail = features[len(features) - t.rank:] if t.rank else ()
        if t.rank > len(features) or any(
                isinstance(p, int) and isinstance(q, int) and p not in (1, q)
                for p, q in zip(t.shape, tail, strict=True)):
            raise ctx.error(f"input {index} ({name}) {t} does not broadcast to the neuron "
                            f"shape {list(features)} of {x}")
        value = ctx.const(index)
        if name in positive and value is not None and not np.all(value > 0):
            raise ctx.error(f"input {index} ({name}) must be > 0 everywhere, got min "
                            f"{np.min(value)}")


def _neuron_infer(positive: Sequence[str], spiking: bool) -> Callable[[InferContext], Any]:
    def infer(ctx: InferContext) -> list[TensorType]:
        x = _sequence(ctx)
        _check_dt(ctx)
        if ctx.attrs["method"] not in METHODS:
            raise ctx.error(f"attribute method={ctx.attrs['method']!r} must be one of "
                            f"{', '.join(METHODS)}")
        if spiking and ctx.attrs["reset"] not in RESETS:
            raise ctx.error(f"attribute reset={ctx.attrs['reset']!r} must be one of "
                            f"{', '.join(RESETS)}")
        _check_params(ctx, x.shape[2:], 1, positive)
        return [x] * max(ctx.num_outputs, 1)

    return infer


# --------------------------------------------------------------------------- dynamics


def _positive(**params: np.ndarray) -> None:
    """Time constants given at run time must be > 0 (constants are checked by inference)."""
    for name, value in params.items():
        if not np.all(value > 0):
            raise ExecutionError(f"input {name} must be > 0 everywhere, got min "
                                 f"{np.min(value) if np.size(value) else 'none'}")


def _leak(v: np.ndarray, drive: np.ndarray, tau: np.ndarray, dt: float, method: str
          ) -> np.ndarray:
    """One step of ``tau dv/dt = drive - v`` (``drive`` held over the step)."""
    if method == "euler":
        return v + dt / tau * (drive - v)
    return drive + (v - drive) * np.exp(-dt / tau)


def _spike(v: np.ndarray, v_threshold: np.ndarray, v_reset: np.ndarray | None, reset: str
           ) -> tuple[np.ndarray, np.ndarray]:
    z = v > v_threshold
    v = np.where(z, v_reset if reset == "v_reset" else v - v_threshold, v)
    return z.astype(v.dtype), v


def _lif(x: np.ndarray, tau: np.ndarray, r: np.ndarray, v_leak: np.ndarray,
         v_threshold: np.ndarray, v_reset: np.ndarray | None = None, *, dt: float, method: str,
         reset: str) -> tuple[np.ndarray, np.ndarray]:
    _positive(tau=tau)
    v_reset = np.zeros_like(v_threshold) if v_reset is None else v_reset
    spikes, trace = np.empty_like(x), np.empty_like(x)
    v = np.zeros(x.shape[1:], x.dtype)
    for t in range(x.shape[0]):
        v = _leak(v, v_leak + r * x[t], tau, dt, method)
        spikes[t], v = _spike(v, v_threshold, v_reset, reset)
        trace[t] = v
    return spikes, trace


def _cuba_step(v: np.ndarray, i: np.ndarray, x: np.ndarray, tau_syn: np.ndarray,
               tau_mem: np.ndarray, r: np.ndarray, v_leak: np.ndarray, w_in: np.ndarray,
               dt: float, method: str) -> tuple[np.ndarray, np.ndarray]:
    """One step of ``tau_syn I' = w_in X - I``, ``tau_mem v' = v_leak - v + r I``."""
    target = w_in * x
    if method == "euler":  # both from the old state, as one Euler step of the system
        return v + dt / tau_mem * (v_leak - v + r * i), i + dt / tau_syn * (target - i)
    i_new = _leak(i, target, tau_syn, dt, "exact")
    # u = v - v_leak - r*target obeys u' = -u/tau_mem + r (i - target) e^{-s/tau_syn} / tau_mem.
    u0, gap = v - v_leak - r * target, i - target
    e_mem, e_syn = np.exp(-dt / tau_mem), np.exp(-dt / tau_syn)
    same = np.isclose(tau_syn, tau_mem, rtol=1e-12, atol=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(same, 0, r * gap * tau_syn / (tau_syn - tau_mem))
        u = np.where(same, (u0 + r * gap * dt / tau_mem) * e_mem, (u0 - c) * e_mem + c * e_syn)
    return (v_leak + r * target + u).astype(x.dtype), i_new


def _cuba_lif(x: np.ndarray, tau_syn: np.ndarray, tau_mem: np.ndarray, r: np.ndarray,
              v_leak: np.ndarray, v_threshold: np.ndarray, v_reset: np.ndarray | None = None,
              w_in: np.ndarray | None = None, *, dt: float, method: str, reset: str
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _positive(tau_syn=tau_syn, tau_mem=tau_mem)
    v_reset = np.zeros_like(v_threshold) if v_reset is None else v_reset
    w_in = np.ones_like(v_threshold) if w_in is None else w_in
    spikes, trace, current = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    v = np.zeros(x.shape[1:], x.dtype)
    i = np.zeros(x.shape[1:], x.dtype)
    for t in range(x.shape[0]):
        v, i = _cuba_step(v, i, x[t], tau_syn, tau_mem, r, v_leak, w_in, dt, method)
        spikes[t], v = _spike(v, v_threshold, v_reset, reset)
        trace[t], current[t] = v, i
    return spikes, trace, current


def _if(x: np.ndarray, r: np.ndarray, v_threshold: np.ndarray,
        v_reset: np.ndarray | None = None, *, dt: float, method: str, reset: str
        ) -> tuple[np.ndarray, np.ndarray]:
    v_reset = np.zeros_like(v_threshold) if v_reset is None else v_reset
    spikes, trace = np.empty_like(x), np.empty_like(x)
    v = np.zeros(x.shape[1:], x.dtype)
    for t in range(x.shape[0]):
        v = v + dt * r * x[t]  # exact and euler agree: the drive is constant over the step
        spikes[t], v = _spike(v, v_threshold, v_reset, reset)
        trace[t] = v
    return spikes, trace


def _li(x: np.ndarray, tau: np.ndarray, r: np.ndarray, v_leak: np.ndarray, *, dt: float,
        method: str) -> np.ndarray:
    _positive(tau=tau)
    trace = np.empty_like(x)
    v = np.zeros(x.shape[1:], x.dtype)
    for t in range(x.shape[0]):
        v = trace[t] = _leak(v, v_leak + r * x[t], tau, dt, method)
    return trace


def _integrator(x: np.ndarray, r: np.ndarray, *, dt: float, method: str) -> np.ndarray:
    # v[t] = sum_{s<=t} dt * r * x[s]; accumulated step by step, as a device would.
    trace = np.empty_like(x)
    v = np.zeros(x.shape[1:], x.dtype)
    for t in range(x.shape[0]):
        v = trace[t] = v + dt * r * x[t]
    return trace


def _threshold(x: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    return (x > threshold).astype(x.dtype)


MAX_DELAY_STEPS = 2**31 - 1
"""The longest delay, in steps (at dt = 1 ms, 24 days)."""


def delay_steps(delay: np.ndarray, dt: float, where: str = "snn.Delay") -> np.ndarray:
    """Delays in seconds as whole numbers of steps; an error unless each is one, from 0
    to :data:`MAX_DELAY_STEPS`."""
    steps = np.asarray(delay, np.float64) / dt
    rounded = np.rint(steps)
    # 1e-4 of a step: float32 delays are off by ~1e-7 relative, and no one means 2.0001.
    if not np.all(np.isfinite(steps)) or np.any(rounded < 0) or not np.allclose(
            steps, rounded, rtol=0, atol=1e-4):
        raise VerificationError(f"{where}: delays must be non-negative whole multiples of "
                                f"dt={dt}, got {np.asarray(delay).reshape(-1)[:4].tolist()}")
    if np.any(rounded > MAX_DELAY_STEPS):
        raise VerificationError(f"{where}: a delay of {float(rounded.max()):g} steps (dt={dt}) "
                                f"is over the limit of {MAX_DELAY_STEPS} steps")
    return rounded.astype(np.int64)


def _delay(x: np.ndarray, delay: np.ndarray, *, dt: float) -> np.ndarray:
    steps = np.broadcast_to(delay_steps(delay, dt), x.shape[2:])
    y = np.zeros_like(x)
    for index in np.ndindex(*x.shape[2:]):
        k = int(steps[index])
        if k < x.shape[0]:
            y[(slice(k, None), slice(None), *index)] = x[(slice(0, x.shape[0] - k),
                                                          slice(None), *index)]
    return y


def _infer_delay(ctx: InferContext) -> TensorType:
    x = _sequence(ctx)
    _check_dt(ctx)
    _check_params(ctx, x.shape[2:], 1)
    value = ctx.const(1)
    if value is not None:
        delay_steps(value, ctx.attrs["dt"], f"node {ctx.node!r} (snn.Delay)")
    return x


# --------------------------------------------------------------------------- linear maps


def _infer_linear(ctx: InferContext) -> TensorType:
    x, w = _sequence(ctx), ctx.input(1)
    if x.rank != 3:
        raise ctx.error(f"input X must be [T, B, N], got {x}")
    if w.rank != 2:
        raise ctx.error(f"input weight must be [out, in], got {w}")
    if w.dtype != x.dtype:
        raise ctx.error(f"input weight is {w.dtype.value}, expected {x.dtype.value}")
    if D.is_static(x.shape[2]) and D.is_static(w.shape[1]) and x.shape[2] != w.shape[1]:
        raise ctx.error(f"weight {w} takes {w.shape[1]} inputs but X {x} has {x.shape[2]}")
    if ctx.has_input(2):
        b = ctx.input(2)
        if b.rank != 1 or (D.is_static(b.shape[0]) and b.shape[0] != w.shape[0]):
            raise ctx.error(f"input bias must be [{w.shape[0]}], got {b}")
    return TensorType(x.dtype, (x.shape[0], x.shape[1], w.shape[0]))


def _linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    y = x @ weight.T
    return y if bias is None else y + bias


def _infer_per_neuron(ctx: InferContext) -> TensorType:
    x = _sequence(ctx)
    _check_params(ctx, x.shape[2:], 1)
    return x


def _per_step(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """``fn`` on ``x`` with time and batch merged into one leading axis."""
    t, b = x.shape[:2]
    y = fn(x.reshape(t * b, *x.shape[2:]))
    return y.reshape(t, b, *y.shape[1:])


def _conv_attrs(rank: int) -> tuple[Attr, ...]:
    return (Attr("strides", AttrKind.INTS, None, f"{rank} strides (default 1)."),
            Attr("pads", AttrKind.INTS, None, f"{2 * rank} pads, begins then ends (default 0)."),
            Attr("dilations", AttrKind.INTS, None, f"{rank} dilations (default 1)."),
            Attr("group", AttrKind.INT, 1, "Channel groups."))


def _core_attrs(rank: int, attrs: dict[str, Any]) -> dict[str, Any]:
    return {"auto_pad": "NOTSET", "dilations": attrs.get("dilations") or [1] * rank,
            "group": attrs.get("group", 1), "kernel_shape": None,
            "pads": attrs.get("pads") or [0] * (2 * rank),
            "strides": attrs.get("strides") or [1] * rank}


def _infer_conv(rank: int) -> Callable[[InferContext], TensorType]:
    def infer(ctx: InferContext) -> TensorType:
        x = _sequence(ctx)
        if x.rank != rank + 3:
            raise ctx.error(f"input X must be [T, B, C, {rank} spatial], got {x}")
        inner = InferContext(ctx.node, get_op("Conv"), [
            TensorType(x.dtype, (1, *x.shape[2:])), *ctx.inputs[1:]],
            _core_attrs(rank, ctx.attrs), 1, ctx.consts)
        y = get_op("Conv").infer(inner)
        return TensorType(x.dtype, (x.shape[0], x.shape[1], *y.shape[1:]))

    return infer


def _conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None,
          **attrs: Any) -> np.ndarray:
    rank = weight.ndim - 2
    kernel = get_op("Conv").kernel
    return _per_step(lambda v: kernel(v, weight, bias, **_core_attrs(rank, attrs)), x)


def _pool_geometry(attrs: dict[str, Any]) -> tuple[list[int], list[int], list[int]]:
    kernel = [int(k) for k in attrs["kernel_shape"]]
    strides = [int(s) for s in (attrs.get("strides") or kernel)]
    pads = [int(p) for p in (attrs.get("pads") or [0, 0, 0, 0])]
    return kernel, strides, pads


def _infer_sum_pool(ctx: InferContext) -> TensorType:
    x = _sequence(ctx)
    if x.rank != 5:
        raise ctx.error(f"input X must be [T, B, C, H, W], got {x}")
    kernel, strides, pads = _pool_geometry(ctx.attrs)
    if len(kernel) != 2 or min(kernel) < 1:
        raise ctx.error(f"attribute kernel_shape={kernel} must be two sizes >= 1")
    if len(strides) != 2 or min(strides) < 1:
        raise ctx.error(f"attribute strides={strides} must be two values >= 1")
    if len(pads) != 4 or min(pads) < 0:
        raise ctx.error(f"attribute pads={pads} must be four values >= 0")
    out: list[D.Dim] = []
    for axis in range(2):
        size = x.shape[3 + axis]
        if not D.is_static(size):
            out.append(ctx.fresh(f"pool{axis}"))
            continue
        padded = size + pads[axis] + pads[2 + axis]
        if padded < kernel[axis]:
            raise ctx.error(f"window {kernel} is larger than the padded input {x}")
        out.append((padded - kernel[axis]) // strides[axis] + 1)
    return TensorType(x.dtype, (*x.shape[:3], *out))


def _sum_pool(x: np.ndarray, *, kernel_shape: Any, strides: Any = None, pads: Any = None
              ) -> np.ndarray:
    kernel, step, pad = _pool_geometry(
        {"kernel_shape": kernel_shape, "strides": strides, "pads": pads})
    padded = np.pad(x, [(0, 0)] * 3 + [(pad[0], pad[2]), (pad[1], pad[3])])
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=(3, 4))
    return windows[:, :, :, ::step[0], ::step[1]].sum(axis=(-2, -1), dtype=x.dtype)


def _flatten_axes(ctx: InferContext, rank: int) -> tuple[int, int]:
    start, end = ctx.attrs["start_dim"], ctx.attrs["end_dim"]
    first = ctx.axis(start, rank, "start_dim")
    last = ctx.axis(end, rank, "end_dim")
    if last < first:
        raise ctx.error(f"end_dim={end} comes before start_dim={start}")
    return first, last


def _infer_flatten(ctx: InferContext) -> TensorType:
    x = _sequence(ctx)
    features = x.shape[2:]
    if not features:
        raise ctx.error(f"input X {x} has no neuron axes to flatten")
    first, last = _flatten_axes(ctx, len(features))
    merged = D.dim_prod(features[first:last + 1])
    return TensorType(x.dtype, (*x.shape[:2], *features[:first], merged, *features[last + 1:]))


def _flatten(x: np.ndarray, *, start_dim: int, end_dim: int) -> np.ndarray:
    features = x.shape[2:]
    first, last = start_dim % len(features), end_dim % len(features)
    merged = math.prod(features[first:last + 1])
    return x.reshape(*x.shape[:2], *features[:first], merged, *features[last + 1:])


# --------------------------------------------------------------------------- registry


def _op(name: str, inputs: tuple[Input, ...], outputs: tuple[Output, ...], infer: Any,
        kernel: Kernel, doc: str, attrs: tuple[Attr, ...] = ()) -> OpDef:
    return register(OpDef(name=name, inputs=inputs, outputs=outputs, type_vars={"T": FLOATS},
                          infer=infer, kernel=kernel, attrs=attrs, domain="snn", doc=doc,
                          extra={"stateful": name in STATEFUL}))


STATEFUL = frozenset({"LIF", "CubaLIF", "IF", "LI", "Integrator", "Delay"})
"""Ops whose output at step t depends on earlier steps (a recurrent loop needs one)."""
SPIKING = frozenset({"LIF", "CubaLIF", "IF", "Threshold"})
"""Ops whose first output is spikes (0 or 1)."""

_X = Input("X", "T", doc="Input current [T, B, *F].")
_Z = Output("Z", "T", doc="Spikes (0 or 1) [T, B, *F].")


def _p(name: str, doc: str, optional: bool = False) -> Input:
    return Input(name, "T", optional=optional, doc=doc)


_op("LIF", (_X, _p("tau", "Membrane time constant (s), > 0."), _p("r", "Resistance."),
            _p("v_leak", "Leak (resting) potential."), _p("v_threshold", "Threshold."),
            _p("v_reset", "Reset potential (default 0).", optional=True)),
    (_Z, Output("V", "T", optional=True, doc="Membrane potential after the reset.")),
    _neuron_infer(["tau"], True), _lif, attrs=(_DT, _METHOD, _RESET),
    doc="Leaky integrate-and-fire: tau dV/dt = (v_leak - V) + r X; spikes where V > "
        "v_threshold, then the reset rule. euler: V += dt/tau (v_leak + r X - V); exact: "
        "V = D + (V - D) exp(-dt/tau) with D = v_leak + r X.")

_op("CubaLIF",
    (_X, _p("tau_syn", "Synaptic time constant (s), > 0."),
     _p("tau_mem", "Membrane time constant (s), > 0."), _p("r", "Resistance."),
     _p("v_leak", "Leak potential."), _p("v_threshold", "Threshold."),
     _p("v_reset", "Reset potential (default 0).", optional=True),
     _p("w_in", "Input weight (default 1).", optional=True)),
    (_Z, Output("V", "T", optional=True, doc="Membrane potential after the reset."),
     Output("I", "T", optional=True, doc="Synaptic current.")),
    _neuron_infer(["tau_syn", "tau_mem"], True), _cuba_lif, attrs=(_DT, _METHOD, _RESET),
    doc="Current-based LIF: tau_syn dI/dt = w_in X - I, tau_mem dV/dt = (v_leak - V) + r I; "
        "threshold and reset as LIF. euler updates V and I from the old state; exact solves "
        "the linear system over dt (the tau_syn = tau_mem limit included).")

_op("IF", (_X, _p("r", "Resistance."), _p("v_threshold", "Threshold."),
           _p("v_reset", "Reset potential (default 0).", optional=True)),
    (_Z, Output("V", "T", optional=True, doc="Membrane potential after the reset.")),
    _neuron_infer([], True), _if, attrs=(_DT, _METHOD, _RESET),
    doc="Integrate-and-fire: dV/dt = r X, V += dt r X (euler and exact agree); threshold "
        "and reset as LIF.")

_op("LI", (_X, _p("tau", "Time constant (s), > 0."), _p("r", "Resistance."),
           _p("v_leak", "Leak potential.")),
    (Output("V", "T", doc="Potential [T, B, *F]."),),
    _neuron_infer(["tau"], False), _li, attrs=(_DT, _METHOD),
    doc="Leaky integrator: tau dV/dt = (v_leak - V) + r X, no spikes; output V.")

_op("Integrator", (_X, _p("r", "Resistance.")), (Output("V", "T", doc="Integral."),),
    _neuron_infer([], False), _integrator, attrs=(_DT, _METHOD),
    doc="Integrator (NIR I): dV/dt = r X, V += dt r X; output V.")

_op("Threshold", (_X, _p("threshold", "Threshold.")), (_Z,), _infer_per_neuron, _threshold,
    doc="Heaviside: Z = X > threshold, per step.")

_op("Delay", (_X, _p("delay", "Delay (s) per neuron, a whole multiple of dt.")),
    (Output("Y", "T", doc="X delayed; zeros before the first delayed step."),),
    _infer_delay, _delay, attrs=(_DT,),
    doc="Y[t] = X[t - delay/dt] (0 for t < delay/dt); delay/dt must be a whole number.")

_op("Linear", (_X, Input("weight", "T", doc="[out, in].")),
    (Output("Y", "T", doc="[T, B, out]."),), _infer_linear, _linear,
    doc="Y[t] = X[t] W^T, per step (NIR Linear).")

_op("Affine", (_X, Input("weight", "T", doc="[out, in]."), Input("bias", "T", doc="[out].")),
    (Output("Y", "T", doc="[T, B, out]."),), _infer_linear, _linear,
    doc="Y[t] = X[t] W^T + b, per step (NIR Affine).")

_op("Scale", (_X, _p("scale", "Per-neuron factor.")), (Output("Y", "T"),), _infer_per_neuron,
    lambda x, scale: x * scale, doc="Y[t] = X[t] * scale, per step.")

for _rank in (1, 2):
    _op(f"Conv{_rank}d",
        (Input("X", "T", doc=f"[T, B, C, {_rank} spatial]."),
         Input("weight", "T", doc=f"[M, C/group, {_rank} kernel]."),
         Input("bias", "T", optional=True, doc="[M].")),
        (Output("Y", "T"),), _infer_conv(_rank), _conv, attrs=_conv_attrs(_rank),
        doc=f"core.Conv ({_rank}-D) on every step; NIR's 'same'/'valid' padding is "
            "imported as explicit pads.")

_op("SumPool2d", (Input("X", "T", doc="[T, B, C, H, W]."),), (Output("Y", "T"),),
    _infer_sum_pool, _sum_pool,
    attrs=(Attr("kernel_shape", AttrKind.INTS, REQUIRED, "Window (2 sizes)."),
           Attr("strides", AttrKind.INTS, None, "Strides (default: the window)."),
           Attr("pads", AttrKind.INTS, None, "4 zero pads, begins then ends.")),
    doc="Sum over each window (zero padding), per step.")

_op("Flatten", (_X,), (Output("Y", "T"),), _infer_flatten, _flatten,
    attrs=(Attr("start_dim", AttrKind.INT, 0, "First neuron axis merged (of *F)."),
           Attr("end_dim", AttrKind.INT, -1, "Last neuron axis merged (of *F).")),
    doc="Merges neuron axes start_dim..end_dim of *F (time and batch untouched).")


def __getattr__(name: str) -> Any:
    """``polyhal.ops.snn.lif(x, ...)``: builder functions of the snn ops."""
    from polyhal.ops import _builder_function, snake_name
    from polyhal.ops.registry import all_ops

    for opdef in all_ops("snn"):
        if snake_name(opdef.name) == name:
            return _builder_function(opdef)
    raise AttributeError(f"polyhal.ops.snn has no op {name!r}")
