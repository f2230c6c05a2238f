"""Every error message optx raises, checked word for word, at the call that caused it."""

import re

import jax
import jax.numpy as jnp
import pytest

import optx

P = {"a": jnp.ones(2), "b": {"c": jnp.ones((2, 3))}}


class _Schedule:
    def __call__(self, count):
        return 0.1

    def __repr__(self):
        return "<schedule>"


_schedule = _Schedule()


def _adam_update(grads):
    tx = optx.adam(1e-3)
    return tx.update(grads, tx.init(P))


def _adam_update_state(state):
    return optx.adam(1e-3).update(P, state)


CASES = [
    # Hyperparameters: range, type, finiteness; errors name the optimizer the user called.
    (
        lambda: optx.adam(-1.0),
        ValueError,
        "`adam` needs learning_rate finite and >= 0. Received: learning_rate=-1.0.",
    ),
    (
        lambda: optx.adam(float("nan")),
        ValueError,
        "`adam` needs learning_rate finite and >= 0. Received: learning_rate=nan.",
    ),
    (
        lambda: optx.sgd(float("inf")),
        ValueError,
        "`sgd` needs learning_rate finite and >= 0. Received: learning_rate=inf.",
    ),
    (lambda: optx.adam(1e-3, b1=1.0), ValueError, "`adam` needs b1 in [0, 1). Received: b1=1.0."),
    (
        lambda: optx.adamw(1e-3, b2=-0.1),
        ValueError,
        "`adamw` needs b2 in [0, 1). Received: b2=-0.1.",
    ),
    (
        lambda: optx.scale_by_adam(eps=-1e-8),
        ValueError,
        "`scale_by_adam` needs eps finite and >= 0. Received: eps=-1e-08.",
    ),
    (
        lambda: optx.adamw(1e-3, weight_decay=-0.1),
        ValueError,
        "`adamw` needs weight_decay finite and >= 0. Received: weight_decay=-0.1.",
    ),
    (
        lambda: optx.sgd(0.1, momentum=1.5),
        ValueError,
        "`sgd` needs momentum in [0, 1]. Received: momentum=1.5.",
    ),
    (
        lambda: optx.sgd("0.1"),
        TypeError,
        "`sgd` needs learning_rate to be a real number or a schedule (a function of the step "
        "count). Received: learning_rate='0.1' of type str.",
    ),
    (
        lambda: optx.sgd(True),
        TypeError,
        "`sgd` needs learning_rate to be a real number or a schedule (a function of the step "
        "count). Received: learning_rate=True of type bool.",
    ),
    (
        lambda: optx.clip(-1.0),
        ValueError,
        "`clip` needs max_delta finite and >= 0. Received: max_delta=-1.0.",
    ),
    (
        lambda: optx.clip_by_norm(-1.0),
        ValueError,
        "`clip_by_norm` needs max_norm finite and > 0. Received: max_norm=-1.0.",
    ),
    (
        lambda: optx.clip_by_global_norm(-1.0),
        ValueError,
        "`clip_by_global_norm` needs max_norm finite and > 0. Received: max_norm=-1.0.",
    ),
    (
        lambda: optx.clip_by_global_norm(0.0),
        ValueError,
        "`clip_by_global_norm` needs max_norm finite and > 0. Received: max_norm=0.0.",
    ),
    (
        lambda: optx.clip_by_block_rms(float("-inf")),
        ValueError,
        "`clip_by_block_rms` needs threshold finite and > 0. Received: threshold=-inf.",
    ),
    (
        lambda: optx.ema(1.5),
        ValueError,
        "`ema` needs decay in [0, 1]. Received: decay=1.5.",
    ),
    (
        lambda: optx.ema_params(-0.5),
        ValueError,
        "`ema_params` needs momentum in [0, 1]. Received: momentum=-0.5.",
    ),
    (
        lambda: optx.unscale_gradients(0.0),
        ValueError,
        "`unscale_gradients` needs loss_scale_factor finite and > 0. "
        "Received: loss_scale_factor=0.0.",
    ),
    (
        lambda: optx.scale(float("nan")),
        ValueError,
        "`scale` needs step_size finite. Received: step_size=nan.",
    ),
    # Structural options.
    (
        lambda: optx.adam(1e-3, mu_dtype=jnp.int32),
        TypeError,
        "`adam` needs mu_dtype to be None or a floating dtype. Received: mu_dtype=<class "
        "'jax.numpy.int32'>.",
    ),
    (
        lambda: optx.trace(0.9, accumulator_dtype="not-a-dtype"),
        TypeError,
        "`trace` needs accumulator_dtype to be None or a floating dtype. "
        "Received: accumulator_dtype='not-a-dtype'.",
    ),
    (
        lambda: optx.accumulate_gradients(optx.sgd(0.1), 0),
        ValueError,
        "`accumulate_gradients` needs every_k to be an int >= 1. Received: every_k=0.",
    ),
    (
        lambda: optx.accumulate_gradients(optx.sgd(0.1), 2.0),
        ValueError,
        "`accumulate_gradients` needs every_k to be an int >= 1. Received: every_k=2.0.",
    ),
    (
        lambda: optx.apply_if_finite(optx.sgd(0.1), -1),
        ValueError,
        "`apply_if_finite` needs max_consecutive_errors to be an int >= 0. "
        "Received: max_consecutive_errors=-1.",
    ),
    (
        lambda: optx.ema_params(0.9, overwrite_frequency=0),
        ValueError,
        "`ema_params` needs overwrite_frequency to be an int >= 1. "
        "Received: overwrite_frequency=0.",
    ),
    (
        lambda: optx.ema_params(0.9, start="later"),
        ValueError,
        "`ema_params` needs start in ('initial', 'first_step'). Received: start='later'.",
    ),
    (
        lambda: optx.stateless(3),
        TypeError,
        "`stateless` needs f to be a callable (updates, params) -> updates. Received: f=3.",
    ),
    (
        lambda: optx.scale_by_schedule(3),
        TypeError,
        "`scale_by_schedule` needs step_size_fn to be a callable step -> value. "
        "Received: step_size_fn=3.",
    ),
    # Combinators.
    (
        lambda: optx.chain(optx.sgd(0.1), 3),
        TypeError,
        "`chain` needs transforms[1] to be a transform with `init` and `update` methods (an optx "
        "or optax transform). Received: transforms[1]=3.",
    ),
    (
        lambda: optx.masked("sgd", "a"),
        TypeError,
        "`masked` needs inner to be a transform with `init` and `update` methods (an optx or "
        "optax transform). Received: inner='sgd'.",
    ),
    (
        lambda: optx.apply_if_finite(None, 3),
        TypeError,
        "`apply_if_finite` needs inner to be a transform with `init` and `update` methods (an "
        "optx or optax transform). Received: inner=None.",
    ),
    (
        lambda: optx.named_chain(("a", optx.sgd(0.1)), ("a", optx.sgd(0.1))),
        ValueError,
        "`named_chain` needs distinct names. Received: 'a' more than once.",
    ),
    (
        lambda: optx.named_chain((1, optx.sgd(0.1))),
        TypeError,
        "`named_chain` needs (str, transform) pairs. Received: name=1 at position 0.",
    ),
    (
        lambda: optx.partition({}, {"a": "x"}),
        TypeError,
        "`partition` needs transforms to be a non-empty mapping from label to transform. "
        "Received: transforms={}.",
    ),
    (
        lambda: optx.masked(optx.sgd(0.1), {"a": 1.0}),
        TypeError,
        "`masked` needs mask to be a pytree of bools, a callable returning one, or regular "
        "expressions on parameter paths. Received: a mask with leaf 1.0.",
    ),
    # Masks and labels that do not match the parameters (raised by init).
    (
        lambda: optx.masked(optx.sgd(0.1), {"a": True}).init(P),
        ValueError,
        "`masked` needs mask with the structure of the parameters (or a prefix of it). "
        "Received: mask PyTreeDef({'a': *}) for parameters PyTreeDef({'a': *, 'b': {'c': *}}).",
    ),
    (
        lambda: optx.adamw(1e-3, mask={"a": True, "b": {"d": False}}).init(P),
        ValueError,
        "`masked` needs mask with the structure of the parameters (or a prefix of it). "
        "Received: mask PyTreeDef({'a': *, 'b': {'d': *}}) for parameters "
        "PyTreeDef({'a': *, 'b': {'c': *}}).",
    ),
    (
        lambda: optx.masked(optx.sgd(0.1), lambda p: jax.tree.map(lambda _: 1.0, p)).init(P),
        TypeError,
        "`masked` needs its mask callable to return a pytree of bools. Received: a leaf 1.0.",
    ),
    (
        lambda: optx.partition({"x": optx.sgd(0.1)}, {"a": "x", "b": "y"}).init(P),
        ValueError,
        "`partition` needs a transform for every label. Received: label 'y' (of parameter "
        "'b/c') but transforms only for ['x'].",
    ),
    (
        lambda: optx.partition({"x": optx.sgd(0.1)}, {"^a$": "x"}).init(P),
        ValueError,
        "`partition` needs every parameter to match one of the regular expressions of "
        "param_labels. Received: parameter 'b/c', matched by none of ['^a$']. Add a catch-all "
        "such as '.*'.",
    ),
    # Parameters and gradients that do not match (raised by init / update).
    (
        lambda: optx.adam(1e-3).init({"a": jnp.ones(2, jnp.int32), "b": jnp.ones(2)}),
        TypeError,
        "`scale_by_adam.init` needs floating-point params (float16, bfloat16, float32 or "
        "float64). Received: params['a'] of dtype int32. Keep other leaves out of the optimised "
        "tree, or route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
    (
        lambda: optx.sgd(0.1, momentum=0.9).init({"w": jnp.ones(2), "n": jnp.ones(2, bool)}),
        TypeError,
        "`trace.init` needs floating-point params (float16, bfloat16, float32 or float64). "
        "Received: params['n'] of dtype bool. Keep other leaves out of the optimised tree, or "
        "route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
    (
        lambda: _adam_update({"a": jnp.ones(2)}),
        ValueError,
        "`scale_by_adam.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'b/c'.",
    ),
    (
        lambda: _adam_update({"a": jnp.ones(2), "b": {"c": jnp.ones((3, 2))}}),
        ValueError,
        "`scale_by_adam.update` needs updates with the shapes of the state. "
        "Received: updates['b/c'] of shape (3, 2), expected (2, 3).",
    ),
    (
        lambda: _adam_update({"a": jnp.ones(2), "b": [jnp.ones((2, 3))]}),
        ValueError,
        "`scale_by_adam.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'b/c'; not in the state: 'b/0'.",
    ),
    (
        lambda: optx.adam(1e-3).update([jnp.ones(2)], optx.adam(1e-3).init((jnp.ones(2),))),
        ValueError,
        "`scale_by_adam.update` needs updates with the structure of the state. "
        "Received: updates is PyTreeDef([*]), the state is PyTreeDef((*,)).",
    ),
    (
        lambda: optx.partition({"x": optx.sgd(0.1)}, {"a": "x", "b": {"d": "x"}}).init(P),
        ValueError,
        "`partition` needs param_labels with the structure of the parameters (or a prefix of "
        "it). Received: param_labels PyTreeDef({'a': *, 'b': {'d': *}}) for parameters "
        "PyTreeDef({'a': *, 'b': {'c': *}}).",
    ),
    (
        lambda: _adam_update_state(optx.adam(1e-3).init(P)[0]),
        ValueError,
        "`chain.update` needs the state made by this chain's `init` (a tuple of 2 states). "
        "Received: state of type ScaleByAdamState with 4 entries. That is a state made by "
        "`adam` (ScaleByAdamState of `scale_by_adam`); pass the state returned by `init` of "
        "this same transform (`adam`).",
    ),
    (
        lambda: optx.add_decayed_weights(0.1).update(P, optx.add_decayed_weights(0.1).init(P)),
        ValueError,
        "`add_decayed_weights.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
    ),
    (
        lambda: optx.add_decayed_weights(0.1).update(P, None, {"a": jnp.ones(2)}),
        ValueError,
        "`add_decayed_weights.update` needs updates with the structure of params. "
        "Received: not in params: 'b/c'.",
    ),
    (
        lambda: optx.ema_params().update(P, optx.ema_params().init(P)),
        ValueError,
        "`ema_params.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
    ),
    (
        lambda: optx.ema_params_value(optx.sgd(0.1).init(P)),
        ValueError,
        "`ema_params_value` needs a state holding exactly one `ema_params` state. "
        "Received: a state holding 0.",
    ),
    # Tree helpers.
    (
        lambda: optx.tree.norm(P, ord=3),
        ValueError,
        "`optx.tree.norm` needs ord in (1, 2, 'inf'). Received: ord=3.",
    ),
]


@pytest.mark.parametrize(("call", "error", "message"), CASES, ids=[c[2][:60] for c in CASES])
def test_error_message(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message


def test_named_chain_state_mismatch():
    tx = optx.named_chain(("clip", optx.clip(1.0)), ("sgd", optx.sgd(0.1)))
    message = (
        "`named_chain.update` needs the state made by its `init`, keyed by ['clip', 'sgd']. "
        "Received: state of type dict keyed by ['clip']. That is a dict holding a state "
        "made by `clip`; pass the state returned by `init` of this same transform "
        "(`named_chain`)."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        tx.update(P, {"clip": optx.clip(1.0).init(P)})


def test_ema_params_value_with_two_averages():
    tx = optx.chain(optx.ema_params(0.9), optx.ema_params(0.5))
    message = (
        "`ema_params_value` needs a state holding exactly one `ema_params` state. "
        "Received: a state holding 2."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        optx.ema_params_value(tx.init(P))


def test_errors_raise_under_jit():
    # A mismatched gradient tree is caught while tracing, with the same message.
    tx = optx.adam(1e-3)
    state = tx.init(P)
    with pytest.raises(ValueError, match=re.escape("missing from updates: 'b/c'")):
        jax.jit(tx.update)({"a": jnp.ones(2)}, state)
