"""Renders ``docs/ops.md``, the op reference, from the registry.

Regenerate with ``polyhal gen-docs``; a test fails when the file is stale.
"""

from __future__ import annotations

from polyhal.ops.registry import REQUIRED, OpDef, all_ops, domains

_HEADER = """# Op reference

Generated from the op registry by `polyhal gen-docs`; do not edit by hand.
Dense ops in the `core` domain follow ONNX semantics (the newest version of
each op in the pinned `onnx` package); where ONNX leaves a behaviour open,
the op's description says what polyhal does.

"""


def _dtypes(op: OpDef, var: str) -> str:
    return ", ".join(sorted(d.value for d in op.type_vars[var]))


def _default(value: object) -> str:
    if value is REQUIRED:
        return "required"
    if value is None:
        return "absent"
    return f"`{value!r}`" if not hasattr(value, "value") else f"`{value.value}`"


def render_op(op: OpDef) -> str:
    """The reference section of one op."""
    lines = [f"### {op.qualified_name}", ""]
    facts = []
    if op.onnx_since is not None:
        facts.append(f"ONNX opset {op.onnx_since}")
    facts.append("composite (has a decomposition)" if op.decompose else "primitive")
    if op.differentiable:
        facts.append("differentiable")
    lines += [" · ".join(facts), "", op.doc.strip() or "(no description)", ""]
    lines += ["| | name | type | notes |", "| --- | --- | --- | --- |"]
    for kind, specs in (("input", op.inputs), ("output", op.outputs)):
        for spec in specs:
            notes = ", ".join(n for n, on in (("optional", spec.optional),
                                              ("variadic", spec.variadic)) if on)
            lines.append(f"| {kind} | `{spec.name}` | `{spec.type_var}` | {notes} |")
    for attr in op.attrs:
        lines.append(f"| attribute | `{attr.name}` | {attr.kind.value} | "
                     f"default {_default(attr.default)} |")
    lines.append("")
    for var in sorted(op.type_vars):
        lines.append(f"- `{var}`: {_dtypes(op, var)}")
    lines.append("")
    return "\n".join(lines)


def render_op_reference() -> str:
    """The whole ``docs/ops.md``."""
    parts = [_HEADER]
    for domain in domains():
        ops = all_ops(domain)
        parts.append(f"## Domain `{domain}` ({len(ops)} ops)\n\n")
        parts.append(", ".join(f"[{op.name}](#{op.qualified_name.replace('.', '').lower()})"
                               for op in ops) + "\n\n")
        parts.extend(render_op(op) + "\n" for op in ops)
    return "".join(parts).rstrip() + "\n"
