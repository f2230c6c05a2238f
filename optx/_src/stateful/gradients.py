"""Gradients for the stateful wrapper: `minimize` and `compute_gradients`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax

from optx._src.base import Params


class GradientsMixin:
    """`StatefulBase`'s differentiation of a loss, scaled for loss scaling."""

    if TYPE_CHECKING:
        jit_compile: bool
        _grad_fns: dict[Any, Callable[..., Any]]

        def loss_scale(self) -> jax.Array: ...

        def apply(self, grads: Any, params: Params) -> Params: ...

        def _clip_transform(self) -> Any: ...

    def _value_and_grad(
        self, loss_fn: Callable[..., Any], params: Params, args: tuple[Any, ...], has_aux: bool
    ) -> tuple[Any, jax.Array, Any]:
        """``(gradients of the scaled loss, loss, aux)``, jit-compiled once per ``loss_fn``."""
        grad_fn = self._grad_fns.get((loss_fn, has_aux))
        if grad_fn is None:

            def scaled(p: Params, s: jax.Array, *a: Any) -> tuple[jax.Array, Any]:
                out = loss_fn(p, *a)
                loss, aux = out if has_aux else (out, None)
                return loss * s, (loss, aux)

            grad_fn = jax.value_and_grad(scaled, has_aux=True)
            if self.jit_compile:
                grad_fn = jax.jit(grad_fn)
            self._grad_fns[(loss_fn, has_aux)] = grad_fn
        (_, (loss, aux)), grads = grad_fn(params, self.loss_scale(), *args)
        return grads, loss, aux

    def minimize(
        self, loss_fn: Callable[..., Any], params: Params, *args: Any, has_aux: bool = False
    ) -> tuple[Any, ...]:
        """One step on ``loss_fn(params, *args)``; returns the new parameters and the loss.

        With ``has_aux=True``, ``loss_fn`` returns ``(loss, aux)`` and this returns
        ``(new_params, loss, aux)``. The gradient is `jax.value_and_grad`'s, of the loss
        scaled by `scale_loss` (divided back in the step).
        """
        grads, loss, aux = self._value_and_grad(loss_fn, params, args, has_aux)
        new_params = self.apply(grads, params)
        return (new_params, loss, aux) if has_aux else (new_params, loss)

    def compute_gradients(
        self, loss_fn: Callable[..., Any], params: Params, *args: Any, has_aux: bool = False
    ) -> tuple[Any, ...]:
        """The gradients of ``loss_fn(params, *args)``, clipped as the optimizer clips them.

        As OptimizerV2's: the loss is scaled by `scale_loss` for differentiation and the
        gradients divided back (these are the true gradients), then ``clipnorm`` /
        ``clipvalue`` / ``global_clipnorm`` apply. `apply` clips again, which changes
        nothing; with ``loss_scale_factor`` it also divides by the factor, so pass it
        ``grads`` times `loss_scale` (or use `minimize`).

        Returns:
          ``(grads, loss)``, or ``(grads, loss, aux)`` with ``has_aux=True``.
        """
        grads, loss, aux = self._value_and_grad(loss_fn, params, args, has_aux)
        scale = self.loss_scale()
        grads = jax.tree.map(lambda g: (g / scale).astype(g.dtype), grads)
        clip = self._clip_transform()
        if clip is not None:
            grads, _ = clip.update(grads, clip.init(params), params)
        return (grads, loss, aux) if has_aux else (grads, loss)
