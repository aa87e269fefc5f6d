"""``polyhal devices``, ``check-adapter`` and ``new-adapter``: the adapters, their
devices and the HAL contract."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from polyhal.cli.tables import add_row


def is_builtin(name: str) -> bool:
    """Whether the adapter ``name`` ships with polyhal (is not a plugin)."""
    from polyhal.hal import adapters

    return adapters()[name].__module__.startswith("polyhal.adapters.")


def cmd_devices(args: argparse.Namespace) -> int:
    """List every adapter, its devices and why one is unavailable, and the plugins
    that failed to load."""
    from polyhal.hal import adapters, plugin_failures, probe_all

    table = Table(title="polyhal devices")
    for column in ("adapter", "version", "device", "name", "available", "why not"):
        table.add_column(column)
    classes = adapters()
    for name, devices, error in probe_all():
        version = str(classes[name].version)
        if devices is None:
            add_row(table, name, version, "-", "-", "no", error)
            continue
        for info in devices:
            add_row(table, name, version, info.address, info.name,
                    "yes" if info.available else "no", info.reason)
        if not devices:
            add_row(table, name, version, "-", "-", "no", "probe found no device")
    for failure in plugin_failures():
        add_row(table, failure.name, "?", "-", failure.source, "no", failure.error)
    Console(width=args.width).print(table)
    return 0


def cmd_check_adapter(args: argparse.Namespace) -> int:
    """Check the adapter ``name`` against the HAL contract; 1 when it breaks it."""
    from polyhal.hal import adapters, check_adapter_class, plugin_failures
    from polyhal.hal.registry import unknown_adapter

    known = adapters()
    if args.name not in known:
        failure = next((f for f in plugin_failures() if f.name == args.name), None)
        if failure is None:
            raise unknown_adapter(args.name)
        print(f"adapter {args.name!r} ({failure.source}) could not be loaded:\n{failure.error}")
        return 1
    report = check_adapter_class(known[args.name])
    table = Table(title=f"HAL contract: {args.name} ({report.source}), API {report.api_version}")
    for column in ("class", "hook", "required", "implemented", "problem"):
        table.add_column(column)
    for row in report.rows:
        add_row(table, row.role, row.hook, "required" if row.required else "optional",
                "yes" if row.implemented else "no (default)" if not row.required else "NO",
                row.problem)
    console = Console(width=args.width)
    console.print(table)
    for problem in report.problems:
        console.print(f"- {problem}", markup=False)
    if not report.ok:
        console.print("contract BROKEN")
        return 1
    return _check_device(console, args.name)


def _check_device(console: Console, name: str) -> int:
    """Open device 0 of a class that passed the checks: its claims, and the verdict."""
    from polyhal.errors import AdapterContractError, DeviceError
    from polyhal.hal import open_device

    try:
        with open_device(name) as device:
            caps = device.capabilities
    except DeviceError as exc:
        console.print(f"contract OK (class checks); {name}:0 could not be opened, so its "
                      f"capabilities were not checked: {exc}", markup=False)
        return 0
    except AdapterContractError as exc:
        console.print(f"- {exc}", markup=False)
        console.print("contract BROKEN")
        return 1
    dtypes = sorted({d.value for ds in caps.ops.values() for d in ds})
    console.print(f"claims {len(caps.ops)} ops ({', '.join(caps.claimed_ops)}) in "
                  f"{', '.join(dtypes)}", markup=False)
    _print_next_ops(console, caps)
    console.print("contract OK")
    return 0


def _print_next_ops(console: Console, caps: object) -> None:
    from polyhal.conformance.coverage import next_ops

    ranked = next_ops(caps)  # type: ignore[arg-type]
    if not ranked:
        return
    table = Table(title="implement next: L1 cases unlocked (ci)")
    table.add_column("op")
    table.add_column("cases", justify="right")
    for op, count in ranked:
        add_row(table, op, str(count))
    console.print(table)


def cmd_new_adapter(args: argparse.Namespace) -> int:
    """Write the package of a new out-of-tree adapter and say what to do next."""
    from polyhal.scaffold import AdapterNames, scaffold

    target = scaffold(args.name, args.dir)
    names = AdapterNames.of(args.name)
    print(f"wrote {target}: the {args.name!r} adapter in {names.package}/adapter.py "
          f"(hooks marked REQUIRED)\nnext:\n  pip install -e {target}\n"
          f"  polyhal check-adapter {args.name}\n"
          f"  polyhal conformance {args.name} --level L0 --level L1 --profile ci")
    return 0
