"""What a live model's own code must give before any probe reads it.

The probes run ``live.encode_items``, ``encode_users``, ``item_parameters`` and ``loss``
under torch.func transforms, where a failure can be the transform's (a tower it cannot
trace: the probe cannot run on this model, a warning). Each method is first called once
plainly, on a copy in eval mode, on the rows the probes read: a method that raises there,
or gives what no probe can read (not a float tensor, a shape other than (rows, the item
table's width), non-finite values), is the code of whoever built the live model failing,
not a probe. For a plugin's live model that fails the run (a :class:`PluginError` naming
the plugin and the method, as plugins/README.md says of any plugin code that raises);
popaudit's own live model (``retrain`` checkpoints) is no plugin's, so the probes do not
run, said as a warning (:class:`ProbeError`).

The same rule holds inside the probes that call the live model plainly (C4's gradient
alignment and the update step, on the probe batch): :func:`plain_call` and
:func:`plain_rows` raise :class:`LiveCodeFailure` there, which the probe runner turns into
the plugin's failure (:func:`while_probing`, as a ``sys.exit`` from inside a probe is) or,
for popaudit's own model, that probe's warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from auditor.errors import AuditError, PluginError, ProbeError, setting
from auditor.model import LiveModel
from auditor.plugins.manager import PLUGIN_FAILURES, describe_failure, reraise_interrupt
from auditor.probes.copies import module_device, one_dtype

T = TypeVar("T")


class LiveCodeFailure(ProbeError):
    """The live model's own ``method`` failing in a plain call (no torch.func transform):
    a ProbeError for popaudit's own model, the plugin's failure for a plugin's
    (:func:`while_probing`)."""

    def __init__(self, method: str, what: str) -> None:
        super().__init__(f"the live model's {method} {what}")
        self.method = method
        self.what = what


@dataclass(frozen=True)
class CheckedLive:
    """``encode_items`` on the probed rows as float64 (n, width), or None with why (a tower
    that refuses that many rows at once, while one row passes: a limit of the model)."""

    encoded: np.ndarray | None
    refused: str | None = None


def checked_live(
    live: LiveModel, module: torch.nn.Module, item_rows: np.ndarray, user_rows: np.ndarray, width: int,
    author: str | None,
) -> CheckedLive:
    """Each method of the live model called plainly once, on the rows the probes read, and
    what it gave checked (module docstring)."""
    training = module.training
    device = module_device(module)

    def encoder(method: str) -> Callable[[np.ndarray], object]:
        function = getattr(live, method)
        return lambda rows: function(module, torch.as_tensor(rows, dtype=torch.int64, device=device))

    try:
        module.eval()  # dropout and the like off: the table is what the model serves
        with torch.no_grad():
            items, refused = _encoded(author, "encode_items", encoder("encode_items"), item_rows, width, "item")
            users, _ = _encoded(author, "encode_users", encoder("encode_users"), user_rows, width, "user")
            _call(author, "item_parameters", lambda: live.item_parameters(module))
            n = min(len(items), len(users))
            u, q = one_dtype(users[:n], items[:n])
            loss = _call(author, "loss", lambda: live.loss(u, q))
    except (LiveCodeFailure, PluginError) as failure:
        raise _on_device(failure, device) from failure.__cause__
    finally:
        module.train(training)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.dtype.is_floating_point:
        raise _failure(author, "loss", f"returned {_what(loss)}, not a float scalar tensor")
    _finite_loss(author, loss, f"on {n:,} finite user and item rows")
    if refused is not None:
        return CheckedLive(None, refused)
    return CheckedLive(items.detach().to(torch.float64).cpu().numpy())


def _encoded(
    author: str | None, method: str, encode: Callable[[np.ndarray], object], rows: np.ndarray, width: int, side: str,
) -> tuple[torch.Tensor, str | None]:
    """``encode(rows)`` checked; where it raises on every row but not on the first alone, the
    first row's output and why the rows were not encoded together (the model's limit, not a
    failure of its code: the probes that need more rows at once then say they could not run)."""
    try:
        out = encode(rows)
    except PLUGIN_FAILURES as exc:
        reraise_interrupt(exc)
        if isinstance(exc, AuditError) or len(rows) < 2:
            raise _attributed(author, method, exc) from exc
        try:
            single = encode(rows[:1])
        except PLUGIN_FAILURES as again:
            reraise_interrupt(again)
            raise _attributed(author, method, exc) from exc
        refused = f"its {method} refuses {len(rows):,} {side} rows at once ({describe_failure(exc)})"
        return _rows(author, method, single, rows[:1], width, side), refused
    return _rows(author, method, out, rows, width, side), None


def _call(author: str | None, method: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except PLUGIN_FAILURES as exc:
        reraise_interrupt(exc)
        raise _attributed(author, method, exc) from exc


def _attributed(author: str | None, method: str, exc: BaseException) -> BaseException:
    """The error to raise for ``exc`` raised by the live model's ``method``."""
    if author is not None and isinstance(exc, AuditError):  # the plugin's own error keeps its class (exit code)
        if not isinstance(exc, PluginError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
            exc.args = (f"{author}: its live model's {method}: {exc.args[0]}",)
        return exc
    said = describe_failure(exc)  # sys.exit reads "it called sys.exit(3); ...": the method is the subject
    return _failure(author, method, said.removeprefix("it ") if isinstance(exc, SystemExit) else f"raised {said}")


def _rows(
    author: str | None, method: str, out: object, rows: np.ndarray, width: int | None, side: str,
    where: str = "probed",
) -> torch.Tensor:
    """``out`` when it is a float tensor of shape (len(rows), width) with finite values
    (``width`` None: any width, the probes' own calls, which the contract checked)."""
    n = len(rows)
    if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
        raise _failure(author, method, f"returned {_what(out)}, not a floating-point tensor")
    if width is None and (out.dim() != 2 or out.shape[0] != n):
        raise _failure(author, method, f"returned shape {list(out.shape)} for {n:,} {side} rows {where}")
    if width is not None and tuple(out.shape) != (n, width):
        raise _failure(author, method, f"returned shape {list(out.shape)} for {n:,} {side} rows; the probes read "
                       f"({n:,}, {width}): one vector per row, as wide as the item table")
    finite = torch.isfinite(out).all(dim=1)
    if not bool(finite.all()):  # NaN rows would slip past every comparison (NaN > tolerance is False)
        first = int(torch.nonzero(~finite)[0, 0])
        raise _failure(author, method, f"returned non-finite values (NaN or infinite) for {int((~finite).sum()):,} of "
                       f"{n:,} {side} rows {where} ({side} row {int(rows[first])} first), which no probe can measure")
    return out


def _finite_loss(author: str | None, loss: torch.Tensor, on: str) -> None:
    """Fails when ``loss`` (a scalar tensor) is NaN or infinite: given finite rows, that is
    the loss's code failing (a probe would read a gradient of NaN)."""
    if not bool(torch.isfinite(loss.detach()).all()):
        raise _failure(author, "loss", f"returned a non-finite value ({float(loss.detach())}) {on}, which no probe "
                       "can measure")


def plain_call(method: str, call: Callable[[], T]) -> T:
    """``call()``, the live model's ``method`` called plainly by a probe; an exception it
    raises is :class:`LiveCodeFailure` (a BaseException such as ``sys.exit`` passes on: the
    probe runner names the plugin for it the same way, :func:`while_probing`)."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - the live model's code: named, never a probe's own failure
        if isinstance(exc, LiveCodeFailure):
            raise
        raise LiveCodeFailure(method, f"on the probe batch raised {describe_failure(exc)}") from exc


def plain_rows(method: str, out: torch.Tensor, rows: torch.Tensor | np.ndarray, side: str) -> torch.Tensor:
    """``out``, the ``method``'s rows of the probe batch at the checkpoint's parameters, when
    it is a float tensor of one finite row per row asked (else :class:`LiveCodeFailure`)."""
    ids = rows.detach().cpu().numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
    return _rows(None, method, out, ids, None, side, "of the probe batch")


def plain_loss(loss: torch.Tensor, n: int) -> torch.Tensor:
    """``loss`` of the probe batch's ``n`` finite rows, when finite (else :class:`LiveCodeFailure`)."""
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.dtype.is_floating_point:
        raise LiveCodeFailure("loss", f"returned {_what(loss)}, not a float scalar tensor, on the probe batch")
    _finite_loss(None, loss, f"on the probe batch's {n:,} finite user and item rows")
    return loss


def while_probing(author: str, exc: BaseException) -> PluginError:
    """The plugin's failure for ``exc``, raised by its live model's code while the probes ran
    it: a :class:`LiveCodeFailure` (a raise or unusable output of a plain call) names the
    method, anything else (``sys.exit``, ``GeneratorExit``) is said as raised."""
    if isinstance(exc, LiveCodeFailure):
        return PluginError(f"{author}: its live model's {exc.method} {exc.what}")
    return PluginError(f"{author}: its live model failed while the probes ran it: {describe_failure(exc)}")


def _on_device(failure: LiveCodeFailure | PluginError, device: torch.device) -> AuditError:
    """``failure`` with, where the code raised on an accelerator, the likely cause: code
    that makes its own tensors on the CPU (a target ``torch.arange(n)``) fails there."""
    if device.type == "cpu" or failure.__cause__ is None:
        return failure
    flag = setting("device")
    hint = (f" (the probes ran it on {device.type} ({flag} {device.type}): its methods get their tensors there "
            f"and must make theirs on the same device, as torch.arange(n, device=users.device); "
            f"{flag} cpu runs the code as written)")
    if isinstance(failure, LiveCodeFailure):
        return LiveCodeFailure(failure.method, failure.what + hint)
    return PluginError(str(failure) + hint)


def _what(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of dtype {str(value.dtype).removeprefix('torch.')}, shape {list(value.shape)}"
    return f"a {type(value).__name__}"


def _failure(author: str | None, method: str, what: str) -> AuditError:
    if author is None:
        return LiveCodeFailure(method, what)
    return PluginError(f"{author}: its live model's {method} {what}")


__all__ = ["CheckedLive", "LiveCodeFailure", "checked_live", "plain_call", "plain_loss", "plain_rows", "while_probing"]
